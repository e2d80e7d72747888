"""The searcher: one database's records, found for a query within a deadline.

The lexical path is the seed's: a query from the prompt's body
(``contract.body_text``), its words made an FTS5 query (``query``), BM25 ranking
inside the namespaces, and if FTS5 refuses the expression, an escaped ``LIKE``
substring search, newest first. Search never raises: every failure is an empty
result with an outcome and the latency.

A word's document frequency is that of what the FTS5 tokenizer makes of it
(`Migrations` is the term `migrat`, `src/app.py` the phrase `src app py`): one-term
words are read from the fts5vocab table, phrases are counted (up to 32 new ones per
search; past that a phrase is taken to be as common as its rarest term). A word with
nothing indexable in it (`?`, `—`) can never match and is left out, as is a second
word that indexes the same (`Fix` after `fix`).

Semantic and hybrid searches add the records' vectors (``vectors``) and the query's
embedding (``embeddings``), fused by reciprocal rank (``_hybrid``). A turn next to
others that match is likelier to matter itself (a conversation, a task worked over
several turns), so each candidate gains a share of its neighbours' scores, and a
hit's neighbours that match too are shown with it (``_neighbours``).
"""

from __future__ import annotations

import concurrent.futures
import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from kirolearn import contract, db, project
from kirolearn.db import errors, fts, reads
from kirolearn.db.store import Connection
from kirolearn.search import (
    brief,
    checkpoint,
    embeddings,
    ranking,
    staleness,
    steps,
    vectors,
    when,
)
from kirolearn.search.context import (
    FENCE_TOKENS,
    SESSION_LOOKBACK,
    SESSION_RECENT,
    SESSION_RECORDS,
    SESSION_TOP,
    session_block,
    within_tokens,
    without_repeats,
)
from kirolearn.search.query import (
    MAX_WORDS,
    MIN_COVERAGE,
    coverage,
    embedded_query,
    fts_expression,
    inflected,
    is_rare,
    is_stop_word,
    most_matched_terms,
    quote,
    refers_back,
    says_what,
    select_terms,
    term_budget_for,
    weight,
    with_parts,
    words,
)
from kirolearn.search.result import Result

MAX_PHRASE_COUNTS = 32  # phrases counted per search; others are bounded by their rarest term
TOTAL_TTL_S = 5.0  # how often the record count is re-read
FREQ_TTL_S = 600.0  # document frequencies are kept this long, or until the count moves 1%
CACHE_MAX = 50_000
SCOPE_SLACK = 10  # extra candidates ranked when several namespaces are searched as one
NAMESPACES_TTL_S = 30.0  # the longest the namespaces present are taken as known (``shared``)
PREVIOUS_PROMPTS = 2  # joined to a prompt that refers back to them
MIN_SIMILARITY = 0.25  # cosine below which a record is not a semantic match
NEIGHBOUR_WEIGHT = 0.3  # share of its neighbours' fused scores a candidate gains
COVERAGE_CHECKED = 3  # the best-ranked lexical matches whose coverage is read
FILE_RECORDS = 500  # the newest records of the files asked about that are weighed
IN_PLAY_BOOST = 1.5  # a lexical match naming a file in play: its score × this
SPAN_RECORDS = 2000  # the newest records of the time a request names that are weighed
# What a file brings back is fused from three rankings of its records: by the request's
# words (weighing 1), by closeness in meaning (hybrid) and newest first (these).
MEANING_WEIGHT = 0.5
NEWEST_WEIGHT = 0.5
RULE_FILES = 10  # rows read beyond the newest work the session start shows: rule files'


def clearing(records: list[dict], home: str, floor: float) -> list[dict]:
    """The records of namespace home's project (any actor's), and those of others that
    are at least floor close in meaning to the query (with the neighbours shown with
    them)."""
    here = project.parts(home)[1]
    kept = {r["record_id"] for r in records if "neighbour_of" not in r and (
        project.parts(r["namespace"])[1] == here or (r.get("relevance") or 0.0) >= floor)}
    return [r for r in records if r.get("neighbour_of", r["record_id"]) in kept]


class DeadlinePassed(Exception):
    pass


# Whether a search from a namespace takes in the other actors' of its project (given the
# searcher's connection, to look up what the asking client contributed).
Sharing = Callable[[Connection, str], bool]
# Why the agent asking has a record already (None: it has not), such as a rule file it
# loads itself: left out of what it is given.
Known = Callable[[dict], str | None]


