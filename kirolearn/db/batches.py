"""The extraction queue, every statement of it: the events not yet in a batch, the
batches (formed, leased to a worker, done, failed, split), and a batch's completion
with its records and what its turn says of older ones. Run by the single writer
(storage), inside its transaction unless a function says otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from kirolearn import contract, paths
from kirolearn.db import errors, now_ms, path_key, reads
from kirolearn.db.store import Connection, Params
from kirolearn.db.writes import save_record, supersede


def pending_by_namespace(conn: Connection) -> dict[str, int]:
    """Bytes of body waiting in the buffer (not yet in a batch), per namespace."""
    return dict(conn.execute(f"SELECT e.namespace, SUM(length(e.body_json)) {reads.PENDING}"))


def pending_bytes(conn: Connection, namespace: str) -> int:
    """Bytes of body of one namespace waiting in the buffer."""
    return conn.execute("SELECT COALESCE(SUM(length(body_json)), 0) FROM events WHERE"
                        " namespace = $1 AND seq > COALESCE((SELECT last_seq FROM"
                        " extraction_cursor WHERE namespace = $2), 0)",
                        (namespace, namespace)).fetchone()[0]


def due_batches(conn: Connection, now: int, limit: int) -> list[tuple[str, str, int]]:
    """Batches to hand out: ready ones, and leased ones whose lease has expired."""
    return conn.execute(
        "SELECT batch_id, namespace, attempts FROM extraction_batches WHERE state = 'ready'"
        " UNION ALL SELECT batch_id, namespace, attempts FROM extraction_batches"
        " WHERE state = 'leased' AND lease_expires_ms < $1 LIMIT $2", (now, limit)).fetchall()


def next_lease_expiry(conn: Connection) -> int | None:
    """When the first lease of a batch being extracted runs out (epoch ms)."""
    return conn.execute("SELECT min(lease_expires_ms) FROM extraction_batches"
                        " WHERE state = 'leased'").fetchone()[0]


def batch_error(conn: Connection, batch_id: str) -> str | None:
    """Why a batch's last attempt failed (None: no worker said)."""
    row = conn.execute("SELECT error FROM extraction_batches WHERE batch_id = $1",
                       (batch_id,)).fetchone()
    return row[0] if row else None


def pending_work(home: paths.Home) -> dict | None:
    """Events and batches waiting for extraction in the home's store, per project with
    any, and the failed batches (newest 20, with why): what ``kirolearn status`` shows.
    None when the store is unknown, not made yet or cannot be read (status must still
    report the processes)."""
    from kirolearn import config, db

    try:
        where = db.location(home)
    except config.ConfigError:
        return None
    if not db.exists(where):
        return None
    try:
        with db.reading(where) as conn:
            stats = reads.stats(conn)
            failed = failed_batches(conn)
    except errors.StoreError:
        return None
    return {"events": stats["totals"]["pending_events"],
            "batches": stats["totals"]["pending_batches"],
            "failed": failed,
            "namespaces": [{k: n[k] for k in ("namespace", "pending_events", "pending_batches")}
                           for n in stats["namespaces"]
                           if n["pending_events"] or n["pending_batches"]]}


def failed_batches(conn: Connection, namespace: str | None = None,
                   limit: int = 20) -> list[dict]:
    """The failed batches (of a namespace), newest first: which project, how many
    events, and why."""
    rows = conn.execute(
        "SELECT b.batch_id, b.namespace, b.error, b.attempts, (SELECT count(*) FROM events e"
        f"{conn.indexed_by('events_namespace')} WHERE e.namespace = b.namespace"
        " AND e.seq BETWEEN b.first_seq AND b.last_seq) FROM extraction_batches b"
        " WHERE b.state = 'failed' AND (CAST($1 AS TEXT) IS NULL OR b.namespace = $1)"
        " ORDER BY b.created_ms DESC, b.batch_id DESC LIMIT $2", (namespace, limit))
    return [{"batch_id": r[0], "namespace": r[1], "error": r[2] or "", "attempts": r[3],
             "events": r[4]} for r in rows]


