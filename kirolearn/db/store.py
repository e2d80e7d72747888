"""What every module of ``db`` is written against: a connection to either store.

A connection is opened by its dialect (``db.sqlite`` or ``db.postgres``), picked once,
when it is opened, from where the store is. Both run the same plain SQL, whose
parameters are numbered ``$1``, ``$2``, … (PostgreSQL's own): statements common to
both are written once. SQLite's connection translates one thing, the parameters: each
``$N`` is written ``?N`` (``db.sqlite.numbered``, cached per statement), SQLite's own
positional form, which binds faster than ``$N`` (a name, bound from a dict); text in
quotes is left alone, and any other parameter style is refused. What differs lives in
the dialect, behind this interface: the schema and its migrations, the full-text search
statements, transactions, and the few planner hints SQLite needs (``indexed_by``,
``unindexed``), which PostgreSQL's connection leaves out.
Every failure is one of ``db.errors``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from kirolearn.db import errors


class Cursor(Protocol):
    """The rows of one statement (and how many rows it changed)."""

    rowcount: int

    def fetchone(self) -> tuple | None: ...

    def fetchall(self) -> list[tuple]: ...

    def __iter__(self) -> Iterator[tuple]: ...


class Connection(Protocol):
    """A connection to the store, in autocommit mode: a transaction is ``transaction()``."""

    name: str  # "sqlite" or "postgres"
    dialect: Dialect  # the dialect's module: its schema, search statements and checks

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    def executescript(self, script: str) -> None: ...

    def transaction(self) -> AbstractContextManager[Connection]: ...

    def pipeline(self) -> AbstractContextManager[None]:
        """Statements sent without waiting for each answer, their results read when the
        block ends: many small statements cost one round trip to a server (SQLite, in the
        process, has none to save). A cursor's rows and rowcount are read after it."""
        ...

    def indexed_by(self, index: str) -> str:
        """`` INDEXED BY index`` on SQLite (whose planner picks worse on its own), or ""."""
        ...

    def unindexed(self, column: str) -> str:
        """The column, kept from choosing an index on SQLite (``+column``)."""
        ...

    def close(self) -> None: ...


class Dialect(Protocol):
    """What a store's dialect (``db.sqlite``, ``db.postgres``: a package each) gives the
    rest of kirolearn; ``db.dialect`` picks one by where the store is, and nothing
    outside ``db`` asks which it has. ``tests/test_db.py`` checks both implement it."""

    Connection: type  # its connection, named ``Connection.name``
    fts: Any  # its full-text search statements (``db.fts`` reaches them)
    schema: Any  # its numbered migrations (``MIGRATIONS``)
    TITLE: str  # its name for people: "SQLite", "PostgreSQL"
    # A store in a file kirolearn holds: its pages are checked when the writer opens it,
    # its WAL is watched, it is kept private, and ``kirolearn backup`` copies it.
    IN_A_FILE: bool
    # Who backs the store up, when not kirolearn (None: ``kirolearn backup``).
    BACKED_UP_BY: str | None

    def describe(self, where: Any) -> str:
        """The location for a log or a message (a URL less its password)."""
        ...

    def exists(self, where: Any) -> bool:
        """Whether the store was made (a server is there to be reached)."""
        ...

    def connect_reader(self, where: Any) -> Connection: ...

    def connect_writer(self, where: Any) -> Connection: ...

    def open_searcher(self, where: Any, interrupted: Any) -> Connection: ...

    def reading(self, where: Any) -> AbstractContextManager[Connection]: ...

    def size_bytes(self, where: Any, writer: Callable[[], Connection]) -> int:
        """The store's size on disk (``writer``: the writer's connection, for a store
        that must be asked)."""
        ...

    def exposed(self, where: Any) -> str | None:
        """Why others may read the store, with the fix (None: it is private)."""
        ...

    def describe_fault(self, exc: errors.StoreError, where: Any) -> str | None:
        """What a store's error says about the machine, and what to do (None: not a
        fault of the disk, the file or the server)."""
        ...

    def checkpoint(self, conn: Connection) -> bool: ...

    def check(self, conn: Connection) -> str: ...

    def damage(self, conn: Connection, most: int = 3) -> list[str]: ...

    def purge_index(self, conn: Connection) -> None: ...

    def release_memory(self, conn: Connection) -> None: ...

    def terms_counted_after(self, conn: Connection) -> AbstractContextManager[None]: ...

    def export_schema(self, version: int) -> int: ...


class Params:
    """A statement's parameters, numbered in the order they are added: ``p(value)`` is
    ``$N`` and ``p.list(values)`` is ``($N, $N+1, …)``; ``p.values`` is what to run it
    with. For a statement whose number of parameters depends on its arguments."""

    def __init__(self, *values: Any):
        self.values: list[Any] = list(values)

    def __call__(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"

    def list(self, values: Iterable[Any]) -> str:
        return "(" + ", ".join(self(value) for value in values) + ")"


@contextlib.contextmanager
def transaction(conn: Connection, begin: str) -> Iterator[Connection]:
    """``begin`` (the dialect's BEGIN) … ``COMMIT``, or ``ROLLBACK`` when the body raises;
    a rollback that fails too (SQLite may have rolled back already, on a full disk) is
    let go: the first error is the one."""
    conn.execute(begin)
    try:
        yield conn
    except BaseException:
        with contextlib.suppress(errors.StoreError):
            conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except errors.StoreError:
        with contextlib.suppress(errors.StoreError):
            conn.execute("ROLLBACK")
        raise
