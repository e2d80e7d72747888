"""Every change to the database, made by the single writer (the storage role).

Each function runs inside the caller's ``conn.transaction()`` unless it says otherwise.
(The extraction queue's changes are ``batches``'; what is left here is every change to
events and records, merges and forgetting included: one module, long as it is.)
"""

from __future__ import annotations

import json
import operator
import re
import struct
from collections import Counter
from collections.abc import Callable, Iterable

from kirolearn import contract, privacy, project
from kirolearn.db import files_key, reads, utc_now
from kirolearn.db.store import Connection, Params


def checkpoint(conn: Connection) -> bool:
    """Fold the WAL into the database file (at a clean stop; PostgreSQL checkpoints
    itself); whether all of it is in the file now."""
    return conn.dialect.checkpoint(conn)


def compact(conn: Connection) -> None:
    """Give the free pages back to the disk (``VACUUM``, outside a transaction), then
    fold the WAL in."""
    conn.execute("VACUUM")
    checkpoint(conn)


# --- events ----------------------------------------------------------------------------------

STORED_FIELDS = ("event_id", "namespace", "kind", "session_id", "actor_id", "valid_time",
                 "valid_ms", "body_json", "source_json", "content_hash", "parent_event_id",
                 "project_path", "schema_version")


_EVENT_COLUMNS = f"{', '.join(STORED_FIELDS)}, transaction_time"
_EVENT_VALUES = ", ".join(f"${n}" for n in range(1, len(STORED_FIELDS) + 2))
_FIELD = {name: f"${n}" for n, name in enumerate(STORED_FIELDS, 1)}
WINDOW = f"${len(STORED_FIELDS) + 2}"  # the dedup window's parameter

INSERT_EVENT_SQL = (f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES ({_EVENT_VALUES})"
                    " ON CONFLICT DO NOTHING")


def _insert_event_within_sql(conn: Connection) -> str:
    """The insert, unless an event of the same content is stored in the same namespace,
    session and kind within the window: one statement, so that a batch of them is sent
    at once (``insert_events``) and each still sees the ones before it."""
    f = _FIELD
    return (f"INSERT INTO events ({_EVENT_COLUMNS}) SELECT {_EVENT_VALUES} WHERE NOT EXISTS"
            f" (SELECT 1 FROM events{conn.indexed_by('events_session_time')}"
            f" WHERE session_id = {f['session_id']}"
            f" AND valid_ms BETWEEN {f['valid_ms']} - {WINDOW} AND {f['valid_ms']} + {WINDOW}"
            f" AND content_hash = {f['content_hash']} AND namespace = {f['namespace']}"
            f" AND kind = {f['kind']} AND event_id != {f['event_id']})"
            " ON CONFLICT DO NOTHING")


def event_row(event: dict, transaction_time: str) -> list:
    """The event's row for ``insert_events``; KeyError for an event of the wrong shape."""
    return [*(event[name] for name in STORED_FIELDS), transaction_time]


def insert_events(conn: Connection, rows: list[list], dedup_window_ms: int) -> list[bool]:
    """Insert events (``event_row``s, in order) inside the caller's transaction; for each,
    whether it was stored, else it is a duplicate: the same event_id, or the same content
    in the same namespace, session and kind within the dedup window (a retried hook).

    Sent as one pipeline: on a server, a chunk of an import is a round trip or two, not
    one per event (each a wait for the server's turn on a busy machine)."""
    sql = _insert_event_within_sql(conn) if dedup_window_ms > 0 else INSERT_EVENT_SQL
    extra = [dedup_window_ms] if dedup_window_ms > 0 else []
    with conn.pipeline():
        cursors = [conn.execute(sql, [*row, *extra]) for row in rows]
    return [cursor.rowcount > 0 for cursor in cursors]


def insert_event(conn: Connection, event: dict, dedup_window_ms: int,
                 transaction_time: str | None = None) -> str:
    """One event (in ``contract.stored_form``): 'stored' or 'duplicate' (``insert_events``)."""
    row = event_row(event, transaction_time or utc_now())
    return "stored" if insert_events(conn, [row], dedup_window_ms)[0] else "duplicate"


# --- memory records ----------------------------------------------------------------------------

INSERT_RECORD_SQL = (
    "INSERT INTO memory_records (record_id, namespace, title, summary, facts_json,"
    " facts_text, concepts_json, files_touched_json, observation_type, strategy,"
    " source_event_ids_json, created_at, batch_id, invalid_reason, embedding_hash,"
    " files_key, anchors_json, code_json, scrubbed_with, author, session_id, turn_seq,"
    " changes_text)"
    " SELECT $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$21,"
    " e.session_id, e.seq, $22 FROM (SELECT 1) AS one LEFT JOIN events e ON e.event_id = $20")
# A change to part of a record's text keeps its mark of today's rules only when the rest
# had it (``privacy.scrub_stale``): the new part was scrubbed with today's.
KEEP_SCRUBBED = "scrubbed_with = CASE WHEN scrubbed_with = {} THEN scrubbed_with END"


