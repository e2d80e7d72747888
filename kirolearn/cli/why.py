"""``kirolearn why PATH:LINES``: what is remembered of the commits that wrote some lines."""

from __future__ import annotations

import json
import os
import re

import click

from kirolearn import contract, project, tooluse
from kirolearn.cli.common import ask, require_running

LINES = re.compile(r"^(.*):(\d+)(?:-(\d+))?$")
WAIT_MS = 60_000  # git's blame of a long history's file takes seconds


def parse_where(where: str) -> tuple[str, int, int]:
    """``PATH``, ``PATH:N`` or ``PATH:N-M`` → (path, first, last); last 0: to the end."""
    found = LINES.match(where)
    if found is None:
        return where, 1, 0
    first, last = int(found[2]), int(found[3] or found[2])
    if first < 1 or last < first:
        raise click.BadParameter(f"{first}-{last} is not a range of lines (1-based, N-M"
                                 " with N <= M)", param_hint="PATH:LINES")
    return found[1], first, last


@click.command()
@click.argument("where", metavar="PATH[:LINES]")
@click.option("--json", "as_json", is_flag=True,
              help="The commits (with their lines) and the ids of their records.")
def why(where: str, as_json: bool) -> None:
    """Print what kirolearn remembers of why these lines are as they are: the work of
    the commits that wrote them (git blame), the commits with the most lines first.

    LINES is N or N-M (1-based, inclusive); without it, the whole file. The file is
    read as the working tree has it; lines not committed yet have no commit. A seeded
    history (kirolearn seed --git) tells of its commits; an agent's session tells of
    the commit that later holds its change.

    \b
    Examples:
        kirolearn why src/app/client.py:120-140
        kirolearn why src/app/client.py:88
    """
    if not contract.is_text(where):
        raise click.UsageError("PATH is not valid text in this terminal's encoding")
    path, first, last = parse_where(where)
    full = os.path.realpath(path)
    if not os.path.isfile(full):
        raise click.BadParameter(f"{path} is not a file", param_hint="PATH:LINES")
    here = project.resolve_project(os.path.dirname(full))
    if here.is_global or not os.path.exists(os.path.join(here.checkout, ".git")):
        raise click.ClickException(f"{path} is not in a git working tree")
    require_running()
    body = {"namespaces": [here.namespace(project.actor_id())], "checkout": here.checkout,
            "path": tooluse.relative(full, here.checkout), "first": first, "last": last,
            "budget_ms": WAIT_MS - 5_000}
    result = ask("retrieval", "why", body, "why", WAIT_MS)
    if as_json:
        click.echo(json.dumps({"path": body["path"], **result}, ensure_ascii=False))
        return
    if result["outcome"] == "unreadable":
        raise click.ClickException(f"{path}: lines {first}-{last or 'end'} could not be read")
    if result["outcome"] == "blaming":
        raise click.ClickException(f"git is still blaming {path}: ask again in a moment")
    if result["context"]:
        click.echo(result["context"])
    else:
        click.echo("nothing remembered of the commits that wrote these lines (kirolearn"
                   " seed --git tells of a project's history)", err=True)


COMMANDS = [why]
