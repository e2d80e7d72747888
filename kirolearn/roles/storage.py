"""Storage role: the single SQLite writer.

Sockets (all bound here):
- ``storage`` ROUTER: ``put_events`` from ingest (acknowledged only after the
  transaction commits), the changes to records that ingest relays (``put_record``,
  ``forget``, ``update_record``, ``put_records``, ``forget_project``, ``prune_events``),
  ``put_embeddings`` (records' vectors, from retrieval; near-copies merged then),
  ``log_retrieval``, ``ping``. Requests that are already
  queued are committed together in one transaction (group commit), so a burst
  costs one fsync instead of one per event.
- ``batches`` PUSH: ready extraction batches, leased to whichever worker pulls.
- ``records`` PULL: from a worker, that it took a batch (its pid: a batch whose
  worker dies goes out again at once), that an attempt failed (and why), or the
  batch's records, committed together with the batch's completion. A batch already
  done is ignored, so a batch whose lease expired and was handed out twice is still
  committed once. A batch that keeps failing is split in two; one event that keeps
  failing is marked failed with the reason (``retry_batches`` re-queues it).
- with ``network.listen``, ``batches`` and ``records`` again on TCP (PORT+1, PORT+2),
  with CURVE, for extraction workers on other machines (``kirolearn worker extraction
  --connect tcp://HOST:PORT``): the same leases and exactly-once commits. Such a
  worker sends no pid; while it extracts it says so (``working``) every few seconds, and
  a batch it goes silent with goes out again after REMOTE_SILENCE_S. Only worker keys
  (``kirolearn keys add --worker``) get in; a revoked one is cut off within
  KEYS_CHECK_S (the TCP batches socket is bound anew, and the others reconnect) and its
  batches go out again. A private actor's batches go to this machine's workers only,
  unless ``network.remote_workers_private``.

Every worker's records, this machine's too, are scrubbed as an event is and must be
the batch's: in its namespace, made from its events (a worker elsewhere's, from a
batch it took); anything else is dropped and said in the log.
- ``feed`` PUB: after each commit, what changed (``events``, ``records`` or
  ``retrievals``, one frame, no payload), so the viewer reads new rows at once
  instead of polling. Nothing waits on it: a slow or absent subscriber loses
  only wake-ups, never data.

When the database cannot be written (a full disk, a read-only or damaged file, an I/O
error) every request gets an ``UNAVAILABLE`` reply that names the fault and what to do
(the shims then keep their events in the spool), ``ping`` carries it for ``kirolearn
status`` and ``doctor``, and the writer is reopened every few seconds until a write
succeeds again. A WAL file deleted under the running writer is folded back into the
database and started afresh, so readers see every committed event.

With ``backup.interval_h`` set, a backup is taken that often into ``backups/``
(``scheduled-<time>.db``, the last ``backup.keep`` kept), on a thread beside the writer.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator

import zmq

from kirolearn import config, contract, db, keys, paths, privacy, project, protocol, transport
from kirolearn.db import errors, reads, writes
from kirolearn.db.sqlite import backup as backups
from kirolearn.db.store import Connection
from kirolearn.roles import base
from kirolearn.search import embeddings

Code = protocol.ErrorCode
MAX_BATCH_ATTEMPTS = 5
BUSY_WINDOW_S = 0.05  # a put this recent means ingest traffic is flowing
BATCH_WORK_MAX_DEFER_S = 10.0  # extraction waits at most this long behind a burst
WAL_CHECK_S = 5.0  # how often the writer looks for a WAL deleted under it
CLAIM_CHECK_S = 0.25  # how often a batch's worker is looked for while it extracts
BATCH_WORK_GAP_S = 0.05  # batch work runs at most this often (a failing pass never spins)
NO_WORKER_RETRY_S = 0.25  # batches are due but no worker is free: offered again this soon
REOPEN_S = 2.0  # while the database cannot be written, how often to try again
TAKE_TARGET_S = 0.1  # a take keeps a worker about this long, at its recent pace
TAKE_MAX_BATCHES = 32  # ... and holds at most this many batches
TAKE_MAX_BYTES = 1 << 20  # ... and this many bytes (a larger batch goes alone)
RESULT_MESSAGES_PER_READ = 64  # workers' messages read in one look, at most
RESULTS_SLICE_S = 0.05  # workers' results committed in transactions about this long
REMOTE_SILENCE_S = 15.0  # a worker elsewhere unheard of this long has died with its batches
KEYS_CHECK_S = 0.5  # how often, while listening, the worker keys are looked at for a revoke
PURGE_AFTER_S = 2.0  # forgets in a row: the full-text index is purged once, after the last


def describe_fault(exc: errors.StoreError, path: db.Location) -> str | None:
    """What a store's error says about the machine, and what to do; None for an error
    that is not a fault of the disk, the file or the server (a bug, a constraint)."""
    where = db.describe(path)
    if db.is_postgres(path):
        if isinstance(exc, errors.StoreUnreachable | errors.StoreReadOnly | errors.StoreFull
                      | errors.StoreBusy):
            return (f"the database at {where} cannot be written ({exc}); check that its"
                    " server runs and lets kirolearn in (the agents keep their events in the"
                    " spool meanwhile)")
        return None
    if isinstance(exc, errors.StoreFull):
        return (f"the disk holding {path} is full; free some space there (the agents keep"
                " their events in the spool meanwhile, and they are stored once there is room)")
    if isinstance(exc, errors.StoreReadOnly):
        return (f"{path} cannot be written (a read-only file or file system); make it writable"
                " again (chmod u+w, or remount read-write)")
    if isinstance(exc, errors.StoreDamaged):
        return (f"{path} is damaged ({exc}); stop kirolearn and put a good copy in its place"
                " (kirolearn export/import keeps one), or move it aside to start afresh")
    if isinstance(exc, errors.StoreUnreachable):
        return f"{path} cannot be read or written ({exc}); check the disk and the file's folder"
    return None


def well_formed_changes(value: object) -> list[tuple[str, str]]:
    """The (path, event id) pairs of a records message's ``changed`` that are well formed
    (a worker's mistake there costs a ranking signal, never the batch)."""
    return [(item[0], item[1]) for item in (value if isinstance(value, list) else [])
            if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
            and 0 < len(item[0]) <= 500 and contract.is_ulid(item[1])]


class Storage(base.Role):
    role = "storage"

    def setup(self) -> None:
        cfg = self.settings["storage"]
        self.dedup_window_ms = int(self.settings["ingest"]["dedup_window_s"] * 1000)
        self.merge_window_s = self.settings["extraction"]["merge_window_s"]
        self.merge_min_similarity = self.settings["extraction"]["merge_min_similarity"]
        self.idle_ms = int(cfg["batch_idle_s"] * 1000)
        self.max_bytes = cfg["batch_max_bytes"]
        self.lease_ms = int(cfg["lease_s"] * 1000)
        self.group_max = max(1, cfg["group_commit_max"])
        self.path = db.location(self.base, self.settings)
        self._conn: Connection | None = None
        self.fault: str | None = None  # why the database cannot be written, said to all
        self.fault_since: str | None = None
        self.reopen_at = 0.0
        self.wal: int | None = None  # the inode of the WAL file the writer writes to
        # The file as last found whole, or damaged, by the quick check (``_check_pages``).
        self.checked: tuple[int, int, int] | None = None
        self.damaged: tuple[int, int, int] | None = None
        self.claims: dict[str, int] = {}  # leased batch → the pid of the worker that took it
        self.heard: dict[str, float] = {}  # batch of a worker elsewhere → when it last spoke
        self.holders: dict[str, str] = {}  # batch of a worker elsewhere → the worker's name
        self.unclaimed: set[str] = set()  # batches sent elsewhere, not yet said taken
        self.remote_private = self.settings["network"]["remote_workers_private"]
        self.private_warned = False
        # Workers' results read but not yet committed (``_save_results``).
        self.unsaved: list[writes.BatchResult] = []
        self.unsaved_failures: list[tuple[str, str]] = []  # (batch, why an attempt failed)
        self.batch_s: float | None = None  # the workers' recent seconds per batch
        self.backup_every_s = self.settings["backup"]["interval_h"] * 3600  # 0: never
        if self.backup_every_s and db.is_postgres(self.path):
            self.log.warning("backup.interval_h is ignored: a PostgreSQL store is backed up"
                             " by PostgreSQL's own tools (pg_dump, base backups)")
            self.backup_every_s = 0
        self.backup_due = (backups.next_due(paths.backup_dir(self.base), self.backup_every_s)
                           if self.backup_every_s else math.inf)
        self.backup_thread: threading.Thread | None = None
        # Unbatched events per namespace: [bytes, newest arrival ms], kept in memory so
        # deciding when a batch is due costs nothing per tick. After a restart the idle
        # clock starts again from now.
        try:
            self.pending = {ns: [size, db.now_ms()]
                            for ns, size in reads.pending_by_namespace(self.conn).items()}
        except (base.Unavailable, errors.StoreError) as exc:  # serve, and say why, until fixed
            self.log.error("the database cannot be read at start: %s", exc)
            self.pending = {}
        self.turn_ended: set[str] = set()
        self.group: list[base.Request] = []  # put_events waiting for the next commit
        self.service = self.serve_on(paths.endpoint("storage", self.base))
        # Where takes go: this machine's workers first, then those elsewhere.
        self.batches = [self.bind(zmq.PUSH, paths.endpoint("batches", self.base), hwm=1)]
        self.add_socket(self.bind(zmq.PULL, paths.endpoint("records", self.base)),
                        self._on_records)
        self.keyring: keys.Keyring | None = None
        self.keys_check_at = math.inf
        if self.settings["network"]["listen"]:
            self._listen_for_workers(self.settings["network"]["listen"])
        self.feed = self.bind(zmq.PUB, paths.endpoint("feed", self.base), hwm=100)
        self.purge_due: float | None = None  # when to purge forgotten words from the index
        self.events_stored = 0
        self.commits = 0
        self.last_put = self.last_batch_work = 0.0
        self.wal_check_at = 0.0
        self.dispatch_due: float | None = 0.0  # batches may be waiting from the last run

    def _listen_for_workers(self, listen: str) -> None:
        """The batches and records sockets on TCP, with CURVE, for workers elsewhere."""
        try:
            endpoints = transport.tcp_endpoints(listen)
            pair = keys.server_pair(self.base)
        except ValueError as exc:  # keys.KeysError too: FATAL, with what to do
            raise config.ConfigError(str(exc)) from exc
        self.keyring = keys.Keyring(self.base, keys.WORKER)
        self.worker_names = self.keyring.names()  # to see a revoke, whoever reads it first
        self.keys_check_at = time.monotonic() + KEYS_CHECK_S
        self.answer_zap(self.keyring.name_of)
        curve = self.worker_curve = transport.Curve(pair.public, pair.secret)
        self.remote_batches = endpoints["batches"]
        self.batches.append(self.bind(zmq.PUSH, endpoints["batches"], hwm=1, curve=curve))
        self.add_socket(self.bind(zmq.PULL, endpoints["records"], curve=curve),
                        self._on_records)
        self.log.info("extraction workers elsewhere: %s and %s (CURVE)",
                      endpoints["batches"], endpoints["records"])

    def counters(self) -> dict:
        counters = {"events_stored": self.events_stored, "commits": self.commits}
        if self.fault:
            counters.update(fault=self.fault, fault_since=self.fault_since)
        return counters

    # -- the writer connection ----------------------------------------------------------------

    @property
    def conn(self) -> Connection:
        """The writer, opened again (at most every REOPEN_S) after a fault; Unavailable,
        naming the fault, while it cannot be."""
        if self._conn is None:
            if time.monotonic() < self.reopen_at:
                raise base.Unavailable(f"storage cannot write: {self.fault}")
            try:
                conn = db.connect_writer(self.path)
                if conn.name == "sqlite":
                    self._check_pages(conn)
            except errors.StoreError as exc:
                self._fail_writer(exc)
                raise base.Unavailable(f"storage cannot write: {self.fault}") from exc
            self._conn = conn
        return self._conn

    @contextlib.contextmanager
    def writing(self) -> Iterator[Connection]:
        """One transaction on the writer; a fault of the disk or file becomes Unavailable
        (and the writer is reopened later), a success clears the fault."""
        conn = self.conn
        try:
            with conn.transaction():
                yield conn
        except errors.StoreError as exc:
            if describe_fault(exc, self.path) is None:
                raise
            self._fail_writer(exc)
            raise base.Unavailable(f"storage cannot write: {self.fault}") from exc
        if self.wal is None and not db.is_postgres(self.path):
            with contextlib.suppress(OSError):
                self.wal = os.stat(f"{self.path}-wal").st_ino
        if self.fault:
            self.log.warning("the database can be written again (fault since %s: %s)",
                             self.fault_since, self.fault)
            self.fault = self.fault_since = None

    def _check_pages(self, conn: Connection) -> None:
        """Damaged pages are found before anything is written over them: SQLite's quick
        check when the writer opens a file not checked yet (known by its inode, size and
        time, so a fault's retries do not read it again), raised as the damage it is."""
        info = os.stat(self.path)
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
        if stamp == self.checked:
            return
        problems = [] if stamp == self.damaged else conn.dialect.damage(conn)
        if problems or stamp == self.damaged:
            conn.close()
            self.damaged = stamp
            raise errors.StoreDamaged("database disk image is malformed: "
                                        + "; ".join(problems or ["as found before"]))
        self.checked = stamp

    def _fail_writer(self, exc: errors.StoreError) -> None:
        fault = describe_fault(exc, self.path) or f"{db.describe(self.path)}: {exc}"
        if fault != self.fault:
            self.log.error("storage cannot write: %s", fault)
            self.fault, self.fault_since = fault, db.utc_now()
        if self._conn is not None:
            with contextlib.suppress(errors.StoreError):
                self._conn.close()
            self._conn = self.wal = None
        self.reopen_at = time.monotonic() + REOPEN_S

    def _check_wal(self) -> None:
        """A WAL deleted (or replaced) under the writer hides what it holds from every
        reader: fold it into the database (the writer still has it open) and start
        afresh."""
        if self._conn is None or self.wal is None:
            return
        try:
            same = os.stat(f"{self.path}-wal").st_ino == self.wal
        except FileNotFoundError:
            same = False
        if not same:
            self.log.warning("the WAL file was deleted; folding it into the database")
            with contextlib.suppress(errors.StoreError):
                writes.checkpoint(self._conn)
            self._conn.close()
            self._conn = self.wal = None  # reopened by the next write

    def _announce(self, what: bytes) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self.feed.send(what, flags=zmq.NOBLOCK)

    # -- requests ---------------------------------------------------------------------------

    @base.op("put_events")
    def put_events(self, request: base.Request) -> object:
        """``put_events {events: [stored event…]}`` → ``{results: [{event_id, status}…]}``,
        answered after the transaction holding them commits. Requests already queued
        are committed together (group commit): a burst costs one fsync."""
        request.require("events", list, "a list")
        self.group.append(request)
        if len(self.group) >= self.group_max:
            self._commit_group()
        return base.LATER

    def after_requests(self) -> None:
        self._commit_group()
        self.dispatch_due = 0.0  # a request may have made a batch due (a retry, a split)

    def _commit_group(self) -> None:
        group, self.group = self.group, []
        if not group:
            return
        stored: list[dict] = []
        transaction_time = db.utc_now()
        try:
            with self.writing():
                results = [[self._put_one(event, transaction_time, stored)
                            for event in request.body["events"]] for request in group]
                history = self._batch_history(stored)
        except base.Unavailable as exc:  # said in the log once, when the fault began
            for request in group:
                request.fail(Code.UNAVAILABLE, exc.reason)
            return
        except Exception as exc:
            self.log.exception("commit failed")
            for request in group:
                request.fail(Code.INTERNAL, f"storage commit failed: {exc}")
            return
        for request, answer in zip(group, results, strict=True):
            request.reply({"results": answer})
        now = db.now_ms()
        for namespace in history:
            self.pending.pop(namespace, None)
        for event in stored:
            if event["namespace"] in history:
                continue
            entry = self.pending.setdefault(event["namespace"], [0, now])
            entry[0] += len(event["body_json"])
            entry[1] = now
            if event["kind"] == "session_summary":
                self.turn_ended.add(event["namespace"])
        self.events_stored += len(stored)
        self.commits += 1
        if stored:
            self._announce(b"events")
        self.last_put = time.monotonic()

    def _batch_history(self, stored: list[dict]) -> set[str]:
        """Events imported from an export that had already distilled them (``history``)
        are batched at once as done, with their namespace's other pending events (ready);
        the namespaces so batched."""
        history: dict[str, set[str]] = {}
        for event in stored:
            if event.get("history"):
                history.setdefault(event["namespace"], set()).add(event["event_id"])
        for namespace, event_ids in history.items():
            writes.form_batches(self.conn, namespace, "import", self.max_bytes,
                                history=frozenset(event_ids))
        return set(history)

    def _put_one(self, event: object, transaction_time: str, stored: list[dict]) -> dict:
        """Insert one event inside the open transaction.

        Ingest has validated, scrubbed and hashed the event; only ingest can reach
        this socket (0700 runtime directory). An event of the wrong shape (a bug
        upstream) fails before any SQL runs and is rejected alone; a database error
        fails the whole group, which is rolled back and retried by its clients.
        """
        event_id = event.get("event_id") if isinstance(event, dict) else None
        try:
            status = writes.insert_event(self.conn, event, self.dedup_window_ms, transaction_time)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return {"event_id": event_id, "status": "rejected", "reason": f"malformed: {exc!r}"}
        if status == "stored":
            stored.append(event)
            return {"event_id": event_id, "status": status}
        stored_at = reads.event_stored_at(self.conn, event_id)  # None: the same content
        return {"event_id": event_id, "status": status, **({"stored_at": stored_at}
                                                            if stored_at else {})}

    @base.op("log_retrieval")
    def log_retrieval(self, request: base.Request) -> None:
        """``log_retrieval {prompt_event_id, namespace, record_ids, latency_ms, outcome,
        context, error?}`` → ``{}``: one prompt's retrieval, for the viewer."""
        body = request.body
        try:
            with self.writing():
                writes.log_retrieval(
                    self.conn, body.get("prompt_event_id"), body.get("namespace"),
                    list(body.get("record_ids") or []), float(body.get("latency_ms", 0.0)),
                    str(body.get("outcome")), str(body.get("context") or ""), body.get("error"))
        except (errors.StoreConflict, TypeError, ValueError) as exc:
            raise base.BadRequest(str(exc)) from exc
        self._announce(b"retrievals")

    @base.op("put_record")
    def put_record(self, request: base.Request) -> dict:
        """``put_record {record}`` → ``{record_id, status: stored}``: a record saved
        through MCP (checked and scrubbed by ingest; checked again here). What the agent
        saved on purpose is never merged into another record."""
        try:
            record = contract.validate_record(request.body.get("record"))
        except contract.ContractError as exc:
            raise base.BadRequest(str(exc)) from exc
        with self.writing():
            writes.insert_record(self.conn, record)
        result = {"record_id": record["record_id"], "status": "stored"}
        self.log.info("put_record: %s", result)
        self._announce(b"records")
        return result

    @base.op("retry_batches")
    def retry_batches(self, request: base.Request) -> dict:
        """``retry_batches`` → ``{requeued}``: every failed extraction batch is handed out
        again (``kirolearn extraction retry``)."""
        with self.writing():
            requeued = writes.retry_batches(self.conn)
        self.log.info("retry_batches: %d failed batch(es) re-queued", requeued)
        return {"requeued": requeued}

    @base.op("forget")
    def forget(self, request: base.Request) -> dict:
        """``forget {record_id, namespaces}`` → ``{deleted}``: whether the record was
        there, in one of those namespaces (a tombstone keeps its id)."""
        record_id = request.require("record_id", str, "a record id")
        namespaces = request.require("namespaces", list, "a list of namespaces")
        with self.writing():
            deleted = writes.delete_record(self.conn, record_id, namespaces)
        self.log.info("forget: %s %s", record_id, "deleted" if deleted else "not found")
        self._forgotten(b"records")
        if deleted:
            self.purge_due = time.monotonic() + PURGE_AFTER_S
        return {"deleted": deleted}

    @base.op("forget_project")
    def forget_project(self, request: base.Request) -> dict:
        """``forget_project {namespace}`` → ``{events, records}``: everything of one
        project removed (tombstones kept for its records)."""
        namespace = request.require("namespace", str, "a namespace")
        with self.writing():
            removed = writes.forget_namespace(self.conn, namespace)
        self.pending.pop(namespace, None)
        self.turn_ended.discard(namespace)
        self.log.info("forget_project: %s: %d event(s), %d record(s)", namespace,
                      removed["events"], removed["records"])
        self._forgotten(b"events", b"records", b"retrievals")
        return removed

    @base.op("update_record")
    def update_record(self, request: base.Request) -> dict:
        """``update_record {record_id, namespaces, changes, reason?}`` → ``{updated}``:
        an edit (a new version) or a record marked invalid (``writes.update_record``)."""
        record_id = request.require("record_id", str, "a record id")
        namespaces = request.require("namespaces", list, "a list of namespaces")
        changes = request.require("changes", dict, "an object")
        with self.writing():
            updated = writes.update_record(self.conn, record_id, namespaces, changes,
                                           request.body.get("reason"))
        self.log.info("update_record: %s %s", record_id, sorted(changes) if updated
                      else "not found")
        self._forgotten(b"records")
        return {"updated": updated}

    @base.op("put_records")
    def put_records(self, request: base.Request) -> dict:
        """``put_records {items: [{record, versions, invalid_reason, embedding} |
        {tombstone}…]}`` → ``{results: [{record_id, status, reason?}…]}``: an export's
        records and tombstones (checked and scrubbed by ingest), in one transaction."""
        items = request.require("items", list, "a list")
        results = []
        with self.writing():
            for item in items:
                if "tombstone" in item:
                    result = writes.import_tombstone(self.conn, item["tombstone"])
                    results.append({"record_id": item["tombstone"]["record_id"], **result})
                    if result["status"] == "stored":
                        self.purge_due = time.monotonic() + PURGE_AFTER_S
                    continue
                embedding = item.get("embedding")
                if embedding and len(embedding["vector"]) != embeddings.DIMENSIONS * 4:
                    embedding = None  # another model's: embedded again here
                result = writes.import_record(self.conn, item["record"], item["versions"],
                                              item.get("invalid_reason"), embedding,
                                              embeddings.record_hash)
                results.append({"record_id": item["record"]["record_id"], **result})
        self._forgotten(b"records")
        return {"results": results}

    @base.op("prune_events")
    def prune_events(self, request: base.Request) -> dict:
        """``prune_events {before_ms, namespace?}`` → ``{events, bytes_before,
        bytes_after}``: raw events already distilled removed, and the file compacted."""
        before_ms = request.require("before_ms", int, "a time in ms")
        namespace = request.body.get("namespace")
        size_before = self._file_bytes()
        with self.writing():
            removed = writes.prune_events(self.conn, before_ms, namespace)
        if removed:
            try:
                writes.compact(self.conn)
            except errors.StoreError as exc:  # removed all the same; the space is reused later
                self.log.warning("prune_events: the file could not be compacted: %s", exc)
        self.log.info("prune_events: %d event(s) removed", removed)
        self._announce(b"events")
        return {"events": removed, "bytes_before": size_before, "bytes_after": self._file_bytes()}

    @base.op("scrub")
    def scrub(self, request: base.Request) -> dict:
        """``scrub {dry_run?}`` → ``{redacted: {table: {kind: count}}}``: today's rules
        run over everything stored, redacting in place (``writes.scrub_stored``); the
        full-text index is then rewritten and the WAL folded in, so no old copy stays."""
        dry_run = bool(request.body.get("dry_run"))
        with self.writing():
            redacted = writes.scrub_stored(self.conn, dry_run)
        if redacted and not dry_run:
            self._purge_index()
            for changed in (b"events", b"records", b"retrievals"):
                self._announce(changed)
        self.log.info("scrub%s: %s", " (dry run)" if dry_run else "",
                      {table: sum(kinds.values()) for table, kinds in redacted.items()} or
                      "nothing to redact")
        return {"redacted": redacted}

    def _file_bytes(self) -> int:
        """The store's size on disk (on PostgreSQL, its database's)."""
        if db.is_postgres(self.path):
            return reads.database_bytes(self.conn)
        return sum(os.stat(f"{self.path}{suffix}").st_size for suffix in ("", "-wal")
                   if os.path.exists(f"{self.path}{suffix}"))

    def _forgotten(self, *what: bytes) -> None:
        """After a change that removed text: the WAL's copies of the old pages are folded
        into the file (best effort: not while a reader holds them) and the viewers told."""
        with contextlib.suppress(errors.StoreError):
            writes.checkpoint(self.conn)
        for item in what:
            self._announce(item)

    @base.op("put_embeddings")
    def put_embeddings(self, request: base.Request) -> dict:
        """``put_embeddings {items: [{record_id, text_hash, vector}]}`` → ``{written,
        merged}``: each vector (from retrieval) is stored if the record still has the
        text it was made from, and an extracted record that says the same as an older
        one in other words is merged into it (``writes.reconcile``)."""
        items = request.require("items", list, "a list")
        written, merged = 0, {}
        with self.writing():
            for item in items:
                if (isinstance(item, dict) and isinstance(item.get("record_id"), str)
                        and isinstance(item.get("text_hash"), str)
                        and isinstance(item.get("vector"), bytes)
                        and len(item["vector"]) == embeddings.DIMENSIONS * 4
                        and writes.save_embedding(self.conn, item["record_id"],
                                                  item["text_hash"], item["vector"],
                                                  embeddings.record_hash)):
                    written += 1
                    if self.merge_window_s > 0:
                        target = writes.reconcile(self.conn, item["record_id"], item["vector"],
                                                  self.merge_min_similarity,
                                                  self.merge_window_s)
                        if target is not None:
                            merged[item["record_id"]] = target
        if merged:
            self.log.info("put_embeddings: %d record(s) merged into older ones that say"
                          " the same: %s", len(merged), merged)
            self._announce(b"records")
        elif written:
            self._announce(b"vectors")  # retrieval's back-fill counts what is left
        return {"written": written, "merged": len(merged)}

    # -- extraction batches ---------------------------------------------------------------------

    def wake_at(self) -> float | None:
        """The next of: the WAL check, a scheduled backup, the index purge, workers'
        results still to commit (now), and batch work (a batch to form or hand out, a
        worker to look for), which waits while events pour in (``tick``)."""
        now = time.monotonic()
        due = [now + self.backup_due - time.time(), self.keys_check_at]
        if self.unsaved or self.unsaved_failures:
            due.append(now)
        if self.wal is not None:
            due.append(self.wal_check_at)
        busy_until = self.last_put + BUSY_WINDOW_S
        if self.purge_due is not None:
            due.append(max(self.purge_due, busy_until))
        work = self._batch_work_due(now)
        if work is not None:
            if now < busy_until:
                work = max(work, min(busy_until, self.last_batch_work + BATCH_WORK_MAX_DEFER_S))
            work = max(work, self.last_batch_work + BATCH_WORK_GAP_S)
            if self._conn is None:
                work = max(work, self.reopen_at)
            due.append(work)
        return min(due)

    def _batch_work_due(self, now: float) -> float | None:
        if self.turn_ended:
            return now
        due = [] if self.dispatch_due is None else [self.dispatch_due]
        if self.claims:
            due.append(self.last_batch_work + CLAIM_CHECK_S)
        if self.heard:
            due.append(min(self.heard.values()) + REMOTE_SILENCE_S)
        now_ms = db.now_ms()
        for size, newest in self.pending.values():
            due.append(now if size >= self.max_bytes
                       else now + (newest + self.idle_ms - now_ms) / 1000)
        return min(due, default=None)

    def tick(self) -> None:
        """Workers' results committed, a slice at a time; batch bookkeeping once they
        are, deferred while events are pouring in (acks come first), but never for
        longer than BATCH_WORK_MAX_DEFER_S."""
        now = time.monotonic()
        if now >= self.wal_check_at:
            self.wal_check_at = now + WAL_CHECK_S
            self._check_wal()
        self._start_backup_when_due()
        if now >= self.keys_check_at:
            self.keys_check_at = now + KEYS_CHECK_S
            self._cut_off_revoked_workers()
        self._save_results()
        if self.unsaved:
            return
        busy = now - self.last_put < BUSY_WINDOW_S
        if not busy and self.purge_due is not None and now >= self.purge_due:
            self._purge_index()
        if busy and now - self.last_batch_work < BATCH_WORK_MAX_DEFER_S:
            return
        if self._conn is None and now < self.reopen_at:
            return  # a fault: nothing can be done before the writer is tried again
        self.last_batch_work = now
        self._batch_work(self._form_batches, self._reclaim_from_dead_workers,
                         self._dispatch_batches)

    def _batch_work(self, *steps: Callable[[], None]) -> None:
        """Run batch bookkeeping steps; a fault or an error stops them until next time."""
        try:
            for step in steps:
                step()
        except base.Unavailable:
            pass  # said when the fault began
        except errors.StoreError:
            self.log.exception("batch bookkeeping failed; will retry")

    def _purge_index(self) -> None:
        """The words of forgotten records out of the full-text index (``purge_index``),
        once no forget has come for a moment and events are not pouring in."""
        self.purge_due = None
        try:
            writes.purge_index(self.conn)  # one statement: a transaction of its own
        except (base.Unavailable, errors.StoreError) as exc:
            self.log.warning("the full-text index could not be purged: %s", exc)
            return
        self._forgotten()
        self.log.info("the full-text index was rewritten without the forgotten records")

    def _start_backup_when_due(self) -> None:
        if time.time() < self.backup_due or (self.backup_thread and self.backup_thread.is_alive()):
            return
        self.backup_due = time.time() + self.backup_every_s
        self.backup_thread = threading.Thread(target=self._backup, name="backup", daemon=True)
        self.backup_thread.start()

    def _backup(self) -> None:
        """A scheduled backup, on a thread and a connection of its own: SQLite copies
        without holding the GIL, so commits go on meanwhile."""
        try:
            folder = paths.ensure_private_dir(paths.backup_dir(self.base))
            dest, summary, removed = backups.take_scheduled(self.path, folder,
                                                            self.settings["backup"]["keep"])
        except (backups.BackupError, OSError, errors.StoreError) as exc:
            self.log.error("scheduled backup failed: %s", exc)
            return
        self.log.info("scheduled backup: %d events and %d records to %s%s", summary["events"],
                      summary["records"], dest,
                      f"; {len(removed)} older removed" if removed else "")

    def _form_batches(self) -> None:
        now = db.now_ms()
        ready = []
        for namespace, (size, newest) in self.pending.items():
            if namespace in self.turn_ended:
                ready.append((namespace, "turn_end"))
            elif size >= self.max_bytes:
                ready.append((namespace, "size"))
            elif now - newest >= self.idle_ms:
                ready.append((namespace, "idle"))
        self.turn_ended.clear()
        if not ready:
            return
        with self.writing():
            for namespace, reason in ready:
                writes.form_batches(self.conn, namespace, reason, self.max_bytes,
                                    whole_turns=reason == "turn_end")
        for namespace, reason in ready:
            del self.pending[namespace]
            if reason == "turn_end":  # a turn begun since waits for its own end
                left = reads.pending_bytes(self.conn, namespace)
                if left:
                    self.pending[namespace] = [left, now]

    def _cut_off_revoked_workers(self) -> None:
        """A worker key revoked: its connection is closed (the TCP batches socket is
        closed and bound anew: the other workers reconnect, the revoked one is refused),
        and its batches, with those sent there and not yet said taken, go out again now.
        A bind the port does not take yet is tried again at the next look."""
        if self.keyring is None:
            return
        allowed = self.keyring.names()
        revoked, self.worker_names = self.worker_names - allowed, allowed
        gone = {b for b, name in self.holders.items() if name not in allowed}
        if revoked or gone:
            if len(self.batches) > 1:
                self.batches.pop().close(linger=0)
            for batch_id in gone | self.unclaimed:
                name = self.holders.pop(batch_id, None)
                self.heard.pop(batch_id, None)
                self.log.warning("batch %s: %s; handing it out again", batch_id,
                                 f"worker {name}'s key was revoked" if name else
                                 "sent to the workers elsewhere as a key was revoked")
                with self.writing():
                    writes.batch_attempt_failed(self.conn, batch_id,
                                                "the worker's key was revoked")
            self.unclaimed.clear()
            self.dispatch_due = 0.0
        if len(self.batches) == 1:
            try:
                self.batches.append(self.bind(zmq.PUSH, self.remote_batches, hwm=1,
                                              curve=self.worker_curve))
            except zmq.ZMQError as exc:
                self.log.warning("the workers' batches port is not free yet (%s); trying"
                                 " again", exc)

    def _reclaim_from_dead_workers(self) -> None:
        """A batch whose worker process is gone, or whose worker elsewhere has gone silent,
        goes out again now, not at lease end. (Kept in memory: after a restart of storage,
        the lease does it.)"""
        silent = time.monotonic() - REMOTE_SILENCE_S
        for batch_id, heard in list(self.heard.items()):
            if heard < silent:
                self.log.warning("batch %s: its worker elsewhere has said nothing for %.0f s;"
                                 " handing it out again", batch_id, REMOTE_SILENCE_S)
                del self.heard[batch_id]
                self.holders.pop(batch_id, None)
                with self.writing():
                    writes.batch_attempt_failed(self.conn, batch_id,
                                                "the worker elsewhere went silent")
        for batch_id, pid in list(self.claims.items()):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                self.log.warning("batch %s: worker %d is gone; handing it out again",
                                 batch_id, pid)
                del self.claims[batch_id]
                with self.writing():
                    writes.batch_attempt_failed(self.conn, batch_id,
                                                f"worker {pid} died while extracting it")
            except PermissionError:
                pass  # alive, as another user

    def _take_size(self) -> int:
        """How many due batches go to a worker in one message: as many as it does in about
        TAKE_TARGET_S at its recent pace, so that a backlog costs one message per take
        (and its results few commits), while a slow (model-backed) worker still takes one
        at a time and leaves the rest to the others."""
        if self.batch_s is None:
            return 1
        return max(1, min(TAKE_MAX_BATCHES, int(TAKE_TARGET_S / max(self.batch_s, 1e-4))))

    def _dispatch_batches(self) -> None:
        """Hand due batches to free workers, several in one take when they go fast;
        ``dispatch_due`` says when to look again: at once while more may be due, soon
        while no worker is free, else when the first lease runs out (a message brings
        anything sooner)."""
        now = db.now_ms()
        per_take = self._take_size()
        limit = max(16, 2 * per_take)
        due = reads.due_batches(self.conn, now, limit=limit)
        self.dispatch_due = time.monotonic() if len(due) == limit else None
        if len(due) < limit:
            expires = reads.next_lease_expiry(self.conn)
            if expires is not None:
                self.dispatch_due = time.monotonic() + max(0, expires - now) / 1000
        take: list[tuple[dict, int]] = []  # (the batch as sent, its attempts so far)
        take_bytes = 0
        take_local = False  # the take holds a private actor's batches: here only
        for batch_id, namespace, attempts in due:
            if attempts >= MAX_BATCH_ATTEMPTS:
                self._give_up(batch_id, f"{attempts} attempts failed")
                continue
            local = self._here_only(namespace)
            if take and local != take_local:
                if not self._hand_out(take, now, take_local):
                    return
                take, take_bytes = [], 0
            take_local = local
            if not take and not self._worker_free(local):
                if local:
                    continue  # a private batch waits for this machine's workers
                return
            batch = {"batch_id": batch_id, "namespace": namespace,
                     "events": reads.batch_events(self.conn, batch_id)}
            size = len(protocol.pack(batch))
            if size > protocol.MAX_FRAME_BYTES - 64:
                self._give_up(batch_id, f"the batch is {size} bytes; a frame may carry"
                                        f" {protocol.MAX_FRAME_BYTES}")
                continue
            if take and take_bytes + size > TAKE_MAX_BYTES:
                if not self._hand_out(take, now, local) or not self._worker_free(local):
                    return
                take, take_bytes = [], 0
            take.append((batch, attempts))
            take_bytes += size
            if len(take) == per_take:
                if not self._hand_out(take, now, local):
                    return
                take, take_bytes = [], 0
        if take:
            self._hand_out(take, now, take_local)

    def _here_only(self, namespace: str) -> bool:
        """Whether a batch of this namespace goes to this machine's workers alone: a
        private actor's, unless ``network.remote_workers_private``."""
        if self.remote_private or len(self.batches) == 1:
            return False
        if not project.parts(namespace)[0].endswith(project.PRIVATE):
            return False
        if not self.settings["extraction"]["workers"] and not self.private_warned:
            self.private_warned = True
            self.log.warning("a private actor's batches wait: they go to this machine's"
                             " workers only (extraction.workers is 0), unless"
                             " network.remote_workers_private = true")
        return True

    def _worker_free(self, here_only: bool = False) -> bool:
        """Whether a worker (``here_only``: of this machine) can take a message now; if
        not, batches are offered again soon (and none is read for nothing). None can
        while results wait to be committed: a fast worker would outrun the writer."""
        sockets = self.batches[:1] if here_only else self.batches
        if not self.unsaved and any(sock.poll(0, zmq.POLLOUT) for sock in sockets):
            return True
        self.dispatch_due = time.monotonic() + NO_WORKER_RETRY_S
        return False

    def _hand_out(self, take: list[tuple[dict, int]], now: int, here_only: bool = False
                  ) -> bool:
        """Send one take to a free worker (``here_only``: of this machine) and lease its
        batches; False if no worker took it (they stay due)."""
        message = protocol.pack({"batches": [batch for batch, _ in take]})
        for sock in self.batches[:1] if here_only else self.batches:
            try:
                sock.send(message, flags=zmq.NOBLOCK)
                break
            except zmq.Again:
                continue
        else:
            return False  # no worker free (one went away since the poll)
        if sock is not self.batches[0]:
            self.unclaimed.update(batch["batch_id"] for batch, _ in take)
        with self.writing():
            writes.lease_batches(self.conn, [batch["batch_id"] for batch, _ in take],
                                 now + self.lease_ms)
        lease_end = time.monotonic() + self.lease_ms / 1000
        self.dispatch_due = min(self.dispatch_due or lease_end, lease_end)
        for batch, attempts in take:
            if attempts:
                self.log.warning("batch %s handed out again (attempt %d)", batch["batch_id"],
                                 attempts + 1)
        return True

    def _give_up(self, batch_id: str, why: str) -> None:
        """A batch that cannot be done whole is split in two; a single event that cannot
        be done is marked failed, with the reason, for ``kirolearn extraction retry``."""
        with self.writing():
            other = writes.split_batch(self.conn, batch_id)
            if other is None:
                last = reads.batch_error(self.conn, batch_id)
                writes.fail_batch(self.conn, batch_id, why + (f"; last: {last}" if last else ""))
        if other is None:
            self.log.error("batch %s failed (%s); its event stays stored, and `kirolearn"
                           " extraction retry` hands it out again", batch_id, why)
        else:
            self.log.warning("batch %s split in two (%s); the second half is %s", batch_id,
                             why, other)

    def _on_records(self, sock: zmq.Socket) -> None:
        """What the workers have sent since the last look: the batches they took noted,
        and the results committed (``_save_results``); then the next take handed out at
        once (unless events are pouring in: acks come first)."""
        self.dispatch_due = 0.0  # a worker is free again, or a batch is back
        for _ in range(RESULT_MESSAGES_PER_READ):
            try:
                frame = sock.recv(zmq.NOBLOCK, copy=False)
                message = protocol.unpack(frame.bytes)
            except zmq.Again:
                break
            except protocol.DecodeError as exc:
                self.log.warning("dropped a malformed records message: %s", exc)
                continue
            key = transport.peer_key(frame)
            worker = None if key is None or self.keyring is None else self.keyring.name_of(key)
            if key is not None and worker is None:
                self.log.warning("dropped a records message from a worker no longer allowed")
                continue
            self._read_worker_message(message, worker)
        self._save_results()
        if time.monotonic() - self.last_put >= BUSY_WINDOW_S:
            self._batch_work(self._dispatch_batches)

    def _read_worker_message(self, message: dict, worker: str | None = None) -> None:
        """A claim (``batch_ids``, and ``worker_pid`` here) and a worker elsewhere's
        (``worker``: its key's name) ``working`` are noted at once; a take's ``results``
        are checked and added to what is to be committed."""
        ids, working = message.get("batch_ids"), message.get("working")
        if worker is not None and isinstance(ids, list):  # heard from now on (not its pid)
            for batch_id in ids:
                if isinstance(batch_id, str) and batch_id in self.unclaimed:
                    self.unclaimed.discard(batch_id)
                    self.heard[batch_id] = time.monotonic()
                    self.holders[batch_id] = worker
            return
        if worker is not None and isinstance(working, list):  # still at it
            for batch_id in working:
                if isinstance(batch_id, str) and self.holders.get(batch_id) == worker:
                    self.heard[batch_id] = time.monotonic()
            return
        if isinstance(ids, list):
            pid = message.get("worker_pid")
            if isinstance(pid, int):
                self.claims.update(dict.fromkeys((i for i in ids if isinstance(i, str)), pid))
            return
        items = message.get("results")
        if not isinstance(items, list):
            self.log.warning("dropped a records message without batch_ids or results")
            return
        seconds = message.get("seconds")
        if isinstance(seconds, int | float) and seconds >= 0 and items:
            pace = seconds / len(items)
            self.batch_s = pace if self.batch_s is None else 0.7 * self.batch_s + 0.3 * pace
        for item in items:
            batch_id = item.get("batch_id") if isinstance(item, dict) else None
            if not isinstance(batch_id, str):
                self.log.warning("dropped a result without a batch_id")
                continue
            if worker is not None and self.holders.get(batch_id) != worker:
                self.log.warning("dropped worker %s's result for batch %s, which it was not"
                                 " given", worker, batch_id)
                continue
            self.claims.pop(batch_id, None)
            self.heard.pop(batch_id, None)
            self.holders.pop(batch_id, None)
            self.unclaimed.discard(batch_id)
            if isinstance(item.get("error"), str):
                self.log.warning("batch %s: an attempt failed: %s", batch_id, item["error"])
                self.unsaved_failures.append((batch_id, item["error"][:1000]))
            elif isinstance(item.get("records"), list):
                valid = self._the_batchs_records(batch_id, item["records"], worker)
                if valid is not None:
                    self.unsaved.append((batch_id, valid,
                                         well_formed_changes(item.get("changed"))))
            else:
                self.log.warning("batch %s: dropped a result without records or error", batch_id)

    def _the_batchs_records(self, batch_id: str, records: list, worker: str | None
                            ) -> list[dict] | None:
        """A result's records, scrubbed and checked: each valid, in the batch's namespace
        and made from its events; None when the batch is not there (or cannot be read
        now: its lease hands it out again)."""
        valid = []
        for record in records:
            try:
                valid.append(contract.validate_record(privacy.scrub_record(record)))
            except contract.ContractError as exc:
                self.log.warning("batch %s: dropped an invalid record: %s", batch_id, exc)
        try:
            scope = reads.batch_scope(self.conn, batch_id)
        except (base.Unavailable, errors.StoreError) as exc:
            self.log.warning("batch %s: its result cannot be checked now: %s", batch_id, exc)
            return None
        if scope is None:
            self.log.warning("dropped a result for batch %s, which does not exist", batch_id)
            return None
        namespace, event_ids = scope
        kept = [r for r in valid if r["namespace"] == namespace
                and set(r["source_event_ids"]) <= event_ids]
        if len(kept) < len(valid):
            self.log.warning("batch %s: dropped %d record(s) of %s that are not the batch's"
                             " (their namespace or events are another's)", batch_id,
                             len(valid) - len(kept), f"worker {worker}" if worker else "a worker")
        return kept

    def _save_results(self) -> None:
        """Failed attempts and completed batches, in one transaction that stops taking
        batches once it has run RESULTS_SLICE_S; the rest wait for the next pass of the loop,
        after the events queued meanwhile (a take's thousand records committed at once held
        the events' acks for a second on PostgreSQL). On a fault nothing is committed: the
        batches go out again when their leases run out."""
        if not (self.unsaved or self.unsaved_failures):
            return
        started = time.monotonic()
        outcome: dict[str, int | str | None] = {}
        try:
            with self.writing():
                failures, self.unsaved_failures = self.unsaved_failures, []
                for batch_id, error in failures:
                    writes.batch_attempt_failed(self.conn, batch_id, error)
                while self.unsaved and (not outcome
                                        or time.monotonic() - started < RESULTS_SLICE_S):
                    outcome.update(writes.complete_batches(self.conn, [self.unsaved.pop(0)],
                                                           self.merge_window_s))
        except base.Unavailable:
            self.unsaved, self.unsaved_failures = [], []
            return  # said when the fault began
        if not self.unsaved:
            self.dispatch_due = 0.0  # the workers may have the next take
        committed = {b: n for b, n in outcome.items() if isinstance(n, int)}
        for batch_id, what in outcome.items():
            if what is None:
                self.log.info("batch %s was already committed; ignored a second result",
                              batch_id)
            elif isinstance(what, str):
                self.log.warning("batch %s: an attempt failed: %s", batch_id, what)
        if committed:
            self.log.info("%d batch(es) committed with %d record(s)", len(committed),
                          sum(committed.values()))
            self._announce(b"records")

    # -- stop -----------------------------------------------------------------------------------

    def drain(self) -> None:
        """Commit whatever requests are still queued before the socket closes."""
        table = base.op_table(self, "service")
        while self.service.poll(0, zmq.POLLIN):
            base.serve(self.service, table, self.role, self.log)
            self._commit_group()
        while self.unsaved or self.unsaved_failures:
            self._save_results()

    def teardown(self) -> None:
        if getattr(self, "purge_due", None) is not None:
            self._purge_index()  # a forget just before the stop is purged all the same
        if getattr(self, "backup_thread", None) is not None:
            self.backup_thread.join()  # a backup is finished, never left half-written
        conn = getattr(self, "_conn", None)
        if conn is not None:
            with contextlib.suppress(errors.StoreError):
                writes.checkpoint(conn)
            conn.close()


if __name__ == "__main__":
    base.main(Storage)
