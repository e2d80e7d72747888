"""The viewer's reads: projects, counts, pages of events, records, retrievals, sessions.

Each page reads what it shows and no more, from indexes where the tables are large
(a record's row holds its vector, a retrieval's the context it gave).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from kirolearn.db import postgres, reads

RETRIEVAL_COLUMNS = ("r.id, r.prompt_event_id, r.namespace, r.record_ids_json, r.latency_ms,"
                     " r.outcome, r.created_at, r.error, e.body_json")


def conditions(*pairs: tuple[str, Any]) -> tuple[str, list]:
    """A ``WHERE`` clause from (SQL with one ``?``, value) pairs; a pair whose value is
    empty is left out."""
    kept = [(sql, value) for sql, value in pairs if value]
    clause = ("WHERE " + " AND ".join(sql for sql, _ in kept)) if kept else ""
    return clause, [value for _, value in kept]


def namespaces(conn: sqlite3.Connection) -> dict[str, str | None]:
    """Every namespace, with the project folder its newest event came from (if any).
    Each costs an index seek, not a scan of the tables."""
    found: dict[str, str | None] = {}
    for table in ("events", "memory_records"):
        found.update(dict.fromkeys(reads.namespaces_in(conn, table)))
    for namespace in found:
        row = conn.execute("SELECT project_path FROM events WHERE namespace = ?"
                           " AND project_path IS NOT NULL ORDER BY seq DESC LIMIT 1",
                           (namespace,)).fetchone()
        found[namespace] = row[0] if row else None
    return found


def strategies(conn: sqlite3.Connection) -> list[str]:
    return [row[0] for row in conn.execute(
        "SELECT DISTINCT strategy FROM memory_records ORDER BY 1")]


def record_counts(conn: sqlite3.Connection, column: str, namespace: str | None) -> dict[str, int]:
    """Records per ``observation_type`` or ``strategy``, most first."""
    assert column in ("observation_type", "strategy")
    where, args = conditions(("namespace = ?", namespace))
    return dict(conn.execute(f"SELECT {column}, count(*) FROM memory_records {where}"
                             f" GROUP BY {column} ORDER BY 2 DESC", args).fetchall())


def retrieval_latencies(conn: sqlite3.Connection, since: str,
                        namespace: str | None) -> list[tuple[str, float, str]]:
    """(created_at, latency_ms, outcome) of the retrievals since then, oldest first, from
    the covering index (the rows hold contexts)."""
    return conn.execute(
        "SELECT created_at, latency_ms, outcome FROM retrievals INDEXED BY retrievals_time"
        " WHERE created_at >= ?" + (" AND namespace = ?" if namespace else "")
        + " ORDER BY created_at", [since, *([namespace] if namespace else [])]).fetchall()


def _events(rows: list[tuple]) -> list[tuple[int, dict]]:
    found = []
    for row in rows:
        event = reads.event_from_row(row[1:-1])
        event.setdefault("source", {})["project_path"] = row[-1]
        found.append((row[0], event))
    return found


def events_page(conn: sqlite3.Connection, after: int, namespace: str | None,
                session_id: str | None, limit: int, newest: bool) -> list[tuple[int, dict]]:
    """(seq, event) past seq ``after`` (oldest first), or the newest ``limit``."""
    where, args = conditions(("seq > ?", after), ("namespace = ?", namespace),
                             ("session_id = ?", session_id))
    return _events(conn.execute(
        f"SELECT seq, {reads.EVENT_COLUMNS}, project_path FROM events {where}"
        f" ORDER BY seq {'DESC' if newest else 'ASC'} LIMIT ?", [*args, limit]).fetchall())


def event_by_id(conn: sqlite3.Connection, event_id: str) -> tuple[int, dict] | None:
    found = _events(conn.execute(f"SELECT seq, {reads.EVENT_COLUMNS}, project_path FROM events"
                                 " WHERE event_id = ?", (event_id,)).fetchall())
    return found[0] if found else None


def session_events(conn: sqlite3.Connection, session_id: str) -> list[tuple[int, dict]]:
    return _events(conn.execute(
        f"SELECT seq, {reads.EVENT_COLUMNS}, project_path FROM events WHERE session_id = ?"
        " ORDER BY valid_ms, seq", (session_id,)).fetchall())


def records_page(conn: sqlite3.Connection, namespace: str | None, observation_type: str | None,
                 strategy: str | None, since: str | None, until: str | None,
                 before: int | None, limit: int) -> list[dict]:
    """Newest first (``before``: the row id to continue below), each with its ``id``."""
    where, args = conditions(
        ("namespace = ?", namespace), ("observation_type = ?", observation_type),
        ("strategy = ?", strategy),
        ("+created_at >= ?", since),  # `+`: newest first by id, not a sort of all since
        ("substr(created_at, 1, 10) <= ?", until), ("id < ?", before))
    rows = conn.execute(f"SELECT id, {reads.RECORD_COLUMNS} FROM memory_records {where}"
                        " ORDER BY id DESC LIMIT ?", [*args, limit]).fetchall()
    return [{**reads.record_from_row(row[1:]), "id": row[0]} for row in rows]


def source_events(conn: sqlite3.Connection, event_ids: list[str]) -> dict[str, tuple]:
    """(event_id, kind, valid_time, body_json) of these events, by id."""
    marks = ",".join("?" * len(event_ids))
    return {r[0]: r for r in conn.execute(
        f"SELECT event_id, kind, valid_time, body_json FROM events WHERE event_id IN ({marks})",
        event_ids)}


def record_uses(conn: sqlite3.Connection, namespace: str, record_id: str, lookback: int,
                limit: int = 20) -> list[tuple[int, str, str]]:
    """(id, created_at, outcome) of the retrievals that gave this record to a prompt,
    among the namespace's latest ``lookback`` (a bounded look)."""
    each = ("json_array_elements_text(r.record_ids_json::json) AS j(value)"
            if isinstance(conn, postgres.Connection) else "json_each(r.record_ids_json) j")
    return conn.execute(
        "SELECT r.id, r.created_at, r.outcome FROM (SELECT * FROM retrievals"
        f" WHERE namespace = ? ORDER BY id DESC LIMIT ?) r, {each}"
        " WHERE j.value = ? ORDER BY r.id DESC LIMIT ?",
        (namespace, lookback, record_id, limit)).fetchall()