def _new_record_params(record: dict, batch_id: str | None, invalid_reason: str | None) -> tuple:
    record = privacy.scrub_record(record)  # what the mark says: today's rules, here
    facts = record.get("facts", [])
    return (record["record_id"], record["namespace"], record["title"], record["summary"],
            json.dumps(facts), " ".join(facts), json.dumps(record.get("concepts", [])),
            json.dumps(record.get("files_touched", [])), record["observation_type"],
            record["strategy"], json.dumps(record["source_event_ids"]), record["created_at"],
            batch_id, invalid_reason, None if invalid_reason is None else NOT_EMBEDDED,
            files_key(record.get("files_touched", [])),
            json.dumps(record.get("anchors") or {}), json.dumps(record.get("code") or {}),
            privacy.version(), next(iter(record["source_event_ids"]), None),
            project.record_author(record), record.get("changes") or "")


def insert_record(conn: Connection, record: dict, batch_id: str | None = None,
                  invalid_reason: str | None = None) -> None:
    """A new record, its text scrubbed here with this process's rules and marked so
    (``scrubbed_with``: a search hands it out without a second pass; the role that sent
    it scrubbed it too, for its logs); one marked invalid (an import) is kept out of the
    full-text index and is never embedded."""
    conn.execute(INSERT_RECORD_SQL, _new_record_params(record, batch_id, invalid_reason))


def insert_records(conn: Connection, records: Iterable[dict]) -> None:
    """Many new records at once (a seeded corpus), in the caller's transaction: on
    PostgreSQL they are sent without waiting for each answer, and the search's term
    counts are made once, after them."""
    rows = [_new_record_params(r, None, None) for r in records]
    with conn.dialect.terms_counted_after(conn):
        conn.executemany(INSERT_RECORD_SQL, rows)


NOT_EMBEDDED = "invalid"  # the embedding_hash of a record marked invalid: never embedded
# A valid record whose text changed is embedded again from the new text.
EMBED_AGAIN = "embedding_hash = CASE WHEN invalid_reason IS NULL THEN NULL ELSE embedding_hash END"


def _keep_version(conn: Connection, row_id: int, reason: str | None = None) -> None:
    """Keep a record's present state in ``record_versions`` before it changes."""
    conn.execute(
        "INSERT INTO record_versions (record_id, title, summary, facts_json, concepts_json,"
        " files_touched_json, source_event_ids_json, created_at, replaced_at, reason)"
        " SELECT record_id, title, summary, facts_json, concepts_json, files_touched_json,"
        " source_event_ids_json, created_at, $1, $2 FROM memory_records WHERE id = $3",
        (utc_now(), reason, row_id))


MAX_SUMMARY = 4000  # a record's limits (contract.validate_record): a merge that would
MAX_ITEMS = 100  # pass them does not happen; the record is saved as a new one


def save_record(conn: Connection, record: dict, batch_id: str | None = None,
                merge_window_s: float = 0) -> str | None:
    """Insert a record, or merge it into one that says the same (``same_work``) created
    within ``merge_window_s`` in its namespace: the repeat strengthens it instead of
    adding a near-copy.

    A merge only adds: the record keeps its id and every summary, fact, concept and
    source event of both (a summary it does not already hold is appended, with the new
    title when it differs), takes the newer time, and its previous state is kept in
    ``record_versions`` (so how often it was seen is its merges plus one). A merge that
    would pass a record's limits is not made. Returns the id of the record it merged
    into (None: inserted)."""
    if merge_window_s > 0:
        for row in same_work(conn, record, merge_window_s)[:1]:
            if _merge_into(conn, row, record, batch_id):
                return row[6]
    insert_record(conn, record, batch_id)
    return None


def _merge_into(conn: Connection, row: tuple, record: dict,
                batch_id: str | None) -> bool:
    """Merge record into the stored one (a row of ``MERGE_COLUMNS``), as ``save_record``
    says; False (nothing changed) when that would pass a record's limits."""
    record = privacy.scrub_record(record)
    title, summary = row[7], row[1]
    added = record["summary"] if record["title"] == title else "\n\n".join(
        part for part in (record["title"], record["summary"]) if part)
    if (record["summary"] or added) not in summary:
        summary = f"{summary}\n\n{added}".strip()
    facts = list(dict.fromkeys(json.loads(row[2]) + record.get("facts", [])))
    concepts = list(dict.fromkeys(json.loads(row[3]) + record.get("concepts", [])))
    sources = list(dict.fromkeys(json.loads(row[4]) + record["source_event_ids"]))
    anchors = json.loads(row[8])
    for path, names in (record.get("anchors") or {}).items():
        anchors[path] = list(dict.fromkeys(anchors.get(path, []) + names))[
            :contract.MAX_ANCHORED_SYMBOLS]
    if (len(summary) > MAX_SUMMARY or len(facts) > MAX_ITEMS or len(concepts) > MAX_ITEMS
            or len(anchors) > contract.MAX_ANCHORED_FILES):
        return False
    _keep_version(conn, row[0])
    code = record.get("code") or json.loads(row[9])  # where the newer work left the code
    conn.execute(
        "UPDATE memory_records SET summary = $1, facts_json = $2, facts_text = $3,"
        " concepts_json = $4, source_event_ids_json = $5, created_at = $6, batch_id = $7,"
        " embedding_hash = NULL, anchors_json = $8, code_json = $9, stale_why = NULL,"
        f" stale_at = NULL, {KEEP_SCRUBBED.format('$11')},"
        f" changes_text = substr(changes_text || $12, 1, {contract.MAX_CHANGES_CHARS})"
        " WHERE id = $10",
        (summary, json.dumps(facts), " ".join(facts), json.dumps(concepts),
         json.dumps(sources), record["created_at"], batch_id, json.dumps(anchors),
         json.dumps(code), row[0], privacy.version(),
         "\n" + record["changes"] if record.get("changes") else ""))
    return True