def batch_scope(conn: Connection, batch_id: str) -> tuple[str, set[str]] | None:
    """A batch's namespace and the ids of its events (None: no such batch): what the
    records made from it may name."""
    row = conn.execute("SELECT namespace FROM extraction_batches WHERE batch_id = $1",
                       (batch_id,)).fetchone()
    if row is None:
        return None
    return row[0], {event_id for (event_id,) in conn.execute(
        "SELECT e.event_id FROM extraction_batches b JOIN events e"
        f"{conn.indexed_by('events_namespace')}"
        " ON e.namespace = b.namespace AND e.seq BETWEEN b.first_seq AND b.last_seq"
        " WHERE b.batch_id = $1", (batch_id,))}


def batch_events(conn: Connection, batch_id: str) -> list[dict]:
    """A batch's events in time order (arrival order within a millisecond), in storage
    form (``body_json`` and ``source_json``, still encoded): the worker decodes them,
    which keeps that work off the single writer."""
    rows = conn.execute(
        "SELECT e.event_id, e.kind, e.body_json, e.namespace, e.session_id, e.valid_time,"
        " e.parent_event_id, e.project_path, e.source_json FROM extraction_batches b"
        f" JOIN events e{conn.indexed_by('events_namespace')}"
        " ON e.namespace = b.namespace AND e.seq BETWEEN b.first_seq AND b.last_seq"
        " WHERE b.batch_id = $1 ORDER BY e.valid_ms, e.seq", (batch_id,))
    keys = ("event_id", "kind", "body_json", "namespace", "session_id", "valid_time",
            "parent_event_id", "project_path", "source_json")
    return [dict(zip(keys, row, strict=True)) for row in rows]


# A batch's events, whatever their size: what a model reads whole in one prompt, and
# what storage commits in a few milliseconds (acks wait while it does).
MAX_BATCH_EVENTS = 200


def form_batches(conn: Connection, namespace: str, reason: str, max_bytes: int,
                 max_events: int = MAX_BATCH_EVENTS, history: frozenset[str] = frozenset(),
                 whole_turns: bool = False) -> list[str]:
    """Make the namespace's pending events ready batches (caller's transaction), each at
    most ``max_bytes`` of body (an event larger alone is a batch of its own) and
    ``max_events`` events, cut after a turn's end (a ``session_summary``) where the
    limits leave one, so a turn stays whole. Events stored after this stay pending.
    ``whole_turns``: the events from the first of a turn still open stay pending too
    (``whole_until``: a turn begun before the batch was formed, in this session or in
    another working beside it, waits to be batched whole).

    ``history``: ids of events imported from an export that had already distilled them;
    each run of them becomes a batch already done, so they are not extracted again.
    """
    cursor = conn.execute("SELECT last_seq FROM extraction_cursor WHERE namespace = $1",
                          (namespace,)).fetchone()
    first = (cursor[0] if cursor else 0) + 1
    rows = conn.execute("SELECT seq, kind = 'session_summary', length(body_json), event_id,"
                        " session_id, valid_ms"
                        f" FROM events{conn.indexed_by('events_namespace')} WHERE namespace = $1"
                        " AND seq >= $2 ORDER BY seq", (namespace, first)).fetchall()
    if whole_turns:
        rows = rows[:whole_until(rows, now_ms())]
    batch_ids = []
    start = 0
    while start < len(rows):
        done = rows[start][3] in history
        end = start + 1
        while end < len(rows) and (rows[end][3] in history) == done:
            end += 1
        ranges = ([(rows[start][0], rows[end - 1][0])] if done
                  else _cut(rows[start:end], max_bytes, max_events))
        for low, high in ranges:
            batch_ids.append(contract.new_ulid())
            conn.execute("INSERT INTO extraction_batches (batch_id, namespace, first_seq,"
                         " last_seq, state, reason, created_ms, done_ms, record_count)"
                         " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                         (batch_ids[-1], namespace, low, high, "done" if done else "ready",
                          "imported" if done else reason, now_ms(), now_ms() if done else None,
                          0 if done else None))
        start = end
    if rows:
        conn.execute("INSERT INTO extraction_cursor VALUES ($1, $2) ON CONFLICT (namespace)"
                     " DO UPDATE SET last_seq = excluded.last_seq", (namespace, rows[-1][0]))
    return batch_ids


# A turn open this long (a session left mid-turn) no longer holds the others' back.
OPEN_TURN_WAIT_MS = 300_000


