"""SQLite: the embedded default, one file under the home.

One writer (the storage role: WAL, full sync, ``BEGIN IMMEDIATE``), any number of
read-only readers beside it. ``schema`` holds its migrations, ``fts`` its full-text
search (FTS5), ``backup`` the online copy of the file. The connection runs the common
statements (``$N`` parameters, ``numbered``) and raises ``db.errors`` for what SQLite
says.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from kirolearn.db import errors, store
from kirolearn.db.sqlite import fts, schema

__all__ = ["Connection", "check", "connect_reader", "connect_writer", "damage", "fts",
           "open_searcher", "schema"]

TITLE = "SQLite"
IN_A_FILE = True
BACKED_UP_BY = None  # ``kirolearn backup`` copies the file


def describe(path: Path) -> str:
    return str(path)


def exists(path: Path) -> bool:
    return Path(path).exists()


@contextlib.contextmanager
def reading(path: Path) -> Iterator[Connection]:
    """A read-only connection for one piece of work, closed after it."""
    conn = connect_reader(path)
    try:
        yield conn
    finally:
        conn.close()


def size_bytes(path: Path, writer: Callable[[], Connection]) -> int:
    """The file and its WAL (read from the disk, so also while the writer cannot open)."""
    return sum(os.stat(f"{path}{suffix}").st_size for suffix in ("", "-wal")
               if os.path.exists(f"{path}{suffix}"))


def exposed(path: Path) -> str | None:
    mode = Path(path).stat().st_mode & 0o777
    if mode & 0o077:
        return f"{path} is readable by others (mode {mode:o}); run: chmod 600 {path}"
    return None


def describe_fault(exc: errors.StoreError, path: Path) -> str | None:
    if isinstance(exc, errors.StoreFull):
        return (f"the disk holding {path} is full; free some space there (the agents keep"
                " their events in the spool meanwhile, and they are stored once there is room)")
    if isinstance(exc, errors.StoreReadOnly):
        return (f"{path} cannot be written (a read-only file or file system); make it"
                " writable again (chmod u+w, or remount read-write)")
    if isinstance(exc, errors.StoreDamaged):
        return (f"{path} is damaged ({exc}); stop kirolearn and put a good copy in its place"
                " (kirolearn export/import keeps one), or move it aside to start afresh")
    if isinstance(exc, errors.StoreUnreachable):
        return f"{path} cannot be read or written ({exc}); check the disk and the file's folder"
    return None


def error(exc: sqlite3.Error) -> errors.StoreError:
    """The store's error for what SQLite raised (its message kept)."""
    text = str(exc).lower()
    if isinstance(exc, sqlite3.IntegrityError):
        kind: type[errors.StoreError] = errors.StoreConflict
    elif "interrupted" in text:
        kind = errors.StoreTimeout
    elif "locked" in text or "busy" in text:
        kind = errors.StoreBusy
    elif "full" in text:
        kind = errors.StoreFull
    elif "readonly" in text or "read-only" in text:
        kind = errors.StoreReadOnly
    elif "malformed" in text or "not a database" in text or "corrupt" in text:
        kind = errors.StoreDamaged
    elif "disk i/o" in text or "unable to open" in text:
        kind = errors.StoreUnreachable
    else:
        kind = errors.StoreError
    return kind(str(exc))


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise error(exc) from exc


@functools.lru_cache(maxsize=1024)
def numbered(sql: str) -> str:
    """The statement with its ``$N`` parameters written as SQLite's own ``?N``: both
    are SQLite, but ``$N`` is a name, bound from a dict (a microsecond more per
    argument), where ``?N`` is bound by position. Text in quotes (a literal, a quoted
    name) and comments is left as it is; a parameter of another form (``?``,
    ``:name``), which PostgreSQL would refuse, is refused here too."""
    out, at, size = [], 0, len(sql)
    while at < size:
        char = sql[at]
        if char in "'\"`[":
            close = "]" if char == "[" else char
            end = sql.find(close, at + 1)
            while end != -1 and close != "]" and sql.startswith(close * 2, end):
                end = sql.find(close, end + 2)  # a doubled quote is one quote
            end = size if end == -1 else end + 1
        elif sql.startswith("--", at):
            end = sql.find("\n", at)
            end = size if end == -1 else end
        elif sql.startswith("/*", at):
            end = sql.find("*/", at + 2)
            end = size if end == -1 else end + 2
        elif char == "$" and at + 1 < size and sql[at + 1].isdigit():
            end = at + 1
            while end < size and sql[end].isdigit():
                end += 1
            out.append("?" + sql[at + 1:end])
            at = end
            continue
        elif char == "?" or (char in ":@$" and sql[at + 1:at + 2].isalpha()):
            raise errors.StoreError(f"a statement's parameters are $1, $2, … (both dialects"
                                    f" run them), not {sql[at:at + 8]!r}: {sql[:200]}")
        else:
            end = at + 1
        out.append(sql[at:end])
        at = end
    return "".join(out)


