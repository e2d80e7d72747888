"""Every change to the database, made by the single writer (the storage role).

Each function runs inside the caller's ``transaction`` unless it says otherwise.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path

from kirolearn import contract
from kirolearn.db import in_list, now_ms, reads, schema, transaction, utc_now


def connect_writer(path: Path) -> sqlite3.Connection:
    """The single writer connection: WAL, full sync, migrations applied."""
    schema.create_private(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=5000")
    # Index pages (content hashes are random) stay in memory instead of being re-read.
    conn.execute("PRAGMA cache_size=-65536")
    schema.migrate(conn)
    for suffix in ("-wal", "-shm"):
        side = Path(str(path) + suffix)
        if side.exists():
            side.chmod(0o600)
    return conn


def checkpoint(conn: sqlite3.Connection) -> None:
    """Fold the WAL into the database file (at a clean stop)."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


# --- events ----------------------------------------------------------------------------------

STORED_FIELDS = ("event_id", "namespace", "kind", "session_id", "actor_id", "valid_time",
                 "valid_ms", "body_json", "source_json", "content_hash", "parent_event_id",
                 "project_path", "schema_version")


def stored_form(event: dict, body_json: str, valid_ms: int, content_hash: str) -> dict:
    """What ingest hands storage: the events row, encoded, less transaction_time.

    Ingest does all the parsing and encoding so the single writer only writes.
    """
    source = event["source"]
    return {
        "event_id": event["event_id"], "namespace": event["namespace"], "kind": event["kind"],
        "session_id": event["session_id"], "actor_id": event["actor_id"],
        "valid_time": event["valid_time"],
        "valid_ms": valid_ms, "body_json": body_json,
        "source_json": contract.canonical_json(source), "content_hash": content_hash,
        "parent_event_id": event.get("parent_event_id"),
        "project_path": source.get("project_path"), "schema_version": event["schema_version"],
    }


INSERT_EVENT_SQL = (f"INSERT OR IGNORE INTO events ({', '.join(STORED_FIELDS)}, transaction_time)"
                    f" VALUES ({', '.join('?' * (len(STORED_FIELDS) + 1))})")


def insert_event(conn: sqlite3.Connection, event: dict, dedup_window_ms: int,
                 transaction_time: str | None = None) -> str:
    """Insert one event (in stored_form) inside the caller's transaction.

    Returns 'stored' or 'duplicate': the same event_id, or the same content in the
    same namespace, session and kind within the dedup window (a retried hook).
    """
    valid_ms = event["valid_ms"]
    if dedup_window_ms > 0 and conn.execute(
        "SELECT 1 FROM events INDEXED BY events_session_time WHERE session_id = ?"
        " AND valid_ms BETWEEN ? AND ? AND content_hash = ? AND namespace = ? AND kind = ?"
        " AND event_id != ? LIMIT 1",
        (event["session_id"], valid_ms - dedup_window_ms, valid_ms + dedup_window_ms,
         event["content_hash"], event["namespace"], event["kind"], event["event_id"]),
    ).fetchone():
        return "duplicate"
    row = [event[name] for name in STORED_FIELDS]
    row.append(transaction_time or utc_now())
    if not conn.execute(INSERT_EVENT_SQL, row).rowcount:
        return "duplicate"  # same event_id
    return "stored"


# --- memory records ----------------------------------------------------------------------------

def insert_record(conn: sqlite3.Connection, record: dict, batch_id: str | None = None) -> None:
    facts = record.get("facts", [])
    conn.execute(
        "INSERT INTO memory_records (record_id, namespace, title, summary, facts_json,"
        " facts_text, concepts_json, files_touched_json, observation_type, strategy,"
        " source_event_ids_json, created_at, batch_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (record["record_id"], record["namespace"], record["title"], record["summary"],
         json.dumps(facts), " ".join(facts), json.dumps(record.get("concepts", [])),
         json.dumps(record.get("files_touched", [])), record["observation_type"],
         record["strategy"], json.dumps(record["source_event_ids"]), record["created_at"],
         batch_id),
    )


MAX_SUMMARY = 4000  # a record's limits (contract.validate_record): a merge that would
MAX_ITEMS = 100  # pass them does not happen; the record is saved as a new one


