"""Retrieval role: answers ``search`` with memory records and the agent's context block.

Ingest asks it for every prompt sent with ``retrieve: true`` (``search``) and for
every session start sent with ``retrieve: "session"`` (``session_context``);
``kirolearn search`` and the MCP server ask it directly. It searches on its own read-only connection
(WAL lets it read while storage writes; see ``search``). Every search runs under a
deadline: the request's budget, cut shorter by the sender's ``deadline_ms`` when
given, so a request that waited in the queue past its sender's patience is answered
``timeout`` at once instead of being searched for nobody.

One module, long as it is: the role's op table, each op with the check of its request
beside it (the searching is ``search``'s, the context blocks ``briefs``').
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from kirolearn import (
    access,
    config,
    contract,
    db,
    keys,
    privacy,
    project,
    protocol,
    rules,
    transport,
)
from kirolearn.agents import AGENTS
from kirolearn.config import MODES
from kirolearn.db import errors, reads
from kirolearn.extract import llm
from kirolearn.extract import rules as rule_records
from kirolearn.roles import base
from kirolearn.roles.hints import check_hints
from kirolearn.roles.retrieval import briefs
from kirolearn.search import (
    MAX_NAMESPACES,
    embed_worker,
    embeddings,
    engine,
    ranking,
    staleness,
    vectors,
    why,
    worktree,
)
from kirolearn.search.request import Request, Sharing
from kirolearn.tooluse import Lines

MAX_LIMIT = 100
MAX_IDS = 100  # records one get_records may ask for
MAX_AROUND = 50  # records a timeline may show on each side
MAX_CONTEXT_TOKENS = 1_000_000
MAX_BUDGET_MS = 60_000
TREE_WAIT_S = 0.15  # how long a search waits for git's first reading of its tree, or
# its reading after a checkout of another branch (``worktree.Worktrees.reading``)


@dataclass
class SearchRequest:
    namespaces: tuple[str, ...]
    query: str
    limit: int
    budget_ms: float
    deadline: float | None  # time.monotonic()
    with_records: bool
    mode: str
    max_tokens: int | None
    types: tuple[str, ...] = ()
    with_global: bool = False  # the last namespace is the global one, under its floor
    files: tuple[str, ...] = ()  # in play: a match naming one ranks higher
    opened: tuple[str, ...] = ()  # a search about these files (``steps.ABOUT_FILES``)
    exclude: tuple[str, ...] = ()  # records an ``opened`` search leaves out


def parse_search(body: dict, default_limit: int, default_budget_ms: float,
                 default_mode: str = "lexical", default_tokens: int | None = None
                 ) -> SearchRequest:
    """A search request's body, checked (BadRequest says what is wrong).

    The query is ``query`` (text) or comes from ``event`` (a prompt: text content,
    last message turn, or JSON data); the namespace is ``namespace`` or the event's,
    or ``namespaces`` (several, searched as one). ``files``, ``opened`` and
    ``exclude``: see ``hints.check_hints``.
    """
    query = _query(body)
    namespaces, with_global = _namespaces(body)
    limit = body.get("limit", default_limit)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= MAX_LIMIT:
        raise base.BadRequest(f"'limit' must be an integer from 0 to {MAX_LIMIT}")
    budget_ms = body.get("budget_ms", default_budget_ms)
    if (not isinstance(budget_ms, int | float) or isinstance(budget_ms, bool)
            or not 0 <= budget_ms <= MAX_BUDGET_MS):
        raise base.BadRequest(f"'budget_ms' must be a number from 0 to {MAX_BUDGET_MS}")
    deadline = _deadline(body)
    with_records = body.get("records", False)
    if not isinstance(with_records, bool):
        raise base.BadRequest("'records' must be true or false")
    mode = body.get("mode", default_mode)
    if mode not in MODES:
        raise base.BadRequest(f"'mode' must be one of {', '.join(MODES)}")
    max_tokens = body.get("tokens", default_tokens)
    if max_tokens is not None:
        max_tokens = parse_count(body, "tokens", default_tokens, MAX_CONTEXT_TOKENS)
    types = body.get("types", [])
    if (not isinstance(types, list) or len(types) > len(contract.OBSERVATION_TYPES)
            or not all(t in contract.OBSERVATION_TYPES for t in types)):
        raise base.BadRequest("'types' must be a list of observation types ("
                              + ", ".join(contract.OBSERVATION_TYPES) + ")")
    try:
        hints = check_hints(body)
    except ValueError as exc:
        raise base.BadRequest(str(exc)) from None
    return SearchRequest(namespaces, query, limit, float(budget_ms), deadline, with_records,
                         mode, max_tokens, tuple(dict.fromkeys(types)), with_global,
                         *(tuple(hints.get(key, ())) for key in ("files", "opened", "exclude")))


def _query(body: dict) -> str:
    event = body.get("event")
    if "query" in body:
        if not isinstance(body["query"], str):
            raise base.BadRequest("'query' must be a string")
        return body["query"]
    if isinstance(event, dict):
        return contract.body_text(event.get("body"))
    raise base.BadRequest("give 'query' (a string) or 'event' (a prompt event)")


def _namespaces(body: dict) -> tuple[tuple[str, ...], bool]:
    """The namespaces searched, and whether the last is the global one (given as
    ``global_namespace``, with one namespace)."""
    if "namespaces" in body:
        return parse_namespaces(body), False
    event = body.get("event")
    namespace = body.get("namespace", event.get("namespace") if isinstance(event, dict) else None)
    if not isinstance(namespace, str) or not namespace:
        raise base.BadRequest("'namespace' must be a non-empty string")
    if "global_namespace" not in body:
        return (namespace,), False
    if not contract.is_namespace(body["global_namespace"]):
        raise base.BadRequest("'global_namespace' must be a namespace such as"
                              " /actor/<id>/project/<id>/")
    namespaces = tuple(dict.fromkeys((namespace, body["global_namespace"])))
    return namespaces, len(namespaces) > 1


def _deadline(body: dict) -> float | None:
    """``deadline_ms`` (milliseconds since the epoch) on this process's monotonic clock."""
    deadline_ms = body.get("deadline_ms")
    if deadline_ms is None:
        return None
    if not isinstance(deadline_ms, int | float) or isinstance(deadline_ms, bool):
        raise base.BadRequest("'deadline_ms' must be a number (milliseconds since the epoch)")
    return time.monotonic() + (deadline_ms - time.time() * 1000) / 1000


