"""The words' side of a search: a query from the prompt's body, its words made an FTS5
query (``query``), BM25 ranking inside the namespaces, and if FTS5 refuses the
expression, an escaped ``LIKE`` substring search, newest first.

A word's document frequency is that of what the FTS5 tokenizer makes of it
(`Migrations` is the term `migrat`, `src/app.py` the phrase `src app py`): one-term
words are read from the fts5vocab table, phrases are counted (up to 32 new ones per
search; past that a phrase is taken to be as common as its rarest term). A word with
nothing indexable in it (`?`, `—`) can never match and is left out, as is a second
word that indexes the same (`Fix` after `fix`). ``vocabulary.Vocabulary`` keeps what
was read, for the engine's life; ``matches`` is one search's use of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from kirolearn.db import errors, fts
from kirolearn.db.store import Connection
from kirolearn.search import postings
from kirolearn.search.call import Lift, Means, Search
from kirolearn.search.context import without_repeats
from kirolearn.search.query import (
    MAX_WORDS,
    coverage,
    fts_expression,
    inflected,
    is_rare,
    is_stop_word,
    most_matched_terms,
    says_what,
    select_terms,
    term_budget_for,
    weight,
    with_parts,
    words,
)
from kirolearn.search.result import Result

SCOPE_SLACK = 10  # extra candidates ranked when several namespaces are searched as one
COVERAGE_CHECKED = 3  # the best-ranked lexical matches whose coverage is read

class DeadlinePassed(Exception):
    pass


def matches(s: Search, limit: int, within: list[int] | None = None,
            chosen: Callable[[list[str]], None] | None = None) -> Result:
    """The search's query's best lexical matches (among these row ids, when ``within`` is
    given; else lifted by ``s.lifts``). ``chosen`` is told the query's distinctive terms
    once they are chosen, before the full-text statement (most of a search's time)
    runs."""
    said = words(s.query)[:MAX_WORDS]
    raw = [t for t in with_parts(said) if not is_stop_word(t)]
    if not raw or limit <= 0:
        return Result([], "empty", 0.0)
    engine, namespaces, types = s.engine, s.namespaces, s.request.types
    conn = engine.connection()
    picked = _terms(engine, conn, raw, len(said))
    if picked is None:
        return Result([], "empty", 0.0)
    terms, token_freq, total, window = picked.terms, picked.freq, picked.total, picked.window
    rare = [t for t in terms if is_rare(token_freq[t], total)]
    distinctive = sorted((t for t in terms if token_freq[t]), key=token_freq.__getitem__)
    if chosen is not None:
        chosen(distinctive)
    ranked_by = terms
    try:
        # Room for the repeats `without_repeats` leaves out when namespaces are merged.
        wanted = limit if len(namespaces) == 1 else limit + SCOPE_SLACK
        expression = fts_expression(terms)
        if within is not None:
            window = None
            ids = conn.dialect.fts.rank(conn, namespaces, expression, wanted, 0, types, within)
        else:
            found = exact(s, conn, picked, wanted)
            if found is None:
                ids = lifted(conn, namespaces, expression, wanted, window, types, s.lifts)
            else:
                (ids, ranked_by), window = found, None
    except errors.StoreError:
        if time.monotonic() >= s.deadline:
            raise DeadlinePassed from None
        if within is not None:  # a substring search would not keep to them
            return Result([], "empty", 0.0, terms, window)
        ids = fts.like(conn, namespaces, s.query, limit, types)
        return Result(read(conn, ids), "fallback", 0.0, terms, window)
    records = read(conn, ids)
    if len(namespaces) > 1:
        records = without_repeats(records)[:limit]
    return Result(records, "ok" if records else "empty", 0.0, terms, window, rare,
                  distinctive=distinctive, held=_held(conn, records, picked, ranked_by))


class Terms(NamedTuple):
    """The terms a query searches for, with what was read to choose them."""

    terms: list[str]  # its words chosen (``query.select_terms``)
    stems: dict[str, tuple[str, ...]]  # each word's index terms
    freq: dict[str, int]  # each candidate word's document frequency
    total: int  # the documents indexed
    window: int | None  # the newest rows searched (None: all)
    every: list[str]  # its words chosen with no budget: the seed's
    budget: int  # the rows the terms may match between them


def _terms(engine: Means, conn: Connection, raw: list[str], said: int) -> Terms | None:
    """The query's words (``raw``, of ``said`` words) that can match, one per index
    term, chosen by their frequencies; None when none can."""
    stems = engine.vocabulary.index_terms(conn, raw)
    unique: dict[tuple[str, ...], str] = {}
    for token in raw:  # a token with nothing to index can never match
        if stems[token]:
            unique.setdefault(stems[token], token)
    candidates = list(unique.values())
    if not candidates:
        return None
    total, doc_freq = engine.vocabulary.frequencies(conn, unique)
    token_freq = {t: doc_freq[stems[t]] for t in candidates}
    budget = engine.term_budget or term_budget_for(total)
    most = most_matched_terms(said)
    terms, window = select_terms(candidates, token_freq, total, budget, most)
    every, _ = select_terms(candidates, token_freq, total, total, most)
    return Terms(terms, stems, token_freq, total, window, every, budget)


def exact(s: Search, conn: Connection, picked: Terms, limit: int
          ) -> tuple[list[tuple[int, float]], list[str]] | None:
    """The BM25 ranking by every word of the query (``picked.every``: the seed's), lifted
    as ``lifted`` does, and the words it is by: the scores of the common words and of the
    phrases from memory (``postings``), the others' read for every record holding them,
    added up. A word not read into memory yet is read as the search runs where it is
    rare or the budget keeps it, and left out otherwise (as the budget does). None
    where the store is too small for the budget to leave a word out, where its scores
    do not add up, or where a word past the budget alone (ranked over the newest
    records) is not read yet. A word in half the records or more weighs nothing in BM25
    and is left out."""
    freq, total = picked.freq, picked.total
    every = [t for t in picked.every if freq[t] > 0 and freq[t] * 2 < total]
    if not every or total <= picked.budget or not conn.dialect.fts.SCORES_ADD_UP:
        return None
    worth = {fts_expression([t]): t for t in every
             if freq[t] > postings.COMMON_MIN or len(picked.stems[t]) > 1}
    newest = fts.newest_id(conn)
    kept = s.engine.postings.scores(conn, s.namespaces, list(worth), newest, total)
    unread = [t for e, t in worth.items() if e not in kept]
    if picked.window is not None and set(unread) & set(picked.terms):
        return None
    live = read_now(picked, every, set(worth.values()), unread)
    dense = added_up(s, conn, [k for scores in kept.values() for k in scores], live,
                     picked, newest)
    return (best(conn, dense, limit, s.namespaces, s.request.types),
            [t for t in every if t in live or fts_expression([t]) in kept])


def read_now(picked: Terms, every: list[str], worth: set[str], unread: list[str]
             ) -> list[str]:
    """The words read as the search runs: those never kept in memory (not ``worth``
    it), and of those not read into it yet, the rare ones and those the budget keeps."""
    return [t for t in every if t not in worth or (t in unread and (
        picked.freq[t] <= postings.COMMON_MIN or t in picked.terms))]


def added_up(s: Search, conn: Connection, kept: list[postings.Scores], live: list[str],
             picked: Terms, newest: int) -> np.ndarray:
    """Every record's score by row id: the kept scores, and the ``live`` words' read now
    for every record holding them, added up, then lifted (``s.lifts``)."""
    dense = np.zeros(max([newest, *(k.newest for k in kept)]) + 1, np.float32)
    for k in kept:
        dense[k.rows] += k.scores
    if live:
        rows = conn.dialect.fts.rank(conn, s.namespaces, fts_expression(live),
                                     sum(picked.freq[t] for t in live), 0, s.request.types)
        dense[np.fromiter((r for r, _ in rows), np.int64, len(rows))] -= np.fromiter(
            (score for _, score in rows), np.float32, len(rows))
    for rows, factor in s.lifts:
        dense[np.array([r for r in rows if r < len(dense)], np.int64)] *= factor
    return dense


def best(conn: Connection, dense: np.ndarray, limit: int, namespaces: Sequence[str],
         types: Sequence[str]) -> list[tuple[int, float]]:
    """The ``limit`` best-scored rows (``dense``: by row id, higher is better) of valid
    records of the namespaces and types (the kept scores may be older than a record's
    change), as ``rank`` gives them (the score negated; the newer first among equals)."""
    matched = np.flatnonzero(dense > 0)
    taken = min(len(matched), 2 * limit + SCOPE_SLACK)
    while True:
        top = matched[np.argpartition(-dense[matched], taken - 1)[:taken]] if taken else matched
        top = top[np.lexsort((-top, -dense[top]))]
        valid = fts.valid_rows(conn, top.tolist(), namespaces, types)
        found = [(int(r), -float(dense[r])) for r in top if int(r) in valid]
        if len(found) >= limit or taken == len(matched):
            return found[:limit]
        taken = min(len(matched), taken * 4)


def _held(conn: Connection, records: list[dict], picked: Terms,
          terms: list[str]) -> dict[str, float]:
    """``held`` of the best-ranked records (``COVERAGE_CHECKED``), by the weights of the
    terms they were ranked by."""
    stems, freq = picked.stems, picked.freq
    weights = {stems[t]: weight(freq[t], picked.total) for t in terms if says_what(t)}
    return held(conn, records[:COVERAGE_CHECKED], weights, {stems[t]: t for t in terms})


def held(conn: Connection, records: list[dict], weights: dict[tuple[str, ...], float],
         said: dict[tuple[str, ...], str]) -> dict[str, float]:
    """How much of the query's weight each of these records holds (``coverage``), by id:
    a term is held when the record's indexed text (its concepts too) has all its index
    terms, and a word (``said``: the query's word of each term) as itself or an
    inflection of it (``query.inflected``): "capital" is not held by "capitalization",
    though the stemmer makes one term of them."""
    if not records or not weights:
        return {}
    texts = [" ".join([r["title"], r["summary"], *r["facts"], *r["concepts"]])
             for r in records]
    found = [set(terms) for terms in conn.dialect.fts.index_terms(conn, texts)]
    forms = {term: form for term in weights
             if len(term) == 1 and (form := inflected(said[term])) is not None}
    return {r["record_id"]: coverage(weights, {
        t for t in weights if terms.issuperset(t)
        and (t not in forms or forms[t].search(text))})
        for r, terms, text in zip(records, found, texts, strict=True)}


def lifted(conn: Connection, namespaces: tuple[str, ...], expression: str, limit: int,
           window: int | None, types: tuple[str, ...],
           lifts: Sequence[Lift]) -> list[tuple[int, float]]:
    """The best matches (``rank``), where what is known beside the words lifts the
    records it names (``lifts``: the steps' ``in_play`` and ``in_time``), each one's
    score multiplied (lower is better: BM25 and negated ts_rank are negative). Ranked
    together in one statement; with a window, the lifted records' best matches, however
    old, join the window's."""
    lifts = [(rows, factor) for rows, factor in lifts if rows]
    if window is None or not lifts:
        return rank(conn, namespaces, expression, limit, window, types, lifts)
    boost: dict[int, float] = {}
    for rows, factor in lifts:
        for row in rows:
            boost[row] = boost.get(row, 1.0) * factor
    scores = dict(rank(conn, namespaces, expression, limit, window, types))
    scores.update(conn.dialect.fts.rank(conn, namespaces, expression, limit, 0, types,
                                        list(boost)))
    order = sorted(scores, key=lambda i: (scores[i] * boost.get(i, 1.0), -i))
    return [(i, scores[i] * boost.get(i, 1.0)) for i in order[:limit]]


def rank(conn: Connection, namespaces: tuple[str, ...], expression: str, limit: int,
         window: int | None, types: tuple[str, ...] = (),
         lifts: Sequence[Lift] = ()) -> list[tuple[int, float]]:
    """BM25 order within the namespaces (``lifts``: see ``fts.rank``). With a window,
    only the newest `window` ids are ranked, widened (x4) while the namespaces have too
    few matches in it."""
    newest = fts.newest_id(conn) if window is not None else 0
    while True:
        since = newest - window if window is not None else 0
        rows = conn.dialect.fts.rank(conn, namespaces, expression, limit, since, types,
                                     lifts=lifts)
        if len(rows) >= limit or since <= 0:
            return rows
        window *= 4


def read(conn: Connection, ranked: list[tuple]) -> list[dict]:
    """Full records for the ranked ids, with their scores."""
    rows = fts.records_by_rowid(conn, [i for i, _ in ranked])
    return [{**rows[i], "score": score} for i, score in ranked if i in rows]
