"""Backup and restore: a consistent copy of the database, taken while the daemon runs,
and putting one back (``kirolearn.db.sqlite.backup``)."""

from __future__ import annotations

from pathlib import Path

import click

from kirolearn import control, db, paths
from kirolearn.cli import common
from kirolearn.cli.daemon import start
from kirolearn.db.sqlite import backup as backups
from kirolearn.supervisor.arbiter import AlreadyRunning, PidLock


def _describe(summary: dict) -> str:
    return f"{summary['events']} events and {summary['records']} records"


@click.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path), required=False)
def backup(path: Path | None) -> None:
    """Copy the database to PATH (default: backups/kirolearn-<time>.db in the home), as
    of one moment, while the daemon runs and writes. The copy is checked before it
    gets its name; an existing file is never replaced. (A PostgreSQL store is backed up
    with pg_dump: it says so.)

    \b
    Examples:
        kirolearn backup
        kirolearn backup ~/safe/kirolearn-monday.db
    """
    where = db.location(common.home(), common.settings())
    store = db.dialect(where)
    if store.BACKED_UP_BY:
        raise click.ClickException(
            f"memory is kept in {store.TITLE} here (storage.url), which kirolearn does not"
            f" copy; back it up with {store.BACKED_UP_BY}")
    if path is None:
        folder = paths.ensure_private_dir(common.home().backup_dir)
        path = folder / f"kirolearn-{backups.stamp()}.db"
    try:
        summary = backups.take(common.home().db_path, path)
    except backups.BackupError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"backed up {_describe(summary)} to {path.absolute()}")


@click.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--yes", is_flag=True, help="Do not ask before replacing the database.")
@click.pass_context
def restore(ctx: click.Context, path: Path, yes: bool) -> None:
    """Put the backup at PATH in place of the database. Asks first; stops the daemon if
    it runs and starts it again after. The database it replaces is kept beside it
    (kirolearn.db.before-restore-<time>).

    \b
    Example:
        kirolearn restore ~/.kirolearn/backups/kirolearn-20261123T171500Z.db
    """
    try:
        summary = backups.verify(path)
    except backups.BackupError as exc:
        raise click.ClickException(str(exc)) from exc
    target = common.home().ensure_layout().db_path
    if not yes:
        click.confirm(f"Replace {target} with the backup's {_describe(summary)}?", abort=True)
    was_running = control.stop(common.home())
    lock = PidLock(common.home().pidfile())  # no daemon starts (a hook's autostart) meanwhile
    try:
        lock.acquire()
    except AlreadyRunning as exc:
        raise click.ClickException(f"{exc}: it started again; nothing was restored") from exc
    try:
        kept = backups.restore(path, target)
        click.echo(f"restored {_describe(summary)} from {path}")
        if kept is not None:
            click.echo(f"the database it replaced is kept as {kept}")
    except backups.BackupError as exc:
        raise click.ClickException(f"{exc}; the database was left as it was") from exc
    finally:
        lock.release()
        if was_running:
            ctx.invoke(start, foreground=False, extraction_workers=None)


COMMANDS = [backup, restore]