MERGE_COLUMNS = ("id, summary, facts_json, concepts_json, source_event_ids_json,"
                 " files_touched_json, record_id, title, anchors_json, code_json")


def same_work(conn: Connection, record: dict, window_s: float) -> list[tuple]:
    """The valid records of the record's namespace, type and strategy created within
    window_s before it (the work's time: an import of old sessions merges as live work
    does) that tell of the same work, newest first: those of the same request (its title
    and files), then an earlier turn of its session with its facts when they tell of
    work done (an edit or a command, not reads alone: two questions answered by reading
    the same file are not the same). The same edit made for another request, in another
    session, is other work: each request stays findable."""
    columns = MERGE_COLUMNS
    kind = (record["namespace"], record["observation_type"], record["strategy"])
    files = set(record.get("files_touched", []))
    rows = [row for row in conn.execute(
        f"SELECT {columns} FROM memory_records{conn.indexed_by('memory_records_title')}"
        " WHERE namespace = $1 AND title = $2 AND observation_type = $3 AND strategy = $4"
        " AND invalid_reason IS NULL AND julianday(created_at) >= julianday($6) - $5"
        " ORDER BY id DESC", (kind[0], record["title"], *kind[1:], window_s / 86400,
                              record["created_at"]))
        if set(json.loads(row[5])) == files]
    facts = record.get("facts", [])
    if any(not fact.startswith("read ") for fact in facts):
        # (facts_json is compared here, not in SQL: a `facts_json = ?` term there makes
        # SQLite rewrite the indexed expression, and the index goes unused)
        text = json.dumps(facts)
        same = [row for row in conn.execute(
            f"SELECT {columns}, facts_json FROM memory_records"
            f"{conn.indexed_by('memory_records_facts')}"
            " WHERE namespace = $1 AND substr(facts_json, 1, 200) = substr($2, 1, 200)"
            " AND observation_type = $3 AND strategy = $4 AND invalid_reason IS NULL"
            " AND julianday(created_at) >= julianday($6) - $5"
            " AND session_id = (SELECT session_id FROM events WHERE event_id = $7)"
            " ORDER BY id DESC",
            (kind[0], text, *kind[1:], window_s / 86400, record["created_at"],
             next(iter(record["source_event_ids"]), None)))
            if row[-1] == text]
        rows += [row[:-1] for row in same[:1] if row[0] not in {r[0] for r in rows}]
    return rows


# What a record that undoes earlier work says of it (its request, its summary).
UNDOES = re.compile(r"\b(?:revert(?:s|ed|ing)?|undo(?:es|ne|ing)?|undid|roll(?:s|ed|ing)? back"
                    r"|rollback|back(?:s|ed|ing)? out|put back|go(?:es|ing)? back to)\b", re.I)
SUPERSEDE_CANDIDATES = 50  # the newest records about the same files a new one is compared with


def supersede(conn: Connection, record: dict) -> str | None:
    """Mark the earlier record a new one says the opposite of superseded by it, with
    the link (``superseded_by``): one that undoes its work (a revert, a fix undone: the
    new record says so) in the same code, or a later decision about the same code. The
    same code: a file both are anchored to (``anchors``), and a name the work defined
    there in both, or, for an undoing, a file whose names it did not keep. The newest
    such record is the one; it is kept, readable and recalled below the new one. Returns
    its id."""
    anchors: dict[str, list[str]] = record.get("anchors") or {}
    undoes = bool(UNDOES.search(f"{record['title']}\n{record['summary']}"))
    if not anchors or not (undoes or record["observation_type"] == "decision"):
        return None
    p = Params()
    marks = p.list(list(anchors))
    for row in conn.execute(
            "SELECT mr.id, mr.record_id, mr.anchors_json, mr.observation_type FROM"
            f" record_files rf JOIN memory_records mr ON mr.id = rf.record_id"
            f" WHERE rf.namespace = {p(record['namespace'])} AND rf.path IN {marks}"
            f" AND mr.record_id != {p(record['record_id'])} AND mr.superseded_by IS NULL"
            f" ORDER BY mr.id DESC LIMIT {SUPERSEDE_CANDIDATES}", p.values):
        if not undoes and row[3] != "decision":
            continue
        earlier: dict[str, list[str]] = json.loads(row[2])
        if any(set(earlier.get(path, ())) & set(names) or (undoes and path in earlier
                                                            and not names)
               for path, names in anchors.items()):
            conn.execute("UPDATE memory_records SET superseded_by = $1 WHERE id = $2",
                         (record["record_id"], row[0]))
            return row[1]
    return None


