"""What readers ask of the database: events, records, batches, counts.

Every function takes a connection: a reader's (``mode=ro``) or, inside storage, the
writer's.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator

from kirolearn.db import in_list

EVENT_COLUMNS = ("event_id, kind, body_json, namespace, actor_id, session_id, valid_time,"
                 " source_json, schema_version, content_hash, parent_event_id")


def event_from_row(row: tuple) -> dict:
    event = {
        "event_id": row[0], "kind": row[1], "body": json.loads(row[2]), "namespace": row[3],
        "actor_id": row[4], "session_id": row[5], "valid_time": row[6],
        "source": json.loads(row[7]), "schema_version": row[8], "content_hash": row[9],
    }
    if row[10]:
        event["parent_event_id"] = row[10]
    return event


def iter_events(conn: sqlite3.Connection, namespace: str | None = None) -> Iterator[dict]:
    sql = f"SELECT {EVENT_COLUMNS} FROM events"
    args: tuple = ()
    if namespace:
        sql += " WHERE namespace = ?"
        args = (namespace,)
    for row in conn.execute(sql + " ORDER BY valid_ms, event_id", args):
        yield event_from_row(row)


RECORD_COLUMNS = ("record_id, namespace, title, summary, facts_json, concepts_json,"
                  " files_touched_json, observation_type, strategy, source_event_ids_json,"
                  " created_at")


def record_from_row(row: tuple) -> dict:
    return {
        "record_id": row[0], "namespace": row[1], "title": row[2], "summary": row[3],
        "facts": json.loads(row[4]), "concepts": json.loads(row[5]),
        "files_touched": json.loads(row[6]), "observation_type": row[7], "strategy": row[8],
        "source_event_ids": json.loads(row[9]), "created_at": row[10],
    }


def record_by_id(conn: sqlite3.Connection, record_id: str) -> dict | None:
    row = conn.execute(f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE record_id = ?",
                       (record_id,)).fetchone()
    return None if row is None else record_from_row(row)


def records_by_id(conn: sqlite3.Connection, record_ids: list[str],
                  namespaces: Iterable[str]) -> list[dict]:
    """The records with these ids in these namespaces, in the order asked; ids that are
    not there are left out."""
    if not record_ids:
        return []
    ids_sql, ids = in_list(record_ids)
    ns_sql, ns = in_list(namespaces)
    # `+namespace`: look the ids up by their unique index, not the namespace's rows.
    found = {row[0]: record_from_row(row) for row in conn.execute(
        f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE record_id IN {ids_sql}"
        f" AND +namespace IN {ns_sql}", ids + ns)}
    return [found[i] for i in dict.fromkeys(record_ids) if i in found]


def records_around(conn: sqlite3.Connection, record: dict, namespaces: Iterable[str],
                   before: int, after: int) -> list[dict]:
    """``before`` records older than ``record`` and ``after`` newer ones, in these
    namespaces, with it in the middle: oldest first."""
    ns_sql, ns = in_list(namespaces)
    key = (record["created_at"], record["record_id"])
    older = conn.execute(
        f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE namespace IN {ns_sql}"
        " AND (created_at, record_id) < (?, ?) ORDER BY created_at DESC, record_id DESC"
        " LIMIT ?", [*ns, *key, before]).fetchall()
    newer = conn.execute(
        f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE namespace IN {ns_sql}"
        " AND (created_at, record_id) > (?, ?) ORDER BY created_at, record_id"
        " LIMIT ?", [*ns, *key, after]).fetchall()
    return ([record_from_row(row) for row in reversed(older)] + [record]
            + [record_from_row(row) for row in newer])


def unembedded(conn: sqlite3.Connection, after_id: int, limit: int) -> list[tuple[int, dict]]:
    """Records still to be embedded, in id order past after_id: (id, record)."""
    return [(row[0], record_from_row(row[1:])) for row in conn.execute(
        f"SELECT id, {RECORD_COLUMNS} FROM memory_records INDEXED BY memory_records_unembedded"
        " WHERE embedding_hash IS NULL AND id > ? ORDER BY id LIMIT ?", (after_id, limit))]


def count_unembedded(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM memory_records INDEXED BY memory_records_unembedded"
                        " WHERE embedding_hash IS NULL").fetchone()[0]


def count_vectors(conn: sqlite3.Connection, namespace: str) -> int:
    return conn.execute("SELECT count(*) FROM memory_records WHERE namespace = ?"
                        " AND embedding IS NOT NULL", (namespace,)).fetchone()[0]


def vectors(conn: sqlite3.Connection, namespace: str) -> Iterator[tuple[str, str, bytes]]:
    """A namespace's stored vectors: (record_id, created_at, blob)."""
    yield from conn.execute(
        "SELECT record_id, created_at, embedding FROM memory_records"
        " WHERE namespace = ? AND embedding IS NOT NULL", (namespace,))


