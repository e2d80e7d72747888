"""Storage role: the single writer.

Sockets (all bound here):
- ``storage`` ROUTER: ``put_events`` from ingest (acknowledged only after the
  transaction commits), the changes to records that ingest relays (``put_record``,
  ``forget``, ``update_record``, ``put_records``, ``forget_project``, ``prune_events``,
  ``scrub``, ``retry_batches``), ``put_embeddings`` (records' vectors, from retrieval;
  near-copies merged then), ``mark_stale`` (records whose code is gone, from
  retrieval), ``log_retrieval``, ``ping``. Requests that are already
  queued are committed together in one transaction (group commit), so a burst costs
  one fsync instead of one per event.
- ``batches``, ``records``: the extraction workers' (``handout.Handout``, with the
  batches' leases in ``leases.Leases``).
- ``feed`` PUB: after each commit, what changed (``events``, ``records``, ``vectors``
  or ``retrievals``, one frame, no payload), so the viewer reads new rows at once
  instead of polling. Nothing waits on it: a slow or absent subscriber loses only
  wake-ups, never data.

The connection, and what is done when the database cannot be written, are the
``writer.Writer``'s: requests then get an ``UNAVAILABLE`` reply that names the fault
and what to do (the shims keep their events in the spool), and ``ping`` carries it for
``kirolearn status`` and ``doctor``. With ``backup.interval_h`` set, a backup is taken
that often into ``backups/`` (``scheduled-<time>.db``, the last ``backup.keep`` kept),
on a thread beside the writer. Between events, the records stored with other privacy
rules than today's are scrubbed again (``_rescrub``).

One module, long as it is: the single writer's op table, every write the daemon makes;
its parts (``writer``, ``handout``, ``leases``) are apart.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time

import zmq

from kirolearn import contract, db, paths, project
from kirolearn.db import batches, errors, reads, writes
from kirolearn.db.sqlite import backup as backups
from kirolearn.db.store import Connection
from kirolearn.roles import base
from kirolearn.roles.storage.handout import Handout
from kirolearn.roles.storage.writer import Writer
from kirolearn.search import embeddings

Code = base.Code
BUSY_WINDOW_S = 0.05  # a put this recent means ingest traffic is flowing
BATCH_WORK_MAX_DEFER_S = 10.0  # extraction waits at most this long behind a burst
BATCH_WORK_GAP_S = 0.05  # batch work runs at most this often (a failing pass never spins)
WAL_CHECK_S = 5.0  # how often the writer looks for a WAL deleted under it
PURGE_AFTER_S = 2.0  # forgets in a row: the full-text index is purged once, after the last
RESCRUB_SLICE = 500  # records scrubbed again with today's rules in one transaction
RESCRUB_RETRY_S = 5.0  # after a slice that could not be written


class Storage(base.Role):
    role = "storage"

    def setup(self) -> None:
        self.dedup_window_ms = int(self.settings["ingest"]["dedup_window_s"] * 1000)
        self.merge_window_s = self.settings["extraction"]["merge_window_s"]
        self.merge_min_similarity = self.settings["extraction"]["merge_min_similarity"]
        self.group_max = max(1, self.settings["storage"]["group_commit_max"])
        self.path = db.location(self.home, self.settings)
        self.writer = Writer(self.path, self.log)
        self.backups = ScheduledBackups(self)
        self.group: list[base.Request] = []  # put_events waiting for the next commit
        self.service = self.serve_on(self.home.endpoint("storage"))
        self.handout = Handout(self, self.writer, self.busy, self.announce)
        self.feed = self.bind(zmq.PUB, self.home.endpoint("feed"), hwm=100)
        self.purge_due: float | None = None  # when to purge forgotten words from the index
        # When to scrub again the records stored with other rules (``_rescrub``); None: done.
        self.rescrub_due: float | None = 0.0
        self.rescrubbed: dict[str, int] = {"records": 0, "redactions": 0}
        self._fold_seeded_authors()
        self.events_stored = 0
        self.commits = 0
        self.last_put = 0.0
        self.wal_check_at = 0.0

    def _fold_seeded_authors(self) -> None:
        """A home seeded by an earlier version, one namespace per commit author: each
        project made one again (``writes.fold_seeded_authors``); tried at every start
        until extraction has caught up on it."""
        with contextlib.suppress(base.Unavailable), self.writing() as conn:
            folded = writes.fold_seeded_authors(conn, project.actor_id())
            for project_id, count in folded.items():
                self.log.info("the seeded history of project %s: %d author namespace(s)"
                              " moved into %s's", project_id, count, project.actor_id())

    def counters(self) -> dict:
        counters = {"events_stored": self.events_stored, "commits": self.commits}
        if self.writer.fault:
            counters.update(fault=self.writer.fault, fault_since=self.writer.fault_since)
        return counters

    @property
    def conn(self) -> Connection:
        return self.writer.conn

    def writing(self):
        return self.writer.writing()

    def busy(self) -> bool:
        """Whether events are pouring in (their acks come before batch work)."""
        return time.monotonic() - self.last_put < BUSY_WINDOW_S

    def announce(self, what: bytes) -> None:
        base.send_now(self.feed, what)

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
        self.handout.dispatch_due = 0.0  # a request may have made a batch due (a retry, a split)

    def _commit_group(self) -> None:
        group, self.group = self.group, []
        if not group:
            return
        stored: list[dict] = []
        transaction_time = db.utc_now()
        try:
            with self.writing():
                results = self._put(group, transaction_time, stored)
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
        if not self.writer.check_wal():  # a WAL deleted under it: not durable yet
            for request in group:
                request.fail(Code.UNAVAILABLE, "the database's WAL file was deleted; the"
                                               " events are kept and sent again")
            return
        for request, answer in zip(group, results, strict=True):
            request.reply({"results": answer})
        self.handout.stored(stored, history)
        self.events_stored += len(stored)
        self.commits += 1
        if stored:
            self.announce(b"events")
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
            batches.form_batches(self.conn, namespace, "import", self.handout.max_bytes,
                                history=frozenset(event_ids))
        return set(history)

    def _put(self, group: list[base.Request], transaction_time: str,
             stored: list[dict]) -> list[list[dict]]:
        """Insert the group's events inside the open transaction, in order (together:
        ``writes.insert_events``); each request's answers.

        Ingest has validated, scrubbed and hashed the events; only ingest can reach this
        socket (0700 runtime directory). An event of the wrong shape (a bug upstream) is
        rejected alone before any SQL runs; a database error fails the whole group, which
        is rolled back and retried by its clients.
        """
        answers: list[list[dict]] = []
        rows: list[list] = []
        sent: list[tuple[dict, dict]] = []  # (event, its answer) for each row
        for request in group:
            answers.append([])
            for event in request.body["events"]:
                event_id = event.get("event_id") if isinstance(event, dict) else None
                answer = {"event_id": event_id}
                answers[-1].append(answer)
                try:
                    rows.append(writes.event_row(event, transaction_time))
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    answer.update(status="rejected", reason=f"malformed: {exc!r}")
                    continue
                sent.append((event, answer))
        inserted = writes.insert_events(self.conn, rows, self.dedup_window_ms)
        for (event, answer), was_stored in zip(sent, inserted, strict=True):
            answer["status"] = "stored" if was_stored else "duplicate"
            if was_stored:
                stored.append(event)
        duplicates = [answer for _, answer in sent if answer["status"] == "duplicate"]
        # A duplicate's stored time: when its id was stored (none: the same content).
        stored_at = reads.events_stored_at(self.conn, [a["event_id"] for a in duplicates])
        for answer in duplicates:
            if answer["event_id"] in stored_at:
                answer["stored_at"] = stored_at[answer["event_id"]]
        return answers

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
        self.announce(b"retrievals")

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
        self.announce(b"records")
        return result

    @base.op("put_rule_file")
    def put_rule_file(self, request: base.Request) -> dict:
        """``put_rule_file {record_id, namespace, name, record}`` → ``{record_id,
        status}``: a rule file's one record as the file is now (checked and made by
        ingest; ``writes.put_rule``)."""
        record_id = request.require("record_id", str, "a record id")
        namespace = request.require("namespace", str, "a namespace")
        name = request.require("name", str, "a file's name")
        record = request.body.get("record")
        try:
            record = None if record is None else contract.validate_record(record)
        except contract.ContractError as exc:
            raise base.BadRequest(str(exc)) from exc
        if record is not None and (record["record_id"], record["namespace"]) != (
                record_id, namespace):
            raise base.BadRequest("the record is not the rule file's")
        with self.writing():
            status = writes.put_rule(self.conn, record_id, namespace, name, record)
        self.log.info("put_rule_file: %s %s %s", record_id, name, status)
        if status != "unchanged":
            self.announce(b"records")
        return {"record_id": record_id, "status": status}

    @base.op("retry_batches")
    def retry_batches(self, request: base.Request) -> dict:
        """``retry_batches`` → ``{requeued}``: every failed extraction batch is handed out
        again (``kirolearn extraction retry``)."""
        with self.writing():
            requeued = batches.retry_batches(self.conn)
        self.log.info("retry_batches: %d failed batch(es) re-queued", requeued)
        return {"requeued": requeued}

    @base.op("worker_gone")
    def worker_gone(self, request: base.Request) -> dict:
        """``worker_gone {pid}`` → ``{handed_out}``: a worker of this machine exited (from the
        supervisor): what it held, and the batches sent here and not yet claimed, go out
        again now rather than at their leases' end."""
        pid = request.require("pid", int, "a process id")
        handed = self.handout.leases.worker_gone(pid)
        self.handout.dispatch_due = 0.0
        return {"handed_out": handed}

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
        self.handout.forgotten(namespace)
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
        """``put_records {items: [{record, versions, invalid_reason, embedding, stale,
        superseded_by} |
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
                                              embeddings.made_from, item.get("stale"),
                                              item.get("superseded_by"))
                results.append({"record_id": item["record"]["record_id"], **result})
        self._forgotten(b"records")
        return {"results": results}

    @base.op("prune_events")
    def prune_events(self, request: base.Request) -> dict:
        """``prune_events {before_ms, namespace?}`` → ``{events, bytes_before,
        bytes_after}``: raw events already distilled removed, and the file compacted."""
        before_ms = request.require("before_ms", int, "a time in ms")
        namespace = request.body.get("namespace")
        size_before = self.writer.size_bytes()
        with self.writing():
            removed = writes.prune_events(self.conn, before_ms, namespace)
        if removed:
            try:
                writes.compact(self.conn)
            except errors.StoreError as exc:  # removed all the same; the space is reused later
                self.log.warning("prune_events: the file could not be compacted: %s", exc)
        self.log.info("prune_events: %d event(s) removed", removed)
        self.announce(b"events")
        return {"events": removed, "bytes_before": size_before,
                "bytes_after": self.writer.size_bytes()}

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
                self.announce(changed)
        self.log.info("scrub%s: %s", " (dry run)" if dry_run else "",
                      {table: sum(kinds.values()) for table, kinds in redacted.items()} or
                      "nothing to redact")
        return {"redacted": redacted}

    def _forgotten(self, *what: bytes) -> None:
        """After a change that removed text: the WAL's copies of the old pages are folded
        into the file (best effort: not while a reader holds them) and the viewers told."""
        self.writer.checkpoint()
        for item in what:
            self.announce(item)

    @base.op("drop_vectors")
    def drop_vectors(self, request: base.Request) -> dict:
        """``drop_vectors {keep_space}`` → ``{dropped}``: the vectors of any other space
        (another model's) are dropped, and their records embedded again."""
        space = request.require("keep_space", str, "a vector space's name")
        if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", space):
            raise base.BadRequest("'keep_space' must be letters, digits and dashes")
        with self.writing():
            dropped = writes.drop_vectors(self.conn, space)
        self.log.info("drop_vectors: %d vector(s) not of %s dropped", dropped, space)
        if dropped:
            self.announce(b"vectors")
        return {"dropped": dropped}

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
                                                  embeddings.made_from)):
                    written += 1
                    if self.merge_window_s > 0:
                        target = writes.reconcile(self.conn, item["record_id"], item["vector"],
                                                  embeddings.space_of(item["text_hash"]),
                                                  self.merge_min_similarity,
                                                  self.merge_window_s)
                        if target is not None:
                            merged[item["record_id"]] = target
        if merged:
            self.log.info("put_embeddings: %d record(s) merged into older ones that say"
                          " the same: %s", len(merged), merged)
            self.announce(b"records")
        elif written:
            self.announce(b"vectors")  # retrieval's back-fill counts what is left
        return {"written": written, "merged": len(merged)}

    @base.op("mark_stale")
    def mark_stale(self, request: base.Request) -> dict:
        """``mark_stale {items: [{record_id, why}]}`` → ``{marked}``: records retrieval
        found stale in what their branch has committed (``why``), or whose code is back
        (``why`` null): marked, or no longer (``writes.mark_stale``)."""
        items = request.require("items", list, "a list")
        if not all(isinstance(i, dict) and isinstance(i.get("record_id"), str)
                   and (i.get("why") is None or (isinstance(i["why"], str) and i["why"]))
                   for i in items):
            raise base.BadRequest("'items' must be a list of {record_id, why}")
        with self.writing():
            marked = sum(writes.mark_stale(self.conn, i["record_id"], i.get("why"))
                         for i in items)
        if marked:
            self.announce(b"records")
        return {"marked": marked}

    # -- the loop -----------------------------------------------------------------------------

    def wake_at(self) -> float | None:
        """The next of: the WAL check, a scheduled backup, the index purge, the worker
        keys' check, workers' results still to commit (now), and batch work (a batch to
        form or hand out, a worker to look for), which waits while events pour in
        (``tick``)."""
        now = time.monotonic()
        due = [now + self.backups.due - time.time(), self.handout.keys_check_at]
        if self.handout.unsaved_any:
            due.append(now)
        if self.writer.wal is not None:
            due.append(self.wal_check_at)
        busy_until = self.last_put + BUSY_WINDOW_S
        if self.purge_due is not None:
            due.append(max(self.purge_due, busy_until))
        if self.rescrub_due is not None:
            due.append(max(self.rescrub_due, busy_until))
        work = self.handout.due(now)
        if work is not None:
            last = self.handout.last_work
            if now < busy_until:
                work = max(work, min(busy_until, last + BATCH_WORK_MAX_DEFER_S))
            work = max(work, last + BATCH_WORK_GAP_S)
            if not self.writer.is_open:
                work = max(work, self.writer.reopen_at)
            due.append(work)
        return min(due)

    def tick(self) -> None:
        """Workers' results committed, a slice at a time; batch bookkeeping once they
        are, deferred while events are pouring in (acks come first), but never for
        longer than BATCH_WORK_MAX_DEFER_S."""
        now = time.monotonic()
        if now >= self.wal_check_at:
            self.wal_check_at = now + WAL_CHECK_S
            self.writer.check_wal()
        self.backups.start_when_due()
        if now >= self.handout.keys_check_at:
            self.handout.check_keys()
        self.handout.save_results()
        if self.handout.unsaved:
            return
        busy = self.busy()
        if not busy and self.purge_due is not None and now >= self.purge_due:
            self._purge_index()
        if not busy and self.rescrub_due is not None and now >= self.rescrub_due:
            self._rescrub(now)
        if busy and now - self.handout.last_work < BATCH_WORK_MAX_DEFER_S:
            return
        if self.writer.waiting_to_reopen(now):
            return  # a fault: nothing can be done before the writer is tried again
        self.handout.work(now)

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

    def _rescrub(self, now: float) -> None:
        """A slice of the records stored with other rules than today's (before an
        upgrade: ``privacy.Scrubber.version``) scrubbed again, between events; until
        then a search scrubs them as they leave."""
        try:
            with self.writing():
                looked, counts = writes.rescrub_records(self.conn, RESCRUB_SLICE)
        except (base.Unavailable, errors.StoreError) as exc:
            self.log.warning("records could not be scrubbed again now: %s", exc)
            self.rescrub_due = now + RESCRUB_RETRY_S
            return
        self.rescrubbed["records"] += looked
        self.rescrubbed["redactions"] += sum(counts.values())
        if counts:  # the old words leave the full-text index too
            self.announce(b"records")
            self.purge_due = now
        if looked < RESCRUB_SLICE:
            self.rescrub_due = None
            if self.rescrubbed["records"]:
                self.log.info("%(records)d record(s) scrubbed again with today's privacy"
                              " rules: %(redactions)d redaction(s)", self.rescrubbed)

    def release_memory(self) -> None:
        """The writer's page cache, filled by a burst of writes, given back when quiet."""
        if self.writer.is_open:
            db.release_memory(self.conn)

    # -- stop -----------------------------------------------------------------------------------

    def drain(self) -> None:
        """Commit whatever requests are still queued before the socket closes."""
        table = base.op_table(self, "service")
        while self.service.poll(0, zmq.POLLIN):
            base.serve(self.service, table, self.role, self.log)
            self._commit_group()
        while self.handout.unsaved_any:
            self.handout.save_results()

    def teardown(self) -> None:
        if getattr(self, "purge_due", None) is not None:
            self._purge_index()  # a forget just before the stop is purged all the same
        if getattr(self, "backups", None) is not None:
            self.backups.join()  # a backup is finished, never left half-written
        if getattr(self, "writer", None) is not None:
            self.writer.close()


