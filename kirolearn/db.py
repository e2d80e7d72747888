"""The SQLite database: schema migrations, and every query that touches it.

Only the storage process writes (one connection, WAL, ``BEGIN IMMEDIATE``).
Readers (retrieval, the CLI's stats and export) open ``mode=ro`` connections,
which WAL lets run beside the writer.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from kirolearn import contract


class MigrationError(RuntimeError):
    pass


# The records' full-text tokenizer; retrieval tokenizes queries with the same one.
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"

MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "init", """
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- arrival order, never reused
    event_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('prompt', 'tool_use', 'session_summary', 'note')),
    session_id TEXT NOT NULL,
    actor_id TEXT NOT NULL,
    valid_time TEXT NOT NULL,
    valid_ms INTEGER NOT NULL,
    transaction_time TEXT NOT NULL,
    body_json TEXT NOT NULL,
    source_json TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    parent_event_id TEXT,
    project_path TEXT,
    schema_version INTEGER NOT NULL
) STRICT;
-- Ordered by (namespace, seq): a project's events in arrival order, and so its
-- extraction buffer (every seq past its cursor) and its batches (seq ranges).
CREATE INDEX events_namespace ON events (namespace);
-- Dedup looks for the same content in the same session around the same time; keyed by
-- session and time, inserts land at the end of their session's range (no random pages).
CREATE INDEX events_session_time ON events (session_id, valid_ms, content_hash);

-- The extraction buffer of a namespace is its events with seq > last_seq. Forming a
-- batch moves the cursor; nothing is written per event.
CREATE TABLE extraction_cursor (
    namespace TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL
) STRICT;

CREATE TABLE memory_records (
    id INTEGER PRIMARY KEY,
    record_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    title TEXT NOT NULL,
    summary TEXT NOT NULL,
    facts_json TEXT NOT NULL,
    facts_text TEXT NOT NULL,
    concepts_json TEXT NOT NULL,
    files_touched_json TEXT NOT NULL,
    observation_type TEXT NOT NULL CHECK (observation_type IN
        ('tool_use', 'decision', 'error', 'discovery', 'pattern', 'session_summary')),
    strategy TEXT NOT NULL,
    source_event_ids_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    batch_id TEXT
) STRICT;
CREATE INDEX memory_records_namespace ON memory_records (namespace, created_at);

CREATE VIRTUAL TABLE memory_records_fts USING fts5 (
    title, summary, facts_text,
    content = 'memory_records', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memory_records_ai AFTER INSERT ON memory_records BEGIN
    INSERT INTO memory_records_fts (rowid, title, summary, facts_text)
    VALUES (new.id, new.title, new.summary, new.facts_text);
END;
CREATE TRIGGER memory_records_ad AFTER DELETE ON memory_records BEGIN
    INSERT INTO memory_records_fts (memory_records_fts, rowid, title, summary, facts_text)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text);
END;
CREATE TRIGGER memory_records_au AFTER UPDATE ON memory_records BEGIN
    INSERT INTO memory_records_fts (memory_records_fts, rowid, title, summary, facts_text)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text);
    INSERT INTO memory_records_fts (rowid, title, summary, facts_text)
    VALUES (new.id, new.title, new.summary, new.facts_text);
END;
CREATE VIRTUAL TABLE memory_records_fts_vocab USING fts5vocab (memory_records_fts, 'row');

CREATE TABLE extraction_batches (
    batch_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    first_seq INTEGER NOT NULL,  -- the batch is the namespace's events with seq in
    last_seq INTEGER NOT NULL,   -- first_seq..last_seq (inclusive)
    state TEXT NOT NULL CHECK (state IN ('ready', 'leased', 'done', 'failed')),
    reason TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    lease_expires_ms INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    done_ms INTEGER,
    record_count INTEGER
) STRICT;
CREATE INDEX extraction_batches_state ON extraction_batches (state, lease_expires_ms);

CREATE TABLE retrievals (
    id INTEGER PRIMARY KEY,
    prompt_event_id TEXT,
    namespace TEXT,
    record_ids_json TEXT NOT NULL,
    latency_ms REAL NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'empty', 'fallback', 'timeout', 'error')),
    created_at TEXT NOT NULL
) STRICT;
CREATE INDEX retrievals_prompt ON retrievals (prompt_event_id);
"""),
    (2, "record_namespace_index", """
-- Search checks the namespace of every full-text match; this narrow index answers
-- that without reading the wide record rows (half the cost of a search, measured).
CREATE INDEX memory_records_id_namespace ON memory_records (id, namespace);
"""),
    (3, "record_title_index", """
-- A new record with the title of a recent one in its namespace may be its near-duplicate.
CREATE INDEX memory_records_title ON memory_records (namespace, title);
"""),
    (4, "record_embeddings", """
-- A record's vector (float32, little-endian) from its title, summary, facts and concepts;
-- embedding_hash names the text and model it was made from. NULL: still to be embedded
-- (a new record, or one whose text a merge changed).
ALTER TABLE memory_records ADD COLUMN embedding BLOB;
ALTER TABLE memory_records ADD COLUMN embedding_hash TEXT;
CREATE INDEX memory_records_unembedded ON memory_records (id) WHERE embedding_hash IS NULL;
"""),
    (5, "retrieval_context", """
