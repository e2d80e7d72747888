"""The statements search is made of, whichever the store: what ranks records by their
words is the dialect's (``sqlite.fts``: FTS5 and BM25; ``postgres.fts``: tsvector and
ts_rank), reached as ``conn.dialect.fts``; what reads records around a search (types, a
literal substring, full rows, a session's start, the ranking signals) is here, once.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from datetime import datetime, timedelta

from kirolearn import contract
from kirolearn.db import path_key, reads
from kirolearn.db.store import Connection, Params


def newest_id(conn: Connection) -> int:
    return conn.execute("SELECT max(id) FROM memory_records").fetchone()[0] or 0


def of_types(conn: Connection, record_ids: Sequence[str],
             types: Sequence[str]) -> set[str]:
    """Which of these records are of these types."""
    if not record_ids:
        return set()
    p = Params()
    ids = p.list(record_ids)
    typed = f" AND observation_type IN {p.list(types)}" if types else ""
    return {row[0] for row in conn.execute(
        f"SELECT record_id FROM memory_records WHERE record_id IN {ids}{typed}", p.values)}


def valid_rows(conn: Connection, rows: Sequence[int], namespaces: Sequence[str],
               types: Sequence[str] = ()) -> set[int]:
    """Which of these row ids are of valid records of these namespaces (and types, when
    given)."""
    if not rows:
        return set()
    p = Params()
    typed = f" AND observation_type IN {p.list(types)}" if types else ""
    return {row[0] for row in conn.execute(
        f"SELECT id FROM memory_records WHERE id IN {p.list(rows)}"
        f" AND namespace IN {p.list(namespaces)} AND invalid_reason IS NULL{typed}", p.values)}


def like(conn: Connection, namespaces: Sequence[str], text: str,
         limit: int, types: Sequence[str] = ()) -> list[tuple[int, None]]:
    """The records holding ``text`` as a literal substring (``%``, ``_`` and ``\\``
    escaped), newest first; none marked invalid; of these types, when given."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    p = Params(f"%{escaped}%")
    where = f" AND namespace IN {p.list(namespaces)}"
    if types:
        where += f" AND observation_type IN {p.list(types)}"
    # lower() on both sides: case is ignored alike by both dialects (SQLite's LIKE, and
    # its lower(), fold ASCII letters only).
    return conn.execute(
        "SELECT id, NULL FROM memory_records WHERE"
        " (lower(title) LIKE lower($1) ESCAPE '\\' OR lower(summary) LIKE lower($1)"
        " ESCAPE '\\' OR lower(facts_text) LIKE lower($1) ESCAPE '\\')"
        f" AND invalid_reason IS NULL{where}"
        f" ORDER BY created_at DESC, id DESC LIMIT {p(limit)}", p.values).fetchall()


def records_of_files(conn: Connection, namespaces: Sequence[str], paths: Sequence[str],
                     limit: int) -> list[tuple[int, str]]:
    """(row id, record id) of the newest ``limit`` valid records naming one of these
    files (the file index, ``record_files``), newest first. Each file's newest are read
    in index order on their own: asked of several files at once, the index would give
    every record of each to be sorted, thousands for a file that much work touched."""
    newest = heapq.nlargest(limit, {
        row for namespace in namespaces for path in paths
        for (row,) in conn.execute(
            "SELECT record_id FROM record_files WHERE namespace = $1 AND path = $2"
            " ORDER BY record_id DESC LIMIT $3", (namespace, path, limit))})
    if not newest:
        return []
    p = Params()
    ids = dict(conn.execute(f"SELECT id, record_id FROM memory_records WHERE id IN"
                            f" {p.list(newest)}", p.values).fetchall())
    return [(row, ids[row]) for row in newest if row in ids]


def records_of_objects(conn: Connection, namespaces: Sequence[str],
                       objects: Sequence[tuple[str, str]]) -> dict[tuple[str, str], list[int]]:
    """(object id, path) → the row ids of the valid records known by it (the object index,
    ``record_objects``: a seeded record by its commit, path ''; a live record by the blob
    id it left a file as, and that file's path), newest first."""
    if not namespaces or not objects:
        return {}
    p, wanted = Params(), set(objects)
    found: dict[tuple[str, str], list[int]] = {}
    for object_id, path, row in conn.execute(
            "SELECT object_id, path, record_id FROM record_objects WHERE namespace IN"
            f" {p.list(namespaces)} AND object_id IN {p.list({o for o, _ in objects})}"
            " ORDER BY record_id DESC", p.values):
        if (object_id, path) in wanted:
            found.setdefault((object_id, path), []).append(row)
    return found


