"""The viewer's reads: projects, counts, pages of events, records, retrievals, sessions.

Each page reads what it shows and no more, from indexes where the tables are large
(a record's row holds its vector, a retrieval's the context it gave).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kirolearn.db import reads
from kirolearn.db.store import Connection, Params

RETRIEVAL_COLUMNS = ("r.id, r.prompt_event_id, r.namespace, r.record_ids_json, r.latency_ms,"
                     " r.outcome, r.created_at, r.error, e.body_json, e.kind")


def conditions(p: Params, *pairs: tuple[str, Any]) -> str:
    """A ``WHERE`` clause from (SQL with one ``{}`` for the value, value) pairs, the
    values added to ``p``; a pair whose value is empty is left out."""
    kept = [sql.format(p(value)) for sql, value in pairs if value]
    return ("WHERE " + " AND ".join(kept)) if kept else ""


def namespaces(conn: Connection) -> dict[str, str | None]:
    """Every namespace, with the project folder its newest event came from (if any).
    Each costs an index seek, not a scan of the tables."""
    found: dict[str, str | None] = {}
    for table in ("events", "memory_records"):
        found.update(dict.fromkeys(reads.namespaces_in(conn, table)))
    for namespace in found:
        found[namespace] = reads.project_path(conn, namespace)
    return found


def strategies(conn: Connection) -> list[str]:
    return [row[0] for row in conn.execute(
        "SELECT DISTINCT strategy FROM memory_records ORDER BY 1")]


def record_counts(conn: Connection, column: str, namespace: str | None) -> dict[str, int]:
    """Records per ``observation_type`` or ``strategy``, most first."""
    assert column in ("observation_type", "strategy")
    p = Params()
    where = conditions(p, ("namespace = {}", namespace))
    return dict(conn.execute(f"SELECT {column}, count(*) FROM memory_records {where}"
                             f" GROUP BY {column} ORDER BY 2 DESC", p.values).fetchall())


def retrieval_latencies(conn: Connection, since: str,
                        namespace: str | None) -> list[tuple[str, float, str]]:
    """(created_at, latency_ms, outcome) of the retrievals since then, oldest first, from
    the covering index (the rows hold contexts)."""
    p = Params()
    where = conditions(p, ("created_at >= {}", since), ("namespace = {}", namespace))
    return conn.execute(
        "SELECT created_at, latency_ms, outcome FROM retrievals"
        f"{conn.indexed_by('retrievals_time')} {where} ORDER BY created_at",
        p.values).fetchall()


def _events(rows: list[tuple]) -> list[tuple[int, dict]]:
    found = []
    for row in rows:
        event = reads.event_from_row(row[1:-1])
        event.setdefault("source", {})["project_path"] = row[-1]
        found.append((row[0], event))
    return found


def events_page(conn: Connection, after: int, namespace: str | None,
                session_id: str | None, limit: int, newest: bool) -> list[tuple[int, dict]]:
    """(seq, event) past seq ``after`` (oldest first), or the newest ``limit``."""
    p = Params()
    where = conditions(p, ("seq > {}", after), ("namespace = {}", namespace),
                       ("session_id = {}", session_id))
    return _events(conn.execute(
        f"SELECT seq, {reads.EVENT_COLUMNS}, project_path FROM events {where}"
        f" ORDER BY seq {'DESC' if newest else 'ASC'} LIMIT {p(limit)}", p.values).fetchall())


def event_by_id(conn: Connection, event_id: str) -> tuple[int, dict] | None:
    found = _events(conn.execute(f"SELECT seq, {reads.EVENT_COLUMNS}, project_path FROM events"
                                 " WHERE event_id = $1", (event_id,)).fetchall())
    return found[0] if found else None


def session_events(conn: Connection, session_id: str) -> list[tuple[int, dict]]:
    return _events(conn.execute(
        f"SELECT seq, {reads.EVENT_COLUMNS}, project_path FROM events WHERE session_id = $1"
        " ORDER BY valid_ms, seq", (session_id,)).fetchall())


def authors(conn: Connection, namespace: str | None) -> list[tuple[str, int]]:
    """Who did the work of the records (``memory_records.author``), most records first."""
    p = Params()
    where = conditions(p, ("namespace = {}", namespace))
    return [tuple(row) for row in conn.execute(
        f"SELECT author, count(*) FROM memory_records {where} GROUP BY author"
        " ORDER BY 2 DESC, 1", p.values)]


def records_page(conn: Connection, namespace: str | None, observation_type: str | None,
                 strategy: str | None, since: str | None, until: str | None,
                 before: int | None, limit: int, author: str | None = None) -> list[dict]:
    """Newest first (``before``: the row id to continue below), each with its ``id``."""
    p = Params()
    where = conditions(
        p, ("namespace = {}", namespace), ("observation_type = {}", observation_type),
        ("strategy = {}", strategy), ("author = {}", author),
        # unindexed: newest first by id, not a sort of all since
        (conn.unindexed("created_at") + " >= {}", since),
        ("substr(created_at, 1, 10) <= {}", until), ("id < {}", before))
    rows = conn.execute(f"SELECT id, {reads.RECORD_COLUMNS} FROM memory_records {where}"
                        f" ORDER BY id DESC LIMIT {p(limit)}", p.values).fetchall()
    return [{**reads.record_from_row(row[1:]), "id": row[0]} for row in rows]


def source_events(conn: Connection, event_ids: list[str]) -> dict[str, tuple]:
    """(event_id, kind, valid_time, body_json) of these events, by id."""
    p = Params()
    return {r[0]: r for r in conn.execute(
        "SELECT event_id, kind, valid_time, body_json FROM events WHERE event_id IN"
        f" {p.list(event_ids)}", p.values)}


def record_uses(conn: Connection, namespace: str, record_id: str, lookback: int,
                limit: int = 20) -> list[tuple[int, str, str]]:
    """(id, created_at, outcome) of the retrievals that gave this record to a prompt,
    among the namespace's latest ``lookback`` (a bounded look)."""
    return conn.execute(
        "SELECT r.id, r.created_at, r.outcome FROM (SELECT * FROM retrievals"
        " WHERE namespace = $1 ORDER BY id DESC LIMIT $2) r"
        " WHERE r.record_ids_json LIKE $3 ORDER BY r.id DESC LIMIT $4",
        (namespace, lookback, f'%"{record_id}"%', limit)).fetchall()