-- What the viewer shows of a retrieval: the context the agent was given and, for an
-- answer that fell back or failed, why. Retrievals logged before this have ''.
ALTER TABLE retrievals ADD COLUMN context TEXT NOT NULL DEFAULT '';
ALTER TABLE retrievals ADD COLUMN error TEXT;
CREATE INDEX retrievals_namespace ON retrievals (namespace, id);
-- The viewer's latency chart reads these columns only, for a span of time.
CREATE INDEX retrievals_time ON retrievals (created_at, namespace, latency_ms, outcome);
-- The viewer counts records by type and strategy, and filters by them, without reading
-- the wide rows (a record's vector alone is 1.5 KB).
CREATE INDEX memory_records_kind ON memory_records (namespace, observation_type, strategy);
"""),
]


def _checksum(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def now_ms() -> int:
    return int(time.time() * 1000)


def connect_writer(path: Path) -> sqlite3.Connection:
    """The single writer connection: WAL, full sync, migrations applied."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.touch(mode=0o600)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=5000")
    # Index pages (content hashes are random) stay in memory instead of being re-read.
    conn.execute("PRAGMA cache_size=-65536")
    migrate(conn)
    for suffix in ("-wal", "-shm"):
        side = Path(str(path) + suffix)
        if side.exists():
            side.chmod(0o600)
    return conn


def connect_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection; raises sqlite3.OperationalError if there is no database."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None,
                           check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