def save_record(conn: sqlite3.Connection, record: dict, batch_id: str | None = None,
                merge_window_s: float = 0) -> str | None:
    """Insert a record, or merge it into a near-duplicate: a record of the namespace with
    the same title, type, strategy and files, created within ``merge_window_s``.

    A merge only adds: the record keeps its id and every summary, fact, concept and
    source event of both (a summary it does not already hold is appended), takes the
    newer time, and its previous state is kept in ``record_versions``. A merge that
    would pass a record's limits is not made. Returns the id of the record it merged
    into (None: inserted)."""
    if merge_window_s > 0:
        files = set(record.get("files_touched", []))
        for row in conn.execute(
                "SELECT id, summary, facts_json, concepts_json, source_event_ids_json,"
                " files_touched_json, record_id FROM memory_records INDEXED BY memory_records_title"
                " WHERE namespace = ?"
                " AND title = ? AND observation_type = ? AND strategy = ?"
                " AND julianday(created_at) >= julianday('now') - ? ORDER BY id DESC",
                (record["namespace"], record["title"], record["observation_type"],
                 record["strategy"], merge_window_s / 86400)):
            if set(json.loads(row[5])) != files:
                continue
            summary = row[1] if record["summary"] in row[1] else f"{row[1]}\n\n{record['summary']}"
            facts = list(dict.fromkeys(json.loads(row[2]) + record.get("facts", [])))
            concepts = list(dict.fromkeys(json.loads(row[3]) + record.get("concepts", [])))
            sources = list(dict.fromkeys(json.loads(row[4]) + record["source_event_ids"]))
            if (len(summary) > MAX_SUMMARY or len(facts) > MAX_ITEMS
                    or len(concepts) > MAX_ITEMS):
                break
            conn.execute(
                "INSERT INTO record_versions (record_id, title, summary, facts_json,"
                " concepts_json, files_touched_json, source_event_ids_json, created_at,"
                " replaced_at) SELECT record_id, title, summary, facts_json, concepts_json,"
                " files_touched_json, source_event_ids_json, created_at, ?"
                " FROM memory_records WHERE id = ?", (utc_now(), row[0]))
            conn.execute(
                "UPDATE memory_records SET summary = ?, facts_json = ?, facts_text = ?,"
                " concepts_json = ?, source_event_ids_json = ?, created_at = ?, batch_id = ?,"
                " embedding_hash = NULL WHERE id = ?",
                (summary, json.dumps(facts), " ".join(facts), json.dumps(concepts),
                 json.dumps(sources), record["created_at"], batch_id, row[0]))
            return row[6]
    insert_record(conn, record, batch_id)
    return None


def delete_record(conn: sqlite3.Connection, record_id: str, namespaces: Iterable[str]) -> bool:
    """Delete a record (its full-text entry goes with it, by trigger); whether it was
    there, in one of these namespaces."""
    ns_sql, ns = in_list(namespaces)
    return conn.execute(f"DELETE FROM memory_records WHERE record_id = ? AND +namespace IN"
                        f" {ns_sql}", [record_id, *ns]).rowcount > 0


def save_embedding(conn: sqlite3.Connection, record_id: str, text_hash: str, blob: bytes,
                   current_hash: Callable[[dict], str]) -> bool:
    """Store a record's vector if it was made from the record's current text (a merge may
    have changed it since); whether it was stored."""
    record = reads.record_by_id(conn, record_id)
    if record is None or current_hash(record) != text_hash:
        return False
    conn.execute("UPDATE memory_records SET embedding = ?, embedding_hash = ? WHERE record_id = ?",
                 (blob, text_hash, record_id))
    return True



# --- extraction batches ----------------------------------------------------------------------

# A batch's events, whatever their size: what a model reads whole in one prompt, and
# what storage commits in a few milliseconds (acks wait while it does).
MAX_BATCH_EVENTS = 200


def form_batches(conn: sqlite3.Connection, namespace: str, reason: str, max_bytes: int,
                 max_events: int = MAX_BATCH_EVENTS) -> list[str]:
    """Make the namespace's pending events ready batches (caller's transaction), each at
    most ``max_bytes`` of body (an event larger alone is a batch of its own) and
    ``max_events`` events, cut after a turn's end (a ``session_summary``) where the
    limits leave one, so a turn stays whole. Events stored after this stay pending.
    """
    cursor = conn.execute("SELECT last_seq FROM extraction_cursor WHERE namespace = ?",
                          (namespace,)).fetchone()
    first = (cursor[0] if cursor else 0) + 1
    rows = conn.execute("SELECT seq, kind = 'session_summary', length(body_json) FROM events"
                        " INDEXED BY events_namespace WHERE namespace = ? AND seq >= ?"
                        " ORDER BY seq", (namespace, first)).fetchall()
    ranges: list[tuple[int, int]] = []
    start = 0
    while start < len(rows):
        end, size, turn_end = start, 0, None  # rows[start:end] is the batch so far
        while end < len(rows) and (end == start or (size + rows[end][2] <= max_bytes
                                                    and end - start < max_events)):
            size += rows[end][2]
            if rows[end][1]:
                turn_end = end
            end += 1
        if end < len(rows) and turn_end is not None:
            end = turn_end + 1  # the limits fell inside a turn: cut after the last whole one
        ranges.append((rows[start][0], rows[end - 1][0]))
        start = end
    batch_ids = []
    for low, high in ranges:
        batch_ids.append(contract.new_ulid())
        conn.execute("INSERT INTO extraction_batches (batch_id, namespace, first_seq, last_seq,"
                     " state, reason, created_ms) VALUES (?, ?, ?, ?, 'ready', ?, ?)",
                     (batch_ids[-1], namespace, low, high, reason, now_ms()))
    if ranges:
        conn.execute("INSERT INTO extraction_cursor VALUES (?, ?) ON CONFLICT (namespace)"
                     " DO UPDATE SET last_seq = excluded.last_seq", (namespace, ranges[-1][1]))
    return batch_ids



