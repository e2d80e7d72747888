"""The ``kirolearn`` command: one click group, each command a thin skin over the library.

``daemon`` runs it (start, stop, restart, status, scale, logs, worker, open), ``data``
reads and writes what is stored (import, export, stats, search, brief, prune, scrub),
``why`` tells what is remembered of the commits that wrote a file's lines, ``past``
gives memory its past (seed, import-sessions),
``records`` corrects it (forget, edit), ``capture`` says where it is captured (pause,
resume), ``embeddings`` the vectors, ``extraction`` the batches that become records
(failed, retry), ``agents`` connects the agents (install, uninstall), ``mcp`` serves
them the MCP tools, ``backup`` copies the database and puts a copy back (backup,
restore), ``network`` shares a daemon over TCP (keys, connect), and ``doctor`` says
what is wrong.

A command's module is imported when the command runs: ``kirolearn mcp``, which an agent
starts at each of its sessions and waits for, pays for its own module only.
"""

from __future__ import annotations

import importlib
import os

import click

from kirolearn import __version__, paths

# module of kirolearn.cli → the commands in its COMMANDS
MODULES = {
    "daemon": ("start", "stop", "restart", "status", "scale", "logs", "worker", "open"),
    "data": ("import", "export", "stats", "search", "brief", "prune", "scrub"),
    "why": ("why",),
    "past": ("seed", "import-sessions"),
    "records": ("forget", "edit"),
    "capture": ("pause", "resume", "enable", "disable"),
    "backup": ("backup", "restore"),
    "embeddings": ("embeddings",),
    "extraction": ("extraction",),
    "agents": ("install", "uninstall"),
    "mcp": ("mcp",),
    "network": ("keys", "connect"),
    "doctor": ("doctor",),
}


class Commands(click.Group):
    """The command group, whose commands end in a message, never a traceback: an error a
    command did not expect is said in one line (``KIROLEARN_DEBUG=1`` shows where). Its
    commands are found in their modules (``MODULES``) when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for names in MODULES.values() for name in names]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = next((m for m, names in MODULES.items() if cmd_name in names), None)
        if module is None:
            return None
        commands = importlib.import_module(f"kirolearn.cli.{module}").COMMANDS
        return next(command for command in commands if command.name == cmd_name)

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