def records_between(conn: Connection, namespaces: Sequence[str], start: datetime,
                    end: datetime, limit: int) -> list[int]:
    """The row ids of the valid records of work done in ``[start, end)``, newest first
    (their times compared as times; the index narrows them by day, a day wider each
    side for the time zones)."""
    if not namespaces:
        return []
    p = Params()
    where = (f"namespace IN {p.list(namespaces)} AND invalid_reason IS NULL"
             f" AND created_at >= {p((start - timedelta(days=1)).date().isoformat())}"
             f" AND created_at < {p((end + timedelta(days=1)).date().isoformat())}"
             f" AND julianday(created_at) >= julianday({p(start.isoformat())})"
             f" AND julianday(created_at) < julianday({p(end.isoformat())})")
    return [row[0] for row in conn.execute(
        f"SELECT id FROM memory_records WHERE {where} ORDER BY id DESC LIMIT {p(limit)}",
        p.values)]


def records_by_rowid(conn: Connection, ids: Sequence[int]) -> dict[int, dict]:
    """Full records by their row id, for a search's answer (read after ranking: only
    the ranked rows)."""
    if not ids:
        return {}
    p = Params()
    return {row[0]: reads.searched_record_from_row(row[1:]) for row in conn.execute(
        f"SELECT id, {reads.SEARCHED_COLUMNS} FROM memory_records WHERE id IN {p.list(ids)}",
        p.values)}


# --- a session's start -------------------------------------------------------------------------

def newest_records(conn: Connection, namespace: str, limit: int,
                   types: Sequence[str] = ()) -> list[dict]:
    """A namespace's newest records (of these observation types, when given), less those
    marked invalid or stale (their code gone) and those superseded (a later one undid
    their work)."""
    p = Params(namespace)
    typed = f" AND observation_type IN {p.list(types)}" if types else ""
    return [reads.record_from_row(row) for row in conn.execute(
        f"SELECT {reads.RECORD_COLUMNS} FROM memory_records WHERE namespace = $1{typed}"
        " AND invalid_reason IS NULL AND stale_why IS NULL AND superseded_by IS NULL"
        f" ORDER BY created_at DESC, id DESC LIMIT {p(limit)}", p.values)]


def in_force(conn: Connection, namespaces: Sequence[str], limit: int) -> list[dict]:
    """The newest records of these namespaces that are in force (as ``newest_records``),
    with only what a project's brief reads of them: id, namespace, title, summary,
    facts, files, type, strategy, time and author."""
    p = Params()
    return [{"record_id": row[0], "namespace": row[1], "title": row[2], "summary": row[3],
             "facts": json.loads(row[4]), "files_touched": json.loads(row[5]),
             "observation_type": row[6], "strategy": row[7], "created_at": row[8],
             "author": row[9]}
            for row in conn.execute(
                "SELECT record_id, namespace, title, summary, facts_json, files_touched_json,"
                " observation_type, strategy, created_at, author FROM memory_records WHERE"
                f" namespace IN {p.list(namespaces)} AND {IN_FORCE}"
                f" ORDER BY created_at DESC, id DESC LIMIT {p(limit)}", p.values)]


IN_FORCE = "invalid_reason IS NULL AND stale_why IS NULL AND superseded_by IS NULL"


def work_totals(conn: Connection, namespaces: Sequence[str]) -> tuple[int, int, str | None]:
    """The records of work in force of these namespaces (rule files aside): how many,
    by how many authors, since when."""
    p = Params()
    row = conn.execute(
        "SELECT count(*), count(DISTINCT author), min(created_at) FROM memory_records"
        f" WHERE namespace IN {p.list(namespaces)} AND {IN_FORCE}"
        f" AND strategy <> {p(contract.RULE_FILE)}", p.values).fetchone()
    return row[0], row[1], row[2]


