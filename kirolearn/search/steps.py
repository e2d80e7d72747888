"""A hybrid search, as named steps over one ``Search`` (the state of one search).

Each step reads what the steps before it left and adds its own: candidates from the
words (``lexical``, and the records holding a rare word, ``rare``) and from the
meaning (``embed_query``, ``vector``), their fusion by reciprocal rank (``fuse``), the
floor of meaning an unrelated prompt falls under (``similar_enough``), no answer when
the best is far in meaning and weak in words (``fits``), what is known of each beyond
its text (``weigh``), the time the request names (``in_time``), its neighbours in its
session (``neighbours``), the places kept for rare matches (``rare_places``), then the
records read (``fetch``) and
put in order with their neighbours (``assemble``, ``diverse``). A step that finds the
semantic side cannot be had (vectors still loading, an embedder too slow) answers with
the lexical search instead and ends it (``answer``). A new source of candidates, or a
new signal, is one step more in ``HYBRID``; the steps that touch neither the database
nor the model are pure functions of the state, tested alone.

The searcher (``env``) holds what the steps use: its connection, vector index,
embedder, weights and deadline; the search's budget and format are its ``search``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from kirolearn.db import fts, reads
from kirolearn.db.store import Connection
from kirolearn.search import ranking, vectors
from kirolearn.search.context import without_repeats
from kirolearn.search.query import embedded_query, fts_expression
from kirolearn.search.result import Result

RARE_SHARE = 3  # rare matches take at most a third of a hybrid answer's places, one a term
# Nothing fits a prompt that shares words with some record when no candidate is this
# close in meaning (or ``min_similarity``, when set higher) and none holds
# STRONG_COVERAGE of its words (``query.coverage``): common words shared lift a
# cosine too. One that shares no word at all is judged by its meaning alone, at
# ``min_similarity`` (a paraphrase: "where are schema changes kept?" is 0.29 from "How
# to run database migrations"). On the development histories the closest record's
# cosine is 0.11-0.45 for off-topic prompts (median 0.2) and 0.24-0.82 for the
# requests of later commits (median 0.5): 78-88% of off-topic prompts get nothing (at
# the floor of meaning, 0.25, with a third of the words: 62-80%) and no recall is lost.
FIT_SIMILARITY = 0.3
STRONG_COVERAGE = 0.5  # a lexical match holding this much stays, however far in meaning
IN_TIME_BOOST = 2.0  # a record of the time the request names ("yesterday"): its score × this
CANDIDATES = 4  # each side of a hybrid search brings limit × this many candidates
RETURN_MARGIN_S = 0.025  # a late embedder is given up this long before the deadline (room
# for the answer to be made on a busy machine, where a thread may wait its turn)
FALLBACK_RESERVE_S = 0.06  # ... or this long, when a lexical search must still be run


@dataclass
class Search:
    """One hybrid search under way."""

    namespaces: tuple[str, ...]
    query: str
    limit: int
    mode: str  # "hybrid", or "semantic": the vectors alone
    lexical: Result | None = None  # the words' candidates, ``limit × CANDIDATES`` of them
    embedding: Future | None = None  # the query's vector, while it is being made
    query_vector: Any = None
    rare: dict[str, dict] = field(default_factory=dict)  # records of a rare word, by id
    near: list[tuple[str, float, float]] = field(default_factory=list)  # (id, cosine, created)
    created: dict[str, float] = field(default_factory=dict)  # each candidate's time, in ms
    fused: list[tuple[str, float]] = field(default_factory=list)  # (id, score), best first
    cosine: dict[str, float] = field(default_factory=dict)  # closeness to the query
    around: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    pool: dict[str, float] = field(default_factory=dict)  # every candidate's fused score
    shown: dict[str, str] = field(default_factory=dict)  # a neighbour shown → its hit
    found: dict[str, dict] = field(default_factory=dict)  # the records read, by id
    records: list[dict] = field(default_factory=list)  # the answer, in order
    answer: Result | None = None  # set by a step that ends the search (lexical instead)

    @property
    def wide(self) -> int:
        return self.limit * CANDIDATES


class Env(Protocol):
    """What the steps use of the searcher."""

    vectors: vectors.VectorIndex
    deadline: float  # time.monotonic()
    types: tuple[str, ...]
    span: tuple[datetime, datetime] | None  # the time the request names (``when``)
    min_similarity: float
    rrf_k: int
    weights: ranking.Weights
    neighbour_weight: float

    def connection(self) -> Connection: ...

    def vectors_ready(self, namespaces: tuple[str, ...]) -> bool: ...

    def model_ready(self) -> bool: ...

    def lexical(self, namespaces: tuple[str, ...], query: str, limit: int,
                chosen: Callable[[list[str]], None] | None = None) -> Result: ...

    def lexical_instead(self, namespaces: tuple[str, ...], query: str, limit: int,
                        wide: Result | None, why: str) -> Result: ...

    def embed_soon(self, text: str) -> Future: ...

    def vector_of(self, pending: Future, reserve_s: float) -> Any: ...

    def rank(self, namespaces: tuple[str, ...], expression: str,
             limit: int) -> list[tuple[int, float]]: ...

    def records_of(self, ranked: list[tuple]) -> list[dict]: ...


Step = Callable[[Env, Search], None]


def lexical(env: Env, s: Search) -> None:
    """The words' candidates (when every namespace's vectors are there to fuse with, and
    the model is loaded: else the lexical answer, at once). The
    query is embedded meanwhile, on the embedding thread, from the moment the words'
    rarest are known (``embedded_query``) to the end of the full-text statement."""
    waiting = ("vectors still loading" if not env.vectors_ready(s.namespaces) else
               "the model is loading" if not env.model_ready() else None)
    if waiting:
        s.answer = env.lexical_instead(s.namespaces, s.query, s.limit, None, waiting)
        return

    def chosen(distinctive: list[str]) -> None:
        s.embedding = env.embed_soon(embedded_query(s.query, distinctive))

    try:
        s.lexical = env.lexical(s.namespaces, s.query, s.wide, chosen)
    except BaseException:
        if s.embedding is not None:
            s.embedding.cancel()
        raise


def embed_query(env: Env, s: Search) -> None:
    """The query's vector (a long prompt's start and its rarest words, ``embedded_query``),
    made on a thread; the embedder is given up in time for the answer to be the
    lexical one (failing, or too slow)."""
    reserve = RETURN_MARGIN_S if s.lexical.window is None else FALLBACK_RESERVE_S
    pending = s.embedding or env.embed_soon(embedded_query(s.query, s.lexical.distinctive))
    try:
        s.query_vector = env.vector_of(pending, reserve)
    except Exception as exc:  # too slow (TimeoutError) or broken: lexical it is
        s.answer = env.lexical_instead(s.namespaces, s.query, s.limit, s.lexical,
                                       f"{type(exc).__name__}: {exc}")
        return
    if s.mode == "semantic":
        s.lexical = None


def rare(env: Env, s: Search) -> None:
    """The best records holding a rare word of the query (``is_rare``: a name, an
    identifier), one a word, in at most a third of the places."""
    terms = s.lexical.rare if s.lexical else []
    if not terms:
        return
    ids = env.rank(s.namespaces, fts_expression(terms),
                   min(len(terms), max(1, s.limit // RARE_SHARE)))
    s.rare = {r["record_id"]: r for r in env.records_of(ids)}


def vector(env: Env, s: Search) -> None:
    """The records nearest in meaning, at or above the floor (of the types asked for)."""
    near = env.vectors.top(s.namespaces, s.query_vector, s.wide, env.min_similarity)
    if env.types:
        wanted = fts.of_types(env.connection(), [i for i, _, _ in near], env.types)
        near = [item for item in near if item[0] in wanted]
    s.near = near


def fuse(env: Env, s: Search) -> None:
    """Both rankings fused by reciprocal rank, with a small boost for recency (the rare
    matches ranked after the lexical ones)."""
    s.created = {record_id: when for record_id, _, when in s.near}
    lexical_ranking = [r["record_id"] for r in s.lexical.records] if s.lexical else []
    lexical_ranking += [i for i in s.rare if i not in lexical_ranking]
    for record in (s.lexical.records if s.lexical else []) + list(s.rare.values()):
        s.created[record["record_id"]] = vectors.created_ms(record["created_at"])
    s.fused = ranking.fuse([[i for i, _, _ in s.near], lexical_ranking], s.created,
                           time.time() * 1000, env.rrf_k, env.weights)


def similar_enough(env: Env, s: Search) -> None:
    """A lexical match on common words only is no match: whatever has a vector must be
    close enough in meaning (a rare match, and a strong lexical one, stay), so an
    unrelated prompt brings nothing."""
    s.cosine = env.vectors.similarities(s.namespaces, [i for i, _ in s.fused], s.query_vector)
    floor = env.min_similarity
    held = s.lexical.held if s.lexical else {}
    s.fused = [(i, score) for i, score in s.fused
               if i in s.rare or s.cosine.get(i, floor) >= floor
               or held.get(i, 0.0) >= STRONG_COVERAGE]


def fits(env: Env, s: Search) -> None:
    """Nothing fits when no candidate is close enough in meaning and none holds enough
    of the prompt's words (a rare word alone, in a prompt about something else, is not
    enough): then there is no answer, and the agent's context is spent on nothing."""
    worded = bool(s.lexical and s.lexical.records)
    floor = max(env.min_similarity, FIT_SIMILARITY) if worded else env.min_similarity
    # one not embedded yet stands on its words, as above
    closest = max((s.cosine.get(i, floor) for i, _ in s.fused), default=0.0)
    held = max(s.lexical.held.values(), default=0.0) if s.lexical else 0.0
    if closest < floor and held < STRONG_COVERAGE:
        s.fused = []


