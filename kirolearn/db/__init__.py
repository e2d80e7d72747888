"""The database: every statement kirolearn runs is in this package.

The store is a SQLite file under the home (the default), or a PostgreSQL database
(``storage.url``): ``Location`` is either, and its dialect (``sqlite`` or ``postgres``,
one package each: connection, schema, full-text search, what its faults mean) is
picked from it by its URL's scheme (``DIALECTS``; a path is a SQLite file) when a
connection is opened (``connect_reader``, ``reading``, ``connect_writer``,
``open_searcher``). Both implement ``store.Dialect``, and nothing outside this package
asks which one it has: what differs is a member of the dialect. Every other module is
written once against ``store.Connection``, in plain SQL both dialects run as it is:

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
import importlib
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from kirolearn import paths
from kirolearn.db import errors
from kirolearn.db.store import Connection, Dialect

Location = Path | str  # a SQLite file, or a PostgreSQL URL


def location(home: paths.Home, settings: dict | None = None) -> Location:
    """Where the home's store is: ``storage.url`` when set, else its SQLite file."""
    if settings is None:
        from kirolearn import config
        url = config.storage_url(home)
    else:
        url = settings["storage"]["url"]
    return url or home.db_path


# Each dialect by the scheme of where its store is (a SQLite file is a ``file``).
DIALECTS = {"file": "kirolearn.db.sqlite", "postgresql": "kirolearn.db.postgres",
            "postgres": "kirolearn.db.postgres"}


def dialect(where: Location) -> Dialect:
    """The dialect of a store (``store.Dialect``), by its URL's scheme (a path: a SQLite
    file). Imported when first asked for: PostgreSQL's brings psycopg only then."""
    scheme = "file" if isinstance(where, Path) else urlsplit(where).scheme
    if scheme not in DIALECTS:
        raise errors.StoreUnreachable(f"no store is kept at {scheme}:// URLs"
                                      f" (storage.url: postgresql://…)")
    return importlib.import_module(DIALECTS[scheme])


def exists(where: Location) -> bool:
    """Whether the store was made (a PostgreSQL database is there to be reached)."""
    return dialect(where).exists(where)


def describe(where: Location) -> str:
    """The location for a log or a message (a URL less its password)."""
    return dialect(where).describe(where)


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


def reading(where: Location) -> contextlib.AbstractContextManager[Connection]:
    """A read-only connection for one piece of work, closed after it (on PostgreSQL,
    given back to the process's pool)."""
    return dialect(where).reading(where)


def path_key(path: str) -> str:
    """How ``file_changes`` names a file: a hash of its path as records give it."""
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def files_key(files: Iterable[str]) -> str | None:
    """How ``memory_records.files_key`` names the set of files a record names (None:
    none), whatever their order."""
    files = sorted(set(files))
    return path_key("\n".join(files)) if files else None