def retrievals_page(conn: sqlite3.Connection, namespace: str | None, outcome: str | None,
                    before: int | None, limit: int) -> list[tuple]:
    """Rows of RETRIEVAL_COLUMNS, newest first."""
    where, args = conditions(("r.namespace = ?", namespace), ("r.outcome = ?", outcome),
                             ("r.id < ?", before))
    return conn.execute(f"SELECT {RETRIEVAL_COLUMNS} FROM retrievals r"
                        f" LEFT JOIN events e ON e.event_id = r.prompt_event_id {where}"
                        " ORDER BY r.id DESC LIMIT ?", [*args, limit]).fetchall()


def retrieval_by_id(conn: sqlite3.Connection, retrieval_id: int) -> tuple | None:
    """A row of RETRIEVAL_COLUMNS and the context it gave."""
    return conn.execute(f"SELECT {RETRIEVAL_COLUMNS}, r.context FROM retrievals r"
                        " LEFT JOIN events e ON e.event_id = r.prompt_event_id WHERE r.id = ?",
                        (retrieval_id,)).fetchone()


def sessions_page(conn: sqlite3.Connection, namespace: str | None, limit: int) -> list[dict]:
    """The sessions with the newest events first: their span and counts."""
    where, args = conditions(("namespace = ?", namespace))
    rows = conn.execute(
        "SELECT session_id, namespace, min(valid_time), max(valid_time), count(*),"
        " count(*) FILTER (WHERE kind = 'prompt'), count(*) FILTER (WHERE kind = 'tool_use')"
        " FROM events"
        f" {where} GROUP BY session_id, namespace ORDER BY max(valid_ms) DESC LIMIT ?",
        [*args, limit]).fetchall()
    return [{"session_id": r[0], "namespace": r[1], "first": r[2], "last": r[3],
             "events": r[4], "prompts": r[5], "tools": r[6]} for r in rows]
