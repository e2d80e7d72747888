"""SQLite's full-text search: the FTS5 index of valid records (``memory_records_fts``),
its vocabulary (``memory_records_fts_vocab``) and BM25 ranking. A search's words are
tokenized by a temporary FTS5 table of the searcher's connection (``open_searcher``),
exactly as the records were."""

from __future__ import annotations

from collections.abc import Sequence

from kirolearn.db.store import Connection, Params

# BM25 is a sum over the expression's phrases, each weighed by its own document frequency:
# the scores of one phrase alone (``term_scores``) add up to those of the phrases OR-ed.
SCORES_ADD_UP = True


def index_terms(conn: Connection, words: list[str]) -> list[tuple[str, ...]]:
    """Each word's index terms in order, as the FTS5 tokenizer makes them
    (`Migrations` → `migrat`, `src/app.py` → `src app py`)."""
    conn.execute("DELETE FROM temp.query_tokens")  # in case a search was cut short
    conn.executemany("INSERT INTO temp.query_tokens (rowid, token) VALUES ($1, $2)",
                     enumerate(words))
    found: dict[int, list[tuple[int, str]]] = {}
    for term, doc, offset in conn.execute("SELECT term, doc, offset FROM temp.query_tokens_vocab"):
        found.setdefault(doc, []).append((offset, term))
    return [tuple(term for _, term in sorted(found.get(index, []))) for index in range(len(words))]


def record_count(conn: Connection) -> int:
    return conn.execute("SELECT count(*) FROM memory_records").fetchone()[0]


def term_doc_counts(conn: Connection, terms: Sequence[str]) -> dict[str, int]:
    """How many records hold each index term (terms not indexed are left out)."""
    p = Params()
    return dict(conn.execute(
        f"SELECT term, doc FROM memory_records_fts_vocab WHERE term IN {p.list(terms)}",
        p.values))


def match_count(conn: Connection, expression: str) -> int:
    """How many records match an FTS5 expression."""
    return conn.execute("SELECT count(*) FROM memory_records_fts WHERE memory_records_fts"
                        " MATCH $1", (expression,)).fetchone()[0]


def rank(conn: Connection, namespaces: Sequence[str], expression: str, limit: int,
         since_id: int = 0, types: Sequence[str] = (),
         within: Sequence[int] | None = None,
         lifts: Sequence[tuple[Sequence[int], float]] = ()) -> list[tuple[int, float]]:
    """(id, score) of the best matches with an id past ``since_id``, in the namespaces
    (of these types, when given; among these row ids, when given). The score is BM25
    (lower is better), times the factor of each of ``lifts`` (row ids, factor) that
    holds the row.

    Row ids are compared as each match is read (the ``+`` keeps them from FTS5, which
    would seek every term's doclist once per id: for common words, a second at 100,000
    records where reading the whole match takes milliseconds)."""
    p = Params(expression, since_id)
    score = "bm25(memory_records_fts)" + "".join(
        f" * CASE WHEN +memory_records_fts.rowid IN {p.list(rows)} THEN {p(factor)} ELSE 1 END"
        for rows, factor in lifts if rows)
    where = f" AND mr.namespace IN {p.list(namespaces)}"
    if within is not None:
        where += f" AND +memory_records_fts.rowid IN {p.list(within or [0])}"
    if types:  # the type is read from the row, not the covering index
        where += f" AND mr.observation_type IN {p.list(types)}"
        join = "JOIN memory_records mr ON mr.id = memory_records_fts.rowid"
    else:
        join = ("JOIN memory_records mr INDEXED BY memory_records_id_namespace"
                " ON mr.id = memory_records_fts.rowid")
    return conn.execute(
        f"SELECT mr.id, {score} AS score FROM memory_records_fts {join}"
        f" WHERE memory_records_fts MATCH $1 AND memory_records_fts.rowid > $2{where}"
        f" ORDER BY score, mr.id DESC LIMIT {p(limit)}",
        p.values).fetchall()


def term_scores(conn: Connection, namespace: str, expression: str, since_id: int,
                until_id: int) -> list[tuple[int, float]]:
    """(id, BM25 score, higher is better) of every record of the namespace, its id in
    ``(since_id, until_id]``, that matches a one-phrase expression, by id."""
    return conn.execute(
        "SELECT mr.id, -bm25(memory_records_fts) FROM memory_records_fts JOIN memory_records mr"
        " INDEXED BY memory_records_id_namespace ON mr.id = memory_records_fts.rowid"
        " WHERE memory_records_fts MATCH $1 AND memory_records_fts.rowid > $2"
        " AND memory_records_fts.rowid <= $3 AND mr.namespace = $4 ORDER BY mr.id",
        (expression, since_id, until_id, namespace)).fetchall()


def rank_changes(conn: Connection, namespaces: Sequence[str], expression: str,
                 limit: int) -> list[tuple[str, str]]:
    """(record id, created at) of the valid records, in the namespaces, whose changed
    lines (``record_changes_fts``) best match an FTS5 expression: BM25, the newer first
    among equals."""
    p = Params(expression)
    return [(row[0], row[1]) for row in conn.execute(
        "SELECT mr.record_id, mr.created_at FROM record_changes_fts JOIN memory_records mr"
        " INDEXED BY"
        " memory_records_id_namespace ON mr.id = record_changes_fts.rowid"
        f" WHERE record_changes_fts MATCH $1 AND mr.namespace IN {p.list(namespaces)}"
        f" ORDER BY bm25(record_changes_fts), mr.id DESC LIMIT {p(limit)}", p.values)]