def mark_stale(conn: Connection, record_id: str, why: str | None) -> bool:
    """Mark a record stale (its code is gone: ``why``), or no longer (``why`` None: its
    code is back); whether it changed. A stale record stays, readable and exported,
    and is not recalled; the time it was first found so is kept."""
    if why is None:
        return bool(conn.execute("UPDATE memory_records SET stale_why = NULL, stale_at = NULL"
                                 " WHERE record_id = $1 AND stale_why IS NOT NULL",
                                 (record_id,)).rowcount)
    return bool(conn.execute(
        "UPDATE memory_records SET stale_why = $1, stale_at = coalesce(stale_at, $2)"
        " WHERE record_id = $3 AND (stale_why IS NULL OR stale_why != $1)",
        (why[:1000], utc_now(), record_id)).rowcount)


RECONCILE_CANDIDATES = 50  # the newest records about the same files a new one is compared with


def reconcile(conn: Connection, record_id: str, vector: bytes, space: str,
              min_similarity: float, window_s: float) -> str | None:
    """Merge a record the daemon extracted, once embedded, into an older one that says
    the same in other words: of its namespace, type and strategy, naming the same files,
    created within window_s, and at least min_similarity alike in meaning (the cosine of
    their vectors; the most alike of the newest ``RECONCILE_CANDIDATES`` is taken), and
    not one a later record undid (``supersede``: the undoing is not the same). The
    older record takes it in as ``save_record`` merges (a version kept; summaries, facts
    and sources gathered; the newer time), with its turn (so the session that repeated
    the work holds it) and its usefulness. The newer record stays, readable and
    exported, marked invalid as merged into it: it is never recalled beside it. Records
    saved by hand or imported (no batch) are never merged. Returns the id it merged
    into."""
    row = conn.execute(
        "SELECT id, namespace, observation_type, strategy, files_key, batch_id, session_id,"
        " turn_seq, useful_count FROM memory_records WHERE record_id = $1"
        " AND batch_id IS NOT NULL AND files_key IS NOT NULL AND invalid_reason IS NULL"
        " AND julianday(created_at) >= julianday('now') - $2",
        (record_id, window_s / 86400)).fetchone()
    if row is None:
        return None
    best, most = None, min_similarity
    values = _floats(vector)
    for candidate in conn.execute(
            f"SELECT {MERGE_COLUMNS}, embedding FROM memory_records"
            f"{conn.indexed_by('memory_records_files')} WHERE namespace = $1 AND files_key = $2"
            " AND id < $3 AND observation_type = $4 AND strategy = $5 AND invalid_reason IS NULL"
            " AND superseded_by IS NULL"
            " AND length(embedding) = $6 AND julianday(created_at) >= julianday('now') - $7"
            " AND (embedding_hash IS NULL OR embedding_hash LIKE $9) ORDER BY id DESC LIMIT $8",
            (row[1], row[4], row[0], row[2], row[3], len(vector), window_s / 86400,
             RECONCILE_CANDIDATES, reads.of_space(space))):
        similarity = sum(map(operator.mul, _floats(candidate[-1]), values))
        if similarity >= most:
            best, most = candidate, similarity
    record = reads.record_by_id(conn, record_id)
    if best is None or record is None or not _merge_into(conn, best, record, row[5]):
        return None
    conn.execute("UPDATE memory_records SET session_id = coalesce($1, session_id),"
                 " turn_seq = coalesce($2, turn_seq), useful_count = useful_count + $3"
                 " WHERE id = $4", (row[6], row[7], row[8], best[0]))
    conn.execute("UPDATE memory_records SET invalid_reason = $1, embedding = NULL,"
                 " embedding_hash = $2 WHERE id = $3",
                 (f"merged into {best[6]}, which says the same (the same files,"
                  f" similarity {most:.2f})", NOT_EMBEDDED, row[0]))
    return best[6]


def _floats(vector: bytes) -> tuple[float, ...]:
    """A stored vector's values (little-endian float32); of two unit vectors, the sum of
    their products is their cosine."""
    return struct.unpack(f"<{len(vector) // 4}f", vector)


def _record_row(conn: Connection, record_id: str,
                namespaces: Iterable[str]) -> tuple[int, str] | None:
    """(row id, namespace) of the record with this id in one of these namespaces."""
    p = Params(record_id)
    return conn.execute(f"SELECT id, namespace FROM memory_records WHERE record_id = $1"
                        f" AND {conn.unindexed('namespace')} IN {p.list(namespaces)}",
                        p.values).fetchone()