def migrate(conn: sqlite3.Connection) -> list[int]:
    """Apply pending migrations in order, each in its own transaction."""
    conn.execute("""CREATE TABLE IF NOT EXISTS _migrations (
        version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL,
        applied_at TEXT NOT NULL) STRICT""")
    applied = {v: c for v, c in conn.execute("SELECT version, checksum FROM _migrations")}
    known = {v for v, _, _ in MIGRATIONS}
    newer = sorted(set(applied) - known)
    if newer:
        raise MigrationError(f"database has migration(s) {newer} this kirolearn does not know; "
                             "it was written by a newer version")
    done = []
    for version, name, sql in MIGRATIONS:
        if version in applied:
            if applied[version] != _checksum(sql):
                raise MigrationError(f"migration {version:04d}_{name} differs from the one applied")
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(sql):
                conn.execute(statement)
            conn.execute("INSERT INTO _migrations VALUES (?, ?, ?, ?)",
                         (version, name, _checksum(sql), utc_now()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        done.append(version)
    return done


def _statements(script: str) -> Iterator[str]:
    """Split a script into complete statements (triggers contain semicolons)."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                yield buffer
            buffer = ""


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


# --- memory records ----------------------------------------------------------------------------

RECORD_COLUMNS = ("record_id, namespace, title, summary, facts_json, concepts_json,"
                  " files_touched_json, observation_type, strategy, source_event_ids_json,"
                  " created_at")


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


def save_record(conn: sqlite3.Connection, record: dict, batch_id: str | None = None,
                merge_window_s: float = 0) -> str | None:
    """Insert a record, or merge it into a near-duplicate: a record of the namespace with
    the same title, type, strategy and files, created within ``merge_window_s``. The merged record
    keeps its id, takes the newer summary and time, and gathers both facts, concepts and
    source events. Returns the id of the record it merged into (None: inserted)."""
    if merge_window_s > 0:
        files = set(record.get("files_touched", []))
        for row in conn.execute(
                "SELECT id, facts_json, concepts_json, source_event_ids_json, files_touched_json,"
                " record_id FROM memory_records WHERE namespace = ? AND title = ?"
                " AND observation_type = ? AND strategy = ?"
                " AND julianday(created_at) >= julianday('now') - ? ORDER BY id DESC",
                (record["namespace"], record["title"], record["observation_type"],
                 record["strategy"], merge_window_s / 86400)):
            if set(json.loads(row[4])) != files:
                continue
            facts = list(dict.fromkeys(json.loads(row[1]) + record.get("facts", [])))[:100]
            concepts = list(dict.fromkeys(json.loads(row[2]) + record.get("concepts", [])))
            sources = list(dict.fromkeys(json.loads(row[3]) + record["source_event_ids"]))
            conn.execute(
                "UPDATE memory_records SET summary = ?, facts_json = ?, facts_text = ?,"
                " concepts_json = ?, source_event_ids_json = ?, created_at = ?, batch_id = ?,"
                " embedding_hash = NULL WHERE id = ?",
                (record["summary"], json.dumps(facts), " ".join(facts),
                 json.dumps(concepts[:100]), json.dumps(sources), record["created_at"],
                 batch_id, row[0]))
            return row[5]
    insert_record(conn, record, batch_id)
    return None


def record_from_row(row: tuple) -> dict:
    return {
        "record_id": row[0], "namespace": row[1], "title": row[2], "summary": row[3],
        "facts": json.loads(row[4]), "concepts": json.loads(row[5]),
        "files_touched": json.loads(row[6]), "observation_type": row[7], "strategy": row[8],
        "source_event_ids": json.loads(row[9]), "created_at": row[10],
    }


def _in(values: Iterable[str]) -> tuple[str, list[str]]:
    """An SQL ``IN (?, ?, …)`` list and its arguments."""
    values = list(values)
    return "(" + ",".join("?" * len(values)) + ")", values


def records_by_id(conn: sqlite3.Connection, record_ids: list[str],
                  namespaces: Iterable[str]) -> list[dict]:
    """The records with these ids in these namespaces, in the order asked; ids that are
    not there are left out."""
    if not record_ids:
        return []
    ids_sql, ids = _in(record_ids)
    ns_sql, ns = _in(namespaces)
    # `+namespace`: look the ids up by their unique index, not the namespace's rows.
    found = {row[0]: record_from_row(row) for row in conn.execute(
        f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE record_id IN {ids_sql}"
        f" AND +namespace IN {ns_sql}", ids + ns)}
    return [found[i] for i in dict.fromkeys(record_ids) if i in found]


def records_around(conn: sqlite3.Connection, record: dict, namespaces: Iterable[str],
                   before: int, after: int) -> list[dict]:
    """``before`` records older than ``record`` and ``after`` newer ones, in these
    namespaces, with it in the middle: oldest first."""
    ns_sql, ns = _in(namespaces)
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


def delete_record(conn: sqlite3.Connection, record_id: str, namespaces: Iterable[str]) -> bool:
    """Delete a record (its full-text entry goes with it, by trigger); whether it was
    there, in one of these namespaces."""
    ns_sql, ns = _in(namespaces)
    return conn.execute(f"DELETE FROM memory_records WHERE record_id = ? AND +namespace IN"
                        f" {ns_sql}", [record_id, *ns]).rowcount > 0


def unembedded(conn: sqlite3.Connection, after_id: int, limit: int) -> list[tuple[int, dict]]:
    """Records still to be embedded, in id order past after_id: (id, record)."""
    return [(row[0], record_from_row(row[1:])) for row in conn.execute(
        f"SELECT id, {RECORD_COLUMNS} FROM memory_records INDEXED BY memory_records_unembedded"
        " WHERE embedding_hash IS NULL AND id > ? ORDER BY id LIMIT ?", (after_id, limit))]


def count_unembedded(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM memory_records INDEXED BY memory_records_unembedded"
                        " WHERE embedding_hash IS NULL").fetchone()[0]


def save_embedding(conn: sqlite3.Connection, record_id: str, text_hash: str, blob: bytes,
                   current_hash: Callable[[dict], str]) -> bool:
    """Store a record's vector if it was made from the record's current text (a merge may
    have changed it since); whether it was stored."""
    row = conn.execute(f"SELECT {RECORD_COLUMNS} FROM memory_records WHERE record_id = ?",
                       (record_id,)).fetchone()
    if row is None or current_hash(record_from_row(row)) != text_hash:
        return False
    conn.execute("UPDATE memory_records SET embedding = ?, embedding_hash = ? WHERE record_id = ?",
                 (blob, text_hash, record_id))
    return True


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


def form_batch(conn: sqlite3.Connection, namespace: str, reason: str) -> str | None:
    """Make the namespace's pending events a new ready batch (caller's transaction).

    Events stored after this (higher seq) stay pending for the next batch.
    """
    cursor = conn.execute("SELECT last_seq FROM extraction_cursor WHERE namespace = ?",
                          (namespace,)).fetchone()
    first = (cursor[0] if cursor else 0) + 1
    last = conn.execute("SELECT MAX(seq) FROM events WHERE namespace = ?",
                        (namespace,)).fetchone()[0]
    if last is None or last < first:
        return None
    batch_id = contract.new_ulid()
    conn.execute("INSERT INTO extraction_batches (batch_id, namespace, first_seq, last_seq,"
                 " state, reason, created_ms) VALUES (?, ?, ?, ?, 'ready', ?, ?)",
                 (batch_id, namespace, first, last, reason, now_ms()))
    conn.execute("INSERT INTO extraction_cursor VALUES (?, ?) ON CONFLICT (namespace)"
                 " DO UPDATE SET last_seq = excluded.last_seq", (namespace, last))
    return batch_id


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


def complete_batch(conn: sqlite3.Connection, batch_id: str, records: Iterable[dict],
                   merge_window_s: float = 0) -> int | None:
    """Commit a batch's records (near-duplicates merged, see ``save_record``) and mark it
    done, atomically; None if it was already done."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        state = conn.execute("SELECT state FROM extraction_batches WHERE batch_id = ?",
                             (batch_id,)).fetchone()
        if state is None or state[0] in ("done", "failed"):
            conn.execute("ROLLBACK")
            return None
        count = 0
        for record in records:
            save_record(conn, record, batch_id, merge_window_s)
            count += 1
        conn.execute("UPDATE extraction_batches SET state = 'done', done_ms = ?, record_count = ?,"
                     " lease_expires_ms = NULL WHERE batch_id = ?", (now_ms(), count, batch_id))
        conn.execute("COMMIT")
        return count
    except BaseException:
        conn.execute("ROLLBACK")
        raise


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
