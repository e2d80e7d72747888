"""The schema: numbered, forward-only migrations recorded in ``_migrations``.

Each dialect keeps its own (``sqlite.schema``, ``postgres.schema``); ``migrate`` applies
a connection's. Each migration is applied once, in order, in its own transaction; its
checksum is kept so that an edited migration is refused rather than silently diverging.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from kirolearn.db import errors
from kirolearn.db.store import Connection


class MigrationError(RuntimeError):
    pass


def _checksum(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


def latest(dialect: str = "sqlite") -> int:
    """The newest migration of a dialect's schema ("sqlite" or "postgres")."""
    if dialect == "postgres":
        from kirolearn.db.postgres import schema
    else:
        from kirolearn.db.sqlite import schema
    return schema.MIGRATIONS[-1][0]


def migrate(conn: Connection) -> list[int]:
    """Apply the connection's dialect's pending migrations in order, each in its own
    transaction."""
    migrations = conn.dialect.schema.MIGRATIONS
    conn.execute("CREATE TABLE IF NOT EXISTS _migrations (version INTEGER PRIMARY KEY,"
                 " name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL)")
    applied = {v: c for v, c in conn.execute("SELECT version, checksum FROM _migrations")}
    known = {v for v, _, _ in migrations}
    newer = sorted(set(applied) - known)
    if newer:
        raise MigrationError(f"database has migration(s) {newer} this kirolearn does not know; "
                             "it was written by a newer version")
    done = []
    for version, name, sql in migrations:
        if version in applied:
            if applied[version] != _checksum(sql):
                raise MigrationError(f"migration {version:04d}_{name} differs from the one applied")
            continue
        with conn.transaction():
            conn.executescript(sql)
            conn.execute("INSERT INTO _migrations VALUES ($1, $2, $3, $4)",
                         (version, name, _checksum(sql),
                          datetime.now(UTC).isoformat(timespec="milliseconds")))
        done.append(version)
    return done


def check(conn: Connection) -> tuple[str, int | None]:
    """The dialect's check of the store ("ok" when sound) and the newest migration
    applied."""
    newest = conn.execute("SELECT max(version) FROM _migrations").fetchone()[0]
    return conn.dialect.check(conn), newest


def applied(conn: Connection) -> int:
    """The newest migration the store has (0: none yet, a store being made)."""
    try:
        return conn.execute("SELECT max(version) FROM _migrations").fetchone()[0] or 0
    except errors.StoreError:
        return 0
