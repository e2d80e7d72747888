"""The ``kirolearn`` command: one click group, each command a thin skin over the library.

``daemon`` runs it (start, stop, restart, status, scale, logs, worker, open), ``data``
reads and writes what is stored (import, export, stats, search, prune, scrub, seed),
``records``
corrects it (forget, edit), ``capture`` says where it is captured (pause, resume),
``embeddings`` the
vectors, ``extraction`` the batches that become records (failed, retry), ``agents``
connects the agents (install, uninstall, mcp), ``backup`` copies the database and puts
a copy back (backup, restore), ``network`` shares a daemon over TCP (keys, connect),
and ``doctor`` says what is wrong.
"""

from __future__ import annotations

import os

import click

from kirolearn import __version__, paths
from kirolearn.cli import (
    agents,
    backup,
    capture,
    daemon,
    data,
    doctor,
    embeddings,
    extraction,
    network,
    records,
)


class Commands(click.Group):
    """The command group, whose commands end in a message, never a traceback: an error a
    command did not expect is said in one line (``KIROLEARN_DEBUG=1`` shows where)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException,
                KeyboardInterrupt, SystemExit, BrokenPipeError):
            raise
        except Exception as exc:
            if os.environ.get("KIROLEARN_DEBUG"):
                raise
            where = f" ({exc.filename})" if isinstance(exc, OSError) and exc.filename else ""
            raise click.ClickException(
                f"{exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}{where}"
                f" [{type(exc).__name__}; KIROLEARN_DEBUG=1 shows where]") from exc


@click.group(cls=Commands)
@click.version_option(__version__, prog_name="kirolearn")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Long-term memory for AI coding agents.

    Everything lives under KIROLEARN_HOME (default ~/.kirolearn).
    """
    ctx.obj = paths.Home.current()  # read once; each command finds it (common.home)


for module in (daemon, data, records, capture, backup, embeddings, extraction, agents,
               network, doctor):
    for command in module.COMMANDS:
        cli.add_command(command)
