"""Every search, as named steps over one ``Search`` (the state of one call).

A search runs the steps of its plan until one answers (``Search.answer``), then the
steps that finish every answer (``FINISH``). The plans:

- ``LEXICAL``: the files in play and the time the request names lift the records they
  name (``in_play``, ``in_time``), the words rank (``words``), and what is known of
  each record beyond its text weighs on the ranking (``weigh``).
- ``HYBRID`` (and ``semantic``, its vectors alone): the same lifts, then candidates
  from the words (``lexical``, and the records holding a rare word, ``rare``), from
  the files in play (``of_play``), from the lines their edits changed (``changed``)
  and from the meaning (``embed_query``, ``vector``),
  their fusion by reciprocal rank (``fuse``), the floor of meaning an unrelated
  prompt falls under (``similar_enough``), no answer when the best is far in meaning
  and weak in words (``fits``), ``weigh``, the time named once more on the fused
  ranking (``in_time``), its neighbours in its session (``neighbours``),
  the places kept for rare matches (``rare_places``), then the records read
  (``fetch``) and put in order with their neighbours (``assemble``, ``diverse``). A
  step that finds the semantic side cannot be had (vectors still loading, an embedder
  too slow) answers with the lexical plan's answer instead.
- ``ABOUT_FILES`` (a file the agent opened): the records naming the files, ranked by
  the words of the request the agent works on, its meaning and their age.
- ``FINISH``: a lexical answer that holds too little of the prompt is none
  (``covered``); another project's records must be close in meaning (``cleared``); the
  records are checked against the code as it is (``checked``) and cut to the tokens
  asked (``fitted``).

A ranking signal is one step, acting in every plan whose ranking it applies to: a new
source of candidates, or a new signal, is one step more. The steps that touch neither
the database nor the model are pure functions of the state (``call.Search``), tested
alone; what outlives a call (connection, vectors, embedder, weights) is the engine's
(``s.engine``: ``call.Means``). Every plan's steps are kept in this one module, long
as it is: a step's place in each plan, and a signal's in both rankings, read at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from kirolearn import project
from kirolearn.db import fts, reads
from kirolearn.search import lexical as words_side
from kirolearn.search import ranking, staleness, vectors
from kirolearn.search.call import Search
from kirolearn.search.context import within_tokens, without_repeats
from kirolearn.search.query import MIN_COVERAGE, embedded_query, fts_expression
from kirolearn.search.result import Result

RARE_SHARE = 3  # rare matches take at most a third of a hybrid answer's places, one a term
# Nothing fits a prompt that shares words with some record when no candidate is this
# close in meaning (or ``min_similarity``, when set higher) and none holds
# STRONG_COVERAGE of its words (``query.coverage``): common words shared lift a
# cosine too. One that shares no word at all is judged by its meaning alone, at
# ``min_similarity`` (a paraphrase: "where are schema changes kept?" is 0.29 from "How
# to run database migrations"). On the development histories the closest record's
# cosine is 0.11-0.45 for off-topic prompts (median 0.2) and 0.24-0.82 for the
# requests of later commits (median 0.5): at 0.35, 85-95% of off-topic prompts get
# nothing (at 0.3: 80-92%; at the floor of meaning, 0.25, with a third of the words:
# 62-80%), for 0.007 of recall on httpx and none on click.
FIT_SIMILARITY = 0.35
STRONG_COVERAGE = 0.5  # a lexical match holding this much stays, however far in meaning
IN_TIME_BOOST = 2.0  # a record of the time the request names ("yesterday"): its score × this
IN_PLAY_BOOST = 1.5  # a lexical match naming a file in play: its score × this
FILE_RECORDS = 500  # the newest records of the files asked about that are weighed
SPAN_RECORDS = 2000  # the newest records of the time a request names that are weighed
RETURN_MARGIN_S = 0.025  # a late embedder is given up this long before the deadline (room
# for the answer to be made on a busy machine, where a thread may wait its turn)
FALLBACK_RESERVE_S = 0.06  # ... or this long, when a lexical search must still be run
# What a file brings back is fused from three rankings of its records: by the request's
# words (weighing 1), by closeness in meaning (hybrid) and newest first (these).
MEANING_WEIGHT = 0.5
NEWEST_WEIGHT = 0.5


Step = Callable[[Search], None]


def run(s: Search) -> Result:
    """The plan's steps until one answers, then ``FINISH``'s."""
    for step in plan(s):
        step(s)
        if s.answer is not None:
            break
    if s.answer is None:
        s.answer = Result([], "empty", 0.0)
    for step in FINISH:
        step(s)
    return s.answer


def plan(s: Search) -> tuple[Step, ...]:
    if s.request.opened:
        return ABOUT_FILES
    if s.mode == "lexical" or s.engine.embedder is None:
        return LEXICAL
    return HYBRID


# -- what is known beside the words: signals, in every plan whose ranking they apply to ---


def in_play(s: Search) -> None:
    """A match naming a file in play (the session's, the working tree's changes) ranks
    higher in the words' ranking: its score × IN_PLAY_BOOST, in their statement. (A
    hybrid search ranks those records on a list of their own as well: ``of_play``.)"""
    if not s.request.files:
        return
    named = fts.records_of_files(s.engine.connection(), s.namespaces, s.request.files,
                                 FILE_RECORDS)
    s.playing_newest = [record_id for _, record_id in named]
    s.play_rows = [row for row, _ in named]
    s.lifts.append((s.play_rows, IN_PLAY_BOOST))


def in_time(s: Search) -> None:
    """Work done when the request says ("yesterday", "in May": ``when.span``) ranks
    higher: its score × IN_TIME_BOOST, in the ranking under way, as ``in_play``."""
    if s.span is None:
        return
    if not s.ranked:
        s.lifts.append((fts.records_between(s.engine.connection(), s.namespaces, *s.span,
                                            SPAN_RECORDS), IN_TIME_BOOST))
        return
    start, end = (moment.timestamp() * 1000 for moment in s.span)
    s.fused = _lifted(s.fused, lambda i: start <= s.created.get(i, -1.0) < end, IN_TIME_BOOST)


def _lifted(fused: list[tuple[str, float]], lifts: Callable[[str], bool],
            factor: float) -> list[tuple[str, float]]:
    """The fused ranking with the scores of those ``lifts`` is true of × factor."""
    return sorted(((i, score * factor if lifts(i) else score) for i, score in fused),
                  key=lambda item: -item[1])  # stable: ties keep the fused order


def weigh(s: Search) -> None:
    """What is known of each record beyond its text: its type, its usefulness, a later
    change to a file it names (``ranking.weigh``), on the ranking under way: the fused
    one, or the words' (BM25: lower is better, so a factor makes a score lower)."""
    weights = s.engine.weights
    if weights.neutral:
        return
    if s.ranked:
        signals = fts.signals(s.engine.connection(), [i for i, _ in s.fused])
        s.fused = ranking.weigh(s.fused, {i: ranking.Signals(*v) for i, v in signals.items()},
                                weights, s.created)
        return
    if s.lexical is None or s.lexical.outcome != "ok":  # a substring match has no score
        return
    records = {r["record_id"]: r for r in s.lexical.records}
    signals = fts.signals(s.engine.connection(), list(records))
    order = ranking.weigh([(i, -r["score"]) for i, r in records.items()],
                          {i: ranking.Signals(*v) for i, v in signals.items()}, weights,
                          {i: vectors.created_ms(r["created_at"]) for i, r in records.items()})
    s.lexical.records = [{**records[i], "score": -score} for i, score in order]


