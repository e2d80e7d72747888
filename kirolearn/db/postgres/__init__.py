"""PostgreSQL: a team's store (``storage.url``).

The same tables as SQLite's (``schema``), its own full-text search (``fts``), and a
connection that runs the common statements as they are written: their ``$N``
parameters are PostgreSQL's own, sent by psycopg's raw cursor. What PostgreSQL lacks
and the common statements call (``julianday``) the schema makes as SQL functions. The
single writer holds an advisory lock; readers share a pool per process.

psycopg (with its pool) is imported only when a PostgreSQL store is opened: it is the
``postgres`` extra, not needed by the SQLite default.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from kirolearn.db import errors, store
from kirolearn.db.postgres import fts, schema

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["Connection", "check", "connect", "describe", "fts", "reading", "schema"]

CONNECT_TIMEOUT_S = 5
# No statement of a reader runs longer: a search is abandoned well before this.
READER_STATEMENT_TIMEOUT_MS = 5000
# A search's bitmaps of a common term's records stay exact (a lossy one is read again).
READER_WORK_MEM = "32MB"
WRITER_LOCK = 0x6B69726F  # the advisory lock the one writer holds ("kiro")


TITLE = "PostgreSQL"
IN_A_FILE = False
BACKED_UP_BY = ("PostgreSQL's own tools: pg_dump --format=custom --file kirolearn.dump"
                " '<storage.url>' (and pg_restore to put it back)")


def exists(url: str) -> bool:
    """A server's database is there to be reached (or says why not, when reached)."""
    return True


def size_bytes(url: str, writer: Callable[[], Connection]) -> int:
    """The database's size, as the server tells it."""
    return writer().execute("SELECT pg_database_size(current_database())").fetchone()[0]


def exposed(url: str) -> str | None:
    """Who may read it is the server's to say."""
    return None


def describe_fault(exc: errors.StoreError, url: str) -> str | None:
    if isinstance(exc, errors.StoreUnreachable | errors.StoreReadOnly | errors.StoreFull
                  | errors.StoreBusy):
        return (f"the database at {describe(url)} cannot be written ({exc}); check that its"
                " server runs and lets kirolearn in (the agents keep their events in the"
                " spool meanwhile)")
    return None


def describe(url: str) -> str:
    """The URL less its password, for logs and messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc[-1]}"))


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise errors.StoreUnreachable(
            "a PostgreSQL store needs psycopg: pip install 'kirolearn[postgres]'") from exc
    return psycopg


def error(exc: Exception) -> errors.StoreError:
    """The store's error for what psycopg raised (its message kept)."""
    psycopg = _psycopg()
    kinds: tuple[tuple[type, type[errors.StoreError]], ...] = (
        (psycopg.IntegrityError, errors.StoreConflict),
        (psycopg.errors.QueryCanceled, errors.StoreTimeout),
        (psycopg.errors.LockNotAvailable, errors.StoreBusy),
        (psycopg.errors.DiskFull, errors.StoreFull),
        (psycopg.errors.ReadOnlySqlTransaction, errors.StoreReadOnly),
        (psycopg.errors.DataCorrupted, errors.StoreDamaged),
        (psycopg.errors.IndexCorrupted, errors.StoreDamaged),
        (psycopg.OperationalError, errors.StoreUnreachable),
    )
    kind = next((ours for theirs, ours in kinds if isinstance(exc, theirs)), errors.StoreError)
    return kind(str(exc).strip())


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    psycopg = _psycopg()
    try:
        yield
    except psycopg.Error as exc:
        raise error(exc) from exc


def _clean(params: Sequence[Any]) -> tuple:
    """The arguments, a NUL in a text (which PostgreSQL's text cannot hold) stored as
    U+FFFD (SQLite keeps it)."""
    return tuple(value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value
                 else value for value in params)