class Rows:
    """A statement's cursor; SQLite reads rows as they are fetched, so a damaged page
    can fail a fetch too: raised as the store's error like any other. (Plain try
    blocks: this is every statement's path.)"""

    __slots__ = ("cursor", "rowcount")

    def __init__(self, cursor: sqlite3.Cursor):
        self.cursor = cursor
        self.rowcount = cursor.rowcount

    def fetchone(self) -> tuple | None:
        try:
            return self.cursor.fetchone()
        except sqlite3.Error as exc:
            raise error(exc) from exc

    def fetchall(self) -> list[tuple]:
        try:
            return self.cursor.fetchall()
        except sqlite3.Error as exc:
            raise error(exc) from exc

    def __iter__(self) -> Iterator[tuple]:
        with _errors():
            yield from self.cursor


class Connection:
    """A SQLite connection in autocommit mode (``isolation_level=None``)."""

    name = "sqlite"

    def __init__(self, raw: sqlite3.Connection):
        self.raw = raw
        self.dialect = sys.modules[__name__]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        try:
            return Rows(self.raw.execute(numbered(sql), params))
        except sqlite3.Error as exc:
            raise error(exc) from exc

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with _errors():
            self.raw.executemany(numbered(sql), rows)

    def executescript(self, script: str) -> None:
        """A migration's statements, one at a time (triggers hold semicolons)."""
        buffer = ""
        for line in script.splitlines(keepends=True):
            buffer += line
            if sqlite3.complete_statement(buffer):
                if buffer.strip():
                    self.execute(buffer)
                buffer = ""

    def pipeline(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # each statement runs in the process at once

    def transaction(self) -> AbstractContextManager[Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (``store.transaction``)."""
        return store.transaction(self, "BEGIN IMMEDIATE")

    def indexed_by(self, index: str) -> str:
        return f" INDEXED BY {index}"

    def unindexed(self, column: str) -> str:
        return f"+{column}"

    def close(self) -> None:
        self.raw.close()


def connect_reader(path: Path) -> Connection:
    """A read-only connection; StoreUnreachable when there is no database."""
    with _errors():
        raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None,
                              check_same_thread=False)
        raw.execute("PRAGMA busy_timeout=5000")
    return Connection(raw)


def connect_writer(path: Path) -> Connection:
    """The single writer: WAL, full sync, migrations applied. The file is made private
    (0600) before SQLite opens it, and so are the WAL and shared memory beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.touch(mode=0o600)
    with _errors():
        raw = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn = Connection(raw)
    try:
        if not os.access(path, os.W_OK):  # SQLite would open it read-only, and say so late
            raise errors.StoreReadOnly("the database file is read-only")
        for pragma in ("journal_mode=WAL", "synchronous=FULL", "foreign_keys=ON",
                       "busy_timeout=5000",
                       # What is deleted (a forgotten record, pruned events) is overwritten
                       # on disk, not left readable in free pages.
                       "secure_delete=ON",
                       # Index pages (content hashes are random) stay in memory.
                       "cache_size=-65536"):
            conn.execute(f"PRAGMA {pragma}")
        from kirolearn.db import schema as migrations
        migrations.migrate(conn)
    except BaseException:
        conn.close()
        raise
    for suffix in ("-wal", "-shm"):
        side = Path(str(path) + suffix)
        if side.exists():
            side.chmod(0o600)
    return conn


def open_searcher(path: Path, interrupted: Callable[[], bool]) -> Connection:
    """A reader for searches, with a temporary FTS5 table that tokenizes query words
    exactly as the records were tokenized; ``interrupted()`` is asked every 1,000 steps
    of a statement and stops it when true (the search's deadline reaches into SQLite)."""
    conn = connect_reader(path)
    conn.execute("PRAGMA cache_size=-65536")  # the index pages searches touch stay hot
    conn.execute(f"CREATE VIRTUAL TABLE temp.query_tokens USING fts5"
                 f" (token, tokenize = '{schema.FTS_TOKENIZE}')")
    conn.execute("CREATE VIRTUAL TABLE temp.query_tokens_vocab USING fts5vocab"
                 " (temp, query_tokens, 'instance')")
    conn.raw.set_progress_handler(interrupted, 1000)
    return conn


def checkpoint(conn: Connection) -> bool:
    """Fold the WAL into the database file (at a clean stop, after a forget); whether
    every frame of it is in the file now (a reader can hold some back)."""
    row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return row is None or (row[0] == 0 and row[1] == row[2])


def damage(conn: Connection, most: int = 3) -> list[str]:
    """What SQLite's quick check finds wrong with the file (at most ``most``); none: it
    reads whole. (It reads every page once, without checking indexes against tables.)"""
    found = [row[0] for row in conn.execute(f"PRAGMA quick_check({int(most)})")]
    return [] if found == ["ok"] else found


def check(conn: Connection) -> str:
    """SQLite's quick check: "ok" when the file is sound."""
    return conn.execute("PRAGMA quick_check").fetchone()[0]


def purge_index(conn: Connection) -> None:
    """Rewrite the full-text index as one segment: a deleted record's words stay in the
    older segments until they are merged (about a second at 100,000 records)."""
    conn.execute("INSERT INTO memory_records_fts (memory_records_fts) VALUES ('optimize')")


def release_memory(conn: Connection) -> None:
    """Give back the connection's page cache (refilled by the next statements)."""
    conn.execute("PRAGMA shrink_memory")


@contextlib.contextmanager
def terms_counted_after(conn: Connection) -> Iterator[None]:
    """Records written in bulk: FTS5 keeps its counts as it goes, nothing to do after."""
    yield


def export_schema(version: int) -> int:
    """The schema an export names: SQLite's migrations are the exports' numbering."""
    return version