def parse_namespaces(body: dict) -> tuple[str, ...]:
    namespaces = body.get("namespaces")
    if (not isinstance(namespaces, list) or not 1 <= len(namespaces) <= MAX_NAMESPACES
            or not all(isinstance(n, str) and n for n in namespaces)):
        raise base.BadRequest(f"'namespaces' must be a list of 1 to {MAX_NAMESPACES}"
                              " non-empty strings")
    return tuple(namespaces)


def known_to(event: object) -> Callable[[dict], str | None] | None:
    """What the agent whose event this is (its ``surface``, which ingest puts in the
    event it asks a search for) has already (``Request.known``): the records of the
    rule files it loads itself (``rules.loads``). None: nothing known of the agent (a
    search of the CLI, of the MCP server)."""
    surface = event.get("surface") if isinstance(event, dict) else None
    if not isinstance(surface, str) or surface not in AGENTS:
        return None

    def known(record: dict) -> str | None:
        if record.get("strategy") != rule_records.STRATEGY:
            return None
        name = (record.get("files_touched") or [""])[0]
        return f"{surface} loads {name} itself" if rules.loads(surface, name) else None

    return known


def parse_count(body: dict, key: str, default: int, most: int) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
        raise base.BadRequest(f"'{key}' must be an integer from 0 to {most}")
    return value


