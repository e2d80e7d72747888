"""Commands for the agents: install and uninstall their hooks."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kirolearn import control, install, project
from kirolearn import seed as kl_seed
from kirolearn.cli import common
from kirolearn.cli.daemon import start
from kirolearn.cli.past import seed


def _install_target(project_dir: str | None, global_: bool) -> Path | None:
    """The project whose agent configuration to change (None: the user's own)."""
    if project_dir and global_:
        raise click.UsageError("give --project DIR or --global, not both")
    if global_:
        return None
    here = project.resolve_project(project_dir)
    if here.is_global:
        where = f"{project_dir} is" if project_dir else "the current directory is"
        raise click.UsageError(
            f"{where} in no project (no {', '.join(project.MARKERS[:3])}, … in it or above"
            " it, below your home), so the hooks would store in the global project; give"
            " --project DIR of a project (or run git init there), or --global")
    return Path(project_dir).resolve() if project_dir else Path(here.root)


def agent_options(command):
    command = click.option("--global", "global_", is_flag=True,
                           help="The user's own configuration, for every project.")(command)
    command = click.option("--project", "project_dir", default=None,
                           type=click.Path(exists=True, file_okay=False),
                           help="The project to configure (default: the current one).")(command)
    return click.option("--agent", "agents", required=True, multiple=True,
                        type=click.Choice(install.AGENTS),
                        help="The agent to configure (repeat for several).")(command)


@click.command(name="install")
@agent_options
@click.option("--absolute", is_flag=True,
              help="Name this installation's commands by absolute path (the default for"
                   " --global) instead of as found on PATH.")
@click.option("--default-agent", is_flag=True,
              help="kiro-cli: make kirolearn's agent the one plain `kiro-cli chat` uses.")
@click.option("--seed/--no-seed", "seed_history", default=None,
              help="Seed the project's memory from its git history now (`kirolearn seed"
                   " --git`; default: asked in a terminal, when it was never seeded).")
@click.pass_context
def install_(ctx: click.Context, agents: tuple[str, ...], project_dir: str | None,
             global_: bool, absolute: bool, default_agent: bool,
             seed_history: bool | None) -> None:
    """Add kirolearn's hooks to an agent's configuration (merged into what is there; a
    file of yours that changes is first copied to <file>.kirolearn.bak; running it again
    changes nothing). A project's files name kirolearn's commands as found on PATH, so
    they work for every teammate who has kirolearn installed. In a git project never
    seeded, it offers to seed the memory from the project's history (--seed to do it
    without asking, --no-seed not to).

    \b
    Examples:
        kirolearn install --agent claude-code
        kirolearn install --agent codex --seed
        kirolearn install --agent kiro-cli --global --default-agent
    """
    if default_agent and "kiro-cli" not in agents:
        raise click.UsageError("--default-agent is for --agent kiro-cli")
    target = _install_target(project_dir, global_)
    _change_agents(lambda agent, where, home: install.install(
        agent, where, home, absolute, default_agent and agent == "kiro-cli"), agents, target)
    # what doctor will say of it, said now: an install that cannot work yet is no success
    unready = [(agent, detail) for agent in agents
               for state, detail in [install.check(agent, target, Path.home())]
               if state != "installed"]
    if target is not None and not absolute and not install.Commands.choose(False).on_path:
        click.echo(f"Note: kirolearn is not on PATH, so these files name"
                   f" {install.installed('kirolearn')} and work on this machine only; put"
                   " its folder on PATH and install again for files every teammate can use.")
    try:
        served = control.served(common.home())
    except control.BadRemote as exc:
        raise click.ClickException(str(exc)) from exc
    if target is not None and _seeding(target, seed_history):
        if not served:
            ctx.invoke(start)
        ctx.invoke(seed, from_git=True, project=str(target))
    elif not served:
        click.echo("The daemon is not running; the first hook starts it (or: kirolearn start).")
    if unready:
        raise click.ClickException("; ".join(f"{agent} is not ready: {detail}"
                                             for agent, detail in unready))


def _seeding(target: Path, asked: bool | None) -> bool:
    """Whether to seed the project from its history: as asked, or, in a terminal, when a
    git project never seeded says yes."""
    checkout = project.resolve_project(target).checkout
    if asked is not None or not sys.stdin.isatty():
        return bool(asked)
    if kl_seed.head(checkout) is None or kl_seed.last_seeded(common.home(), checkout):
        return False
    return click.confirm("Seed this project's memory from its git history now (kirolearn"
                         " seed --git; it can run again at any time)?", default=True)


@click.command()
@agent_options
def uninstall(agents: tuple[str, ...], project_dir: str | None, global_: bool) -> None:
    """Remove kirolearn's hooks from an agent's configuration (and nothing else).

    \b
    Example:
        kirolearn uninstall --agent claude-code --project .
    """
    _change_agents(install.uninstall, agents, _install_target(project_dir, global_))


def _change_agents(operation, agents: tuple[str, ...], target: Path | None) -> None:
    for agent in agents:
        try:
            changes = operation(agent, target, Path.home())
        except (install.InstallError, OSError) as exc:
            raise click.ClickException(f"{agent}: {exc}") from exc
        for change in changes:
            click.echo(f"{agent}: {change}")


COMMANDS = [install_, uninstall]