def delete_record(conn: Connection, record_id: str, namespaces: Iterable[str]) -> bool:
    """Forget a record: its text, full-text entry and versions go (by trigger) and a
    tombstone keeps its id, so no import brings it back; so do the events it was made
    from that no other record was made from, and its part of the retrieval log
    (``forget_in_log``). Whether it was there, in one of these namespaces."""
    row = _record_row(conn, record_id, namespaces)
    if row is None:
        return False
    (sources,) = conn.execute("SELECT source_event_ids_json FROM memory_records WHERE id = $1",
                              (row[0],)).fetchone()
    conn.execute("INSERT INTO tombstones VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                 (record_id, row[1], utc_now()))
    conn.execute("DELETE FROM memory_records WHERE id = $1", (row[0],))
    for event_id in json.loads(sources):
        if not conn.execute("SELECT 1 FROM memory_records WHERE namespace = $1 AND"
                            " source_event_ids_json LIKE $2 LIMIT 1",
                            (row[1], f'%"{event_id}"%')).fetchone():
            conn.execute("DELETE FROM events WHERE event_id = $1", (event_id,))
    forget_in_log(conn, [record_id])
    return True


FORGOTTEN_CONTEXT = "[this context held a memory that was forgotten since]"


def forget_in_log(conn: Connection, record_ids: list[str]) -> None:
    """The retrieval log's contexts that held any of these records are withheld, and the
    records' ids taken out of them: a forgotten record's text leaves the log too."""
    gone = set(record_ids)
    for start in range(0, len(record_ids), 50):
        chunk = record_ids[start:start + 50]
        p = Params()
        likes = " OR ".join(f"record_ids_json LIKE {p(quoted)}"
                            for quoted in (f'%"{record_id}"%' for record_id in chunk))
        rows = conn.execute(f"SELECT id, record_ids_json FROM retrievals WHERE {likes}",
                            p.values).fetchall()
        conn.executemany("UPDATE retrievals SET context = $1, record_ids_json = $2 WHERE id = $3",
                         [(FORGOTTEN_CONTEXT,
                           json.dumps([i for i in json.loads(ids) if i not in gone]), row_id)
                          for row_id, ids in rows])


def purge_index(conn: Connection) -> None:
    """Rewrite the full-text index as one segment: a deleted record's words stay in the
    older segments until they are merged (about a second at 100,000 records). On
    PostgreSQL, ``VACUUM`` takes a forgotten record's dead rows and index entries away
    (outside a transaction)."""
    conn.dialect.purge_index(conn)


# What ``scrub_stored`` rewrites: table → (its key, text columns, JSON columns).
SCRUBBED = {
    "events": ("seq", ("project_path",), ("body_json",)),
    "memory_records": ("id", ("title", "summary", "invalid_reason", "changes_text"),
                       ("facts_json", "concepts_json", "files_touched_json")),
    "record_versions": ("id", ("title", "summary", "reason"),
                        ("facts_json", "concepts_json", "files_touched_json")),
    "retrievals": ("id", ("context", "error"), ()),
    "extraction_batches": ("batch_id", ("error",), ()),
}


def scrub_stored(conn: Connection, dry_run: bool = False) -> dict[str, dict[str, int]]:
    """Run today's scrubber over everything stored and redact in place: events (their
    hash made again), records (their index entry rewritten by the triggers, their vector
    dropped to be made again from the new text, marked scrubbed with today's rules),
    versions, the retrieval log and batch errors. ``{table: {kind: redactions}}``; with
    dry_run nothing is written."""
    report: dict[str, dict[str, int]] = {}
    for table in SCRUBBED:
        counts: Counter = Counter()
        _scrub_rows(conn, table, f"SELECT {_scrubbed_columns(table)} FROM {table}", (),
                    counts, dry_run)
        if counts:
            report[table] = dict(counts)
    if not dry_run:
        conn.execute(f"UPDATE memory_records SET scrubbed_with = $1 WHERE {_NOT_SCRUBBED}",
                     (privacy.version(),))
    return report


_NOT_SCRUBBED = "(scrubbed_with IS NULL OR scrubbed_with <> $1)"  # with today's rules


def rescrub_records(conn: Connection, limit: int) -> tuple[int, dict[str, int]]:
    """Up to ``limit`` records whose text was scrubbed with other rules than today's
    (stored before an upgrade) scrubbed again, redacted in place as ``scrub_stored``
    does, and marked: how many were looked at, and the redactions by kind (a caller
    goes on while the first equals ``limit``)."""
    version = privacy.version()
    counts: Counter = Counter()
    ids = _scrub_rows(conn, "memory_records",
                      f"SELECT {_scrubbed_columns('memory_records')} FROM memory_records"
                      f" WHERE {_NOT_SCRUBBED} ORDER BY id LIMIT $2", (version, limit), counts)
    if ids:
        p = Params(version)
        conn.execute(f"UPDATE memory_records SET scrubbed_with = $1 WHERE id IN {p.list(ids)}",
                     p.values)
    return len(ids), dict(counts)


def _scrubbed_columns(table: str) -> str:
    key, texts, jsons = SCRUBBED[table]
    return ", ".join((key, *texts, *jsons))


def _scrub_rows(conn: Connection, table: str, select: str, params: tuple, counts: Counter,
                dry_run: bool = False) -> list:
    """Scrub the rows ``select`` reads of ``table`` (its key, then its ``SCRUBBED``
    columns) and rewrite those that change; their keys."""
    key, texts, jsons = SCRUBBED[table]
    columns = texts + jsons
    rows = conn.execute(select, params).fetchall()
    for row in rows:
        changed = {}
        for name, value in zip(columns, row[1:], strict=True):
            if value is None or not privacy.may_need_scrub(value):
                continue
            if name in jsons:
                parsed = json.loads(value)
                clean = privacy.scrub(parsed, counts)
                if clean != parsed:
                    changed[name] = contract.canonical_json(clean)
            else:
                clean = privacy.scrub(value, counts)
                if clean != value:
                    changed[name] = clean
        if changed and not dry_run:
            _rewrite(conn, table, key, row[0], changed)
    return [row[0] for row in rows]


def _rewrite(conn: Connection, table: str, key: str, row_key: int | str,
             changed: dict[str, str]) -> None:
    if table == "events" and "body_json" in changed:
        changed["content_hash"] = contract.hash_json(changed["body_json"])
    if table == "memory_records" and "facts_json" in changed:
        changed["facts_text"] = " ".join(json.loads(changed["facts_json"]))
    p = Params()
    assignments = [f"{name} = {p(value)}" for name, value in changed.items()]
    if table == "memory_records":
        assignments += ["embedding = NULL", EMBED_AGAIN]  # no vector of the old text stays
    conn.execute(f"UPDATE {table} SET {', '.join(assignments)} WHERE {key} = {p(row_key)}",
                 p.values)


SEEDED_BY_AUTHOR = "%\"client_id\":\"seed\"%"  # an event ``seed`` made (its source)


def fold_seeded_authors(conn: Connection, user: str) -> dict[str, int]:
    """Move the namespaces an earlier ``seed`` made, one per commit author, into the
    user's namespace of the same project: the author stays on each event
    (``source.author``) and record (``author``). A project is moved once extraction has
    caught up on it (and on the user's namespace): its batches are all done, so the
    moved events are neither extracted again nor left out. How many namespaces were
    moved, by project id. Cheap where there is nothing to move: another actor's
    namespace is looked at only until an event of its own (not seeded) is found."""
    by_project: dict[str, list[str]] = {}
    for namespace in reads.namespaces_in(conn, "events"):
        actor, project_id = project.parts(namespace)
        if actor == user or actor.endswith(project.PRIVATE):
            continue
        if conn.execute(f"SELECT 1 FROM events{conn.indexed_by('events_namespace')}"
                        " WHERE namespace = $1 AND source_json NOT LIKE $2 LIMIT 1",
                        (namespace, SEEDED_BY_AUTHOR)).fetchone() is None:
            by_project.setdefault(project_id, []).append(namespace)
    folded = {}
    for project_id, authors in by_project.items():
        target = project.namespace_for(user, project_id)
        every = [*authors, target]
        p = Params()
        within = p.list(every)
        open_work = conn.execute(
            "SELECT 1 FROM events e LEFT JOIN extraction_cursor c ON c.namespace ="
            f" e.namespace WHERE e.namespace IN {within} AND e.seq > COALESCE(c.last_seq, 0)"
            f" UNION ALL SELECT 1 FROM extraction_batches WHERE state <> 'done'"
            f" AND namespace IN {within} LIMIT 1", p.values).fetchone()
        if open_work:
            continue
        for namespace in authors:
            author = project.parts(namespace)[0]
            for seq, source_json in conn.execute(
                    "SELECT seq, source_json FROM events WHERE namespace = $1",
                    (namespace,)).fetchall():
                source = {"author": author, **json.loads(source_json)}
                conn.execute("UPDATE events SET namespace = $1, actor_id = $2,"
                             " source_json = $3 WHERE seq = $4",
                             (target, user, contract.canonical_json(source), seq))
            for row_id, code_json in conn.execute(
                    "SELECT id, code_json FROM memory_records WHERE namespace = $1",
                    (namespace,)).fetchall():
                code = {**json.loads(code_json), "author": author}
                conn.execute("UPDATE memory_records SET namespace = $1, author = $2,"
                             " code_json = $3 WHERE id = $4",
                             (target, author, json.dumps(code), row_id))
            conn.execute("INSERT INTO file_changes SELECT $1, path_key, turn_seq"
                         " FROM file_changes WHERE namespace = $2 ON CONFLICT (namespace,"
                         " path_key) DO UPDATE SET turn_seq = CASE WHEN excluded.turn_seq >"
                         " file_changes.turn_seq THEN excluded.turn_seq ELSE"
                         " file_changes.turn_seq END", (target, namespace))
            for table in ("file_changes", "extraction_cursor"):
                conn.execute(f"DELETE FROM {table} WHERE namespace = $1", (namespace,))
            for table in ("extraction_batches", "retrievals", "tombstones"):
                conn.execute(f"UPDATE {table} SET namespace = $1 WHERE namespace = $2",
                             (target, namespace))
        last = conn.execute("SELECT max(seq) FROM events WHERE namespace = $1",
                            (target,)).fetchone()[0]
        conn.execute("INSERT INTO extraction_cursor VALUES ($1, $2) ON CONFLICT (namespace)"
                     " DO UPDATE SET last_seq = excluded.last_seq", (target, last))
        folded[project_id] = len(authors)
    return folded


def forget_namespace(conn: Connection, namespace: str) -> dict[str, int]:
    """Forget everything of one project: its events, records (tombstones kept), batches
    and retrieval log. How many events and records were removed."""
    conn.execute("INSERT INTO tombstones SELECT record_id, namespace, $1"
                 " FROM memory_records WHERE namespace = $2 ON CONFLICT DO NOTHING",
                 (utc_now(), namespace))
    forget_in_log(conn, [record_id for (record_id,) in conn.execute(
        "SELECT record_id FROM memory_records WHERE namespace = $1", (namespace,))])
    records = conn.execute("DELETE FROM memory_records WHERE namespace = $1",
                           (namespace,)).rowcount
    events = conn.execute("DELETE FROM events WHERE namespace = $1", (namespace,)).rowcount
    for table in ("extraction_batches", "extraction_cursor", "retrievals", "file_changes"):
        conn.execute(f"DELETE FROM {table} WHERE namespace = $1", (namespace,))
    if records:
        purge_index(conn)
    return {"events": events, "records": records}


def update_record(conn: Connection, record_id: str, namespaces: Iterable[str],
                  changes: dict, reason: str | None) -> bool:
    """Edit a record's ``title``, ``summary`` or ``facts`` (its previous state becomes a
    version, with the reason), or, with ``changes`` ``{"invalid_reason": why}``, mark it
    invalid: it stays readable but is never retrieved. Whether it was there."""
    row = _record_row(conn, record_id, namespaces)
    if row is None:
        return False
    if "invalid_reason" in changes:
        conn.execute("UPDATE memory_records SET invalid_reason = $1, embedding = NULL,"
                     " embedding_hash = $2 WHERE id = $3",
                     (changes["invalid_reason"], NOT_EMBEDDED, row[0]))
        return True
    _keep_version(conn, row[0], reason)
    changes = privacy.scrub_record(changes)
    columns = {"title": changes.get("title"), "summary": changes.get("summary")}
    if "facts" in changes:
        columns.update(facts_json=json.dumps(changes["facts"]),
                       facts_text=" ".join(changes["facts"]))
    p = Params()
    assignments = ", ".join(f"{name} = {p(value)}" for name, value in columns.items()
                            if value is not None)
    conn.execute(f"UPDATE memory_records SET {assignments}, {EMBED_AGAIN},"
                 f" {KEEP_SCRUBBED.format(p(privacy.version()))} WHERE id = {p(row[0])}",
                 p.values)
    return True


def put_rule(conn: Connection, record_id: str, namespace: str, name: str,
             record: dict | None) -> str:
    """A rule file's record (``extract.rules``) as the file is now: stored the first
    time; when the file changed, its new text takes the record's place and the old one
    is kept as a version ("NAME changed"); when it is gone (``record`` None), marked
    invalid; never brought back once forgotten. The status: stored, updated,
    unchanged, removed or forgotten."""
    if conn.execute("SELECT 1 FROM tombstones WHERE record_id = $1", (record_id,)).fetchone():
        return "forgotten"
    record = privacy.scrub_record(record)
    row = conn.execute("SELECT id, title, summary, facts_json, concepts_json, invalid_reason"
                       " FROM memory_records WHERE record_id = $1 AND namespace = $2",
                       (record_id, namespace)).fetchone()
    if record is None:
        if row is None or row[5] is not None:
            return "unchanged"
        update_record(conn, record_id, [namespace],
                      {"invalid_reason": f"{name} was removed"}, None)
        return "removed"
    if row is None:
        insert_record(conn, record)
        return "stored"
    if (row[1], row[2], json.loads(row[3]), json.loads(row[4]), row[5]) == (
            record["title"], record["summary"], record["facts"], record["concepts"], None):
        return "unchanged"
    _keep_version(conn, row[0], f"{name} changed")
    conn.execute("UPDATE memory_records SET title = $1, summary = $2, facts_json = $3,"
                 " facts_text = $4, concepts_json = $5, source_event_ids_json = $6,"
                 " created_at = $7, invalid_reason = NULL, embedding_hash = NULL,"
                 f" {KEEP_SCRUBBED.format('$9')} WHERE id = $8",
                 (record["title"], record["summary"], json.dumps(record["facts"]),
                  " ".join(record["facts"]), json.dumps(record["concepts"]),
                  json.dumps(record["source_event_ids"]), record["created_at"], row[0],
                  privacy.version()))
    return "updated"


def import_record(conn: Connection, record: dict, versions: list[dict],
                  invalid_reason: str | None, embedding: dict | None,
                  made_from: Callable[[dict, str], bool], stale: dict | None = None,
                  superseded_by: str | None = None) -> dict:
    """A record from an export, with its versions, its marks (stale, superseded) and,
    when it was made from the same text by the same model, its vector. Never replaces a
    record, nor brings back a forgotten one: ``{status, reason?}``."""
    forgotten = conn.execute("SELECT forgotten_at FROM tombstones WHERE record_id = $1",
                             (record["record_id"],)).fetchone()
    if forgotten:
        return {"status": "rejected", "reason": f"{record['record_id']} was forgotten on"
                f" {forgotten[0]}; a forgotten record is not brought back"}
    if conn.execute("SELECT 1 FROM memory_records WHERE record_id = $1",
                    (record["record_id"],)).fetchone():
        return {"status": "duplicate"}
    insert_record(conn, record, invalid_reason=invalid_reason)
    if stale is not None or superseded_by is not None:
        conn.execute("UPDATE memory_records SET stale_why = $1, stale_at = $2,"
                     " superseded_by = $3 WHERE record_id = $4",
                     (stale and stale["why"], stale and stale["at"], superseded_by,
                      record["record_id"]))
    for version in versions:
        conn.execute(
            "INSERT INTO record_versions (record_id, title, summary, facts_json,"
            " concepts_json, files_touched_json, source_event_ids_json, created_at,"
            " replaced_at, reason) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)",
            (record["record_id"], version["title"], version["summary"],
             json.dumps(version["facts"]), json.dumps(version["concepts"]),
             json.dumps(version["files_touched"]), json.dumps(version["source_event_ids"]),
             version["created_at"], version["replaced_at"], version.get("reason")))
    if embedding is not None and invalid_reason is None:
        save_embedding(conn, record["record_id"], embedding["hash"], embedding["vector"],
                       made_from)
    return {"status": "stored"}


def import_tombstone(conn: Connection, tombstone: dict) -> dict:
    """A tombstone from an export: the record it names is forgotten here too."""
    if not conn.execute("INSERT INTO tombstones VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                        (tombstone["record_id"], tombstone["namespace"],
                         tombstone["forgotten_at"])).rowcount:
        return {"status": "duplicate"}
    conn.execute("DELETE FROM memory_records WHERE record_id = $1", (tombstone["record_id"],))
    return {"status": "stored"}