def weigh(env: Env, s: Search) -> None:
    """What is known of each beyond its text: its type, its usefulness, a later change
    to a file it names (``ranking.weigh``)."""
    if env.weights.neutral:
        return
    signals = fts.signals(env.connection(), [i for i, _ in s.fused])
    s.fused = ranking.weigh(s.fused, {i: ranking.Signals(*v) for i, v in signals.items()},
                            env.weights, s.created)


def in_time(env: Env, s: Search) -> None:
    """Work done when the request says ("yesterday", "in May": ``when.span``) ranks
    higher: its score × IN_TIME_BOOST."""
    if env.span is None:
        return
    start, end = (moment.timestamp() * 1000 for moment in env.span)
    s.fused = sorted(((i, score * IN_TIME_BOOST if start <= s.created.get(i, -1.0) < end
                       else score) for i, score in s.fused),
                     key=lambda item: -item[1])  # stable: ties keep the fused order


def neighbours(env: Env, s: Search) -> None:
    """A turn next to others that match is likelier to matter itself: each candidate
    gains a share of its session neighbours' scores."""
    s.pool = dict(s.fused)
    if not env.neighbour_weight:
        return
    s.around = fts.neighbours(env.connection(), [i for i, _ in s.fused])
    if s.around:
        s.fused = sorted(((i, score + env.neighbour_weight * sum(
            s.pool.get(n, 0.0) for n in s.around.get(i, ()) if n)) for i, score in s.fused),
            key=lambda item: -item[1])  # stable: ties keep the fused order


