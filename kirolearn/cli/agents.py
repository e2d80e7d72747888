"""Commands for the agents: install and uninstall their hooks, serve MCP."""

from __future__ import annotations

from pathlib import Path

import click

from kirolearn import config, control, project
from kirolearn.shims import install


def _install_target(project_dir: str | None, global_: bool) -> Path | None:
    """The project whose agent configuration to change (None: the user's own)."""
    if project_dir and global_:
        raise click.UsageError("give --project DIR or --global, not both")
    if global_:
        return None
    if project_dir:
        return Path(project_dir).resolve()
    here = project.resolve_project()
    if here.is_global:
        raise click.UsageError(
            "the current directory is in no project; give --project DIR or --global")
    return Path(here.root)


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
def install_(agents: tuple[str, ...], project_dir: str | None, global_: bool) -> None:
    """Add kirolearn's hooks to an agent's configuration (merged into what is there; a
    changed file is backed up to <file>.kirolearn.bak; running it again changes nothing).

    \b
    Examples:
        kirolearn install --agent claude-code
        kirolearn install --agent kiro-cli --global
    """
    _change_agents(install.install, agents, _install_target(project_dir, global_))
    if not control.running():
        click.echo("The daemon is not running; the first hook starts it (or: kirolearn start).")


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


@click.command()
@click.option("--scope", type=click.Choice(project.SCOPES),
              default=None, help="Which memories it serves (default: mcp.scope).")
def mcp(scope: str | None) -> None:
    """Serve the MCP tools on stdio, for an agent to start (kirolearn install registers
    it): search_memory, recall, resume_session, timeline, get_records,
    save_observation, save_session_summary, update_memory and forget, for the project
    of the current directory.

    \b
    Example (what an agent's configuration runs):
        kirolearn mcp
        kirolearn mcp --scope project+global
    """
    from kirolearn import mcp_server

    try:
        mcp_server.main(scope)
    except config.ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc}") from exc


COMMANDS = [install_, uninstall, mcp]
