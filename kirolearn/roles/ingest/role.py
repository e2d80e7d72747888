"""Ingest role: the only door for events.

For each event it validates the v1 contract, checks a supplied ``content_hash``
against the body, scrubs ``<private>`` spans and secrets, stamps the hash of the
scrubbed body (dedup key), and hands it to storage. The client's reply is sent
only after storage acknowledges a committed transaction. For a ``prompt`` sent
with ``retrieve: true`` the retrieval request goes out at the same time, under
the retrieval budget: a late answer is dropped and the reply says "stored, no
context" rather than make the shim wait past its own timeout.

Ingest never blocks on a downstream role: it talks to storage and retrieval over
DEALER sockets with request ids, so many requests can be in flight and storage
can commit them as one group. Live requests go ahead of bulk work: an import's
chunks (``put_events``) and any large event are prepared (parsed, checked, scrubbed)
on a thread of their own (``Preparer``), so the loop keeps answering hooks meanwhile,
and one chunk is with storage at a time, so a hook's event waits behind one chunk's
commit at most.

It also drains the spool (events a shim could not deliver) when it starts and
every ``ingest.spool_interval_s``: each file goes through the same door as a
client's event and is deleted once storage has it (or moved aside if invalid).

Every change to records comes through this door too, is checked (and its text
scrubbed) here and relayed to storage: a record saved through MCP (``put_record``),
an edit or a record marked invalid (``update_record``), an export's records and
tombstones (``put_records``), and ``forget``, ``forget_project``, ``prune_events`` and
``scrub``.

What it checks is in ``checks`` (pure functions), the searches it asks for in
``searches``. One module, long as it is: its op table is the whole door, events and
record writes alike.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from kirolearn import contract, privacy, protocol, spool, transport
from kirolearn.roles import base
from kirolearn.roles.hints import check_hints
from kirolearn.roles.ingest.checks import (
    BadLine,
    check_exported,
    check_forget,
    check_namespace,
    check_prune,
    check_put_record,
    check_rule_file,
    check_scrub,
    check_update,
    decode,
    prepare,
    rejection,
)
from kirolearn.roles.ingest.searches import Searches

Code = protocol.ErrorCode
# A storage request is sent once this much is waiting (or when no client request is left),
# so storage commits one group while ingest prepares the next, and frames stay small.
FLUSH_EVENTS = 200
FLUSH_BYTES = 1024 * 1024
SPOOL_CHUNK = 200  # spool files read per storage request
# Bulk events (an import's put_events) wait behind every live request: one chunk is
# prepared at a time, off the loop, and one is with storage at a time, so a hook's
# event is committed behind at most one chunk of an import.
BULK_AT_STORAGE = 1
KEPT_ANSWERS = 16  # bulk chunks whose answers are kept for a client that sends one again
# A put_event this large (a tool's long output) is prepared off the loop too: scrubbing
# 512 KiB takes tens of milliseconds, which a small prompt beside it would wait.
LARGE_REQUEST_BYTES = 32 * 1024
PREPARER_NICENESS = 10  # of the preparer's thread: the CPU goes to hooks' work first
# The shim's poll timeout is the whole budget; retrieval gets a little less, so the
# "stored, no context" answer reaches the shim before it gives up and spools.
REPLY_RESERVE_S = 0.05


Prepared = tuple[dict, dict] | Exception  # prepare's (stored, body), or why not


def chunk_key(name: object, lines: list[str], history: bool) -> str | None:
    """What tells a chunk sent again (an import's next try, under the name it gave)
    from another: the name and a hash of its lines (None: a chunk with no name)."""
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        return None
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass"))
    digest.update(b"history" if history else b"events")
    for line in lines:
        digest.update(b"\0" + line.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def prepare_all(items: list) -> tuple[list, list[Prepared]]:
    """The events (JSON text decoded) and each one prepared (``prepare``), or the
    exception that says why it cannot be: pure, so it runs on any thread."""
    events = [decode(item) if isinstance(item, str) else item for item in items]
    found: list[Prepared] = []
    for event in events:
        try:
            found.append(prepare(event))
        except Exception as exc:  # a ContractError; anything else is logged by the loop
            found.append(exc)
    return events, found


class Preparer:
    """One thread that prepares what would hold the loop up: an import's chunks and
    large events. Each job's result waits in ``done`` until the loop takes it
    (``wake`` tells it); CPython's lock is handed over every few milliseconds, so the
    loop answers hooks while a job runs."""

    def __init__(self, wake: Callable[[], None]):
        self.jobs: queue.Queue = queue.Queue()
        self.done: queue.Queue = queue.Queue()
        self.wake = wake
        # The loop waits for the lock at most this long when it wakes (5 ms by default).
        sys.setswitchinterval(0.001)
        self.thread = threading.Thread(target=self._run, name="prepare", daemon=True)
        self.thread.start()

    def submit(self, items: list, then: Callable[[list, list[Prepared]], None]) -> None:
        """Prepare events (or their JSON text), then, on the loop's thread (``take``),
        ``then(events, prepared)``."""
        self.jobs.put((items, then))

    def take(self) -> None:
        while True:
            try:
                events, prepared, then = self.done.get_nowait()
            except queue.Empty:
                return
            then(events, prepared)

    def stop(self) -> None:
        self.jobs.put(None)
        self.thread.join(10)

    def _run(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # Linux: a thread's own niceness
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PREPARER_NICENESS)
        while (job := self.jobs.get()) is not None:
            items, then = job
            self.done.put((*prepare_all(items), then))
            self.wake()


@dataclass
class Pending:
    """A client request waiting for storage (and maybe retrieval)."""

    request: base.Request | None  # None: events from the spool, not from a client
    op: str
    results: list[dict | None]  # one per event; None until storage answers
    storage_deadline: float
    event: dict | None = None  # the prompt, when retrieval was asked for
    retrieval: dict | None = None  # its answer, once in (or given up)
    storage_done: bool = False
    storage_slots: list[int] = field(default_factory=list)  # result indexes sent to storage
    spool_files: list[Path] = field(default_factory=list)  # one per event, from the spool
    chunk: str | None = None  # a bulk chunk's key (``chunk_key``): its answer is kept


class Ingest(base.Role):
    role = "ingest"
    refuse_while_stopping = True

    def setup(self) -> None:
        privacy.save_rules(self.home)
        self.budget_s = max(0.0, self.settings["retrieval"]["budget_ms"] / 1000 - REPLY_RESERVE_S)
        self.spool_interval_s = self.settings["ingest"]["spool_interval_s"]
        self.next_spool = 0.0  # drain at start
        self.ticked_at = 0.0
        self.spooling = False  # a chunk of the spool is with storage
        self.storage_timeout_s = self.settings["ingest"]["storage_timeout_ms"] / 1000
        self.preparer = Preparer(self.wake)
        self.serve_on(self.home.endpoint("ingest"))
        self.storage = transport.make_socket(self.ctx, zmq.DEALER,
                                             connect=self.home.endpoint("storage"))
        retrieval = transport.make_socket(self.ctx, zmq.DEALER)
        retrieval.setsockopt(zmq.IMMEDIATE, 1)  # see ``searches``
        retrieval.connect(self.home.endpoint("retrieval"))
        self.add_socket(self.storage, self._on_storage)
        self.add_socket(retrieval, self._on_retrieval)
        self.to_storage = base.Outbox(self.storage)
        self.searches = Searches(retrieval, self.budget_s, self.settings["retrieval"]["limit"],
                                 self.log, self._answered, self._log_retrieval)
        # Events prepared but not yet sent: one storage request (one group commit) per
        # pass over the client socket, or sooner once FLUSH_EVENTS/FLUSH_BYTES wait.
        self.outbox: list[tuple[Pending, list[dict]]] = []
        self.outbox_bytes = self.outbox_events = 0
        self.by_storage_id: dict[str, list[Pending]] = {}
        # put_events waiting to be prepared; the one prepared (or being prepared),
        # waiting for storage; the storage request ids of those sent and not yet
        # acknowledged.
        self.bulk: collections.deque[tuple[base.Request, list, bool, str | None]] = (
            collections.deque())
        # The answers to the latest chunks, by key: a chunk sent again (its client timed
        # out while it was being scrubbed) is answered from here, not scrubbed again.
        self.bulk_answers: collections.OrderedDict[str, list] = collections.OrderedDict()
        self.bulk_working: set[str] = set()  # keys of the chunks prepared or at storage
        self.bulk_ready: list[tuple[Pending, list[dict]]] = []
        self.bulk_at_storage: set[str] = set()
        self.bulk_preparing = False
        # Record writes relayed to storage: its request id → (client request, deadline).
        self.relays: dict[str, tuple[base.Request, float, Callable | None]] = {}
        self.accepted = 0

    def counters(self) -> dict:
        return {"in_flight": len(self.by_storage_id), "accepted": self.accepted,
                "spool_waiting": len(spool.waiting(self.home))}

    # -- clients ----------------------------------------------------------------------------

    @base.op("put_event")
    def put_event(self, request: base.Request) -> object:
        """``put_event {event, retrieve?: true | false | "session", global_namespace?}``
        → ``{event_id, status, retrieval?}``, after storage has committed the event; a
        prompt sent with ``retrieve: true`` gets its context (with the memories of
        ``global_namespace`` that clear ``retrieval.global_min_similarity``), a session
        start (``"session"``) the project's; a tool use sent with ``retrieve: true`` and
        the files it ``opened`` gets what is known of them. ``files`` (in play) and
        ``exclude`` (records the session was given) go to the search with them
        (``check_hints``). An invalid event is an ``INVALID_EVENT`` or ``TOO_LARGE``
        error."""
        retrieve = request.body.get("retrieve", False)
        if retrieve not in (True, False, "session"):
            raise base.BadRequest("'retrieve' must be true, false or \"session\"")
        also = request.body.get("global_namespace")
        if also is not None and not contract.is_namespace(also):
            raise base.BadRequest("'global_namespace' must be a namespace such as"
                                  " /actor/<id>/project/<id>/")
        try:
            hints = check_hints(request.body)
        except ValueError as exc:
            raise base.BadRequest(str(exc)) from None

        def put(events: list, prepared: list[Prepared] | None = None) -> None:
            self._put(request, events, retrieve=retrieve, global_namespace=also, hints=hints,
                      prepared=prepared)

        if request.size >= LARGE_REQUEST_BYTES:  # scrubbed off the loop: hooks go on
            self.preparer.submit([request.body.get("event")], put)
        else:
            put([request.body.get("event")])
        return base.LATER

    @base.op("put_events")
    def put_events(self, request: base.Request) -> object:
        """``put_events {events: [event…]}`` or ``{lines: [JSON text…]}`` → ``{results:
        [{event_id, status, reason?, errors?}…]}``, one per input, in order. Bulk work:
        live requests go first (``BULK_AT_STORAGE``)."""
        # 'lines' carries events as JSON text (bulk import): parsing untrusted JSON
        # belongs here, at the door, and spares the client a decode/encode.
        # 'history': events of an export that had already distilled them (not extracted
        # again).
        events, lines = request.body.get("events"), request.body.get("lines")
        history = request.body.get("history", False) is True
        if isinstance(lines, list) and all(isinstance(line, str) for line in lines):
            key = chunk_key(request.body.get("chunk"), lines, history)
            if key is not None and key in self.bulk_answers:
                return {"results": self.bulk_answers[key]}
            for place, (queued, *_, queued_key) in enumerate(self.bulk):
                # sent again before its turn: one copy waits
                if key is not None and queued_key == key:
                    queued.fail(Code.UNAVAILABLE, "the same chunk was sent again")
                    del self.bulk[place]
                    break
            self.bulk.append((request, lines, history, key))
        elif isinstance(events, list):
            self.bulk.append((request, events, history, None))
        else:
            raise base.BadRequest("'events' (or 'lines') must be a list")
        return base.LATER  # bulk: prepared once no live request waits (``tick``)

    @base.op("put_records")
    def put_records(self, request: base.Request) -> object:
        """``put_records {lines: [JSON text…]}`` → ``{results: [{record_id, status,
        reason?}…]}``: an export's records (with versions, vectors) and tombstones, each
        checked and scrubbed here, then relayed to storage."""
        lines = request.body.get("lines")
        if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
            raise base.BadRequest("'lines' must be a list of JSON texts")
        results: list[dict | None] = [None] * len(lines)
        items, slots = [], []
        for index, line in enumerate(lines):
            item = decode(line)
            try:
                items.append(check_exported(item))
                slots.append(index)
            except contract.ContractError as exc:
                record_id = item.get("record_id") if isinstance(item, dict) else None
                results[index] = {"record_id": record_id if isinstance(record_id, str)
                                  else None, "status": "rejected", "reason": str(exc)}

        def merge(body: dict) -> dict:
            for slot, result in zip(slots, body["results"], strict=True):
                results[slot] = result
            return {"results": results}

        if not items:
            return {"results": results}
        return self._relay(request, lambda _: {"items": items}, merge)

    @base.op("update_record")
    def update_record(self, request: base.Request) -> object:
        """``update_record {record_id, namespaces, changes: {title?, summary?, facts?} |
        {invalid_reason}, reason?}`` → ``{updated}``, relayed to storage."""
        return self._relay(request, check_update)

    @base.op("forget_project")
    def forget_project(self, request: base.Request) -> object:
        """``forget_project {namespace}`` → ``{events, records}``, relayed to storage."""
        return self._relay(request, check_namespace,
                           timeout_s=protocol.MAINTENANCE_MS / 1000)

    @base.op("prune_events")
    def prune_events(self, request: base.Request) -> object:
        """``prune_events {before_ms, namespace?}`` → ``{events, bytes_before,
        bytes_after}``, relayed to storage."""
        return self._relay(request, check_prune, timeout_s=protocol.MAINTENANCE_MS / 1000)

    @base.op("scrub")
    def scrub(self, request: base.Request) -> object:
        """``scrub {dry_run?}`` → ``{redacted}``, relayed to storage."""
        return self._relay(request, check_scrub, timeout_s=protocol.MAINTENANCE_MS / 1000)

    @base.op("put_record")
    def put_record(self, request: base.Request) -> object:
        """``put_record {record}`` → ``{record_id, status: stored}``: a record
        saved through MCP, scrubbed like an event and relayed to storage."""
        return self._relay(request, check_put_record)

    @base.op("put_rule_file")
    def put_rule_file(self, request: base.Request) -> object:
        """``put_rule_file {namespace, name, text}`` → ``{record_id, status}``: a rule file
        of a project (CLAUDE.md, AGENTS.md…) made into its one record, scrubbed, and
        relayed to storage; ``text`` null: the file is gone."""
        return self._relay(request, check_rule_file)

    @base.op("forget")
    def forget(self, request: base.Request) -> object:
        """``forget {record_id, namespaces}`` → ``{deleted}``, relayed to storage."""
        return self._relay(request, check_forget)

    def after_requests(self) -> None:
        self._flush()

    def _flush(self) -> None:
        if not self.outbox:
            return
        group, self.outbox = self.outbox, []
        self.outbox_bytes = self.outbox_events = 0
        self._send_to_storage(group)

    def _send_to_storage(self, group: list[tuple[Pending, list[dict]]]) -> str | None:
        """One storage request (one group commit) for these requests' events; its id."""
        events = [event for _, clean in group for event in clean]
        request_id = self.to_storage.request("put_events", {"events": events})
        if request_id is None:
            for pending, _ in group:
                self._fail(pending, Code.UNAVAILABLE, "storage is not accepting events")
            return None
        self.by_storage_id[request_id] = [pending for pending, _ in group]
        self.accepted += len(events)
        return request_id

    def _bulk_step(self) -> None:
        """One step of bulk work: the prepared chunk to storage once the one before is
        acknowledged, else the next chunk given to the preparer (while storage commits
        the last)."""
        if self.bulk_ready and len(self.bulk_at_storage) < BULK_AT_STORAGE:
            sent = self._send_to_storage(self.bulk_ready)
            self.bulk_ready = []
            if sent is not None:
                self.bulk_at_storage.add(sent)
        elif self._bulk_next():
            request, items, history, key = self.bulk.popleft()
            if key is not None and key in self.bulk_answers:  # sent again while its first
                request.reply({"results": self.bulk_answers[key]})  # copy was prepared
                return
            if key is not None:
                self.bulk_working.add(key)
            self.bulk_preparing = True

            def prepared(events: list, done: list[Prepared]) -> None:
                self.bulk_preparing = False
                self._put(request, events, retrieve=False, history=history, bulk=True,
                          prepared=done, chunk=key)
            self.preparer.submit(items, prepared)

    def _bulk_next(self) -> bool:
        """Whether the next chunk may be prepared: none is, and it is not a copy of one
        still at work (that copy is answered with the first's answer)."""
        return bool(self.bulk and not self.bulk_ready and not self.bulk_preparing
                    and self.bulk[0][3] not in self.bulk_working)

    def _bulk_due(self) -> bool:
        return bool((self.bulk_ready and len(self.bulk_at_storage) < BULK_AT_STORAGE)
                    or self._bulk_next())

    def _fail(self, pending: Pending, code: int, reason: str) -> None:
        self.bulk_working.discard(pending.chunk)
        if pending.request is None:  # spooled events stay spooled; try again later
            self.log.warning("spool: %s; retrying in %ss", reason, self.spool_interval_s)
            self.spooling = False
            self.next_spool = time.monotonic() + self.spool_interval_s
            return
        pending.request.fail(code, reason)
        if pending.event is not None:
            self.searches.drop(pending)

    def _relay(self, request: base.Request, check, merge=None,
               timeout_s: float | None = None) -> object:
        """Check a record write, then send it on to storage; storage's answer (its body
        passed through ``merge`` when given) goes back to the client."""
        try:
            body = check(request.body)
        except contract.ContractError as exc:
            raise base.BadRequest(str(exc), {"errors": [e._asdict() for e in exc.errors]}
                                  ) from exc
        request_id = self.to_storage.request(request.op, body)
        if request_id is None:
            request.fail(Code.UNAVAILABLE, "storage is not accepting writes")
            return base.LATER
        self.relays[request_id] = (
            request, time.monotonic() + (timeout_s or self.storage_timeout_s), merge)
        return base.LATER

    def _put(self, request: base.Request | None, events: list, retrieve: bool | str,
             spool_files: list[Path] | None = None, history: bool = False,
             global_namespace: str | None = None, bulk: bool = False,
             hints: dict | None = None, prepared: list[Prepared] | None = None,
             chunk: str | None = None) -> None:
        """Prepare each event (unless the preparer did: ``prepared``) and queue the valid
        ones for storage (``request`` None: events from the spool; ``history``: already
        distilled, see ``put_events``; ``bulk``: held as the next bulk chunk,
        ``_bulk_step``)."""
        op = request.op if request is not None else "put_events"
        pending = Pending(request, op, [None] * len(events),
                          time.monotonic() + self.storage_timeout_s,
                          spool_files=spool_files or [], chunk=chunk)
        if prepared is None:
            events, prepared = prepare_all(events)
        clean, first_body = self._sorted(pending, events, prepared, history)
        if op == "put_event" and pending.results[0] is not None:
            rejected = pending.results[0]
            too_large = any(e["code"] == "too_large" for e in rejected["errors"])
            request.fail(Code.TOO_LARGE if too_large else Code.INVALID_EVENT,
                         rejected["reason"], {"errors": rejected["errors"]})
            return
        if not clean:
            self._reply(pending)
            return
        if bulk:
            self.bulk_ready = [(pending, clean)]
            return
        self.outbox.append((pending, clean))
        self.outbox_events += len(clean)
        self.outbox_bytes += sum(len(event["body_json"]) for event in clean)
        if self.outbox_bytes >= FLUSH_BYTES or self.outbox_events >= FLUSH_EVENTS:
            self._flush()  # keep storage busy while the next requests are prepared
        hints = hints or {}
        if retrieve == "session" or (retrieve is True and (
                clean[0]["kind"] == "prompt" or hints.get("opened"))):
            self._search_for(pending, clean[0], first_body, retrieve == "session",
                             global_namespace, hints)

    def _search_for(self, pending: Pending, first: dict, body: object, session: bool,
                    global_namespace: str | None, hints: dict) -> None:
        """Ask retrieval for what to bring back with a prompt (or a session's start, or
        a file opened): the first event stored is what it searches for."""
        prompt = {k: first[k] for k in ("event_id", "namespace", "kind", "session_id",
                                        "project_path")}
        surface = json.loads(first["source_json"]).get("surface")  # the agent's
        pending.event = {**prompt, "surface": surface, "body": body}
        client = pending.request.client if pending.request is not None else None
        self.searches.ask(pending, pending.event, client, session=session,
                          global_namespace=global_namespace, hints=hints)

    def _sorted(self, pending: Pending, events: list, prepared: list[Prepared],
                history: bool) -> tuple[list[dict], object]:
        """The prepared events to store (each given a slot in the pending's results)
        and the first one's body; a rejected event's result is its rejection."""
        clean = []
        first_body = None
        for index, (event, outcome) in enumerate(zip(events, prepared, strict=True)):
            if isinstance(outcome, contract.ContractError):
                pending.results[index] = rejection(event, outcome)
                continue
            if isinstance(outcome, Exception):  # a bug must cost this event, not the others
                self.log.error("an event could not be prepared", exc_info=outcome)
                pending.results[index] = rejection(event, contract.ContractError(
                    [contract.FieldError("event",
                                         f"could not be read: {type(outcome).__name__}")]))
                continue
            stored, body = outcome
            if history:
                stored["history"] = True
            clean.append(stored)
            pending.storage_slots.append(index)
            if first_body is None:
                first_body = body
        rejected_count = len(events) - len(clean)
        if rejected_count:
            first = next(r for r in pending.results if r is not None)
            self.log.info("%s: rejected %d event(s); first: %s: %s", pending.op,
                          rejected_count, first["event_id"], first["reason"])
        return clean, first_body

    # -- downstream replies -----------------------------------------------------------------

    def _read_reply(self, sock: zmq.Socket) -> dict | None:
        frames = sock.recv_multipart()
        try:
            return protocol.parse_reply(frames[-1])
        except protocol.DecodeError as exc:
            self.log.warning("dropped a malformed reply: %s", exc)
            return None

    def _on_storage(self, sock: zmq.Socket) -> None:
        while sock.poll(0, zmq.POLLIN):
            reply = self._read_reply(sock)
            if reply and reply.get("id") in self.relays:
                request, _, merge = self.relays.pop(reply["id"])
                if merge is not None and reply["ok"]:
                    reply = {**reply, "body": merge(reply["body"])}
                transport.send_reply(request.sock, request.envelope,
                                     {**reply, "id": request.id})
                continue
            if reply:
                self.bulk_at_storage.discard(reply.get("id"))
            group = self.by_storage_id.pop(reply.get("id"), None) if reply else None
            if group is None:
                continue  # late reply for a request already answered as unavailable
            if not reply["ok"]:
                for pending in group:
                    self._fail(pending, reply["error"]["code"], reply["error"]["reason"])
                continue
            results = iter(reply["body"]["results"])
            for pending in group:
                for slot in pending.storage_slots:
                    pending.results[slot] = next(results)
                pending.storage_done = True
                self._maybe_reply(pending)

    def _on_retrieval(self, sock: zmq.Socket) -> None:
        while sock.poll(0, zmq.POLLIN):
            reply = self._read_reply(sock)
            if reply:
                self.searches.on_reply(reply)

    def _answered(self, pending: Pending, retrieval: dict) -> None:
        pending.retrieval = retrieval
        self._maybe_reply(pending)

    def _log_retrieval(self, event: dict, retrieval: dict) -> None:
        # Best effort: the reply is read and dropped as an unknown id.
        self.to_storage.request("log_retrieval", {
            "prompt_event_id": event["event_id"], "namespace": event["namespace"],
            "record_ids": retrieval["record_ids"], "latency_ms": retrieval["latency_ms"],
            "outcome": retrieval["outcome"], "context": retrieval["context"],
            "error": retrieval.get("error")})

    def _maybe_reply(self, pending: Pending) -> None:
        if pending.storage_done and (pending.event is None or pending.retrieval is not None):
            self._reply(pending)

    def _reply(self, pending: Pending) -> None:
        if pending.request is None:
            self._spool_done(pending)
            return
        if pending.op == "put_event":
            body = dict(pending.results[0])
            if pending.event is not None:  # the error is for the log, not the agent
                body["retrieval"] = {k: v for k, v in pending.retrieval.items() if k != "error"}
            pending.request.reply(body)
        else:
            pending.request.reply({"results": pending.results})
            if pending.chunk is not None:
                self.bulk_working.discard(pending.chunk)
                self.bulk_answers[pending.chunk] = pending.results
                while len(self.bulk_answers) > KEPT_ANSWERS:
                    self.bulk_answers.popitem(last=False)

    # -- the spool -------------------------------------------------------------------------

    def _drain_spool(self, now: float) -> None:
        files = spool.waiting(self.home, SPOOL_CHUNK)
        if not files:
            self.next_spool = now + self.spool_interval_s
            return
        events = []
        for path in files:
            event = spool.read(path)
            events.append(BadLine(event) if isinstance(event, str) else event)
        self.log.info("spool: draining %d event(s)", len(files))
        self.spooling = True
        self._put(None, events, retrieve=False, spool_files=files)
        self._flush()

    def _spool_done(self, pending: Pending) -> None:
        stored = 0
        for path, result in zip(pending.spool_files, pending.results, strict=True):
            try:
                if result["status"] == "rejected":
                    self.log.warning("spool: %s rejected (%s); moved to %s", path.name,
                                     result["reason"], self.home.quarantine_dir)
                    spool.reject(path, result["reason"], self.home)
                else:
                    stored += result["status"] == "stored"
                    path.unlink(missing_ok=True)
            except OSError as exc:
                self.log.warning("spool: cannot remove %s: %s", path.name, exc)
        self.log.info("spool: %d stored, %d already stored or rejected", stored,
                      len(pending.spool_files) - stored)
        self.spooling = False
        full = len(pending.spool_files) >= SPOOL_CHUNK
        self.next_spool = time.monotonic() + (0 if full else self.spool_interval_s)

    # -- deadlines ------------------------------------------------------------------------------

    def wake_at(self) -> float | None:
        """The next deadline: now while bulk work can go on (after each pass over the
        sockets), the spool's next drain, a search waiting to be sent (tried again
        soon), a prompt's budget, a storage acknowledgement or relay's timeout; now too
        when the preparer has something done."""
        if self._bulk_due() or not self.preparer.done.empty():
            return time.monotonic()
        searches = self.searches.next_deadline(self.ticked_at)
        deadlines = [] if searches is None else [searches]
        deadlines += [deadline for _, deadline, _ in self.relays.values()]
        deadlines += [group[0].storage_deadline for group in self.by_storage_id.values()]
        if not self.spooling and not self.stopping:
            deadlines.append(self.next_spool)
        return min(deadlines, default=None)

    def tick(self) -> None:
        self.preparer.take()
        self._flush()
        now = self.ticked_at = time.monotonic()
        if not self.spooling and not self.stopping and now >= self.next_spool:
            self._drain_spool(now)
        self.searches.tick(now)
        for sid, (request, deadline, _) in list(self.relays.items()):
            if now >= deadline:
                del self.relays[sid]
                request.fail(Code.UNAVAILABLE, "storage did not answer in time")
        for rid, group in list(self.by_storage_id.items()):
            if now >= group[0].storage_deadline:
                del self.by_storage_id[rid]
                self.bulk_at_storage.discard(rid)
                self.log.warning("storage did not acknowledge in time; told the clients")
                for pending in group:
                    self._fail(pending, Code.UNAVAILABLE, "storage did not acknowledge in time")
        if self._bulk_due():
            self._bulk_step()

    def drain(self) -> None:
        """Give in-flight requests a moment to be acknowledged before exiting; bulk work
        not begun is refused (an import sends it again to the next daemon)."""
        self.preparer.stop()  # after what it was given
        self.preparer.take()
        self._flush()
        for pending, _ in self.bulk_ready:
            self._fail(pending, Code.UNAVAILABLE, "kirolearn is stopping")
        for request, *_ in self.bulk:
            request.fail(Code.UNAVAILABLE, "kirolearn is stopping")
        self.bulk.clear()
        self.bulk_ready = []
        deadline = time.monotonic() + min(2.0, self.storage_timeout_s)
        while self.by_storage_id and time.monotonic() < deadline:
            if self.storage.poll(50, zmq.POLLIN):
                self._on_storage(self.storage)
            self.tick()