class Searcher:
    """Searches one database on its own read-only connection (opened on first use and
    reopened after a failure), so it reads while the storage role writes."""

    def __init__(self, path: db.Location, term_budget: int | None = None,
                 embedder: embeddings.Embedder | None = None,
                 min_similarity: float = MIN_SIMILARITY, rrf_k: int = ranking.RRF_K,
                 neighbour_weight: float = NEIGHBOUR_WEIGHT,
                 weights: ranking.Weights = ranking.RELEVANCE_AND_RECENCY):
        """``term_budget`` None: ``term_budget_for`` the corpus at hand. With an
        ``embedder``, searches may be ``semantic`` or ``hybrid`` (see ``_hybrid``),
        ranked with ``weights``; ``neighbour_weight`` 0 leaves neighbours out of them."""
        self.path = path
        self.embedder = embedder
        self.vectors = vectors.VectorIndex(embedder.files.space) if embedder is not None else None
        self.min_similarity = min_similarity
        self.rrf_k = rrf_k
        self.neighbour_weight = neighbour_weight
        self.weights = weights
        self._embedding = (concurrent.futures.ThreadPoolExecutor(1, "query-embedding")
                           if embedder is not None else None)
        # Where a namespace's vectors are loaded from: None, here, when first searched
        # (in-process use); the retrieval role passes its back-fill's request_load, so no
        # search waits for a load (they are lexical until it is done).
        self.request_load: Callable[[str], None] | None = None
        self.term_budget = term_budget
        self.conn: Connection | None = None
        self.deadline = math.inf
        self.types: tuple[str, ...] = ()  # of the search under way
        self.files: tuple[str, ...] = ()  # the files in play, of the search under way
        self.span: tuple[datetime, datetime] | None = None  # the time its request names
        self.checkout = staleness.Checkout()  # working trees' files, read for the check
        self._stems: dict[str, tuple[str, ...]] = {}
        self._doc_freq: dict[tuple[str, ...], int] = {}
        self._total = 0
        self._total_at = -math.inf
        self._freq_total = 0  # the record count when the frequencies were cached
        self._freq_at = -math.inf
        self._namespaces: list[str] = []  # every namespace with a record (``shared``)
        self._namespaces_at = -math.inf

    def shared(self, namespaces: Sequence[str], share: Sharing | None = None
               ) -> tuple[str, ...]:
        """The namespaces asked for, each followed by the other actors' of its project
        (``project.shared_namespaces``: a team's memories are shared, a private actor's
        are not) where ``share`` allows it (a client elsewhere's, ``access.may_see``).
        The namespaces present are read again after ``namespaces_changed``, and at
        least every NAMESPACES_TTL_S."""
        if time.monotonic() - self._namespaces_at >= NAMESPACES_TTL_S:
            self._namespaces = reads.namespaces_in(self.connection())
            self._namespaces_at = time.monotonic()
        found: dict[str, None] = {}
        for namespace in namespaces:
            if share is None or share(self.connection(), namespace):
                found.update(dict.fromkeys(project.shared_namespaces(namespace,
                                                                     self._namespaces)))
            else:
                found[namespace] = None
        return tuple(found)

    def namespaces_changed(self) -> None:
        """Records were stored: a namespace may be new."""
        self._namespaces_at = -math.inf

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
            if self.vectors is not None:
                self.vectors.clear()  # reloaded with the connection

    def release_memory(self) -> None:
        """The searches' page cache and the vectors' spare room given back (a quiet
        role's: ``base.QUIET_S``)."""
        if self.conn is not None:
            db.release_memory(self.conn)
        if self.vectors is not None:
            self.vectors.fit()

    def search(self, namespace: str | Sequence[str], query: str, limit: int, budget_ms: float,
               deadline: float | None = None, mode: str = "lexical",
               max_tokens: int | None = None, types: Sequence[str] = (),
               others_floor: float | None = None, share: Sharing | None = None,
               files: Sequence[str] = (), tree: staleness.Tree | None = None,
               known: Known | None = None) -> Result:
        """Never raises. ``namespace`` may be several, searched as one (a record whose title
        and summary repeat a better-ranked one's is left out). ``deadline``
        (time.monotonic()) may cut the budget shorter. ``mode`` is one of MODES; without
        an embedder every mode is lexical. The records are cut to what fits in
        ``max_tokens`` of context (``within_tokens``). ``types``: only records of these
        observation types (none: all). ``others_floor``: a record of a namespace after
        the first is kept only when its ``relevance`` is at least this (one with none, a
        lexical answer's, is not). ``share``: see ``shared``. ``files``: the files in
        play (the session's, the working tree's changes): a match naming one of them
        ranks higher (``_in_play``). ``tree``: the working tree the prompt comes from,
        which the project's records are checked against (``staleness``). ``known``: why
        the agent has a record already (None: it has not), which leaves it out."""
        def run(namespaces: tuple[str, ...]) -> Result:
            if mode == "lexical" or self.embedder is None:
                result = self._search(namespaces, query, limit)
            else:
                result = self._hybrid(namespaces, query, limit, mode)
            if result.coverage is not None and result.coverage < MIN_COVERAGE:
                result.records, result.outcome = [], "empty"  # a lexical answer: nothing fits
            if others_floor is not None:
                result.records = clearing(result.records, namespaces[0], others_floor)
            return result

        self.types, self.files = tuple(types), tuple(files)
        self.span = when.span(query, datetime.now().astimezone())
        return self._answer(namespace, share, budget_ms, deadline, max_tokens, run, tree,
                            known)

    def about_files(self, namespace: str | Sequence[str], files: Sequence[str], query: str,
                    limit: int, budget_ms: float, deadline: float | None = None,
                    mode: str = "lexical", max_tokens: int | None = None,
                    exclude: Sequence[str] = (), share: Sharing | None = None,
                    tree: staleness.Tree | None = None, known: Known | None = None) -> Result:
        """What to know of files the agent has just opened: the records naming one of
        them (the file index), best first by how well they match ``query`` (the request
        the agent is working on: its words, and in a hybrid search its meaning), the
        newer first among equals; none of ``exclude`` (what the session was given
        already). Never raises; the rest as ``search``."""
        self.types, self.files, self.span = (), (), None
        return self._answer(namespace, share, budget_ms, deadline, max_tokens,
                            lambda namespaces: self._about_files(
                                namespaces, tuple(files), query, limit, mode, set(exclude)),
                            tree, known)

    def _answer(self, namespace: str | Sequence[str], share: Sharing | None,
                budget_ms: float, deadline: float | None, max_tokens: int | None,
                run: Callable[[tuple[str, ...]], Result],
                tree: staleness.Tree | None = None, known: Known | None = None) -> Result:
        """``run``'s result, checked against ``tree``, within the budget and
        ``max_tokens``, or an empty one with the outcome that says why (never raises)."""
        started = time.monotonic()
        self.deadline = started + budget_ms / 1000
        if deadline is not None:
            self.deadline = min(self.deadline, deadline)
        result = Result([], "empty", 0.0)
        try:
            if time.monotonic() >= self.deadline:
                raise DeadlinePassed
            namespaces = (namespace,) if isinstance(namespace, str) else tuple(namespace)
            result = run(self.shared(namespaces, share))
            self._check(result, tree, project.parts(namespaces[0])[1], known)
            result.records = within_tokens(result.records, max_tokens)
            if time.monotonic() >= self.deadline:
                raise DeadlinePassed
        except DeadlinePassed:
            result = Result([], "timeout", 0.0, result.terms, result.window,
                            error="the search ran past its budget")
        except Exception as exc:  # retrieval never breaks a turn
            timed_out = time.monotonic() >= self.deadline
            result = Result([], "timeout" if timed_out else "error", 0.0, result.terms,
                            error=f"{type(exc).__name__}: {exc}")
            if not timed_out:
                self.close()  # a broken connection is reopened next time
        self.deadline = math.inf  # the other reads (timeline, brief...) have none
        result.latency_ms = (time.monotonic() - started) * 1000
        return result

    def _check(self, result: Result, tree: staleness.Tree | None, project_id: str,
               known: Known | None = None) -> None:
        """The records as the code is today (``staleness``). Left out (``left_out`` says
        why): one the agent has already (``known``: a rule file it loads); a record of a
        branch not merged into the tree's; one whose code is gone from the tree (with
        ``tree.mark``, shown marked instead); one the store holds
        stale that could not be checked again here. Ranked below the rest: one whose
        files changed a lot since, and below those one superseded by a later record.
        What the store is to hear (``stale_marks``): a record found stale in what its
        own branch has committed, and one held stale whose code is back. A record of
        another project (the global one's) names files of its own: it is not
        checked."""
        mine = [r for r in result.records if project.parts(r["namespace"])[1] == project_id]
        hidden: dict[str, str] = {}
        found: dict[str, staleness.Finding] = {}
        if tree is not None:
            hidden = {r["record_id"]: why for r in mine if (why := tree.hides(r))}
            found = self.checkout.check(tree, [r for r in mine if r["record_id"] not in hidden],
                                        self.deadline)
        kept, changed, superseded = [], [], []
        for record in result.records:
            record_id = record["record_id"]
            why = hidden.get(record_id)  # not this branch's: neither checked nor marked
            if why is None and known is not None:
                why = known(record)
            if why is None:
                record, why = self._judged(record, found.get(record_id), tree,
                                           result.stale_marks)
            if why:
                result.left_out.append({"record_id": record_id, "title": record["title"],
                                        "why": why})
            elif record.get("superseded_by"):
                superseded.append(record)
            elif record_id in found and found[record_id].changed:
                changed.append(record)
            else:
                kept.append(record)
        result.records = kept + changed + superseded

    @staticmethod
    def _judged(record: dict, finding: staleness.Finding | None,
                tree: staleness.Tree | None, marks: dict[str, str | None]
                ) -> tuple[dict, str | None]:
        """The record as it is shown, and why it is left out (None: it is not), from
        what the check found of it (None: not checked) and the store's mark."""
        held = record.get("stale")
        if finding is not None and finding.stale:
            if (finding.committed and not held and tree.branch is not None
                    and (record.get("code") or {}).get("branch") == tree.branch):
                marks[record["record_id"]] = finding.stale
            if not tree.mark:
                return record, finding.stale
            return {**record, "stale": {"why": finding.stale,
                                        "at": (held or {}).get("at")}}, None
        if held and finding is not None:  # checked again: its code is back
            marks[record["record_id"]] = None
            return {k: v for k, v in record.items() if k != "stale"}, None
        if held and (tree is None or not tree.mark):
            return record, f"{held['why']} (found so {held['at'][:10]})"
        return record, None

    def in_context(self, event: dict, query: str) -> str:
        """A prompt's query with the session's previous prompts (``PREVIOUS_PROMPTS``)
        before it when it leans on them (``refers_back``: "and the other one?"). Never
        raises: the prompt alone is searched when they cannot be read."""
        session_id, event_id = event.get("session_id"), event.get("event_id")
        if not (isinstance(session_id, str) and isinstance(event_id, str)
                and refers_back(query)):
            return query
        try:
            earlier = fts.previous_prompts(self.connection(), event.get("namespace", ""),
                                           session_id, event_id, PREVIOUS_PROMPTS)
        except (errors.StoreError, ValueError, TypeError):
            self.close()
            return query
        return "\n".join([*earlier, query])

    def request_of(self, event: dict) -> str:
        """The request a tool use's turn works on: its session's last prompt ("" when
        there is none, or it cannot be read). Never raises."""
        session_id, event_id = event.get("session_id"), event.get("event_id")
        if not (isinstance(session_id, str) and isinstance(event_id, str)):
            return ""
        try:
            last = fts.previous_prompts(self.connection(), event.get("namespace", ""),
                                        session_id, event_id, 1)
        except (errors.StoreError, ValueError, TypeError):
            self.close()
            return ""
        return last[-1] if last else ""

    def checkpoint(self, namespace: str) -> checkpoint.Checkpoint | None:
        """Where the namespace's last active session left off (None: no session yet)."""
        session_id, records = fts.last_session(self.connection(), namespace,
                                               SESSION_RECORDS)
        return checkpoint.of_session(session_id, records) if session_id else None

    def brief(self, namespace: str, tokens: int, known: Known | None = None,
              share: Sharing | None = None) -> brief.Brief:
        """The project's brief (``brief``) within ``tokens``, and the records it names:
        from the namespace's records and those of the project it may read (``shared``:
        a seeded history's authors', a team's); none the agent has already
        (``known``). Raises errors.StoreError."""
        conn = self.connection()
        namespaces = self.shared((namespace,), share)
        records = [r for r in fts.in_force(conn, namespaces, brief.BRIEF_RECORDS)
                   if known is None or known(r) is None]
        count, authors, since = fts.work_totals(conn, namespaces)
        return brief.brief(records, tokens,
                           brief.Totals(count, authors, since) if since else None)

    def session_context(self, namespace: str, token_budget: int,
                        known: Known | None = None, brief_tokens: int = 0,
                        share: Sharing | None = None,
                        written: Callable[[brief.Brief, int], str] | None = None) -> Result:
        """What an agent starting a session should know: where the last session left
        off (its checkpoint), the newest records of earlier work, then the records
        retrieved most often lately (decisions and patterns next, newest first), within
        token_budget; none stale or superseded, nor one the agent has already
        (``known``). A rule file's record is no work: it may be among the patterns,
        never the newest work. Beside it, within its own ``brief_tokens``, the project's
        brief (``brief``; as ``written`` words it, a model's rewrite), after the
        checkpoint; the records it names are not given again. Never raises."""
        def fresh(record: dict) -> bool:
            return known is None or known(record) is None
        started = time.monotonic()
        try:
            conn = self.connection()
            last = self.checkpoint(namespace)
            page = self.brief(namespace, brief_tokens, known, share) if brief_tokens else None
            told = (set(last.record_ids) if last else set()) | set(
                page.record_ids if page else ())
            recent = [] if page and page.sections else [  # the brief lists recent changes
                r for r in fts.newest_records(conn, namespace,
                                              SESSION_RECENT + len(told) + RULE_FILES)
                if r["record_id"] not in told and r["strategy"] != contract.RULE_FILE
            ][:SESSION_RECENT]
            counts = fts.retrieved_counts(conn, namespace, SESSION_LOOKBACK)
            shown = {r["record_id"] for r in recent} | told
            wanted = [i for i, _ in sorted(counts.items(), key=lambda kv: -kv[1])
                      if i not in shown][:SESSION_TOP]
            top = [r for r in reads.records_by_id(conn, wanted, [namespace], valid_only=True)
                   if not r.get("stale") and not r.get("superseded_by") and fresh(r)]
            if len(top) < SESSION_TOP:
                shown |= {r["record_id"] for r in top}
                top += [r for r in fts.newest_records(conn, namespace, SESSION_TOP + RULE_FILES,
                                                      ("decision", "pattern"))
                        if r["record_id"] not in shown and fresh(r)][:SESSION_TOP - len(top)]
            context, included = session_block(recent, top,
                                              max(0, token_budget - FENCE_TOKENS),
                                              last.block() if last else "",
                                              "" if page is None else written(
                                                  page, brief_tokens) if written
                                              else page.markdown)
            result = Result(included, "ok" if context else "empty", 0.0, block=context,
                            also_named=page.record_ids if page and page.sections else [])
        except Exception as exc:  # a session starts with or without its context
            self.close()
            result = Result([], "error", 0.0, error=f"{type(exc).__name__}: {exc}", block="")
        result.latency_ms = (time.monotonic() - started) * 1000
        return result

    # -- the steps --------------------------------------------------------------------------

    def _about_files(self, namespaces: tuple[str, ...], files: tuple[str, ...], query: str,
                     limit: int, mode: str, exclude: set[str]) -> Result:
        conn = self.connection()
        named = [(row, i) for row, i in fts.records_of_files(conn, namespaces, files,
                                                            FILE_RECORDS) if i not in exclude]
        if not named or limit <= 0:
            return Result([], "empty", 0.0)
        newest = [i for _, i in named]
        rankings = [(newest, NEWEST_WEIGHT)]
        lexical = Result([], "empty", 0.0)
        if query.strip():
            lexical = self._search(namespaces, query, limit * steps.CANDIDATES,
                                   within=[row for row, _ in named])
            rankings.append(([r["record_id"] for r in lexical.records], 1.0))
            close = self._closeness(namespaces, query, lexical, newest) if (
                mode != "lexical" and self.embedder is not None) else {}
            rankings.append((sorted((i for i in close if close[i] >= self.min_similarity),
                                    key=lambda i: -close[i]), MEANING_WEIGHT))
        scores: dict[str, float] = {}
        for ranked, share in rankings:
            for rank, record_id in enumerate(ranked, start=1):
                scores[record_id] = scores.get(record_id, 0.0) + share / (self.rrf_k + rank)
        best = sorted(scores, key=lambda i: -scores[i])[:limit]  # stable: the newer first
        records = [{**r, "score": -scores[r["record_id"]]} for r in reads.records_by_id(
            conn, best, namespaces, valid_only=True, searched=True)]
        return Result(records, "ok" if records else "empty", 0.0, lexical.terms)

    def _closeness(self, namespaces: tuple[str, ...], query: str, lexical: Result,
                   record_ids: list[str]) -> dict[str, float]:
        """How close in meaning each of these records is to the query (none when the
        vectors are still loading or the embedder does not answer in time)."""
        if not self.vectors_ready(namespaces) or not self.model_ready():
            return {}
        try:
            vector = self.query_vector(query, lexical.distinctive, steps.RETURN_MARGIN_S)
        except Exception:  # too slow or broken: the words and the time alone
            return {}
        return self.vectors.similarities(namespaces, record_ids, vector)

    def _search(self, namespaces: tuple[str, ...], query: str, limit: int,
                within: list[int] | None = None,
                chosen: Callable[[list[str]], None] | None = None) -> Result:
        """The lexical search (among these row ids, when ``within`` is given).
        ``chosen`` is told the query's distinctive terms once they are chosen, before
        the full-text statement (most of a search's time) runs."""
        said = words(query)[:MAX_WORDS]
        raw = [t for t in with_parts(said) if not is_stop_word(t)]
        if not raw or limit <= 0:
            return Result([], "empty", 0.0)
        conn = self.connection()
        stems = self._token_stems(conn, raw)
        unique: dict[tuple[str, ...], str] = {}
        for token in raw:  # a token with nothing to index can never match
            if stems[token]:
                unique.setdefault(stems[token], token)
        candidates = list(unique.values())
        if not candidates:
            return Result([], "empty", 0.0)
        total, doc_freq = self._frequencies(conn, unique)
        token_freq = {t: doc_freq[stems[t]] for t in candidates}
        budget = self.term_budget or term_budget_for(total)
        terms, window = select_terms(candidates, token_freq, total, budget,
                                     most_matched_terms(len(said)))
        rare = [t for t in terms if is_rare(token_freq[t], total)]
        distinctive = sorted((t for t in terms if token_freq[t]), key=token_freq.__getitem__)
        if chosen is not None:
            chosen(distinctive)
        try:
            # Room for the repeats `without_repeats` leaves out when namespaces are merged.
            wanted = limit if len(namespaces) == 1 else limit + SCOPE_SLACK
            expression = fts_expression(terms)
            if within is not None:
                window = None
                ids = conn.dialect.fts.rank(conn, namespaces, expression, wanted, 0,
                                            self.types, within)
            else:
                ids = self._lifted(conn, namespaces, expression, wanted, window)
        except errors.StoreError:
            if time.monotonic() >= self.deadline:
                raise DeadlinePassed from None
            if within is not None:  # a substring search would not keep to them
                return Result([], "empty", 0.0, terms, window)
            ids = fts.like(conn, namespaces, query, limit, self.types)
            return Result(self._records(conn, ids), "fallback", 0.0, terms, window)
        records = self._records(conn, ids)
        if len(namespaces) > 1:
            records = without_repeats(records)[:limit]
        weights = {stems[t]: weight(token_freq[t], total) for t in terms if says_what(t)}
        return Result(records, "ok" if records else "empty", 0.0, terms, window, rare,
                      distinctive=distinctive,
                      held=self._held(conn, records[:COVERAGE_CHECKED], weights,
                                      {stems[t]: t for t in terms}))

    def _hybrid(self, namespaces: tuple[str, ...], query: str, limit: int, mode: str) -> Result:
        """Lexical and semantic candidates (limit × 4 each) fused by reciprocal rank with a
        small recency boost, then weighed by type, usefulness and staleness
        (``ranking``); ``semantic`` ranks by the vectors alone. The steps, and what each
        adds, are ``steps.HYBRID``'s. A candidate whose vector is less similar to the query
        than ``min_similarity`` is left out (one not embedded yet stays on its lexical
        merit), so an unrelated prompt gets nothing; but a record holding a rare word of
        the query is always among the results. If the embedder fails or has not answered
        in time, or the namespace's vectors are still loading, the answer is exactly the
        lexical search's (``lexical_instead``)."""
        if not query.strip() or limit <= 0:
            return Result([], "empty", 0.0)
        search = steps.Search(namespaces, query, limit, mode)
        for step in steps.HYBRID:
            step(self, search)
            if search.answer is not None:
                return search.answer
        lexical = search.lexical
        return Result(search.records, "ok" if search.records else "empty", 0.0,
                      lexical.terms if lexical else [], lexical.window if lexical else None)

    # -- what the steps use -------------------------------------------------------------------

    def lexical(self, namespaces: tuple[str, ...], query: str, limit: int,
                chosen: Callable[[list[str]], None] | None = None) -> Result:
        """The lexical search, the words' candidates of a hybrid one (``chosen``: see
        ``_search``)."""
        return self._search(namespaces, query, limit, chosen=chosen)

    def query_vector(self, query: str, distinctive: list[str], reserve_s: float) -> Any:
        """The query's vector (a long prompt's start and its rarest words,
        ``embedded_query``), given up ``reserve_s`` before the deadline (``vector_of``)."""
        return self.vector_of(self.embed_soon(embedded_query(query, distinctive)), reserve_s)

    def embed_soon(self, text: str) -> concurrent.futures.Future:
        """This text's embedding, started on the embedding thread."""
        return self._embedding.submit(self.embedder.embed, [text])

    def vector_of(self, pending: concurrent.futures.Future, reserve_s: float) -> Any:
        """The vector ``embed_soon`` is making, waited for until ``reserve_s`` before the
        deadline (raises TimeoutError then, or what the embedder raised)."""
        try:
            wait_s = self.deadline - time.monotonic() - reserve_s
            return pending.result(timeout=max(0.0, wait_s))[0]
        except BaseException:
            pending.cancel()
            raise

    def rank(self, namespaces: tuple[str, ...], expression: str,
             limit: int) -> list[tuple[int, float]]:
        """The ids of the best matches of an FTS expression, with their scores."""
        return self._rank(self.connection(), namespaces, expression, limit, None)

    def records_of(self, ranked: list[tuple]) -> list[dict]:
        return self._records(self.connection(), ranked)

    def lexical_instead(self, namespaces: tuple[str, ...], query: str, limit: int,
                        wide: Result | None, why: str) -> Result:
        """Exactly the lexical search's answer: the wide one's first records when no window
        cut it (the same ranking, a longer list), else a search of its own."""
        if wide is not None and wide.window is None:
            result = wide
            result.records = result.records[:limit]
        else:
            result = self._search(namespaces, query, limit)
        result.error = f"semantic side skipped ({why})"
        return result

    def model_ready(self) -> bool:
        """Whether the model answers at once. One in a process of its own that is not
        loaded (``embed_worker``: it left when idle) is started now, and the searches
        meanwhile are lexical rather than kept waiting for it."""
        if getattr(self.embedder, "ready", True):  # in this process: always loaded
            return True
        self.embedder.warm()
        return False

    def vectors_ready(self, namespaces: tuple[str, ...]) -> bool:
        """Whether every namespace's vectors are loaded. The retrieval role's back-fill is
        asked for the missing ones (``request_load``: no search waits for a load); in
        process they are loaded here, on a connection of their own (a load is not a
        search: the search's deadline does not stop it)."""
        missing = self.vectors.missing(namespaces)
        if not missing:
            return True
        if self.request_load is not None:
            self.vectors.request(missing, self.request_load)
            return False
        conn = db.connect_reader(self.path)
        try:
            for namespace in missing:
                self.vectors.install(namespace, self.vectors.load(conn, namespace))
        finally:
            conn.close()
        return True

    def add_vectors(self, batch: list[dict]) -> None:
        """Vectors the back-fill made: searched from now on."""
        for item in batch:
            self.vectors.upsert(item["namespace"], item["record_id"], item["vector"],
                                item["created"])

    def get_records(self, record_ids: list[str], namespaces: Sequence[str],
                    share: Sharing | None = None) -> list[dict]:
        """Records by id, in these namespaces, with their earlier ``versions`` (raises
        errors.StoreError)."""
        conn = self.connection()
        return reads.with_versions(conn, reads.records_by_id(conn, record_ids,
                                                             self.shared(namespaces, share)))

    def timeline(self, record_id: str, namespaces: Sequence[str], before: int,
                 after: int, share: Sharing | None = None) -> list[dict]:
        """The records around one, oldest first; empty if it is not in these namespaces
        (raises errors.StoreError)."""
        conn = self.connection()
        namespaces = self.shared(namespaces, share)
        found = reads.records_by_id(conn, [record_id], namespaces)
        return reads.records_around(conn, found[0], namespaces, before, after) if found else []

    def session_events(self, namespace: str, session_ids: list[str],
                       not_from: str | None = None) -> dict[str, list[str]]:
        """The stored events' ids of each of these sessions, of clients other than
        ``not_from`` when given (raises errors.StoreError)."""
        return reads.session_event_ids(self.connection(), namespace, session_ids, not_from)

    def connection(self) -> Connection:
        if self.conn is None:
            self.conn = db.open_searcher(self.path, lambda: time.monotonic() >= self.deadline)
        return self.conn

    def _token_stems(self, conn: Connection, raw: list[str]) -> dict[str, tuple]:
        """Each word's index terms, as the FTS5 tokenizer makes them (cached)."""
        missing = [t for t in raw if t not in self._stems]
        if missing:
            if len(self._stems) > CACHE_MAX:
                self._stems.clear()
            terms = conn.dialect.fts.index_terms(conn, missing)
            self._stems.update(zip(missing, terms, strict=True))
        return {t: self._stems[t] for t in raw}

    def _frequencies(self, conn: Connection, phrases: dict[tuple[str, ...], str]
                     ) -> tuple[int, dict[tuple[str, ...], int]]:
        """The record count, and how many records each phrase (index terms → its token)
        matches: one-term phrases from the fts5vocab table, longer ones counted.

        Both mean reading doclists, so they are cached; the cache is dropped when the
        record count moves by 1% (any change, for a small corpus) or after FREQ_TTL_S.
        Past MAX_PHRASE_COUNTS new phrases in one search, a phrase's count is taken as
        its rarest term's (an upper bound).
        """
        now = time.monotonic()
        if now - self._total_at > TOTAL_TTL_S:
            self._total = conn.dialect.fts.record_count(conn)
            self._total_at = now
            moved = abs(self._total - self._freq_total) > self._freq_total // 100
            if moved or now - self._freq_at > FREQ_TTL_S or len(self._doc_freq) > CACHE_MAX:
                self._doc_freq.clear()
                self._freq_total, self._freq_at = self._total, now
        terms = {t for phrase in phrases for t in phrase if (t,) not in self._doc_freq}
        if terms:
            found = conn.dialect.fts.term_doc_counts(conn, list(terms))
            for term in terms:
                self._doc_freq[(term,)] = found.get(term, 0)
        counted = 0
        for phrase, token in phrases.items():
            if phrase in self._doc_freq:
                continue
            bound = min(self._doc_freq[(t,)] for t in phrase)
            if bound and counted < MAX_PHRASE_COUNTS:
                bound = conn.dialect.fts.match_count(conn, quote(token))
                counted += 1
            self._doc_freq[phrase] = bound
        return self._total, self._doc_freq

    def _held(self, conn: Connection, records: list[dict],
              weights: dict[tuple[str, ...], float],
              said: dict[tuple[str, ...], str]) -> dict[str, float]:
        """How much of the query's weight each of these records holds (``coverage``), by
        id: a term is held when the record's indexed text (its concepts too) has all its
        index terms, and a word (``said``: the query's word of each term) as itself or
        an inflection of it (``query.inflected``): "capital" is not held by
        "capitalization", though the stemmer makes one term of them."""
        if not records or not weights:
            return {}
        texts = [" ".join([r["title"], r["summary"], *r["facts"], *r["concepts"]])
                 for r in records]
        found = [set(terms) for terms in conn.dialect.fts.index_terms(conn, texts)]
        forms = {term: form for term in weights
                 if len(term) == 1 and (form := inflected(said[term])) is not None}
        return {r["record_id"]: coverage(weights, {
            t for t in weights if held.issuperset(t)
            and (t not in forms or forms[t].search(text))})
            for r, held, text in zip(records, found, texts, strict=True)}

    def _lifted(self, conn: Connection, namespaces: tuple[str, ...], expression: str,
                limit: int, window: int | None) -> list[tuple[int, float]]:
        """The best matches (``_rank``), where what is known beside the words lifts the
        records it names: the files in play (``files``, × IN_PLAY_BOOST) and the time
        the request names (``span``, × steps.IN_TIME_BOOST), each one's score
        multiplied (lower is better: BM25 and negated ts_rank are negative). Ranked
        together in one statement; with a window, the lifted records' best matches,
        however old, join the window's."""
        lifts: list[tuple[list[int], float]] = []
        if self.files:
            lifts.append(([row for row, _ in fts.records_of_files(
                conn, namespaces, self.files, FILE_RECORDS)], IN_PLAY_BOOST))
        if self.span is not None:
            lifts.append((fts.records_between(conn, namespaces, *self.span, SPAN_RECORDS),
                          steps.IN_TIME_BOOST))
        lifts = [(rows, factor) for rows, factor in lifts if rows]
        if window is None or not lifts:
            return self._rank(conn, namespaces, expression, limit, window, lifts)
        boost: dict[int, float] = {}
        for rows, factor in lifts:
            for row in rows:
                boost[row] = boost.get(row, 1.0) * factor
        scores = dict(self._rank(conn, namespaces, expression, limit, window))
        scores.update(conn.dialect.fts.rank(conn, namespaces, expression, limit, 0,
                                            self.types, list(boost)))
        order = sorted(scores, key=lambda i: (scores[i] * boost.get(i, 1.0), -i))
        return [(i, scores[i] * boost.get(i, 1.0)) for i in order[:limit]]

    def _rank(self, conn: Connection, namespaces: tuple[str, ...], expression: str,
              limit: int, window: int | None,
              lifts: Sequence[tuple[list[int], float]] = ()) -> list[tuple[int, float]]:
        """BM25 order within the namespace (``lifts``: see ``fts.rank``). With a window,
        only the newest `window` ids are ranked, widened (x4) while the namespace has
        too few matches in it."""
        newest = fts.newest_id(conn) if window is not None else 0
        while True:
            since = newest - window if window is not None else 0
            rows = conn.dialect.fts.rank(conn, namespaces, expression, limit, since, self.types,
                                         lifts=lifts)
            if len(rows) >= limit or since <= 0:
                return rows
            window *= 4

    def _records(self, conn: Connection, ranked: list[tuple]) -> list[dict]:
        """Full records for the ranked ids, with their scores."""
        rows = fts.records_by_rowid(conn, [i for i, _ in ranked])
        return [{**rows[i], "score": score} for i, score in ranked if i in rows]
