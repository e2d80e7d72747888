"""The database: every statement kirolearn runs is in this package.

The store is a SQLite file under the home (the default), or a PostgreSQL database
(``storage.url``): ``Location`` is either, and its dialect (``sqlite`` or ``postgres``,
one package each: connection, schema, full-text search) is picked from it once, when a
connection is opened (``connect_reader``, ``reading``, ``connect_writer``,
``open_searcher``). Every other module is written once against ``store.Connection``,
in plain SQL both dialects run as it is:

- ``schema``: the numbered migrations, applied;
- ``writes``: the single writer (the storage role): events, records, vectors, the
  retrieval log — each change inside ``conn.transaction()``;
- ``batches``: the extraction queue: events waiting, batches leased, done and failed;
- ``reads``: what every reader asks (records, events, batches, stats, export);
- ``fts``: the statements search is made of;
- ``views``: the viewer's pages;
- ``errors``: the failures every dialect raises (``StoreFull``, ``StoreDamaged``, …).

Only the storage process writes (one connection; on SQLite WAL and ``BEGIN
IMMEDIATE``, on PostgreSQL an advisory lock). Readers (retrieval, the viewer, the CLI's
stats and export) open read-only connections, which run beside the writer.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

from kirolearn import paths
from kirolearn.db.store import Connection

Location = Path | str  # a SQLite file, or a PostgreSQL URL


def location(home: paths.Home, settings: dict | None = None) -> Location:
    """Where the home's store is: ``storage.url`` when set, else its SQLite file."""
    if settings is None:
        from kirolearn import config
        url = config.storage_url(home)
    else:
        url = settings["storage"]["url"]
    return url or home.db_path


def dialect(where: Location) -> ModuleType:
    """The dialect of a store: ``db.postgres`` for a URL, else ``db.sqlite`` (PostgreSQL's
    imports psycopg only when a connection is made)."""
    if isinstance(where, str):
        from kirolearn.db import postgres
        return postgres
    from kirolearn.db import sqlite
    return sqlite


def is_postgres(where: Location) -> bool:
    return isinstance(where, str)


def exists(where: Location) -> bool:
    """Whether the store was made (a PostgreSQL database is there to be reached)."""
    return is_postgres(where) or Path(where).exists()


def describe(where: Location) -> str:
    """The location for a log or a message (a URL less its password)."""
    if is_postgres(where):
        return dialect(where).describe(where)
    return str(where)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def now_ms() -> int:
    return int(time.time() * 1000)


def connect_reader(where: Location) -> Connection:
    """A read-only connection of its own (errors.StoreUnreachable: no database)."""
    return dialect(where).connect_reader(where)


def connect_writer(where: Location) -> Connection:
    """The single writer's connection, its migrations applied."""
    return dialect(where).connect_writer(where)


def open_searcher(where: Location, interrupted: Callable[[], bool]) -> Connection:
    """Retrieval's reader; ``interrupted()`` stops a statement when true, where the
    dialect can (SQLite; on PostgreSQL a reader's statement timeout bounds each)."""
    return dialect(where).open_searcher(where, interrupted)


def release_memory(conn: Connection) -> None:
    """Give back what the connection caches on this side (SQLite's page cache)."""
    conn.dialect.release_memory(conn)


@contextlib.contextmanager
def reading(where: Location) -> Iterator[Connection]:
    """A read-only connection for one piece of work, closed after it (on PostgreSQL,
    given back to the process's pool)."""
    if is_postgres(where):
        with dialect(where).reading(where) as conn:
            yield conn
        return
    conn = connect_reader(where)
    try:
        yield conn
    finally:
        conn.close()


def path_key(path: str) -> str:
    """How ``file_changes`` names a file: a hash of its path as records give it."""
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def files_key(files: Iterable[str]) -> str | None:
    """How ``memory_records.files_key`` names the set of files a record names (None:
    none), whatever their order."""
    files = sorted(set(files))
    return path_key("\n".join(files)) if files else None