class Retrieval(base.Role):
    role = "retrieval"

    def setup(self) -> None:
        privacy.version()  # reckoned now, not within the first prompt's budget
        cfg = self.settings["retrieval"]
        self.default_limit = cfg["limit"]
        self.default_budget_ms = cfg["budget_ms"]
        self.session_tokens = cfg["session_tokens"]
        self.brief_tokens = cfg["brief_tokens"]
        self.context_tokens = cfg["context_tokens"] or None
        self.global_floor = cfg["global_min_similarity"]
        self.mark_stale = cfg["stale_records"] == "mark"
        self.embeddings_state, embedder = self._load_embedder()
        self.default_mode = cfg["mode"] if embedder is not None else "lexical"
        self.engine = engine.Engine(db.location(self.home, self.settings), embedder=embedder,
                                    min_similarity=cfg["min_similarity"],
                                    rrf_k=max(1, cfg["rrf_k"]),
                                    neighbour_weight=max(0.0, cfg["neighbour_weight"]),
                                    weights=ranking.Weights.from_settings(
                                        self.settings["ranking"]))
        self.engine.postings.start()  # common words are read on a thread: no search waits
        self.backfill: vectors.Backfill | None = None
        # Storage says when records or their vectors change: the namespaces present are
        # read again (a teammate's first memory is found at once), and the back-fill
        # looks then, not on a timer.
        changes = transport.make_socket(self.ctx, zmq.SUB,
                                        connect=self.home.endpoint("feed"))
        changes.setsockopt(zmq.SUBSCRIBE, b"records")
        self.add_socket(changes, self._on_records_changed)
        # Storage takes what the searches find of records (their vectors, stale marks).
        self.storage = transport.make_socket(self.ctx, zmq.DEALER,
                                             connect=self.home.endpoint("storage"))
        self.add_socket(self.storage, self._on_storage_reply)
        if embedder is not None:
            changes.setsockopt(zmq.SUBSCRIBE, b"vectors")
            self.backfill = vectors.Backfill(db.location(self.home, self.settings), embedder,
                                             self.engine.vectors, self.log, self.wake)
            self.engine.request_load = self.backfill.request_load
            self.backfill.start()
        self.outcomes: Counter[str] = Counter()
        self.worktrees = worktree.Worktrees()  # the files in play of this machine's projects
        self.blames = why.Blames()  # who wrote which lines of their files (``why``)
        self.keyring = keys.Keyring(self.home)  # clients elsewhere: their names and grants
        self.rewriter = self._brief_writer()
        self.serve_on(self.home.endpoint("retrieval"))

    def _brief_writer(self) -> briefs.Rewriter | None:
        """The model that rewrites briefs: extraction's, where one is configured."""
        try:
            model = llm.from_settings(self.settings, self.log)
        except config.ConfigError as exc:  # extraction says so too, and runs on heuristics
            self.log.warning("briefs stay rule-made: %s", exc)
            return None
        return None if model is None else briefs.Rewriter(model, self.log)

    def _load_embedder(self) -> tuple[str, embed_worker.Worker | None]:
        """The embedder, and what `kirolearn status` says about it."""
        cfg = self.settings["embeddings"]
        if not cfg["enabled"]:
            return "off (embeddings.enabled = false): search is lexical", None
        try:
            embedder = embed_worker.load(cfg)
        except embeddings.Unavailable as exc:
            self.log.info("embeddings off: %s", exc)
            return f"off: {exc}; search is lexical", None
        files = embedder.files
        self.log.info("embeddings on: %s from %s, vector space %s", files.model, files.source,
                      files.space)
        return f"on: {embeddings.MODEL_NAME} ({files.source}; vector space {files.space})", \
            embedder

    def release_memory(self) -> None:
        self.engine.release_memory()

    def teardown(self) -> None:
        if getattr(self, "blames", None) is not None:
            self.blames.close()
        if getattr(self, "rewriter", None) is not None:
            self.rewriter.close()
        if getattr(self, "backfill", None) is not None:
            self.backfill.stop()
            self.backfill.join(5)
        if hasattr(self, "engine"):
            self.engine.postings.stop()
            self.engine.close()
            if self.engine.embedder is not None:
                self.engine.embedder.close()

    def counters(self) -> dict:
        return {"searches": dict(self.outcomes), "postings": self.engine.postings.status(),
                **self._embedding_status()}

    def _embedding_status(self) -> dict:
        status = {"embeddings": self.embeddings_state, "mode": self.default_mode}
        if self.backfill is not None:
            status.update(embedded=self.backfill.embedded, unembedded=self.backfill.pending)
        worker = self.engine.embedder
        if worker is not None:
            pid = worker.pid
            status["model"] = (f"loaded (pid {pid})" if pid and worker.ready else
                               f"loading (pid {pid})" if pid else
                               "not loaded (idle; the next search loads it)")
        return status

    def _on_records_changed(self, sock: zmq.Socket) -> None:
        while sock.poll(0, zmq.POLLIN):
            sock.recv()
        self.engine.namespaces_changed()
        if self.backfill is not None:
            self.backfill.wake.set()

    def wake_at(self) -> float | None:
        """Now, when the back-fill has vectors or a loaded space to hand over."""
        if self.backfill is not None and not self.backfill.results.empty():
            return time.monotonic()
        return None

    def tick(self) -> None:
        """Hand the back-fill's vectors to storage and to the searches."""
        if self.backfill is not None:
            self.backfill.drain(self._store_vectors, self._drop_other_vectors)

    def _store_vectors(self, batch: list[dict]) -> None:
        self.engine.add_vectors(batch)
        items = [{"record_id": item["record_id"], "text_hash": item["text_hash"],
                  "vector": embeddings.to_blob(item["vector"])} for item in batch]
        if base.Outbox(self.storage).request("put_embeddings", {"items": items}) is None:
            # storage is away: the records stay un-embedded and come back
            self.log.warning("storage did not take %d vector(s); retrying later", len(items))

    def _drop_other_vectors(self, count: int) -> None:
        """Vectors of another model are never searched: storage drops them, and the
        back-fill embeds their records again (it asks until none is left)."""
        space = self.backfill.space
        self.log.info("%d vector(s) are of another model than %s: embedding them again",
                      count, space)
        if base.Outbox(self.storage).request("drop_vectors", {"keep_space": space}) is None:
            self.log.warning("storage did not take drop_vectors; asking again later")

    def _on_storage_reply(self, sock: zmq.Socket) -> None:
        while sock.poll(0, zmq.POLLIN):
            frames = sock.recv_multipart()
            try:
                reply = protocol.parse_reply(frames[-1])
            except protocol.DecodeError as exc:
                self.log.warning("dropped a malformed reply from storage: %s", exc)
                continue
            if not reply["ok"]:
                self.log.warning("storage refused a request: %s", reply.get("error"))

    def sharing(self, request: base.Request) -> Sharing | None:
        """What a client elsewhere may read beside its own namespaces (``access``); None
        for a request of this machine. A prompt that ingest is storing while it asks for
        its context (``storing``, which only ingest sets: the gateway passes no such key
        on) counts as a contribution to its project, though not yet committed."""
        client, storing = request.client, request.storing
        if client is None:
            return None

        def share(conn, namespace: str) -> bool:
            project_id = project.parts(namespace)[1]
            return access.may_see(
                client, project_id, self.keyring.names(), self.keyring.grants_of(client),
                lambda: namespace == storing or reads.wrote_in(
                    conn, access.own_namespaces(client, project_id)))
        return share

    @staticmethod
    def git_tree(request: base.Request, root: object) -> str | None:
        """``root``, when it is a git working tree a request of this machine comes from
        (a client elsewhere's project is not here)."""
        if (request.client is not None or not isinstance(root, str) or not os.path.isabs(root)
                or not os.path.exists(os.path.join(root, ".git"))):
            return None
        return root

    def in_play(self, request: base.Request, event: object) -> tuple[str, ...]:
        """The files the project's working tree has changed, for a prompt of this
        machine (``worktree``)."""
        if not isinstance(event, dict) or event.get("kind") != "prompt":
            return ()
        root = self.git_tree(request, event.get("project_path"))
        return () if root is None else self.worktrees.changed(root)

    def tree(self, request: base.Request, event: object) -> staleness.Tree | None:
        """The working tree a search of this machine comes from, which the records it
        finds are checked against (``staleness``): the event's project path (a prompt,
        a tool use), or a local ``checkout`` (``kirolearn search``)."""
        checkout = request.body.get("checkout")
        if checkout is not None and not (isinstance(checkout, str) and 0 < len(checkout) <= 4096):
            raise base.BadRequest("'checkout' must be a directory's path")
        root = self.git_tree(request, event.get("project_path") if isinstance(event, dict)
                             else checkout)
        if root is None:
            return None
        found = self.worktrees.reading(root, self.worktrees.head(root), TREE_WAIT_S)
        if found.renamed is None:  # not (yet) read as a git working tree
            return None
        return staleness.Tree(root, found.renamed, self.mark_stale, found.branch, found.forked,
                              found.changed)

    @base.op("search")
    def search(self, request: base.Request) -> dict:
        """``search {query | event, namespace? | namespaces?, limit?, budget_ms?,
        deadline_ms?, records?, mode?, tokens?, files?, opened?, exclude?}`` →
        ``{context, record_ids, records?, outcome, latency_ms, terms, window, error?}``;
        never fails once the body is valid (a failure is an empty result with its
        outcome). With ``opened``, the records about those files (``steps.ABOUT_FILES``), for
        the request of the event's turn (``query`` when given)."""
        self.tick()  # install vectors loaded since the last tick before searching
        if self.backfill is not None:
            self.backfill.searched_at = time.monotonic()
        asked = parse_search(request.body, self.default_limit, self.default_budget_ms,
                             self.default_mode, self.context_tokens)
        query, event = asked.query, request.body.get("event")
        share, tree, known = self.sharing(request), self.tree(request, event), known_to(event)
        if asked.opened:  # what is known of files a tool use opened, for its turn's request
            if "query" not in request.body and isinstance(event, dict):
                query = self.engine.request_of(event)
            search = Request(asked.namespaces, query, asked.limit, asked.budget_ms,
                             asked.deadline, asked.mode, asked.max_tokens, share=share,
                             opened=asked.opened, exclude=asked.exclude, tree=tree,
                             known=known)
        else:
            if "query" not in request.body and isinstance(event, dict):  # a prompt's
                query = self.engine.in_context(event, query)
            search = Request(asked.namespaces, query, asked.limit, asked.budget_ms,
                             asked.deadline, asked.mode, asked.max_tokens, asked.types,
                             self.global_floor if asked.with_global else None, share,
                             asked.files + self.in_play(request, event), tree=tree,
                             known=known)
        result = self.engine.search(search)
        self.outcomes[result.outcome] += 1
        if result.stale_marks and base.Outbox(self.storage).request("mark_stale", {
                "items": [{"record_id": record_id, "why": why}
                          for record_id, why in result.stale_marks.items()]}) is None:
            self.log.info("storage did not take %d stale mark(s): the next search finds"
                          " them again", len(result.stale_marks))
        if result.error and result.outcome in ("error", "timeout"):
            self.log.warning("search failed (%s): %s", result.outcome, result.error)
        elif result.error:  # answered lexically, as designed
            self.log.debug("search: %s", result.error)
        return result.as_dict(asked.with_records)

    @base.op("why")
    def why(self, request: base.Request) -> dict:
        """``why {namespaces, checkout, path, first?, last?, text?, budget_ms?, tokens?,
        given?}``
        → ``{context, record_ids, commits: [{commit, path, lines, record_ids}], outcome}``:
        the records of the commits that wrote lines ``first``–``last`` of the checkout's
        file (or the lines ``text`` stands on), the most lines first (``search.why``);
        those ``given`` to the session already in a line each; ``record_ids`` and
        ``commits``: what the context, cut to ``tokens``, holds.
        Outcome ``blaming`` when git has not blamed the file within the budget (asked
        again, it may have); ``unreadable`` when the file, or the text in it, is not
        there; else ``ok``."""
        namespaces = parse_namespaces(request.body)
        root = self.git_tree(request, request.body.get("checkout"))
        if root is None:
            raise base.BadRequest("'checkout' must be a git working tree of this machine")
        path = request.require("path", str, "a file's path in the checkout")
        if not 0 < len(path) <= 4096 or os.path.isabs(path):
            raise base.BadRequest("'path' must be a file's path relative to the checkout")
        first = parse_count(request.body, "first", 1, 10_000_000) or 1
        last = parse_count(request.body, "last", 0, 10_000_000)
        text = request.body.get("text", "")
        if not isinstance(text, str) or len(text) > contract.MAX_BODY_BYTES:
            raise base.BadRequest("'text' must be a string (the lines' text)")
        started, budget_ms = time.monotonic(), request.body.get("budget_ms", MAX_BUDGET_MS)
        if (not isinstance(budget_ms, int | float) or isinstance(budget_ms, bool)
                or not 0 <= budget_ms <= MAX_BUDGET_MS):
            raise base.BadRequest(f"'budget_ms' must be a number from 0 to {MAX_BUDGET_MS}")
        tokens = parse_count(request.body, "tokens", self.context_tokens or 2000,
                             MAX_CONTEXT_TOKENS)
        try:
            given = set(check_hints(request.body).get("given", ()))
        except ValueError as exc:
            raise base.BadRequest(str(exc)) from None
        answer: dict = {"context": "", "record_ids": [], "commits": [], "outcome": "ok"}
        read = why.read(root, Lines(path, first, last, text))
        if read is None:
            return {**answer, "outcome": "unreadable"}
        content, asked = read
        left_s = budget_ms / 1000 - (time.monotonic() - started)
        blamed = self.blames.of(root, path, content, left_s)
        if blamed is None:
            return {**answer, "outcome": "blaming"}
        share = self.sharing(request)
        found = self._read_written(lambda: why.written(
            self.engine.connection(), self.engine.shared(namespaces, share), asked, blamed,
            lambda commits: self.blames.blobs(root, commits, max(0.05, left_s))))
        said, shown = why.block(asked, found, tokens or None, given)
        return {**answer, "context": said,
                "record_ids": [r["record_id"] for w in shown for r in w.records],
                "commits": [{"commit": w.commit.commit, "path": w.commit.path,
                             "lines": list(w.commit.lines),
                             "record_ids": [r["record_id"] for r in w.records]}
                            for w in shown]}

    def _read_written(self, lookup: Callable[[], list[why.Written]]) -> list[why.Written]:
        """``why.written``'s answer, its records scrubbed as they leave (as a search's)."""
        try:
            found = lookup()
        except errors.StoreError as exc:
            self.engine.close()  # reopened on the next request
            raise RuntimeError(f"the database could not be read: {exc}") from exc
        return [w._replace(records=privacy.scrub(w.records)) for w in found]

    @base.op("embeddings")
    def embeddings(self, request: base.Request) -> dict:
        """``embeddings {backfill?}`` → ``{embeddings, mode, embedded?, unembedded?}``;
        ``backfill: true`` starts the back-fill at once."""
        if request.body.get("backfill") and self.backfill is not None:
            self.backfill.wake.set()
        return self._embedding_status()

    @base.op("get_records")
    def get_records(self, request: base.Request) -> dict:
        """``get_records {ids, namespaces}`` → ``{records}``: those found, in the order
        asked, each with its earlier ``versions``."""
        namespaces = parse_namespaces(request.body)
        ids = request.body.get("ids")
        if (not isinstance(ids, list) or not 1 <= len(ids) <= MAX_IDS
                or not all(isinstance(i, str) for i in ids)):
            raise base.BadRequest(f"'ids' must be a list of 1 to {MAX_IDS} record ids")
        share = self.sharing(request)
        return self._read(lambda: self.engine.get_records(ids, namespaces, share))

    @base.op("timeline")
    def timeline(self, request: base.Request) -> dict:
        """``timeline {record_id, namespaces, before?, after?}`` → ``{records}``: the
        records around one, oldest first (empty if it is not there)."""
        namespaces = parse_namespaces(request.body)
        record_id = request.require("record_id", str, "a string")
        before = parse_count(request.body, "before", 5, MAX_AROUND)
        after = parse_count(request.body, "after", 5, MAX_AROUND)
        share = self.sharing(request)
        return self._read(lambda: self.engine.timeline(record_id, namespaces, before, after,
                                                         share))

    def _read(self, lookup) -> dict:
        try:
            return {"records": privacy.scrub(lookup())}  # as they leave, like a search's
        except errors.StoreError as exc:
            self.engine.close()  # reopened on the next request
            self.log.warning("a lookup failed: %s", exc)
            raise RuntimeError(f"the database could not be read: {exc}") from exc

    @base.op("resume_session")
    def resume_session(self, request: base.Request) -> dict:
        """``resume_session {namespace}`` → ``{checkpoint, context}``: where the
        namespace's last active session left off (``checkpoint`` null: none yet), and
        the same as markdown."""
        namespace = request.body.get("namespace")
        if not contract.is_namespace(namespace):
            raise base.BadRequest("'namespace' must be a namespace such as"
                                  " /actor/<id>/project/<id>/")
        try:
            last = self.engine.checkpoint(namespace)
        except errors.StoreError as exc:
            self.engine.close()
            raise RuntimeError(f"the database could not be read: {exc}") from exc
        return privacy.scrub({"checkpoint": last.as_dict() if last else None,
                              "context": last.block() if last else ""})

    @base.op("brief")
    def brief(self, request: base.Request) -> dict:
        """``brief {namespace, tokens?}`` → ``{brief, rewritten, sections, record_ids}``:
        the project's brief as markdown (``search.brief``; the model's rewrite of it,
        ``rewritten``, once one is made: ``briefs``) within ``tokens`` (default
        ``retrieval.brief_tokens``, at least 300), its sections (``{heading, items:
        [{text, record_id}]}``), and the records it names."""
        namespace = request.body.get("namespace")
        if not contract.is_namespace(namespace):
            raise base.BadRequest("'namespace' must be a namespace such as"
                                  " /actor/<id>/project/<id>/")
        tokens = parse_count(request.body, "tokens", max(self.brief_tokens, 300), 100_000)
        try:
            page = self.engine.brief(namespace, tokens, share=self.sharing(request))
            said = self.rewriter.text(page, tokens) if self.rewriter else page.markdown
        except errors.StoreError as exc:
            self.engine.close()
            raise RuntimeError(f"the database could not be read: {exc}") from exc
        return privacy.scrub({"brief": said, "rewritten": said != page.markdown,
                              "sections": page.sections, "record_ids": page.record_ids})

    @base.op("session_events")
    def session_events(self, request: base.Request) -> dict:
        """``session_events {namespace, session_ids, not_from?}`` → ``{sessions: {id:
        [event_id]}}``: the events stored for each session (one with none is left out),
        those of other clients than ``not_from`` only when given, so that an import of
        an agent's transcripts leaves alone what its hooks captured live."""
        namespace = request.body.get("namespace")
        if not contract.is_namespace(namespace):
            raise base.BadRequest("'namespace' must be a namespace such as"
                                  " /actor/<id>/project/<id>/")
        ids = request.body.get("session_ids")
        if (not isinstance(ids, list) or not 1 <= len(ids) <= MAX_IDS
                or not all(isinstance(i, str) and i for i in ids)):
            raise base.BadRequest(f"'session_ids' must be a list of 1 to {MAX_IDS} session ids")
        not_from = request.body.get("not_from")
        if not_from is not None and not (isinstance(not_from, str) and 0 < len(not_from) <= 64):
            raise base.BadRequest("'not_from' must be a client id")
        try:
            return {"sessions": self.engine.session_events(namespace, ids, not_from)}
        except errors.StoreError as exc:
            self.engine.close()
            raise RuntimeError(f"the database could not be read: {exc}") from exc

    @base.op("session_context")
    def session_context(self, request: base.Request) -> dict:
        """``session_context {namespace, tokens?}`` → ``{context, record_ids, outcome,
        latency_ms}``: what an agent starting a session is given."""
        namespace = request.body.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            raise base.BadRequest("'namespace' must be a non-empty string")
        tokens = parse_count(request.body, "tokens", self.session_tokens, 100_000)
        surface = request.body.get("surface")
        if self.engine.embedder is not None:  # its prompts will want the model
            self.engine.embedder.warm()
        result = self.engine.session_context(namespace, tokens,
                                               known_to({"surface": surface}),
                                               self.brief_tokens, self.sharing(request),
                                               self.rewriter and self.rewriter.text)
        self.outcomes[result.outcome] += 1
        if result.error:
            self.log.warning("session context failed: %s", result.error)
        return result.as_dict()