def whole_until(rows: list[tuple], now: int) -> int:
    """How many of these pending events (seq, is a turn's end, size, id, session, time)
    can be batched without cutting a turn: those before the first event of a turn still
    open in its session. Parallel sessions (agents in worktrees, two terminals)
    interleave their events, and one's turn ending must not cut another's in two: its
    request in one record, its conclusion in the next."""
    closed_at: list[int | None] = [None] * len(rows)  # where each event's turn ends
    ends: dict[str, int] = {}
    for at in range(len(rows) - 1, -1, -1):
        if rows[at][1]:
            ends[rows[at][4]] = at
        closed_at[at] = ends.get(rows[at][4])
    whole = need = 0
    for at, row in enumerate(rows):
        if now - row[5] >= OPEN_TURN_WAIT_MS:
            closed = at  # waited for long enough
        elif (closed := closed_at[at]) is None:
            break  # a turn still open: nothing from here on
        need = max(need, closed + 1)
        if need == at + 1:
            whole = at + 1
    return whole


def _cut(rows: list[tuple], max_bytes: int, max_events: int) -> list[tuple[int, int]]:
    """Seq ranges of batches within the limits (rows: seq, is a turn's end, size)."""
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
    return ranges


def lease_batches(conn: Connection, batch_ids: Iterable[str], expires_ms: int) -> None:
    """The batches are out with a worker until ``expires_ms``; one more attempt counted."""
    conn.executemany("UPDATE extraction_batches SET state = 'leased', lease_expires_ms = $1,"
                     " attempts = attempts + 1 WHERE batch_id = $2",
                     [(expires_ms, batch_id) for batch_id in batch_ids])


def batch_attempt_failed(conn: Connection, batch_id: str, error: str) -> None:
    """The lease of a batch whose attempt failed ends now (it is handed out again), and
    why is kept."""
    conn.execute("UPDATE extraction_batches SET lease_expires_ms = 0, error = $1"
                 " WHERE batch_id = $2 AND state = 'leased'", (error, batch_id))