class ScheduledBackups:
    """``backup.interval_h``: a backup of the SQLite file that often, on a thread and a
    connection of its own (SQLite copies without holding the GIL, so commits go on
    meanwhile). A PostgreSQL store is backed up by PostgreSQL's own tools."""

    def __init__(self, role: Storage):
        self.role = role
        self.every_s = role.settings["backup"]["interval_h"] * 3600  # 0: never
        store = db.dialect(role.path)
        if self.every_s and store.BACKED_UP_BY:
            role.log.warning("backup.interval_h is ignored: a %s store is backed up by %s",
                             store.TITLE, store.BACKED_UP_BY)
            self.every_s = 0
        self.folder = role.home.backup_dir
        self.due = backups.next_due(self.folder, self.every_s) if self.every_s else math.inf
        self.thread: threading.Thread | None = None

    def start_when_due(self) -> None:
        if time.time() < self.due or (self.thread and self.thread.is_alive()):
            return
        self.due = time.time() + self.every_s
        self.thread = threading.Thread(target=self._take, name="backup", daemon=True)
        self.thread.start()

    def _take(self) -> None:
        try:
            paths.ensure_private_dir(self.folder)
            dest, summary, removed = backups.take_scheduled(
                self.role.path, self.folder, self.role.settings["backup"]["keep"])
        except (backups.BackupError, OSError) as exc:
            self.role.log.error("scheduled backup failed: %s", exc)
            return
        self.role.log.info("scheduled backup: %d events and %d records to %s%s",
                           summary["events"], summary["records"], dest,
                           f"; {len(removed)} older removed" if removed else "")

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()