def iter_records(conn: sqlite3.Connection, namespace: str | None = None) -> Iterator[dict]:
    sql = f"SELECT {RECORD_COLUMNS} FROM memory_records"
    args: tuple = ()
    if namespace:
        sql += " WHERE namespace = ?"
        args = (namespace,)
    for row in conn.execute(sql + " ORDER BY created_at, record_id", args):
        yield record_from_row(row)



# --- extraction buffer and batches -----------------------------------------------------------

_PENDING = ("FROM events e LEFT JOIN extraction_cursor c ON c.namespace = e.namespace"
            " WHERE e.seq > COALESCE(c.last_seq, 0) GROUP BY e.namespace")


def pending_by_namespace(conn: sqlite3.Connection) -> dict[str, int]:
    """Bytes of body waiting in the buffer (not yet in a batch), per namespace."""
    return dict(conn.execute(f"SELECT e.namespace, SUM(length(e.body_json)) {_PENDING}"))


def due_batches(conn: sqlite3.Connection, now: int, limit: int) -> list[tuple[str, str, int]]:
    """Batches to hand out: ready ones, and leased ones whose lease has expired."""
    return conn.execute(
        "SELECT batch_id, namespace, attempts FROM extraction_batches WHERE state = 'ready'"
        " UNION ALL SELECT batch_id, namespace, attempts FROM extraction_batches"
        " WHERE state = 'leased' AND lease_expires_ms < ? LIMIT ?", (now, limit)).fetchall()


def batch_events(conn: sqlite3.Connection, batch_id: str) -> list[dict]:
    """A batch's events in time order, in storage form (``body_json``, still encoded):
    the worker decodes them, which keeps that work off the single writer."""
    rows = conn.execute(
        "SELECT e.event_id, e.kind, e.body_json, e.namespace, e.session_id, e.valid_time,"
        " e.parent_event_id, e.project_path FROM extraction_batches b"
        " JOIN events e INDEXED BY events_namespace"
        " ON e.namespace = b.namespace AND e.seq BETWEEN b.first_seq AND b.last_seq"
        " WHERE b.batch_id = ? ORDER BY e.valid_ms, e.event_id", (batch_id,))
    keys = ("event_id", "kind", "body_json", "namespace", "session_id", "valid_time",
            "parent_event_id", "project_path")
    return [dict(zip(keys, row, strict=True)) for row in rows]



# --- stats -------------------------------------------------------------------------------------

def stats(conn: sqlite3.Connection, only: str | None = None) -> dict:
    """Counts per namespace (or for one): events by kind, records, buffered events,
    open batches."""
    namespaces: dict[str, dict] = {}

    def entry(ns: str) -> dict:
        return namespaces.setdefault(ns, {"namespace": ns, "events": {}, "events_total": 0,
                                          "records": 0, "pending_events": 0,
                                          "pending_batches": 0})

    for ns, kind, count in conn.execute(
            "SELECT namespace, kind, COUNT(*) FROM events GROUP BY namespace, kind"):
        entry(ns)["events"][kind] = count
        entry(ns)["events_total"] += count
    for ns, count in conn.execute(
            "SELECT namespace, COUNT(*) FROM memory_records GROUP BY namespace"):
        entry(ns)["records"] = count
    for ns, count in conn.execute(f"SELECT e.namespace, COUNT(*) {_PENDING}"):
        entry(ns)["pending_events"] = count
    for ns, count in conn.execute(
            "SELECT namespace, COUNT(*) FROM extraction_batches"
            " WHERE state IN ('ready', 'leased') GROUP BY namespace"):
        entry(ns)["pending_batches"] = count
    rows = sorted((n for n in namespaces.values() if only is None or n["namespace"] == only),
                  key=lambda n: n["namespace"])
    totals = {
        "events": sum(n["events_total"] for n in rows),
        "records": sum(n["records"] for n in rows),
        "pending_events": sum(n["pending_events"] for n in rows),
        "pending_batches": sum(n["pending_batches"] for n in rows),
    }
    return {"namespaces": rows, "totals": totals}