def lease_batch(conn: sqlite3.Connection, batch_id: str, expires_ms: int) -> None:
    """The batch is out with a worker until ``expires_ms``; one more attempt counted."""
    conn.execute("UPDATE extraction_batches SET state = 'leased', lease_expires_ms = ?,"
                 " attempts = attempts + 1 WHERE batch_id = ?", (expires_ms, batch_id))


def batch_attempt_failed(conn: sqlite3.Connection, batch_id: str, error: str) -> None:
    """The lease of a batch whose attempt failed ends now (it is handed out again), and
    why is kept."""
    conn.execute("UPDATE extraction_batches SET lease_expires_ms = 0, error = ?"
                 " WHERE batch_id = ? AND state = 'leased'", (error, batch_id))


def split_batch(conn: sqlite3.Connection, batch_id: str) -> str | None:
    """Split a batch of several events into two ready batches (attempts counted afresh);
    None when it has one event only, and cannot be split."""
    namespace, first, last = conn.execute(
        "SELECT namespace, first_seq, last_seq FROM extraction_batches WHERE batch_id = ?",
        (batch_id,)).fetchone()
    seqs = [seq for (seq,) in conn.execute(
        "SELECT seq FROM events INDEXED BY events_namespace WHERE namespace = ?"
        " AND seq BETWEEN ? AND ? ORDER BY seq", (namespace, first, last))]
    if len(seqs) < 2:
        return None
    middle = seqs[len(seqs) // 2 - 1]
    other = contract.new_ulid()
    conn.execute("UPDATE extraction_batches SET last_seq = ?, state = 'ready', attempts = 0,"
                 " lease_expires_ms = NULL WHERE batch_id = ?",
                 (middle, batch_id))
    conn.execute("INSERT INTO extraction_batches (batch_id, namespace, first_seq, last_seq,"
                 " state, reason, created_ms) VALUES (?, ?, ?, ?, 'ready', 'split', ?)",
                 (other, namespace, middle + 1, last, now_ms()))
    return other


def fail_batch(conn: sqlite3.Connection, batch_id: str, error: str) -> None:
    """Give up on a batch for now, saying why (its events stay stored; ``retry_batches``
    hands it out again)."""
    conn.execute("UPDATE extraction_batches SET state = 'failed', error = ? WHERE batch_id = ?",
                 (error, batch_id))


def retry_batches(conn: sqlite3.Connection) -> int:
    """Every failed batch ready again, its attempts counted afresh; how many."""
    return conn.execute("UPDATE extraction_batches SET state = 'ready', attempts = 0,"
                        " lease_expires_ms = NULL WHERE state = 'failed'").rowcount


def complete_batch(conn: sqlite3.Connection, batch_id: str, records: Iterable[dict],
                   merge_window_s: float = 0) -> int | None:
    """Commit a batch's records (near-duplicates merged, see ``save_record``) and mark it
    done, in one transaction of its own; None if it was already done."""
    with transaction(conn):
        state = conn.execute("SELECT state FROM extraction_batches WHERE batch_id = ?",
                             (batch_id,)).fetchone()
        if state is None or state[0] in ("done", "failed"):
            return None
        count = 0
        for record in records:
            save_record(conn, record, batch_id, merge_window_s)
            count += 1
        conn.execute("UPDATE extraction_batches SET state = 'done', done_ms = ?, record_count = ?,"
                     " lease_expires_ms = NULL WHERE batch_id = ?", (now_ms(), count, batch_id))
    return count


# --- retrieval log ---------------------------------------------------------------------------

def log_retrieval(conn: sqlite3.Connection, prompt_event_id: str | None, namespace: str | None,
                  record_ids: list[str], latency_ms: float, outcome: str, context: str = "",
                  error: str | None = None) -> None:
    """One prompt's retrieval, with the context the agent was given (what the viewer
    shows, even after the records it came from are forgotten)."""
    conn.execute("INSERT INTO retrievals (prompt_event_id, namespace, record_ids_json, latency_ms,"
                 " outcome, created_at, context, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 (prompt_event_id, namespace, json.dumps(record_ids), latency_ms, outcome,
                  utc_now(), context, None if error is None else str(error)[:2000]))


