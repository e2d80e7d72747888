"""The database: every statement kirolearn runs is in this package.

The store is a SQLite file under the home (the default), or a PostgreSQL database
(``storage.url``): ``Location`` is either, and ``connect_reader``, ``reading`` and
``writes.connect_writer`` open the one it names. The statements are SQLite's;
``postgres`` runs them on PostgreSQL (and holds its schema and full-text search).

- ``schema``: the numbered migrations;
- ``writes``: the single writer (the storage role): events, records, batches, vectors,
  the retrieval log — each change inside ``transaction``;
- ``reads``: what every reader asks (records, events, batches, stats, export);
- ``fts``: the full-text statements search is made of;
- ``views``: the viewer's pages;
- ``backup``: a consistent copy of the live database, and putting one back.

Only the storage process writes (one connection, WAL, ``BEGIN IMMEDIATE``; on
PostgreSQL, under an advisory lock). Readers (retrieval, the viewer, the CLI's stats
and export) open read-only connections, which run beside the writer.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from kirolearn import paths

Location = Path | str  # a SQLite file, or a PostgreSQL URL


def location(base: Path | None = None, settings: dict | None = None) -> Location:
    """Where the home's store is: ``storage.url`` when set, else its SQLite file."""
    if settings is None:
        from kirolearn import config
        url = config.storage_url(base)
    else:
        url = settings["storage"]["url"]
    return url or paths.db_path(base)


def is_postgres(where: Location) -> bool:
    return isinstance(where, str)


def exists(where: Location) -> bool:
    """Whether the store was made (a PostgreSQL database is there to be reached)."""
    return is_postgres(where) or Path(where).exists()


def describe(where: Location) -> str:
    """The location for a log or a message (a URL less its password)."""
    if is_postgres(where):
        from kirolearn.db import postgres
        return postgres.describe(where)
    return str(where)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def now_ms() -> int:
    return int(time.time() * 1000)


def connect_reader(path: Location) -> sqlite3.Connection:
    """A read-only connection; raises sqlite3.OperationalError if there is no database."""
    if is_postgres(path):
        from kirolearn.db import postgres
        return postgres.connect(path, readonly=True)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None,
                           check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


@contextlib.contextmanager
def reading(path: Location) -> Iterator[sqlite3.Connection]:
    """A read-only connection for one piece of work, closed after it (on PostgreSQL,
    given back to the process's pool)."""
    if is_postgres(path):
        from kirolearn.db import postgres
        with postgres.reading(path) as conn:
            yield conn
        return
    conn = connect_reader(path)
    try:
        yield conn
    finally:
        conn.close()


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, or ``ROLLBACK`` when the body raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already
            conn.execute("ROLLBACK")             # (a full disk): the first error is the one
        raise
    try:
        conn.execute("COMMIT")
    except sqlite3.Error:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


def in_list(values: Iterable) -> tuple[str, list]:
    """An SQL ``(?, ?, …)`` list and its arguments."""
    values = list(values)
    return "(" + ",".join("?" * len(values)) + ")", values


def path_key(path: str) -> str:
    """How ``file_changes`` names a file: a hash of its path as records give it."""
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def files_key(files: Iterable[str]) -> str | None:
    """How ``memory_records.files_key`` names the set of files a record names (None:
    none), whatever their order."""
    files = sorted(set(files))
    return path_key("\n".join(files)) if files else None
