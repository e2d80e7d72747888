"""What the commands share: the settings, the daemon check, the database, options."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator

import click

from kirolearn import config, control, db, extract, paths, project
from kirolearn.db import schema
from kirolearn.db.store import Connection

UPGRADE_WAIT_S = 15.0  # how long a command waits for a starting daemon's migrations

log = logging.getLogger("kirolearn.cli")


def home() -> paths.Home:
    """The home this command works in (``KIROLEARN_HOME``, read once by the group)."""
    return click.get_current_context().find_object(paths.Home)


def settings() -> dict:
    """The configuration, refused (with why) when it is broken or names an extraction
    strategy that cannot work."""
    try:
        loaded = config.load(home())
        extract.from_settings(loaded, log)
    except config.ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc}") from exc
    return loaded


def ask(target: str, op: str, body: dict, doing: str, timeout_ms: int = control.WRITE_MS
        ) -> dict:
    """One request to the daemon; its failure is an error that says what was being done."""
    try:
        return control.call(target, op, body, timeout_ms=timeout_ms, home=home())
    except control.Unanswered as exc:
        raise click.ClickException(f"{doing} failed: {exc}") from exc


def daemon_search(body: dict, loaded: dict) -> dict:
    """One search in the daemon, exactly as for a prompt (``loaded``: the settings); its
    reply."""
    timeout_ms = int(loaded["retrieval"]["budget_ms"]) + control.SEARCH_MARGIN_MS
    return ask("retrieval", "search", body, "search", timeout_ms)


def require_running() -> None:
    if not control.running(home()):
        raise click.ClickException("kirolearn is not running; start it with 'kirolearn start'")


def require_served() -> None:
    """For commands that only call ingest and retrieval: this machine's daemon runs, or
    one elsewhere serves it (``kirolearn connect``)."""
    try:
        if control.served(home()):
            return
    except control.BadRemote as exc:
        raise click.ClickException(str(exc)) from exc
    require_running()


@contextlib.contextmanager
def reader() -> Iterator[Connection]:
    """A read-only connection to this home's database, closed after the block; while a
    daemon that has just started is still upgrading the store (one migration after
    another), once it has (``UPGRADE_WAIT_S`` at most)."""
    try:
        path = db.location(home())
    except config.ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc}") from exc
    if not db.exists(path):
        raise click.ClickException(f"no database at {path} yet; start kirolearn first")
    deadline = time.monotonic() + UPGRADE_WAIT_S
    while True:
        with db.reading(path) as conn:
            if (time.monotonic() >= deadline or schema.applied(conn) >= schema.latest(conn.name)
                    or not control.running(home())):
                yield conn
                return
        time.sleep(0.1)


def scope_options(command: Callable) -> Callable:
    """--namespace NS or --project DIR (the project DIR belongs to, found the same way
    the agents' hooks find it)."""
    command = click.option("--project", type=click.Path(exists=True, file_okay=False),
                           help="Only the project this directory belongs to.")(command)
    return click.option("--namespace", default=None, help="Only this namespace.")(command)


def namespace_of(namespace: str | None, project_dir: str | None) -> str | None:
    if namespace and project_dir:
        raise click.UsageError("give --namespace or --project, not both")
    if project_dir:
        return project.resolve_project(project_dir).namespace(project.actor_id())
    return namespace
