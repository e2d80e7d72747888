"""The statements search is made of: the FTS5 index, its vocabulary and BM25 ranking.

``open_searcher`` gives retrieval its own read-only connection, with a temporary FTS5
table that tokenizes query words exactly as the records were tokenized.

On PostgreSQL the same functions use its own machinery (``postgres``): words become
lexemes by ``to_tsvector``, a term's frequency is read from ``record_terms``, an
expression's phrases become a ``tsquery`` (each quoted phrase a ``phraseto_tsquery``,
OR-ed) ranked by ``ts_rank`` (negated: lower is better, as BM25 here), and the
fallback is a case-insensitive ``ILIKE``.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Callable, Sequence

from kirolearn import contract
from kirolearn.db import Location, connect_reader, in_list, path_key, postgres, reads
from kirolearn.db.schema import FTS_TOKENIZE

ESTIMATED_PAST = 100_000
_PHRASE = re.compile(r'"((?:[^"]|"")*)"')


def phrases(expression: str) -> list[str]:
    """The quoted phrases of an expression ``query.fts_expression`` made."""
    return [phrase.replace('""', '"') for phrase in _PHRASE.findall(expression)]



def open_searcher(path: Location, interrupted: Callable[[], bool]) -> sqlite3.Connection:
    """A read-only connection for searches; ``interrupted()`` is asked every 1,000 steps
    of a statement and stops it when true (the search's deadline reaches into SQLite;
    on PostgreSQL, a reader's statement timeout bounds each statement instead)."""
    conn = connect_reader(path)
    if isinstance(conn, postgres.Connection):
        return conn
    conn.execute("PRAGMA cache_size=-65536")  # the index pages searches touch stay hot
    conn.execute(f"CREATE VIRTUAL TABLE temp.query_tokens USING fts5"
                 f" (token, tokenize = '{FTS_TOKENIZE}')")
    conn.execute("CREATE VIRTUAL TABLE temp.query_tokens_vocab USING fts5vocab"
                 " (temp, query_tokens, 'instance')")
    conn.set_progress_handler(interrupted, 1000)
    return conn


def index_terms(conn: sqlite3.Connection, words: list[str]) -> list[tuple[str, ...]]:
    """Each word's index terms in order, as the FTS5 tokenizer makes them
    (`Migrations` → `migrat`, `src/app.py` → `src app py`)."""
    if isinstance(conn, postgres.Connection):
        return postgres.index_terms(conn, words)
    conn.execute("DELETE FROM temp.query_tokens")  # in case a search was cut short
    conn.executemany("INSERT INTO temp.query_tokens (rowid, token) VALUES (?, ?)",
                     enumerate(words))
    found: dict[int, list[tuple[int, str]]] = {}
    for term, doc, offset in conn.execute("SELECT term, doc, offset FROM temp.query_tokens_vocab"):
        found.setdefault(doc, []).append((offset, term))
    return [tuple(term for _, term in sorted(found.get(index, []))) for index in range(len(words))]


def record_count(conn: sqlite3.Connection) -> int:
    """How many records there are; on PostgreSQL, past ESTIMATED_PAST records, the
    server's running count of live rows (counting a million took 50 ms a search)."""
    if isinstance(conn, postgres.Connection):
        estimate = conn.execute("SELECT n_live_tup FROM pg_stat_user_tables"
                                " WHERE relid = 'memory_records'::regclass").fetchone()
        if estimate and estimate[0] > ESTIMATED_PAST:
            return estimate[0]
    return conn.execute("SELECT count(*) FROM memory_records").fetchone()[0]


def newest_id(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT max(id) FROM memory_records").fetchone()[0] or 0


def term_doc_counts(conn: sqlite3.Connection, terms: Sequence[str]) -> dict[str, int]:
    """How many records hold each index term (terms not indexed are left out)."""
    marks, args = in_list(terms)
    if isinstance(conn, postgres.Connection):
        return dict(conn.execute(f"SELECT term, docs FROM record_terms WHERE term IN {marks}"
                                 " AND docs > 0", args))
    return dict(conn.execute(
        f"SELECT term, doc FROM memory_records_fts_vocab WHERE term IN {marks}", args))


def match_count(conn: sqlite3.Connection, expression: str) -> int:
    """How many records match an FTS5 expression."""
    if isinstance(conn, postgres.Connection):
        query, args = postgres.tsquery(phrases(expression))
        return conn.execute(f"SELECT count(*) FROM memory_records WHERE search @@ ({query})",
                            args).fetchone()[0]
    return conn.execute("SELECT count(*) FROM memory_records_fts WHERE memory_records_fts"
                        " MATCH ?", (expression,)).fetchone()[0]


def _of_types(types: Sequence[str], alias: str) -> tuple[str, list]:
    """The SQL condition (and its arguments) keeping records of these types; none: all."""
    if not types:
        return "", []
    marks, args = in_list(types)
    return f" AND {alias}.observation_type IN {marks}", args


def rank(conn: sqlite3.Connection, namespaces: Sequence[str], expression: str, limit: int,
         since_id: int = 0, types: Sequence[str] = ()) -> list[tuple[int, float]]:
    """(id, BM25) of the best matches with an id past ``since_id``, in the namespaces
    (of these types, when given)."""
    marks, args = in_list(namespaces)
    typed, type_args = _of_types(types, "mr")
    if isinstance(conn, postgres.Connection):
        query, query_args = postgres.tsquery(phrases(expression))
        wide = since_id > 0 and newest_id(conn) - since_id > postgres.SCANNED_IDS_MAX
        with postgres.bitmap_scans_only(conn) if wide else contextlib.nullcontext():
            return conn.execute(
                f"SELECT mr.id, -ts_rank(mr.search, {query}) AS score FROM memory_records"
                f" mr WHERE mr.search @@ ({query}) AND mr.id > ? AND mr.namespace IN {marks}"
                f"{typed} ORDER BY score, mr.id DESC LIMIT ?",
                (*query_args, *query_args, since_id, *args, *type_args, limit)).fetchall()
    if typed:  # the type is read from the row, not the covering index
        join = "JOIN memory_records mr ON mr.id = memory_records_fts.rowid"
    else:
        join = ("JOIN memory_records mr INDEXED BY memory_records_id_namespace"
                " ON mr.id = memory_records_fts.rowid")
    return conn.execute(
        f"SELECT mr.id, bm25(memory_records_fts) FROM memory_records_fts {join}"
        " WHERE memory_records_fts MATCH ? AND memory_records_fts.rowid > ?"
        f" AND mr.namespace IN {marks}{typed}"
        " ORDER BY bm25(memory_records_fts), mr.id DESC LIMIT ?",
        (expression, since_id, *args, *type_args, limit)).fetchall()


def of_types(conn: sqlite3.Connection, record_ids: Sequence[str],
             types: Sequence[str]) -> set[str]:
    """Which of these records are of these types."""
    if not record_ids:
        return set()
    marks, args = in_list(record_ids)
    typed, type_args = _of_types(types, "memory_records")
    return {row[0] for row in conn.execute(
        f"SELECT record_id FROM memory_records WHERE record_id IN {marks}{typed}",
        [*args, *type_args])}


def like(conn: sqlite3.Connection, namespaces: Sequence[str], text: str,
         limit: int, types: Sequence[str] = ()) -> list[tuple[int, None]]:
    """The records holding ``text`` as a literal substring (``%``, ``_`` and ``\\``
    escaped), newest first; none marked invalid; of these types, when given."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    marks, args = in_list(namespaces)
    typed, type_args = _of_types(types, "memory_records")
    like = "ILIKE" if isinstance(conn, postgres.Connection) else "LIKE"  # SQLite's ignores case
    return conn.execute(
        f"SELECT id, NULL FROM memory_records WHERE"
        f" (title {like} ?1 ESCAPE '\\' OR summary {like} ?1 ESCAPE '\\'"
        f" OR facts_text {like} ?1 ESCAPE '\\')"
        f" AND namespace IN {marks} AND invalid_reason IS NULL{typed}"
        " ORDER BY created_at DESC, id DESC LIMIT ?",
        (f"%{escaped}%", *args, *type_args, limit)).fetchall()


def records_by_rowid(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, dict]:
    """Full records by their row id (read after ranking: only the ranked rows)."""
    if not ids:
        return {}
    marks, args = in_list(ids)
    return {row[0]: reads.record_from_row(row[1:]) for row in conn.execute(
        f"SELECT id, {reads.RECORD_COLUMNS} FROM memory_records WHERE id IN {marks}", args)}


# --- a session's start -------------------------------------------------------------------------

def newest_records(conn: sqlite3.Connection, namespace: str, limit: int,
                   types: Sequence[str] = ()) -> list[dict]:
    """A namespace's newest records (of these observation types, when given), less those
    marked invalid."""
    where, args = "", []
    if types:
        marks, args = in_list(types)
        where = f" AND observation_type IN {marks}"
    return [reads.record_from_row(row) for row in conn.execute(
        f"SELECT {reads.RECORD_COLUMNS} FROM memory_records WHERE namespace = ?{where}"
        " AND invalid_reason IS NULL ORDER BY created_at DESC, id DESC LIMIT ?",
        (namespace, *args, limit))]


def previous_prompts(conn: sqlite3.Connection, namespace: str, session_id: str,
                     event_id: str, count: int) -> list[str]:
    """The texts of the session's last ``count`` prompts before the given one (which
    may not be stored yet), oldest first."""
    rows = conn.execute("SELECT body_json FROM events INDEXED BY events_session_time"
                        " WHERE session_id = ? AND namespace = ? AND kind = 'prompt'"
                        " AND event_id != ? ORDER BY valid_ms DESC, seq DESC LIMIT ?",
                        (session_id, namespace, event_id, count)).fetchall()
    return [contract.body_text(json.loads(row[0])) for row in reversed(rows)]


def last_session(conn: sqlite3.Connection, namespace: str, limit: int
                 ) -> tuple[str | None, list[dict]]:
    """The namespace's last active session (that of its newest record from a session)
    and that session's valid records in turn order, the first ``limit``."""
    row = conn.execute("SELECT session_id FROM memory_records WHERE namespace = ?"
                       " AND session_id IS NOT NULL AND invalid_reason IS NULL"
                       " ORDER BY id DESC LIMIT 1", (namespace,)).fetchone()
    if row is None:
        return None, []
    return row[0], [reads.record_from_row(r) for r in conn.execute(
        f"SELECT {reads.RECORD_COLUMNS} FROM memory_records WHERE session_id = ?"
        " AND namespace = ? AND invalid_reason IS NULL ORDER BY turn_seq, id LIMIT ?",
        (row[0], namespace, limit))]


def retrieved_counts(conn: sqlite3.Connection, namespace: str, lookback: int) -> dict[str, int]:
    """How often each record was given to a prompt in the namespace's last retrievals."""
    counts: dict[str, int] = {}
    for (ids_json,) in conn.execute("SELECT record_ids_json FROM retrievals WHERE namespace = ?"
                                    " ORDER BY id DESC LIMIT ?", (namespace, lookback)):
        for record_id in json.loads(ids_json):
            counts[record_id] = counts.get(record_id, 0) + 1
    return counts


MAX_SIGNAL_FILES = 50  # of a record's files, those checked for a later change


def signals(conn: sqlite3.Connection, record_ids: Sequence[str]
            ) -> dict[str, tuple[str, int, bool]]:
    """Per record: its type, how often it proved useful, and whether a file it names was
    changed by a later turn than its own (``file_changes``)."""
    if not record_ids:
        return {}
    marks, args = in_list(record_ids)
    rows = conn.execute(
        "SELECT record_id, namespace, observation_type, useful_count, turn_seq,"
        f" files_touched_json FROM memory_records WHERE record_id IN {marks}", args).fetchall()
    keys = {row[0]: [path_key(p) for p in json.loads(row[5])[:MAX_SIGNAL_FILES]]
            for row in rows if row[4] is not None}
    changed: dict[tuple[str, str], int] = {}
    for namespace in {row[1] for row in rows if row[0] in keys}:
        wanted = {k for row in rows if row[1] == namespace for k in keys.get(row[0], ())}
        if wanted:
            marks, args = in_list(wanted)
            changed.update(((namespace, key), seq) for key, seq in conn.execute(
                "SELECT path_key, turn_seq FROM file_changes WHERE namespace = ?"
                f" AND path_key IN {marks}", [namespace, *args]))
    return {row[0]: (row[2], row[3], any(changed.get((row[1], k), -1) > row[4]
                                         for k in keys.get(row[0], ())))
            for row in rows}


def neighbours(conn: sqlite3.Connection, record_ids: Sequence[str]
               ) -> dict[str, tuple[str | None, str | None]]:
    """Each record's neighbours in its session: the valid records whose turns come just
    before and just after its own (by the arrival of their first events)."""
    if not record_ids:
        return {}
    marks, args = in_list(record_ids)
    side = ("SELECT o.record_id FROM memory_records o WHERE o.session_id = r.session_id"
            " AND o.namespace = r.namespace AND o.invalid_reason IS NULL"
            " AND o.turn_seq {} r.turn_seq ORDER BY o.turn_seq {} LIMIT 1")
    return {row[0]: (row[1], row[2]) for row in conn.execute(
        f"SELECT r.record_id, ({side.format('<', 'DESC')}), ({side.format('>', 'ASC')})"
        f" FROM memory_records r WHERE r.record_id IN {marks} AND r.session_id IS NOT NULL",
        args)}