class Connection:
    """A PostgreSQL connection in autocommit mode; statements run as written."""

    name = "postgres"

    def __init__(self, raw: psycopg.Connection, release: Any = None):
        self.raw = raw
        self._release = release
        self.dialect = sys.modules[__name__]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor:
        with _errors():
            return self.raw.execute(sql, _clean(params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with _errors():
            self.raw.cursor().executemany(sql, [_clean(row) for row in rows])

    def executescript(self, script: str) -> None:
        """Several statements at once, as written (no parameters)."""
        with _errors():
            self.raw.execute(script.encode())

    def transaction(self) -> AbstractContextManager[Connection]:
        """``BEGIN`` … ``COMMIT`` (``store.transaction``)."""
        return store.transaction(self, "BEGIN")

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[None]:
        """psycopg's pipeline mode: an error of any statement in it is raised at its end."""
        with _errors(), self.raw.pipeline():
            yield

    def indexed_by(self, index: str) -> str:
        return ""  # PostgreSQL's planner picks by the figures it keeps

    def unindexed(self, column: str) -> str:
        return column

    def close(self) -> None:
        if self._release is not None:
            self._release(self.raw)
            return
        # The writer's lock is let go now: the server ends a closed session's locks a
        # moment after, and a writer opened at once would find it still taken.
        with contextlib.suppress(Exception):
            self.raw.execute("SELECT pg_advisory_unlock_all()")
        self.raw.close()


def _connect(url: str, readonly: bool = False) -> Connection:
    """A connection of its own (the writer's, the searcher's)."""
    psycopg = _psycopg()
    with _errors():
        raw = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                              application_name="kirolearn", cursor_factory=psycopg.RawCursor)
        if readonly:
            _as_reader(raw)
    return Connection(raw)


def connect_reader(url: str) -> Connection:
    return _connect(url, readonly=True)


def connect_writer(url: str) -> Connection:
    """The single writer: the advisory lock taken, migrations applied."""
    conn = _connect(url)
    try:
        take_writer_lock(conn)
        from kirolearn.db import schema as migrations
        migrations.migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def open_searcher(url: str, interrupted: Any) -> Connection:
    """A reader for searches (a reader's statement timeout bounds each statement; the
    search's own deadline is checked between them)."""
    return connect_reader(url)


def _as_reader(raw: psycopg.Connection) -> None:
    """Read only, and each statement planned for its own arguments: a search's terms
    match ten records or a hundred thousand, and the one plan psycopg's prepared
    statements settle on after five runs took seconds on the common ones. No JIT: it
    compiles for longer than these statements run. Random reads priced as the cached
    reads they are: at the default the planner read every row's text vector rather than
    the GIN index's few thousand (24 ms against 7 at 10,000 records)."""
    raw.execute("SET default_transaction_read_only = on")
    raw.execute(f"SET statement_timeout = {READER_STATEMENT_TIMEOUT_MS}")
    raw.execute("SET plan_cache_mode = force_custom_plan")
    raw.execute("SET jit = off")
    raw.execute(f"SET work_mem = '{READER_WORK_MEM}'")
    raw.execute("SET random_page_cost = 1.1")


def take_writer_lock(conn: Connection) -> None:
    """The single-writer rule across machines: one storage role writes to a database;
    a second daemon pointed at it is refused instead of interleaving its writes."""
    (taken,) = conn.execute("SELECT pg_try_advisory_lock($1)", (WRITER_LOCK,)).fetchone()
    if not taken:
        raise errors.StoreBusy("another kirolearn daemon is writing to this database")


_pools: dict[str, psycopg_pool.ConnectionPool] = {}
_pools_lock = threading.Lock()
POOL_SIZE = 4


@contextlib.contextmanager
def reading(url: str) -> Iterator[Connection]:
    """A read-only connection from this process's pool for the URL (the viewer's pages
    and the CLI's reads open one per piece of work: the pool keeps them warm)."""
    _psycopg()
    import psycopg_pool
    with _pools_lock:
        pool = _pools.get(url)
        if pool is None:
            pool = psycopg_pool.ConnectionPool(
                url, min_size=1, max_size=POOL_SIZE, open=False, name="kirolearn-readers",
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S,
                        "application_name": "kirolearn",
                        "cursor_factory": _psycopg().RawCursor}, configure=_as_reader)
            with _errors():
                pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
            _pools[url] = pool
    try:
        raw = pool.getconn(timeout=CONNECT_TIMEOUT_S)
    except psycopg_pool.PoolTimeout as exc:
        raise errors.StoreUnreachable(f"no connection to the database: {exc}") from exc
    conn = Connection(raw, release=pool.putconn)
    try:
        yield conn
    finally:
        conn.close()


def close_pools() -> None:
    with _pools_lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()


def checkpoint(conn: Connection) -> bool:
    """Nothing: PostgreSQL checkpoints itself."""
    return True


def check(conn: Connection) -> str:
    """PostgreSQL checks its own pages: "ok"."""
    return "ok"


def damage(conn: Connection, most: int = 3) -> list[str]:
    return []


def purge_index(conn: Connection) -> None:
    """``VACUUM`` takes a forgotten record's dead rows and index entries away (outside a
    transaction)."""
    conn.execute("VACUUM memory_records, record_versions")


def release_memory(conn: Connection) -> None:
    """Nothing held here: the server keeps the pages."""


@contextlib.contextmanager
def terms_counted_after(conn: Connection) -> Iterator[None]:
    """Records written in bulk, in the caller's transaction: ``record_terms`` is counted
    again once, after them, instead of row by row by its trigger (which updates the
    common terms' rows once for each record), and the table is analyzed."""
    triggers = ("memory_records_terms", "memory_records_terms_fold")
    for trigger in triggers:
        conn.execute(f"ALTER TABLE memory_records DISABLE TRIGGER {trigger}")
    yield
    conn.execute("DELETE FROM record_terms")
    conn.execute("INSERT INTO record_terms SELECT term, count(*) FROM memory_records,"
                 " unnest(tsvector_to_array(search)) AS t(term) GROUP BY term")
    for trigger in triggers:
        conn.execute(f"ALTER TABLE memory_records ENABLE TRIGGER {trigger}")
    # The planner's figures for the new rows now, not when autovacuum next comes: a
    # search planned without them read whole windows (190 ms at 100,000 records).
    conn.execute("ANALYZE memory_records")


def export_schema(version: int) -> int:
    """The SQLite schema an export names for this one (``schema.SQLITE_SCHEMA``)."""
    return schema.SQLITE_SCHEMA[version]
