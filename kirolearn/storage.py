"""Storage role: the single SQLite writer.

Sockets (all bound here):
- ``storage`` ROUTER: ``put_events`` from ingest (acknowledged only after the
  transaction commits), ``put_record`` and ``forget`` (records saved or deleted
  through MCP), ``put_embeddings`` (records' vectors, from retrieval),
  ``log_retrieval``, ``ping``. Requests that are already
  queued are committed together in one transaction (group commit), so a burst
  costs one fsync instead of one per event.
- ``batches`` PUSH: ready extraction batches, leased to whichever worker pulls.
- ``records`` PULL: a worker's records for a batch, committed together with the
  batch's completion. A batch already done is ignored, so a batch whose lease
  expired and was handed out twice is still committed once.
- ``feed`` PUB: after each commit, what changed (``events``, ``records`` or
  ``retrievals``, one frame, no payload), so the viewer reads new rows at once
  instead of polling. Nothing waits on it: a slow or absent subscriber loses
  only wake-ups, never data.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time

import zmq

from kirolearn import contract, db, embeddings, paths, protocol, role, transport

MAX_BATCH_ATTEMPTS = 5
BUSY_WINDOW_S = 0.05  # a put this recent means ingest traffic is flowing
BATCH_WORK_MAX_DEFER_S = 10.0  # extraction waits at most this long behind a burst


class Storage(role.Role):
    role = "storage"
    tick_interval_s = 0.25

    def setup(self) -> None:
        cfg = self.settings["storage"]
        self.dedup_window_ms = int(self.settings["ingest"]["dedup_window_s"] * 1000)
        self.idle_ms = int(cfg["batch_idle_s"] * 1000)
        self.max_bytes = cfg["batch_max_bytes"]
        self.lease_ms = int(cfg["lease_s"] * 1000)
        self.group_max = max(1, cfg["group_commit_max"])
        self.conn = db.connect_writer(paths.db_path(self.base))
        # Unbatched events per namespace: [bytes, newest arrival ms], kept in memory so
        # deciding when a batch is due costs nothing per tick. After a restart the idle
        # clock starts again from now.
        self.pending = {ns: [size, db.now_ms()]
                        for ns, size in db.pending_by_namespace(self.conn).items()}
        self.turn_ended: set[str] = set()
        self.service = self.bind(zmq.ROUTER, paths.endpoint("storage", self.base), self._on_request)
        self.batches = self.bind(zmq.PUSH, paths.endpoint("batches", self.base), hwm=4)
        self.bind(zmq.PULL, paths.endpoint("records", self.base), self._on_records)
        self.feed = self.bind(zmq.PUB, paths.endpoint("feed", self.base), hwm=100)
        self.events_stored = 0
        self.commits = 0
        self.last_put = self.last_batch_work = 0.0

    def control_status(self) -> dict:
        return {"events_stored": self.events_stored, "commits": self.commits}

    def _announce(self, what: bytes) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self.feed.send(what, flags=zmq.NOBLOCK)

    # -- requests ---------------------------------------------------------------------------

    def _on_request(self, sock: zmq.Socket) -> None:
        """Read every request already queued (up to group_max) and answer them together."""
        pending: list[tuple[list[bytes], dict]] = []
        while len(pending) < self.group_max:
            received = transport.recv_request(sock, self.log)
            if received is not None:
                pending.append(received)
            if not sock.poll(0, zmq.POLLIN):
                break
        puts = [(env, req) for env, req in pending if req["op"] == "put_events"]
        replies = self._commit_puts(puts) if puts else []
        for env, req in pending:
            if req["op"] != "put_events":
                replies.append((env, self._handle_other(req)))
        for env, reply in replies:
            transport.send_reply(sock, env, reply)

    def _commit_puts(self, puts: list[tuple[list[bytes], dict]]) -> list[tuple[list[bytes], dict]]:
        replies = []
        stored: list[dict] = []
        transaction_time = db.utc_now()
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for env, req in puts:
                events = req["body"].get("events")
                if not isinstance(events, list):
                    replies.append((env, protocol.reply_error(
                        req["id"], protocol.ErrorCode.BAD_REQUEST, "'events' must be a list")))
                    continue
                results = [self._put_one(event, transaction_time, stored) for event in events]
                replies.append((env, protocol.reply_ok(req["id"], {"results": results})))
            self.conn.execute("COMMIT")
        except Exception as exc:
            self.conn.execute("ROLLBACK")
            self.log.exception("commit failed")
            return [(env, protocol.reply_error(req["id"], protocol.ErrorCode.INTERNAL,
                                               f"storage commit failed: {exc}"))
                    for env, req in puts]
        now = db.now_ms()
        for event in stored:
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
        return replies

    def _put_one(self, event: object, transaction_time: str, stored: list[dict]) -> dict:
        """Insert one event inside the open transaction.

        Ingest has validated, scrubbed and hashed the event; only ingest can reach
        this socket (0700 runtime directory). An event of the wrong shape (a bug
        upstream) fails before any SQL runs and is rejected alone; a database error
        fails the whole group, which is rolled back and retried by its clients.
        """
        event_id = event.get("event_id") if isinstance(event, dict) else None
        try:
            status = db.insert_event(self.conn, event, self.dedup_window_ms, transaction_time)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return {"event_id": event_id, "status": "rejected", "reason": f"malformed: {exc!r}"}
        if status == "stored":
            stored.append(event)
        return {"event_id": event_id, "status": status}

    def _handle_other(self, req: dict) -> dict:
        op, body = req["op"], req["body"]
        if op == "ping":
            return protocol.reply_ok(req["id"], {"role": self.role})
        if op == "log_retrieval":
            try:
                db.log_retrieval(self.conn, body.get("prompt_event_id"), body.get("namespace"),
                                 list(body.get("record_ids") or []),
                                 float(body.get("latency_ms", 0.0)), str(body.get("outcome")),
                                 str(body.get("context") or ""), body.get("error"))
            except (sqlite3.Error, TypeError, ValueError) as exc:
                return protocol.reply_error(req["id"], protocol.ErrorCode.BAD_REQUEST, str(exc))
            self._announce(b"retrievals")
            return protocol.reply_ok(req["id"])
        if op in ("put_record", "forget"):
            return self._write_record(req)
        if op == "put_embeddings":
            return self._write_embeddings(req)
        return protocol.reply_error(req["id"], protocol.ErrorCode.UNKNOWN_OP,
                                    f"storage does not serve {op!r}")

    def _write_record(self, req: dict) -> dict:
        """``put_record {record}`` → ``{record_id, status: stored | merged}``;
        ``forget {record_id, namespaces}`` → ``{deleted}``. Ingest has checked and
        scrubbed the request; the record is checked again before it is written."""
        body = req["body"]
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            if req["op"] == "put_record":
                record = contract.validate_record(body.get("record"))
                merged_into = db.save_record(self.conn, record, merge_window_s=self.settings[
                    "extraction"]["merge_window_s"])
                result = {"record_id": merged_into or record["record_id"],
                          "status": "merged" if merged_into else "stored"}
            else:
                result = {"deleted": db.delete_record(self.conn, body.get("record_id"),
                                                      body.get("namespaces") or [])}
            self.conn.execute("COMMIT")
        except (contract.ContractError, TypeError, ValueError) as exc:
            self.conn.execute("ROLLBACK")
            return protocol.reply_error(req["id"], protocol.ErrorCode.BAD_REQUEST, str(exc))
        except sqlite3.Error as exc:
            self.conn.execute("ROLLBACK")
            self.log.exception("%s failed", req["op"])
            return protocol.reply_error(req["id"], protocol.ErrorCode.INTERNAL,
                                        f"storage could not write: {exc}")
        self.log.info("%s: %s", req["op"], result)
        self._announce(b"records")
        return protocol.reply_ok(req["id"], result)

    def _write_embeddings(self, req: dict) -> dict:
        """``put_embeddings {items: [{record_id, text_hash, vector}]}`` from retrieval: each
        vector is stored if the record still has the text it was made from."""
        items = req["body"].get("items")
        if not isinstance(items, list):
            return protocol.reply_error(req["id"], protocol.ErrorCode.BAD_REQUEST,
                                        "'items' must be a list")
        written = 0
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for item in items:
                if (isinstance(item, dict) and isinstance(item.get("record_id"), str)
                        and isinstance(item.get("text_hash"), str)
                        and isinstance(item.get("vector"), bytes)
                        and len(item["vector"]) == embeddings.DIMENSIONS * 4):
                    written += db.save_embedding(self.conn, item["record_id"], item["text_hash"],
                                                 item["vector"], embeddings.record_hash)
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self.conn.execute("ROLLBACK")
            self.log.exception("put_embeddings failed")
            return protocol.reply_error(req["id"], protocol.ErrorCode.INTERNAL,
                                        f"storage could not write: {exc}")
        return protocol.reply_ok(req["id"], {"written": written})

    # -- extraction batches ---------------------------------------------------------------------

    def tick(self) -> None:
        """Batch bookkeeping, deferred while events are pouring in (acks come first),
        but never for longer than BATCH_WORK_MAX_DEFER_S."""
        now = time.monotonic()
        busy = now - self.last_put < BUSY_WINDOW_S
        if busy and now - self.last_batch_work < BATCH_WORK_MAX_DEFER_S:
            return
        self.last_batch_work = now
        try:
            self._form_batches()
            self._dispatch_batches()
        except sqlite3.Error:
            self.log.exception("batch bookkeeping failed; will retry")

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
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for namespace, reason in ready:
                db.form_batch(self.conn, namespace, reason)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        for namespace, _reason in ready:
            del self.pending[namespace]

    def _dispatch_batches(self) -> None:
        now = db.now_ms()
        for batch_id, namespace, attempts in db.due_batches(self.conn, now, limit=16):
            if attempts >= MAX_BATCH_ATTEMPTS:
                self.log.error("batch %s failed %d times; giving up on it (its events stay stored)",
                               batch_id, attempts)
                self.conn.execute("UPDATE extraction_batches SET state = 'failed'"
                                  " WHERE batch_id = ?", (batch_id,))
                continue
            events = db.batch_events(self.conn, batch_id)
            message = {"batch_id": batch_id, "namespace": namespace, "events": events}
            try:
                self.batches.send(protocol.pack(message), flags=zmq.NOBLOCK)
            except zmq.Again:
                return  # no worker ready; try again next tick
            self.conn.execute(
                "UPDATE extraction_batches SET state = 'leased', lease_expires_ms = ?,"
                " attempts = attempts + 1 WHERE batch_id = ?", (now + self.lease_ms, batch_id))
            if attempts:
                self.log.warning("batch %s lease expired; handed out again", batch_id)

    def _on_records(self, sock: zmq.Socket) -> None:
        try:
            message = protocol.unpack(sock.recv())
        except protocol.DecodeError as exc:
            self.log.warning("dropped a malformed records message: %s", exc)
            return
        batch_id = message.get("batch_id")
        records = message.get("records")
        if not isinstance(batch_id, str) or not isinstance(records, list):
            self.log.warning("dropped a records message without batch_id/records")
            return
        valid = []
        for record in records:
            try:
                valid.append(contract.validate_record(record))
            except contract.ContractError as exc:
                self.log.warning("batch %s: dropped an invalid record: %s", batch_id, exc)
        count = db.complete_batch(self.conn, batch_id, valid,
                                  self.settings["extraction"]["merge_window_s"])
        if count is None:
            self.log.info("batch %s was already committed; ignored a second result", batch_id)
        else:
            self.log.info("batch %s committed with %d record(s)", batch_id, count)
            self._announce(b"records")

    # -- stop -----------------------------------------------------------------------------------

    def drain(self) -> None:
        """Commit whatever requests are still queued before the socket closes."""
        while self.service.poll(0, zmq.POLLIN):
            self._on_request(self.service)

    def teardown(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()


if __name__ == "__main__":
    role.main(Storage)
