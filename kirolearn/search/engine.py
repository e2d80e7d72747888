"""The search engine: one database's records, found for a request within a deadline.

The engine is what outlives a search: its read-only connection, the vector index and
the embedder (with the thread queries are embedded on), the words' vocabulary
(``vocabulary.Vocabulary``) and the working trees' files read for the staleness check.
A search (``search``) is one ``Request``, run as the steps of its plan over a
``call.Search`` of its own (``steps``: lexical, hybrid, about the files opened); it
never raises: every failure is an empty result with an outcome and the latency. The
other reads here (records by id, a timeline, a session's start, a brief) have no
deadline.
"""

from __future__ import annotations

import concurrent.futures
import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from kirolearn import contract, db, project
from kirolearn.db import errors, fts, reads
from kirolearn.db.store import Connection
from kirolearn.search import (
    brief,
    call,
    checkpoint,
    embeddings,
    lexical,
    postings,
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
)
from kirolearn.search.query import refers_back
from kirolearn.search.request import Known, Request, Sharing
from kirolearn.search.result import Result
from kirolearn.search.vocabulary import Vocabulary

NAMESPACES_TTL_S = 30.0  # the longest the namespaces present are taken as known (``shared``)
PREVIOUS_PROMPTS = 2  # joined to a prompt that refers back to them
MIN_SIMILARITY = 0.25  # cosine below which a record is not a semantic match
NEIGHBOUR_WEIGHT = 0.3  # share of its neighbours' fused scores a candidate gains
RULE_FILES = 10  # rows read beyond the newest work the session start shows: rule files'


class Engine:
    """Searches one database on its own read-only connection (opened on first use and
    reopened after a failure), so it reads while the storage role writes."""

    def __init__(self, path: db.Location, term_budget: int | None = None,
                 embedder: embeddings.Embedder | None = None,
                 min_similarity: float = MIN_SIMILARITY, rrf_k: int = ranking.RRF_K,
                 neighbour_weight: float = NEIGHBOUR_WEIGHT,
                 weights: ranking.Weights = ranking.RELEVANCE_AND_RECENCY):
        """``term_budget`` None: ``term_budget_for`` the corpus at hand. With an
        ``embedder``, searches may be ``semantic`` or ``hybrid`` (``steps.HYBRID``),
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
        self.vocabulary = Vocabulary()
        self.postings = postings.Postings(path)  # the common words' scores (read when asked)
        self.checkout = staleness.Checkout()  # working trees' files, read for the check
        self.conn: Connection | None = None
        # When the connection's statements are stopped: the deadline of the search
        # running on it (the other reads have none).
        self._statements_until = math.inf
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

    def search(self, request: Request) -> Result:
        """The request's answer (``steps.run``), within its budget, or an empty one with
        the outcome that says why. Never raises."""
        started = time.monotonic()
        deadline = started + request.budget_ms / 1000
        if request.deadline is not None:
            deadline = min(deadline, request.deadline)
        found = call.Search(self, request, request.namespaces, deadline)
        self._statements_until = deadline
        try:
            if time.monotonic() >= deadline:
                raise lexical.DeadlinePassed
            found.namespaces = self.shared(request.namespaces, request.share)
            if not request.opened:
                found.span = when.span(request.query, datetime.now().astimezone())
            result = steps.run(found)
            if time.monotonic() >= deadline:
                raise lexical.DeadlinePassed
        except lexical.DeadlinePassed:
            answer = found.answer or Result([], "empty", 0.0)  # its terms, if it had any
            result = Result([], "timeout", 0.0, answer.terms, answer.window,
                            error="the search ran past its budget")
        except Exception as exc:  # retrieval never breaks a turn
            timed_out = time.monotonic() >= deadline
            result = Result([], "timeout" if timed_out else "error", 0.0,
                            found.answer.terms if found.answer else [],
                            error=f"{type(exc).__name__}: {exc}")
            if not timed_out:
                self.close()  # a broken connection is reopened next time
        finally:
            self._statements_until = math.inf  # the other reads have no deadline
        result.latency_ms = (time.monotonic() - started) * 1000
        return result

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
            top = self._most_wanted(conn, namespace, {r["record_id"] for r in recent} | told,
                                    known)
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

    @staticmethod
    def _most_wanted(conn: Connection, namespace: str, shown: set[str],
                     known: Known | None) -> list[dict]:
        """The records retrieved most often lately, then decisions and patterns, newest
        first: ``SESSION_TOP`` of them, none shown already, stale, superseded or known."""
        def fresh(record: dict) -> bool:
            return known is None or known(record) is None
        counts = fts.retrieved_counts(conn, namespace, SESSION_LOOKBACK)
        wanted = [i for i, _ in sorted(counts.items(), key=lambda kv: -kv[1])
                  if i not in shown][:SESSION_TOP]
        top = [r for r in reads.records_by_id(conn, wanted, [namespace], valid_only=True)
               if not r.get("stale") and not r.get("superseded_by") and fresh(r)]
        if len(top) < SESSION_TOP:
            shown = shown | {r["record_id"] for r in top}
            top += [r for r in fts.newest_records(conn, namespace, SESSION_TOP + RULE_FILES,
                                                  ("decision", "pattern"))
                    if r["record_id"] not in shown and fresh(r)][:SESSION_TOP - len(top)]
        return top

    def embed_soon(self, text: str) -> concurrent.futures.Future:
        """This text's embedding, started on the embedding thread."""
        return self._embedding.submit(self.embedder.embed, [text])

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
            self.conn = db.open_searcher(
                self.path, lambda: time.monotonic() >= self._statements_until)
        return self.conn