def split_batch(conn: Connection, batch_id: str) -> str | None:
    """Split a batch of several events into two ready batches (attempts counted afresh);
    None when it has one event only, and cannot be split."""
    namespace, first, last = conn.execute(
        "SELECT namespace, first_seq, last_seq FROM extraction_batches WHERE batch_id = $1",
        (batch_id,)).fetchone()
    seqs = [seq for (seq,) in conn.execute(
        f"SELECT seq FROM events{conn.indexed_by('events_namespace')} WHERE namespace = $1"
        " AND seq BETWEEN $2 AND $3 ORDER BY seq", (namespace, first, last))]
    if len(seqs) < 2:
        return None
    middle = seqs[len(seqs) // 2 - 1]
    other = contract.new_ulid()
    conn.execute("UPDATE extraction_batches SET last_seq = $1, state = 'ready', attempts = 0,"
                 " lease_expires_ms = NULL WHERE batch_id = $2",
                 (middle, batch_id))
    conn.execute("INSERT INTO extraction_batches (batch_id, namespace, first_seq, last_seq,"
                 " state, reason, created_ms) VALUES ($1, $2, $3, $4, 'ready', 'split', $5)",
                 (other, namespace, middle + 1, last, now_ms()))
    return other


def fail_batch(conn: Connection, batch_id: str, error: str) -> None:
    """Give up on a batch for now, saying why (its events stay stored; ``retry_batches``
    hands it out again)."""
    conn.execute("UPDATE extraction_batches SET state = 'failed', error = $1 WHERE batch_id = $2",
                 (error, batch_id))


def retry_batches(conn: Connection) -> int:
    """Every failed batch ready again, its attempts counted afresh; how many."""
    return conn.execute("UPDATE extraction_batches SET state = 'ready', attempts = 0,"
                        " lease_expires_ms = NULL WHERE state = 'failed'").rowcount


BatchResult = tuple[str, list[dict], list[tuple[str, str]]]  # batch id, records, changed


def complete_batches(conn: Connection, results: Iterable[BatchResult],
                     merge_window_s: float = 0) -> dict[str, int | str | None]:
    """Commit batches' results inside the caller's transaction (several batches, one
    fsync): each batch's records (near-duplicates merged, see ``save_record``; an earlier
    one they undo superseded, ``supersede``), what they
    tell of the ranking signals (``note_usefulness``, ``note_changes``: changed is the
    batch's (path, event id) of each file one of its events changed) and its done mark
    together, in a savepoint of its own. By batch: how many records it committed; None
    if it was already done; or why its records could not be stored (a constraint, such
    as a record id given twice): that batch alone is rolled back and its attempt counted
    failed, and the others commit."""
    outcome: dict[str, int | str | None] = {}
    for batch_id, records, changed in results:
        conn.execute("SAVEPOINT batch")
        try:
            outcome[batch_id] = _complete_batch(conn, batch_id, records, merge_window_s,
                                                changed)
        except errors.StoreConflict as exc:
            conn.execute("ROLLBACK TO batch")
            outcome[batch_id] = f"its records could not be stored: {exc}"
            batch_attempt_failed(conn, batch_id, outcome[batch_id])
        conn.execute("RELEASE batch")
    return outcome


def _complete_batch(conn: Connection, batch_id: str, records: list[dict],
                    merge_window_s: float, changed: Iterable[tuple[str, str]]) -> int | None:
    state = conn.execute("SELECT state, namespace FROM extraction_batches"
                         " WHERE batch_id = $1", (batch_id,)).fetchone()
    if state is None or state[0] in ("done", "failed"):
        return None
    holder: dict[str, str] = {}  # event id -> the record that tells of it
    for record in records:
        target = save_record(conn, record, batch_id, merge_window_s) or record["record_id"]
        supersede(conn, {**record, "record_id": target})
        holder.update(dict.fromkeys(record["source_event_ids"], target))
    note_usefulness(conn, records)
    note_changes(conn, state[1], changed, holder)
    conn.execute("UPDATE extraction_batches SET state = 'done', done_ms = $1,"
                 " record_count = $2, lease_expires_ms = NULL WHERE batch_id = $3",
                 (now_ms(), len(records), batch_id))
    return len(records)


def note_usefulness(conn: Connection, records: list[dict]) -> None:
    """Each record given to a prompt of these records' turns whose files the turn then
    touched proved useful once more (once per prompt). What a tool use was given about
    the files it opened is about those files by design: it proves nothing."""
    useful: set[tuple[str, str]] = set()  # (prompt event id, record id)
    files_of: dict[str, set[str]] = {}
    for record in records:
        files = set(record.get("files_touched", []))
        if not files:
            continue
        p = Params()
        for prompt_id, ids_json in conn.execute(
                "SELECT r.prompt_event_id, r.record_ids_json FROM retrievals r"
                " JOIN events e ON e.event_id = r.prompt_event_id AND e.kind = 'prompt'"
                f" WHERE r.prompt_event_id IN {p.list(record['source_event_ids'])}",
                p.values).fetchall():
            given = [i for i in json.loads(ids_json) if isinstance(i, str)]
            unknown = [i for i in given if i not in files_of]
            if unknown:
                q = Params()
                files_of.update({i: set() for i in unknown})
                files_of.update((i, set(json.loads(f))) for i, f in conn.execute(
                    "SELECT record_id, files_touched_json FROM memory_records"
                    f" WHERE record_id IN {q.list(unknown)}", q.values))
            useful.update((prompt_id, i) for i in given if files & files_of[i])
    conn.executemany("UPDATE memory_records SET useful_count = useful_count + 1"
                     " WHERE record_id = $1", [(i,) for _, i in sorted(useful)])


def note_changes(conn: Connection, namespace: str,
                 changed: Iterable[tuple[str, str]], holder: dict[str, str]) -> None:
    """Each changed file's latest change: the turn of the record that tells of it (the
    event's own place when no record does), so that a record of an earlier turn naming
    the file is stale and one of this turn (or merged with it) is not."""
    for path, event_id in changed:
        (turn_seq,) = conn.execute(
            "SELECT coalesce((SELECT turn_seq FROM memory_records WHERE record_id = $1),"
            " (SELECT seq FROM events WHERE event_id = $2))",
            (holder.get(event_id), event_id)).fetchone()
        if turn_seq is not None:
            conn.execute("INSERT INTO file_changes VALUES ($1, $2, $3) ON CONFLICT"
                         " (namespace, path_key) DO UPDATE SET turn_seq = excluded.turn_seq"
                         " WHERE excluded.turn_seq > file_changes.turn_seq",
                         (namespace, path_key(path), turn_seq))
