"""The store's failures, whichever database it is: each dialect raises these, from
SQLite's and psycopg's own errors, so that the roles and the CLI act on a cause
(storage says a full disk and waits; a search gives up in time) without knowing which
database said it. The original error is the ``__cause__``."""

from __future__ import annotations


class StoreError(Exception):
    """A statement failed for a reason none of the classes below names (a bug, mostly)."""


class StoreConflict(StoreError):
    """A constraint refused the change (an id given twice)."""


class StoreBusy(StoreError):
    """Another writer holds the database (a second daemon, a lock held too long)."""


class StoreTimeout(StoreError):
    """The statement was stopped: the caller's deadline, or the reader's time limit."""


class StoreFull(StoreError):
    """The disk (or the server's) has no room for the change."""


class StoreReadOnly(StoreError):
    """The database cannot be written: a read-only file, file system or server."""


class StoreDamaged(StoreError):
    """The file is damaged, or is not a database."""


class StoreUnreachable(StoreError):
    """The database cannot be opened or reached: no file, an I/O error, a server that is
    down or refuses kirolearn."""