def previous_prompts(conn: Connection, namespace: str, session_id: str,
                     event_id: str, count: int) -> list[str]:
    """The texts of the session's last ``count`` prompts before the given one (which
    may not be stored yet), oldest first."""
    rows = conn.execute(f"SELECT body_json FROM events{conn.indexed_by('events_session_time')}"
                        " WHERE session_id = $1 AND namespace = $2 AND kind = 'prompt'"
                        " AND event_id != $3 ORDER BY valid_ms DESC, seq DESC LIMIT $4",
                        (session_id, namespace, event_id, count)).fetchall()
    return [contract.body_text(json.loads(row[0])) for row in reversed(rows)]


def last_session(conn: Connection, namespace: str, limit: int
                 ) -> tuple[str | None, list[dict]]:
    """The namespace's last active session (that of its newest record from a session)
    and that session's valid records in turn order, the first ``limit``."""
    row = conn.execute("SELECT session_id FROM memory_records WHERE namespace = $1"
                       " AND session_id IS NOT NULL AND invalid_reason IS NULL"
                       " ORDER BY id DESC LIMIT 1", (namespace,)).fetchone()
    if row is None:
        return None, []
    return row[0], [reads.record_from_row(r) for r in conn.execute(
        f"SELECT {reads.RECORD_COLUMNS} FROM memory_records WHERE session_id = $1"
        " AND namespace = $2 AND invalid_reason IS NULL ORDER BY turn_seq, id LIMIT $3",
        (row[0], namespace, limit))]


def retrieved_counts(conn: Connection, namespace: str, lookback: int) -> dict[str, int]:
    """How often each record was given to a prompt in the namespace's last retrievals."""
    counts: dict[str, int] = {}
    for (ids_json,) in conn.execute("SELECT record_ids_json FROM retrievals WHERE namespace = $1"
                                    " ORDER BY id DESC LIMIT $2", (namespace, lookback)):
        for record_id in json.loads(ids_json):
            counts[record_id] = counts.get(record_id, 0) + 1
    return counts


MAX_SIGNAL_FILES = 50  # of a record's files, those checked for a later change


def signals(conn: Connection, record_ids: Sequence[str]
            ) -> dict[str, tuple[str, int, bool]]:
    """Per record: its type, how often it proved useful, and whether a file it names was
    changed by a later turn than its own (``file_changes``)."""
    if not record_ids:
        return {}
    p = Params()
    rows = conn.execute(
        "SELECT record_id, namespace, observation_type, useful_count, turn_seq,"
        f" files_touched_json FROM memory_records WHERE record_id IN {p.list(record_ids)}",
        p.values).fetchall()
    keys = {row[0]: [path_key(p) for p in json.loads(row[5])[:MAX_SIGNAL_FILES]]
            for row in rows if row[4] is not None}
    changed: dict[tuple[str, str], int] = {}
    for namespace in {row[1] for row in rows if row[0] in keys}:
        wanted = {k for row in rows if row[1] == namespace for k in keys.get(row[0], ())}
        if wanted:
            q = Params(namespace)
            changed.update(((namespace, key), seq) for key, seq in conn.execute(
                "SELECT path_key, turn_seq FROM file_changes WHERE namespace = $1"
                f" AND path_key IN {q.list(wanted)}", q.values))
    return {row[0]: (row[2], row[3], any(changed.get((row[1], k), -1) > row[4]
                                         for k in keys.get(row[0], ())))
            for row in rows}


def neighbours(conn: Connection, record_ids: Sequence[str]
               ) -> dict[str, tuple[str | None, str | None]]:
    """Each record's neighbours in its session: the valid records whose turns come just
    before and just after its own (by the arrival of their first events)."""
    if not record_ids:
        return {}
    p = Params()
    side = ("SELECT o.record_id FROM memory_records o WHERE o.session_id = r.session_id"
            " AND o.namespace = r.namespace AND o.invalid_reason IS NULL"
            " AND o.turn_seq {} r.turn_seq ORDER BY o.turn_seq {} LIMIT 1")
    return {row[0]: (row[1], row[2]) for row in conn.execute(
        f"SELECT r.record_id, ({side.format('<', 'DESC')}), ({side.format('>', 'ASC')})"
        f" FROM memory_records r WHERE r.record_id IN {p.list(record_ids)}"
        " AND r.session_id IS NOT NULL", p.values)}
