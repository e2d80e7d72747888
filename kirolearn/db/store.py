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
from collections.abc import Iterable, Iterator, Sequence
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
    dialect: Any  # the dialect's module: its schema, search statements and checks

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    def executescript(self, script: str) -> None: ...

    def transaction(self) -> AbstractContextManager[Connection]: ...

    def indexed_by(self, index: str) -> str:
        """`` INDEXED BY index`` on SQLite (whose planner picks worse on its own), or ""."""
        ...

    def unindexed(self, column: str) -> str:
        """The column, kept from choosing an index on SQLite (``+column``)."""
        ...

    def close(self) -> None: ...


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
