"""Backups: a consistent copy of the live database, and putting one back.

SQLite's online backup API copies the database inside one read transaction, so the
copy is the database as of one commit while the storage role goes on writing; a file
copy of a live WAL database is not (the pages still in the WAL are missing, and
deleting or copying the WAL under a running writer corrupts). A copy is checked
(``PRAGMA integrity_check``) before it gets its name, and is a standalone file: no
WAL beside it. ``verify`` says whether a file is a kirolearn database this version
can use; ``restore`` puts one in place of a stopped daemon's database.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from kirolearn.db import schema

SQLITE_MAGIC = b"SQLite format 3\x00"
SCHEDULED = "scheduled-"  # the storage role's backups (``backup.interval_h``), pruned
REQUIRED_TABLES = {"_migrations", "events", "memory_records"}


class BackupError(Exception):
    """A backup or restore that cannot be made; nothing was changed."""


def take(source: Path, dest: Path) -> dict:
    """Copy the database at ``source`` (running daemon or not) to ``dest``, a new file;
    what the copy holds (``verify``)."""
    dest = dest.absolute()
    if not source.exists():
        raise BackupError(f"there is no database at {source} yet: nothing to back up")
    live = {source.resolve(), *(Path(f"{source.resolve()}{s}") for s in ("-wal", "-shm"))}
    if dest.resolve() in live:
        raise BackupError(f"{dest} is the live database itself; choose another path")
    if os.path.lexists(dest):
        raise BackupError(f"{dest} already exists; a backup never replaces a file")
    # The copy is made in a private folder of its own beside the target (no name there
    # can be a link someone else left), then linked to its name, which fails rather
    # than replace or follow anything that took that name meanwhile.
    try:
        workdir = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    except OSError as exc:
        raise BackupError(f"cannot write {dest}: {exc.strerror}") from exc
    partial = workdir / "partial.db"
    try:
        try:
            reader = sqlite3.connect(f"file:{quote(str(source))}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            raise BackupError(f"cannot read {source}: {exc}") from exc
        _copy(reader, partial)
        os.chmod(partial, 0o600)
        summary = verify(partial)
        _link_new(partial, dest)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return summary


def _link_new(made: Path, dest: Path) -> None:
    """Give ``made`` the name ``dest``, which must not exist (a link there included)."""
    try:
        os.link(made, dest, follow_symlinks=False)
    except FileExistsError as exc:
        raise BackupError(f"{dest} already exists; a backup never replaces a file") from exc
    except OSError as exc:  # a filesystem without hard links: rename, checked just before
        if os.path.lexists(dest):
            raise BackupError(f"{dest} already exists; a backup never replaces a file"
                              ) from exc
        os.rename(made, dest)


def verify(path: Path) -> dict:
    """``{events, records, schema}`` of a kirolearn database file this version can use;
    BackupError saying why not (not SQLite, not kirolearn's, newer, damaged)."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise BackupError(f"cannot read {path}: {exc.strerror}") from exc
    if magic != SQLITE_MAGIC:
        raise BackupError(f"{path} is not a SQLite database")
    conn = _open_as_is(path)
    try:
        tables = {name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables >= REQUIRED_TABLES:
            raise BackupError(f"{path} is a SQLite database, but not kirolearn's")
        version = conn.execute("SELECT max(version) FROM _migrations").fetchone()[0] or 0
        if version > schema.latest():
            raise BackupError(f"{path} was written by a newer kirolearn (schema {version};"
                              f" this one knows up to {schema.latest()})")
        problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        if problems != ["ok"]:
            raise BackupError(f"{path} is damaged: {'; '.join(problems[:3])}")
        return {"events": conn.execute("SELECT count(*) FROM events").fetchone()[0],
                "records": conn.execute("SELECT count(*) FROM memory_records").fetchone()[0],
                "schema": version}
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path} cannot be read as a database: {exc}") from exc
    finally:
        conn.close()


def restore(backup: Path, target: Path) -> Path | None:
    """Put the backup in place of the database at ``target`` (its daemon stopped); the
    database it replaces is kept beside it, renamed. Returns that file (None: there was
    no database)."""
    verify(backup)
    partial = target.with_name(f".{target.name}.restoring")
    partial.touch(mode=0o600)  # private before SQLite writes to it
    try:
        _copy(_open_as_is(backup), partial)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    kept = None
    if target.exists():  # kept with its WAL, as the daemon left them
        kept = target.with_name(f"{target.name}.before-restore-{stamp()}")
        os.replace(target, kept)
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{target}-wal", f"{kept}-wal")
    with contextlib.suppress(FileNotFoundError):
        Path(f"{target}-shm").unlink()
    os.replace(partial, target)
    return kept


def take_scheduled(source: Path, folder: Path, keep: int) -> tuple[Path, dict, list[Path]]:
    """A scheduled backup into ``folder``, then the oldest scheduled ones past ``keep``
    (0: all kept) removed: (the backup, what it holds, the ones removed)."""
    dest = folder / f"{SCHEDULED}{stamp()}.db"
    summary = take(source, dest)
    removed = scheduled(folder)[:-keep] if keep else []
    for old in removed:
        old.unlink()
    return dest, summary, removed


def scheduled(folder: Path) -> list[Path]:
    """The scheduled backups in ``folder``, oldest first (their names sort by time)."""
    return sorted(folder.glob(f"{SCHEDULED}*.db"))


def next_due(folder: Path, interval_s: float) -> float:
    """When (``time.time()``) the next scheduled backup is due: an interval after the
    newest, so a restarted daemon keeps the rhythm; now, when there is none."""
    newest = scheduled(folder)[-1:] if folder.is_dir() else []
    return newest[0].stat().st_mtime + interval_s if newest else 0.0


def _open_as_is(path: Path) -> sqlite3.Connection:
    """A file read as it is (immutable): no lock, no -wal or -shm made beside it."""
    return sqlite3.connect(f"file:{quote(str(path.absolute()))}?mode=ro&immutable=1", uri=True)


def _copy(source: sqlite3.Connection, dest: Path) -> None:
    """The whole database in one step (one read transaction: one consistent state), then
    made a standalone file and flushed to disk."""
    copy = sqlite3.connect(dest, isolation_level=None)
    try:
        source.backup(copy)
        copy.execute("PRAGMA journal_mode=DELETE")
    except sqlite3.Error as exc:
        raise BackupError(f"the copy failed: {exc}") from exc
    finally:
        copy.close()
        source.close()
    with dest.open("rb+") as handle:
        os.fsync(handle.fileno())


def stamp() -> str:
    """A UTC time for file names: 20261123T171500Z."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
