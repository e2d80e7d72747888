"""The single writer: storage's one connection to the store, and what it does when the
store cannot be written. Socket-free: the storage role asks it for transactions.

When the database cannot be written (a full disk, a read-only or damaged file, an I/O
error, a server that is away) every transaction raises ``base.Unavailable`` naming the
fault and what to do (storage answers ``UNAVAILABLE`` with it, and the shims keep their
events in the spool), and the connection is opened again, at most every ``REOPEN_S``,
until a write succeeds. On SQLite a file not checked yet is quick-checked before
anything is written over its pages, and a WAL deleted under the running writer is
folded back into the database and started afresh, so readers see every committed event.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator

from kirolearn import db
from kirolearn.db import errors, writes
from kirolearn.db.store import Connection
from kirolearn.roles import base

REOPEN_S = 2.0  # while the database cannot be written, how often to try again


class Writer:
    """The writer connection, opened on first use and again after a fault."""

    def __init__(self, where: db.Location, log: logging.Logger):
        self.where = where
        self.store = db.dialect(where)
        self.log = log
        self._conn: Connection | None = None
        self.fault: str | None = None  # why the database cannot be written, said to all
        self.fault_since: str | None = None
        self.reopen_at = 0.0
        self.wal: int | None = None  # the inode of the WAL file the writer writes to
        # The file as last found whole, or damaged, by the quick check (``_check_pages``).
        self.checked: tuple[int, int, int] | None = None
        self.damaged: tuple[int, int, int] | None = None

    @property
    def conn(self) -> Connection:
        """The writer, opened again (at most every REOPEN_S) after a fault; Unavailable,
        naming the fault, while it cannot be."""
        if self._conn is None:
            if time.monotonic() < self.reopen_at:
                raise base.Unavailable(f"storage cannot write: {self.fault}")
            try:
                conn = db.connect_writer(self.where)
                if self.store.IN_A_FILE:
                    self._check_pages(conn)
            except errors.StoreError as exc:
                self._fail(exc)
                raise base.Unavailable(f"storage cannot write: {self.fault}") from exc
            self._conn = conn
        return self._conn

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    def waiting_to_reopen(self, now: float) -> bool:
        """Whether a fault keeps the writer closed until later."""
        return self._conn is None and now < self.reopen_at

    @contextlib.contextmanager
    def writing(self) -> Iterator[Connection]:
        """One transaction on the writer; a fault of the disk or file becomes Unavailable
        (and the writer is reopened later), a success clears the fault."""
        conn = self.conn
        try:
            with conn.transaction():
                yield conn
        except errors.StoreError as exc:
            if self.store.describe_fault(exc, self.where) is None:
                raise
            self._fail(exc)
            raise base.Unavailable(f"storage cannot write: {self.fault}") from exc
        if self.wal is None and self.store.IN_A_FILE:
            with contextlib.suppress(OSError):
                self.wal = os.stat(f"{self.where}-wal").st_ino
        if self.fault:
            self.log.warning("the database can be written again (fault since %s: %s)",
                             self.fault_since, self.fault)
            self.fault = self.fault_since = None

    def _check_pages(self, conn: Connection) -> None:
        """Damaged pages are found before anything is written over them: SQLite's quick
        check when the writer opens a file not checked yet (known by its inode, size and
        time, so a fault's retries do not read it again), raised as the damage it is."""
        info = os.stat(self.where)
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
        if stamp == self.checked:
            return
        problems = [] if stamp == self.damaged else conn.dialect.damage(conn)
        if problems or stamp == self.damaged:
            conn.close()
            self.damaged = stamp
            raise errors.StoreDamaged("database disk image is malformed: "
                                      + "; ".join(problems or ["as found before"]))
        self.checked = stamp

    def _fail(self, exc: errors.StoreError) -> None:
        fault = (self.store.describe_fault(exc, self.where)
                 or f"{db.describe(self.where)}: {exc}")
        if fault != self.fault:
            self.log.error("storage cannot write: %s", fault)
            self.fault, self.fault_since = fault, db.utc_now()
        if self._conn is not None:  # nothing more is written through it, the WAL included
            with contextlib.suppress(errors.StoreError):
                self._conn.close()
        self._conn = self.wal = None
        self.reopen_at = time.monotonic() + REOPEN_S

    def check_wal(self) -> bool:
        """A WAL deleted (or replaced) under the writer hides what it holds from every
        reader, and a crash would lose it: fold it into the database (the writer still
        has it open) and start afresh. Whether what was committed is in the database
        file or the WAL that is there (False: it could not all be folded in; a commit is
        then not to be acknowledged). A stat: storage looks before every acknowledgement."""
        if self._conn is None or self.wal is None:
            return True
        try:
            same = os.stat(f"{self.where}-wal").st_ino == self.wal
        except FileNotFoundError:
            same = False
        if same:
            return True
        self.log.warning("the WAL file was deleted; folding it into the database")
        try:
            folded = writes.checkpoint(self._conn)
        except errors.StoreError:
            folded = False
        if not folded:
            self.log.error("the deleted WAL could not all be folded in (a reader holds it);"
                           " what it holds is not acknowledged until it is")
            return False
        self.close()  # reopened by the next write, with a WAL of its own
        return True

    def size_bytes(self) -> int:
        """The store's size on disk (on PostgreSQL, its database's)."""
        return self.store.size_bytes(self.where, lambda: self.conn)

    def checkpoint(self) -> None:
        """Fold the WAL into the file (best effort: not while a reader holds its pages)."""
        with contextlib.suppress(errors.StoreError, base.Unavailable):
            writes.checkpoint(self.conn)

    def close(self) -> None:
        """Close the connection, the WAL folded in first (a clean stop)."""
        if self._conn is not None:
            with contextlib.suppress(errors.StoreError):
                writes.checkpoint(self._conn)
            with contextlib.suppress(errors.StoreError):
                self._conn.close()
        self._conn = self.wal = None