def retrievals_page(conn: Connection, namespace: str | None, outcome: str | None,
                    before: int | None, limit: int) -> list[tuple]:
    """Rows of RETRIEVAL_COLUMNS, newest first."""
    p = Params()
    where = conditions(p, ("r.namespace = {}", namespace), ("r.outcome = {}", outcome),
                       ("r.id < {}", before))
    return conn.execute(f"SELECT {RETRIEVAL_COLUMNS} FROM retrievals r"
                        f" LEFT JOIN events e ON e.event_id = r.prompt_event_id {where}"
                        f" ORDER BY r.id DESC LIMIT {p(limit)}", p.values).fetchall()


def retrieval_by_id(conn: Connection, retrieval_id: int) -> tuple | None:
    """A row of RETRIEVAL_COLUMNS and the context it gave."""
    return conn.execute(f"SELECT {RETRIEVAL_COLUMNS}, r.context FROM retrievals r"
                        " LEFT JOIN events e ON e.event_id = r.prompt_event_id WHERE r.id = $1",
                        (retrieval_id,)).fetchone()


def sessions_page(conn: Connection, namespace: str | None, limit: int) -> list[dict]:
    """The sessions with the newest events first: their span (in UTC, as they are
    ordered: an event's own time may carry any offset) and counts."""
    p = Params()
    where = conditions(p, ("namespace = {}", namespace))
    rows = conn.execute(
        "SELECT session_id, namespace, min(valid_ms), max(valid_ms), count(*),"
        " count(*) FILTER (WHERE kind = 'prompt'), count(*) FILTER (WHERE kind = 'tool_use')"
        " FROM events"
        f" {where} GROUP BY session_id, namespace ORDER BY max(valid_ms) DESC LIMIT {p(limit)}",
        p.values).fetchall()
    return [{"session_id": r[0], "namespace": r[1], "first": utc(r[2]), "last": utc(r[3]),
             "events": r[4], "prompts": r[5], "tools": r[6]} for r in rows]


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
