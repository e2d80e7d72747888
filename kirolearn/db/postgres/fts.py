"""PostgreSQL's full-text search: words become lexemes by ``to_tsvector`` (the
``kirolearn`` configuration: stemmed, no stop words), a term's frequency is read from
``record_terms``, an expression's phrases become a ``tsquery`` (each a
``phraseto_tsquery``, OR-ed; an identifier joined by underscores its own lexeme) ranked
by ``ts_rank`` (negated: lower is better, as BM25 on SQLite)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence

from kirolearn.db.store import Connection, Params

TEXT_SEARCH = "kirolearn"  # the text search configuration of the index and of queries
ESTIMATED_PAST = 100_000
IDENTIFIER = re.compile(r"[^\W_]+(?:_+[^\W_]+)+")  # kirolearn_identifiers' pattern
HYPHENATED = re.compile(r"[^\W_]+(?:-[^\W_]+)+")
_LETTER = re.compile(r"[^\W_]")
_PHRASE = re.compile(r'"((?:[^"]|"")*)"')
# ts_rank of phrases OR-ed is not the sum of each one's: no search adds up scores kept
# in memory (``search.postings``).
SCORES_ADD_UP = False
# Ranking the newest records only (a common term), past this many ids the index of ids
# and the full-text index are read as bitmaps and intersected: the planner would read
# every row of the window instead, and check each one's words (188 ms for 78,000 rows
# at 1,000,000 records, where the bitmaps took 45 ms).
SCANNED_IDS_MAX = 20_000


def phrases(expression: str) -> list[str]:
    """The quoted phrases of an expression ``query.fts_expression`` made."""
    return [phrase.replace('""', '"') for phrase in _PHRASE.findall(expression)]


def _alone(pattern: re.Pattern, word: str) -> str | None:
    """The one match of pattern in word when nothing else in it is a letter or digit."""
    found = pattern.findall(word)
    if len(found) == 1 and not _LETTER.search(pattern.sub("", word)):
        return found[0]
    return None


def identifier(word: str) -> str | None:
    """The lexeme the index keeps for a word that is one identifier joined by
    underscores (in backticks, say); None for any other word."""
    found = _alone(IDENTIFIER, word)
    return found.lower() if found else None


def index_terms(conn: Connection, words: list[str]) -> list[tuple[str, ...]]:
    """Each word's lexemes in order, as the index makes them; an identifier's, and a
    hyphenated word's, is the one it keeps for the whole word."""
    found: dict[int, list[tuple[int, str]]] = {}
    for index, position, lexeme in conn.execute(
            "SELECT w.i - 1, p, t.lexeme FROM unnest($1::text[]) WITH ORDINALITY AS w(word, i),"
            f" unnest(to_tsvector('{TEXT_SEARCH}', w.word)) AS t, unnest(t.positions) AS p",
            (words,)):
        found.setdefault(index, []).append((position, lexeme))
    terms = [tuple(lexeme for _, lexeme in sorted(found.get(i, []))) for i in range(len(words))]
    for i, word in enumerate(words):
        if whole := identifier(word):
            terms[i] = (whole,)
        elif _alone(HYPHENATED, word) and terms[i] and "-" in terms[i][0]:
            terms[i] = terms[i][:1]  # the compound (cursor-bas), then its parts
    return terms


def record_count(conn: Connection) -> int:
    """How many records there are; past ESTIMATED_PAST records, the server's running
    count of live rows (counting a million took 50 ms a search)."""
    estimate = conn.execute("SELECT n_live_tup FROM pg_stat_user_tables"
                            " WHERE relid = 'memory_records'::regclass").fetchone()
    if estimate and estimate[0] > ESTIMATED_PAST:
        return estimate[0]
    return conn.execute("SELECT count(*) FROM memory_records").fetchone()[0]


def term_doc_counts(conn: Connection, terms: Sequence[str]) -> dict[str, int]:
    """How many records hold each lexeme (those in none are left out)."""
    p = Params()
    return dict(conn.execute(f"SELECT term, docs FROM record_terms WHERE term IN"
                             f" {p.list(terms)} AND docs > 0", p.values))