def prune_events(conn: Connection, before_ms: int, namespace: str | None) -> int:
    """Delete the events (of a namespace) older than ``before_ms`` that are already
    distilled into records (the records stay); how many."""
    return conn.execute(
        "DELETE FROM events WHERE valid_ms < $1 AND (CAST($2 AS TEXT) IS NULL OR namespace = $2)"
        " AND seq <= COALESCE((SELECT last_seq FROM extraction_cursor c"
        " WHERE c.namespace = events.namespace), 0)"
        " AND NOT EXISTS (SELECT 1 FROM extraction_batches b WHERE b.namespace ="
        " events.namespace AND b.state != 'done' AND events.seq BETWEEN b.first_seq"
        " AND b.last_seq)", (before_ms, namespace)).rowcount


def save_embedding(conn: Connection, record_id: str, text_hash: str, blob: bytes,
                   made_from: Callable[[dict, str], bool]) -> bool:
    """Store a record's vector if it was made from the record's current text (a merge may
    have changed it since); whether it was stored."""
    record = reads.record_by_id(conn, record_id)
    if record is None or "invalid_reason" in record or not made_from(record, text_hash):
        return False
    conn.execute("UPDATE memory_records SET embedding = $1, embedding_hash = $2"
                 " WHERE record_id = $3", (blob, text_hash, record_id))
    return True


def drop_vectors(conn: Connection, keep_space: str) -> int:
    """Drop the vectors of every other space than keep_space, so that their records are
    embedded again (by keep_space's model); how many."""
    return conn.execute("UPDATE memory_records SET embedding = NULL, embedding_hash = NULL"
                        " WHERE embedding IS NOT NULL AND embedding_hash NOT LIKE $1",
                        (reads.of_space(keep_space),)).rowcount


# --- retrieval log ---------------------------------------------------------------------------

def log_retrieval(conn: Connection, prompt_event_id: str | None, namespace: str | None,
                  record_ids: list[str], latency_ms: float, outcome: str, context: str = "",
                  error: str | None = None) -> None:
    """One prompt's retrieval, with the context the agent was given (what the viewer
    shows, even after the records it came from are forgotten)."""
    conn.execute("INSERT INTO retrievals (prompt_event_id, namespace, record_ids_json, latency_ms,"
                 " outcome, created_at, context, error) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                 (prompt_event_id, namespace, json.dumps(record_ids), latency_ms, outcome,
                  utc_now(), context,  # scrubbed by the searcher that made it
                  None if error is None else privacy.scrub_text(str(error))[:2000]))