# -- the lexical plan ----------------------------------------------------------------------


def words(s: Search) -> None:
    """The query's best lexical matches (``lexical.matches``)."""
    s.lexical = words_side.matches(s, s.limit)


def lexical_answer(s: Search) -> None:
    s.answer = s.lexical


LEXICAL: tuple[Step, ...] = (in_play, in_time, words, weigh, lexical_answer)


# -- the hybrid plan -----------------------------------------------------------------------


def asked(s: Search) -> None:
    """Nothing to look for: no answer."""
    if not s.query.strip() or s.limit <= 0:
        s.answer = Result([], "empty", 0.0)


def lexical(s: Search) -> None:
    """The words' candidates (when every namespace's vectors are there to fuse with, and
    the model is loaded: else the lexical answer, at once). The query is embedded
    meanwhile, on the embedding thread, from the moment the words' rarest are known
    (``embedded_query``) to the end of the full-text statement."""
    engine = s.engine
    waiting = ("vectors still loading" if not engine.vectors_ready(s.namespaces) else
               "the model is loading" if not engine.model_ready() else None)
    if waiting:
        lexical_instead(s, None, waiting)
        return

    def chosen(distinctive: list[str]) -> None:
        s.embedding = engine.embed_soon(embedded_query(s.query, distinctive))

    try:
        s.lexical = words_side.matches(s, s.wide, chosen=chosen)
    except BaseException:
        if s.embedding is not None:
            s.embedding.cancel()
        raise


