"""Reads of OpenCode's own SQLite database (``transcripts.opencode``), opened read only:
its sessions, and each one's messages with their parts, in order. SQL stays in this
package, whoever's database it reads."""

from __future__ import annotations

import sqlite3
from pathlib import Path

Error = sqlite3.Error


def connect(path: Path) -> sqlite3.Connection:
    """OpenCode's database, read only (raises Error)."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def sessions(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(id, directory) of each session that is not a subagent's, oldest first."""
    return [(str(i), str(d or "")) for i, d in conn.execute(
        "SELECT id, directory FROM session WHERE parent_id IS NULL ORDER BY time_created, id")]


def parts(conn: sqlite3.Connection, session_id: str) -> list[tuple[str, str, str, int]]:
    """(message id, message data, part data, part time) of a session, in order."""
    return conn.execute(
        "SELECT m.id, m.data, p.data, p.time_created FROM message m JOIN part p ON"
        " p.message_id = m.id WHERE m.session_id = ? ORDER BY m.time_created, m.id, p.id",
        (session_id,)).fetchall()