def tsquery(phrases: Sequence[str], p: Params) -> str:
    """The SQL of a query matching any of these phrases (its words in order; an
    identifier by its own lexeme), its arguments added to ``p``."""
    parts = []
    for phrase in phrases:
        whole = identifier(phrase)
        if whole is not None:
            lexeme = f"'{whole}'"  # letters, digits and underscores: nothing to escape
            parts.append(f"CAST({p(lexeme)} AS tsquery)")
        elif _alone(HYPHENATED, phrase):
            # The index keeps a hyphenated word whole too (cursor-based: cursor-bas,
            # cursor, base): its lexemes together find it without reading positions.
            parts.append(f"plainto_tsquery('{TEXT_SEARCH}', {p(phrase)})")
        else:
            parts.append(f"phraseto_tsquery('{TEXT_SEARCH}', {p(phrase)})")
    return " || ".join(parts)


def match_count(conn: Connection, expression: str) -> int:
    """How many records match an expression's phrases."""
    p = Params()
    query = tsquery(phrases(expression), p)
    return conn.execute(f"SELECT count(*) FROM memory_records WHERE search @@ ({query})",
                        p.values).fetchone()[0]


def rank(conn: Connection, namespaces: Sequence[str], expression: str, limit: int,
         since_id: int = 0, types: Sequence[str] = (),
         within: Sequence[int] | None = None,
         lifts: Sequence[tuple[Sequence[int], float]] = ()) -> list[tuple[int, float]]:
    """(id, score) of the best matches with an id past ``since_id``, in the namespaces
    (of these types, when given; among these row ids, when given). The score is
    -ts_rank (lower is better), times the factor of each of ``lifts`` (row ids, factor)
    that holds the row."""
    p = Params()
    query = tsquery(phrases(expression), p)
    score = f"-ts_rank(mr.search, {query})" + "".join(
        f" * CASE WHEN mr.id IN {p.list(rows)} THEN {p(float(factor))}::float4 ELSE 1 END"
        for rows, factor in lifts if rows)
    where = f" AND mr.namespace IN {p.list(namespaces)}"
    if within is not None:
        where += f" AND mr.id IN {p.list(within or [0])}"
    if types:
        where += f" AND mr.observation_type IN {p.list(types)}"
    wide = since_id > 0 and conn.execute("SELECT max(id) FROM memory_records"
                                         ).fetchone()[0] - since_id > SCANNED_IDS_MAX
    with bitmap_scans_only(conn) if wide else contextlib.nullcontext():
        return conn.execute(
            f"SELECT mr.id, {score} AS score FROM memory_records"
            f" mr WHERE mr.search @@ ({query}) AND mr.id > {p(since_id)}{where}"
            f" ORDER BY score, mr.id DESC LIMIT {p(limit)}", p.values).fetchall()


def rank_changes(conn: Connection, namespaces: Sequence[str], expression: str,
                 limit: int) -> list[tuple[str, str]]:
    """(record id, created at) of the valid records, in the namespaces, whose changed
    lines (``changes_search``) best match an expression's phrases: ts_rank, the newer
    first among equals."""
    p = Params()
    query = tsquery(phrases(expression), p)
    return [(row[0], row[1]) for row in conn.execute(
        f"SELECT mr.record_id, mr.created_at FROM memory_records mr"
        f" WHERE mr.changes_search @@ ({query}) AND mr.namespace IN {p.list(namespaces)}"
        f" ORDER BY ts_rank(mr.changes_search, {query}) DESC, mr.id DESC LIMIT {p(limit)}",
        p.values)]


@contextlib.contextmanager
def bitmap_scans_only(conn: Connection) -> Iterator[None]:
    """The statements run inside are planned without plain index scans."""
    conn.execute("BEGIN")
    try:
        conn.execute("SET LOCAL enable_indexscan = off")
        yield
    finally:
        conn.execute("COMMIT")
