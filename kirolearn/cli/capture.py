"""Where capture is on: pause it (everywhere or for a project) and resume it; under
``capture.opt_in``, enable a project (and disable it again)."""

from __future__ import annotations

import click

from kirolearn import capture, project
from kirolearn.cli import common


def _root(directory: str) -> str:
    """The project a directory belongs to, found as the agents' hooks find it."""
    return project.resolve_project(directory).root


@click.command()
@click.option("--project", "directory", type=click.Path(exists=True, file_okay=False),
              help="Only the project this directory belongs to.")
def pause(directory: str | None) -> None:
    """Stop capture and context injection, everywhere or for one project, until
    `kirolearn resume`. Every hook honours it at once, without asking the daemon.

    \b
    Examples:
        kirolearn pause
        kirolearn pause --project ~/code/client-app
    """
    state = capture.paused(common.home())
    if directory is None:
        state["everywhere"] = True
        where = "everywhere"
    else:
        root = _root(directory)
        state["projects"] = sorted({*state["projects"], root})
        where = f"for {root}"
    capture.save_paused(state, common.home())
    click.echo(f"capture paused {where}; `kirolearn resume` turns it back on")


@click.command()
@click.option("--project", "directory", type=click.Path(exists=True, file_okay=False),
              help="Only the project this directory belongs to.")
def resume(directory: str | None) -> None:
    """Turn capture and injection back on: everywhere (every pause ends), or for one
    paused project.

    \b
    Examples:
        kirolearn resume
        kirolearn resume --project ~/code/client-app
    """
    state = capture.paused(common.home())
    if directory is None:
        if not state["everywhere"] and not state["projects"]:
            click.echo("capture was not paused")
            return
        capture.save_paused({"everywhere": False, "projects": []}, common.home())
        click.echo("capture resumed everywhere")
        return
    root = _root(directory)
    if root not in state["projects"]:
        raise click.ClickException(
            f"capture is not paused for {root}"
            + ("; it is paused everywhere: `kirolearn resume` ends that" if state["everywhere"]
               else ""))
    state["projects"].remove(root)
    capture.save_paused(state, common.home())
    click.echo(f"capture resumed for {root}"
               + ("; it is still paused everywhere" if state["everywhere"] else ""))


@click.command()
@click.option("--project", "directory", type=click.Path(exists=True, file_okay=False),
              default=".", help="The project (default: the current directory's).")
def enable(directory: str) -> None:
    """Capture this project under `capture.opt_in = true`, where no project is captured
    until you enable it here (nothing in a repository can enable it). Kept in the home.

    \b
    Example:
        kirolearn enable --project ~/code/app
    """
    root = _root(directory)
    roots = capture.enabled(common.home())
    if root not in roots:
        capture.save_enabled([*roots, root], common.home())
    opt_in = capture.settings(common.home())["opt_in"]
    click.echo(f"capture enabled for {root}" + ("" if opt_in else
               " (capture.opt_in is off: every project is captured anyway)"))


@click.command()
@click.option("--project", "directory", type=click.Path(exists=True, file_okay=False),
              default=".", help="The project (default: the current directory's).")
def disable(directory: str) -> None:
    """Take a project off the ones `kirolearn enable` turned capture on for (under
    `capture.opt_in`: it is captured no more).

    \b
    Example:
        kirolearn disable --project ~/code/app
    """
    root = _root(directory)
    roots = capture.enabled(common.home())
    if root not in roots:
        raise click.ClickException(f"{root} was not enabled")
    capture.save_enabled([r for r in roots if r != root], common.home())
    click.echo(f"capture disabled for {root}")


COMMANDS = [pause, resume, enable, disable]