def rare_places(env: Env, s: Search) -> None:
    """The first ``limit``; a rare match below them takes the place of the lowest-ranked
    of the others."""
    left_out = [item for item in s.fused[s.limit:] if item[0] in s.rare]
    s.fused = s.fused[:s.limit]
    if left_out:
        others = [i for i, _ in s.fused if i not in s.rare]
        dropped = set(others[max(0, len(others) - len(left_out)):])
        s.fused = ([item for item in s.fused if item[0] not in dropped] + left_out)[:s.limit]


def fetch(env: Env, s: Search) -> None:
    """The hits and the neighbours shown with them, read whole (still valid, still
    there: the vectors of those gone are forgotten), and how close each is in meaning
    to the query (a scale that holds across answers, where a rank-fused score does not)."""
    hits = {i for i, _ in s.fused}
    s.shown = {n: i for i, _ in s.fused for n in s.around.get(i, ())
               if n in s.pool and n not in hits}
    s.found = {r["record_id"]: r for r in reads.records_by_id(
        env.connection(), [*hits, *s.shown], s.namespaces, valid_only=True, searched=True)}
    missing = {i for i in [*hits, *s.shown] if i not in s.found}
    if missing:
        env.vectors.forget(missing)  # forgotten or marked invalid since they were loaded
    s.cosine.update(env.vectors.similarities(
        s.namespaces, [n for n in s.shown if n not in s.cosine], s.query_vector))


def assemble(env: Env, s: Search) -> None:
    """The records in order, each hit between the neighbours shown with it, each with
    its score (lower is better, as BM25) and ``relevance`` (its cosine, 0 to 1)."""
    def scored(record_id: str, score: float, **extra: str) -> dict:
        similarity = s.cosine.get(record_id)
        return {**s.found[record_id], "score": -score, "relevance":
                None if similarity is None else round(max(0.0, similarity), 2), **extra}

    for i, score in s.fused:
        if i not in s.found:
            continue
        before, after = s.around.get(i, (None, None))
        s.records += [scored(n, s.pool[n], neighbour_of=i)
                      for n in (before,) if s.shown.get(n) == i and n in s.found]
        s.records.append(scored(i, score))
        s.records += [scored(n, s.pool[n], neighbour_of=i)
                      for n in (after,) if s.shown.get(n) == i and n in s.found]


def diverse(env: Env, s: Search) -> None:
    """Several namespaces searched as one: a record whose title and summary repeat a
    better-ranked one's is left out."""
    if len(s.namespaces) > 1:
        s.records = without_repeats(s.records)


HYBRID: tuple[Step, ...] = (lexical, embed_query, rare, vector, fuse, similar_enough, fits,
                            weigh, in_time, neighbours, rare_places, fetch, assemble, diverse)