def embed_query(s: Search) -> None:
    """The query's vector (a long prompt's start and its rarest words, ``embedded_query``),
    made on a thread; the embedder is given up in time for the answer to be the
    lexical one (failing, or too slow)."""
    reserve = RETURN_MARGIN_S if s.lexical.window is None else FALLBACK_RESERVE_S
    pending = s.embedding or s.engine.embed_soon(embedded_query(s.query,
                                                                s.lexical.distinctive))
    try:
        s.query_vector = vector_of(s, pending, reserve)
    except Exception as exc:  # too slow (TimeoutError) or broken: lexical it is
        lexical_instead(s, s.lexical, f"{type(exc).__name__}: {exc}")
        return
    if s.mode == "semantic":
        s.lexical = None


def rare(s: Search) -> None:
    """The best records holding a rare word of the query (``is_rare``: a name, an
    identifier), one a word, in at most a third of the places."""
    terms = s.lexical.rare if s.lexical else []
    if not terms:
        return
    conn = s.engine.connection()
    ids = words_side.rank(conn, s.namespaces, fts_expression(terms),
                          min(len(terms), max(1, s.limit // RARE_SHARE)), None,
                          s.request.types)
    s.rare = {r["record_id"]: r for r in words_side.read(conn, ids)}


def of_play(s: Search) -> None:
    """The records naming a file in play, as a ranking of their own in the fusion: those
    holding the request's words first (ranked by them), then the newest others. So the
    earlier work on the file at hand is a candidate however the whole store ranks it."""
    if not s.play_rows:
        return
    worded = words_side.matches(s, s.wide, within=s.play_rows).records
    first = {r["record_id"]: None for r in worded}
    s.in_play = [*first, *(i for i in s.playing_newest if i not in first)][:s.wide]
    for record in worded:
        s.created[record["record_id"]] = vectors.created_ms(record["created_at"])


def changed(s: Search) -> None:
    """The records whose edits' changed lines (``changes``, never shown) hold the
    request's words, as a ranking of their own in the fusion: the work on code that
    says what the prompt says, however its record is worded. The words are those the
    lexical side chose (``query.select_terms``, within its budget): a long prompt's
    every word would cost the statement more than the whole search."""
    terms = s.lexical.terms if s.lexical else []
    if not terms:
        return
    conn = s.engine.connection()
    found = conn.dialect.fts.rank_changes(conn, s.namespaces, fts_expression(terms), s.wide)
    if s.request.types:
        wanted = fts.of_types(conn, [i for i, _ in found], s.request.types)
        found = [(i, when) for i, when in found if i in wanted]
    s.changed = [i for i, _ in found]
    for record_id, when in found:
        s.created.setdefault(record_id, vectors.created_ms(when))


def vector(s: Search) -> None:
    """The records nearest in meaning, at or above the floor (of the types asked for)."""
    engine = s.engine
    near = engine.vectors.top(s.namespaces, s.query_vector, s.wide, engine.min_similarity)
    if s.request.types:
        wanted = fts.of_types(engine.connection(), [i for i, _, _ in near], s.request.types)
        near = [item for item in near if item[0] in wanted]
    s.near = near


def fuse(s: Search) -> None:
    """The rankings fused by reciprocal rank: the meaning's, the words' (the rare
    matches ranked after the lexical ones), the files in play's (``of_play``) and the
    changed lines' (``changed``), with a small boost for recency."""
    s.created.update((record_id, when) for record_id, _, when in s.near)
    lexical_ranking = [r["record_id"] for r in s.lexical.records] if s.lexical else []
    lexical_ranking += [i for i in s.rare if i not in lexical_ranking]
    for record in (s.lexical.records if s.lexical else []) + list(s.rare.values()):
        s.created[record["record_id"]] = vectors.created_ms(record["created_at"])
    rankings = [[i for i, _, _ in s.near], lexical_ranking]
    rankings += [ranked for ranked in (s.in_play, s.changed) if ranked]
    s.fused = ranking.fuse(rankings, s.created, time.time() * 1000, s.engine.rrf_k,
                           s.engine.weights)
    s.ranked = True


def similar_enough(s: Search) -> None:
    """A lexical match on common words only is no match: whatever has a vector must be
    close enough in meaning (a rare match, and a strong lexical one, stay), so an
    unrelated prompt brings nothing."""
    s.cosine = s.engine.vectors.similarities(s.namespaces, [i for i, _ in s.fused],
                                             s.query_vector)
    floor = s.engine.min_similarity
    held = s.lexical.held if s.lexical else {}
    s.fused = [(i, score) for i, score in s.fused
               if i in s.rare or s.cosine.get(i, floor) >= floor
               or held.get(i, 0.0) >= STRONG_COVERAGE]


def fits(s: Search) -> None:
    """Nothing fits when no candidate is close enough in meaning and none holds enough
    of the prompt's words (a rare word alone, in a prompt about something else, is not
    enough): then there is no answer, and the agent's context is spent on nothing."""
    worded = bool(s.lexical and s.lexical.records)
    least = s.engine.min_similarity
    floor = max(least, FIT_SIMILARITY) if worded else least
    # one not embedded yet stands on its words, as above
    closest = max((s.cosine.get(i, floor) for i, _ in s.fused), default=0.0)
    held = max(s.lexical.held.values(), default=0.0) if s.lexical else 0.0
    if closest < floor and held < STRONG_COVERAGE:
        s.fused = []


def neighbours(s: Search) -> None:
    """A turn next to others that match is likelier to matter itself: each candidate
    gains a share of its session neighbours' scores."""
    s.pool = dict(s.fused)
    share = s.engine.neighbour_weight
    if not share:
        return
    s.around = fts.neighbours(s.engine.connection(), [i for i, _ in s.fused])
    if s.around:
        s.fused = sorted(((i, score + share * sum(
            s.pool.get(n, 0.0) for n in s.around.get(i, ()) if n)) for i, score in s.fused),
            key=lambda item: -item[1])  # stable: ties keep the fused order


def rare_places(s: Search) -> None:
    """The first ``limit``; a rare match below them takes the place of the lowest-ranked
    of the others."""
    left_out = [item for item in s.fused[s.limit:] if item[0] in s.rare]
    s.fused = s.fused[:s.limit]
    if left_out:
        others = [i for i, _ in s.fused if i not in s.rare]
        dropped = set(others[max(0, len(others) - len(left_out)):])
        s.fused = ([item for item in s.fused if item[0] not in dropped] + left_out)[:s.limit]


def fetch(s: Search) -> None:
    """The hits and the neighbours shown with them, read whole (still valid, still
    there: the vectors of those gone are forgotten), and how close each is in meaning
    to the query (a scale that holds across answers, where a rank-fused score does not)."""
    hits = {i for i, _ in s.fused}
    s.shown = {n: i for i, _ in s.fused for n in s.around.get(i, ())
               if n in s.pool and n not in hits}
    s.found = {r["record_id"]: r for r in reads.records_by_id(
        s.engine.connection(), [*hits, *s.shown], s.namespaces, valid_only=True,
        searched=True)}
    missing = {i for i in [*hits, *s.shown] if i not in s.found}
    if missing:
        s.engine.vectors.forget(missing)  # forgotten or marked invalid since they were loaded
    s.cosine.update(s.engine.vectors.similarities(
        s.namespaces, [n for n in s.shown if n not in s.cosine], s.query_vector))


def assemble(s: Search) -> None:
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


def diverse(s: Search) -> None:
    """Several namespaces searched as one: a record whose title and summary repeat a
    better-ranked one's is left out."""
    if len(s.namespaces) > 1:
        s.records = without_repeats(s.records)


def hybrid_answer(s: Search) -> None:
    words_found = s.lexical
    s.answer = Result(s.records, "ok" if s.records else "empty", 0.0,
                      words_found.terms if words_found else [],
                      words_found.window if words_found else None)


HYBRID: tuple[Step, ...] = (asked, in_play, in_time, lexical, embed_query, rare, of_play,
                            changed, vector, fuse, similar_enough, fits, weigh, in_time,
                            neighbours, rare_places, fetch, assemble, diverse, hybrid_answer)


def lexical_instead(s: Search, wide: Result | None, why: str) -> None:
    """The answer is the lexical plan's: the wide one's first records when no window cut
    it (the same ranking, a longer list), else a search of its own; weighed as that
    plan's is."""
    if wide is not None and wide.window is None:
        wide.records = wide.records[:s.limit]
        s.lexical = wide
    else:
        s.lexical = words_side.matches(s, s.limit)
    weigh(s)
    s.lexical.error = f"semantic side skipped ({why})"
    s.answer = s.lexical


def vector_of(s: Search, pending: Future, reserve_s: float) -> Any:
    """The vector ``Engine.embed_soon`` is making, waited for until ``reserve_s`` before
    the deadline (raises TimeoutError then, or what the embedder raised)."""
    try:
        wait_s = s.deadline - time.monotonic() - reserve_s
        return pending.result(timeout=max(0.0, wait_s))[0]
    except BaseException:
        pending.cancel()
        raise


# -- what is known of the files the agent opened -------------------------------------------


def named(s: Search) -> None:
    """The records naming one of the files opened, newest first (none of those the
    session was given already)."""
    exclude = s.request.exclude
    s.named = [(row, i) for row, i in fts.records_of_files(
        s.engine.connection(), s.namespaces, s.request.opened, FILE_RECORDS)
        if i not in exclude]
    if not s.named or s.limit <= 0:
        s.answer = Result([], "empty", 0.0)


def of_files(s: Search) -> None:
    """The records named, best first by how well they match the request (its words, and
    in a hybrid search its meaning), the newer first among equals: three rankings fused
    by reciprocal rank."""
    engine = s.engine
    newest = [i for _, i in s.named]
    rankings = [(newest, NEWEST_WEIGHT)]
    worded = Result([], "empty", 0.0)
    if s.query.strip():
        worded = words_side.matches(s, s.wide, within=[row for row, _ in s.named])
        rankings.append(([r["record_id"] for r in worded.records], 1.0))
        close = closeness(s, worded, newest) if (
            s.mode != "lexical" and engine.embedder is not None) else {}
        rankings.append((sorted((i for i in close if close[i] >= engine.min_similarity),
                                key=lambda i: -close[i]), MEANING_WEIGHT))
    scores: dict[str, float] = {}
    for ranked, share in rankings:
        for place, record_id in enumerate(ranked, start=1):
            scores[record_id] = scores.get(record_id, 0.0) + share / (engine.rrf_k + place)
    best = sorted(scores, key=lambda i: -scores[i])[:s.limit]  # stable: the newer first
    records = [{**r, "score": -scores[r["record_id"]]} for r in reads.records_by_id(
        engine.connection(), best, s.namespaces, valid_only=True, searched=True)]
    s.answer = Result(records, "ok" if records else "empty", 0.0, worded.terms)


def closeness(s: Search, worded: Result, record_ids: list[str]) -> dict[str, float]:
    """How close in meaning each of these records is to the query (none when the
    vectors are still loading or the embedder does not answer in time)."""
    engine = s.engine
    if not engine.vectors_ready(s.namespaces) or not engine.model_ready():
        return {}
    try:
        vector = vector_of(s, engine.embed_soon(embedded_query(s.query, worded.distinctive)),
                           RETURN_MARGIN_S)
    except Exception:  # too slow or broken: the words and the time alone
        return {}
    return engine.vectors.similarities(s.namespaces, record_ids, vector)


ABOUT_FILES: tuple[Step, ...] = (named, of_files)


# -- every answer ----------------------------------------------------------------------------


def covered(s: Search) -> None:
    """A lexical answer whose best matches hold too little of the query's weight
    (``MIN_COVERAGE``) is no answer."""
    if s.answer.coverage is not None and s.answer.coverage < MIN_COVERAGE:
        s.answer.records, s.answer.outcome = [], "empty"


def cleared(s: Search) -> None:
    """With ``others_floor``: the records of the first namespace's project (any
    actor's), and those of others at least that close in meaning to the query."""
    if s.request.others_floor is not None:
        s.answer.records = clearing(s.answer.records, s.namespaces[0], s.request.others_floor)


def checked(s: Search) -> None:
    """The records as the code is today (``staleness.judge``)."""
    staleness.judge(s.answer, s.request.tree, project.parts(s.request.namespaces[0])[1],
                    s.engine.checkout, s.deadline, s.request.known)


def fitted(s: Search) -> None:
    """What fits in the tokens asked (``within_tokens``)."""
    s.answer.records = within_tokens(s.answer.records, s.request.max_tokens)


FINISH: tuple[Step, ...] = (covered, cleared, checked, fitted)


def clearing(records: list[dict], home: str, floor: float) -> list[dict]:
    """The records of namespace home's project (any actor's), and those of others that
    are at least floor close in meaning to the query (with the neighbours shown with
    them)."""
    here = project.parts(home)[1]
    kept = {r["record_id"] for r in records if "neighbour_of" not in r and (
        project.parts(r["namespace"])[1] == here or (r.get("relevance") or 0.0) >= floor)}
    return [r for r in records if r.get("neighbour_of", r["record_id"]) in kept]
