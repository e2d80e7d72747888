"""Extraction worker: PULLs a take of leased batches of events, PUSHes memory records back.

Workers hold no state: storage leases each batch and commits the returned
records, and the files the batch's tool uses changed (for ranking: ``changed_files``),
together with the batch's completion. A worker says which batch it took
(with its pid, on the daemon's machine), so if it dies the batch is handed out again
at once; a worker elsewhere says it is still at it every WORKING_EVERY_S instead, and
its batches go out again soon after it falls silent; an attempt
that fails is reported with its reason, and the batch goes out again. A take holds
one batch, or several when they go fast (storage sizes it by the worker's pace).

Records come from the extractor ``extraction.strategy`` names (``kirolearn.extract``):
the heuristic one, or a model that falls back to it whenever it cannot be used.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import zmq

from kirolearn import control, extract, protocol, tooluse, transport
from kirolearn.extract import anchors
from kirolearn.roles import base

NICENESS = 10
WORKING_EVERY_S = 5.0  # how often a worker elsewhere says it is still extracting its take


def changed_files(events: list[dict]) -> list[list[str]]:
    """[path, event id] of each file a tool use of the batch changed (an edit that did
    not fail), the path as records name it: what makes older records of it stale."""
    changed = []
    for event in events:
        if event["kind"] == "tool_use" and isinstance(event["body"], dict):
            action = tooluse.observe(event["body"].get("data"))
            if action.kind == "edit" and not action.failed:
                changed += [[tooluse.relative(path, event.get("project_path")),
                             event["event_id"]] for path in action.paths]
    return changed


class ExtractionWorker(base.Role):
    role = "extraction"

    def __init__(self, name: str, base_dir: Path, settings: dict,
                 daemon: control.Remote | None = None):
        """``daemon``: a daemon elsewhere, reached over TCP and CURVE (``kirolearn worker
        extraction --connect tcp://HOST:PORT``); None: this home's own."""
        super().__init__(name, base_dir, settings)
        self.daemon = daemon

    def setup(self) -> None:
        os.nice(NICENESS)  # background work: hooks' acks and searches come first
        if self.daemon is None:
            endpoints = {name: self.home.endpoint(name) for name in ("batches", "records")}
            curve = None
        else:
            endpoints, curve = transport.tcp_endpoints(self.daemon.endpoint), self.daemon.curve
        pull = transport.make_socket(self.ctx, zmq.PULL, hwm=1, connect=endpoints["batches"],
                                     curve=curve)
        self.add_socket(pull, self._on_take)
        self.records = transport.make_socket(self.ctx, zmq.PUSH, linger_ms=2000,
                                             connect=endpoints["records"], curve=curve)
        self.extractor = extract.from_settings(self.settings, self.log)
        self.batches_done = 0
        self.working: list[str] = []  # the batches of the take under way
        self.stop_saying = threading.Event()
        self.saying: threading.Thread | None = None
        if self.daemon is not None:
            self.saying = threading.Thread(target=self._say_working, name="working",
                                           args=(endpoints["records"], curve), daemon=True)
            self.saying.start()

    def teardown(self) -> None:
        if getattr(self, "saying", None) is not None:
            self.stop_saying.set()
            self.saying.join()

    def _say_working(self, endpoint: str, curve: transport.Curve) -> None:
        """(Its own thread, and socket.) While a take is under way, tell storage every
        WORKING_EVERY_S: a worker elsewhere that dies mid-take (or whose machine does) is
        noticed in seconds, not when its lease runs out."""
        sock = transport.make_socket(self.ctx, zmq.PUSH, connect=endpoint, curve=curve)
        try:
            while not self.stop_saying.wait(WORKING_EVERY_S):
                working = self.working
                if working:
                    base.send_now(sock, protocol.pack({"working": working}))
        finally:
            sock.close(linger=0)

    def counters(self) -> dict:
        return {"batches_done": self.batches_done, **self.extractor.status()}

    def _on_take(self, sock: zmq.Socket) -> None:
        """One take: which batches it took is said first, then every batch's result in
        one message, with the seconds they took (storage sizes the next take by it)."""
        try:
            take = protocol.unpack(sock.recv())
            batches = [(b["batch_id"], b["namespace"], b["events"]) for b in take["batches"]]
        except (protocol.DecodeError, KeyError, TypeError) as exc:
            self.log.warning("dropped a malformed take: %s", exc)
            return
        started = time.monotonic()
        claim: dict = {"batch_ids": [b[0] for b in batches]}
        if isinstance(take.get("take"), str):  # said back: it was this worker that got it
            claim["take"] = take["take"]
        if self.daemon is None:  # a pid means something on the daemon's machine only
            claim["worker_pid"] = os.getpid()
        self.records.send(protocol.pack(claim))
        self.working = claim["batch_ids"]
        results, strategies = [], Counter()
        for batch_id, namespace, events in batches:
            result, strategy = self._extract(batch_id, namespace, events)
            results.append(result)
            strategies[strategy] += 1
        seconds = time.monotonic() - started
        self.records.send(protocol.pack({"results": results, "seconds": seconds}))
        self.working = []
        self.batches_done += len(batches) - strategies["failed"]
        self.log.info("take %s", json.dumps({
            "batches": len(batches), "events": sum(len(b[2]) for b in batches),
            "records": sum(len(r.get("records", ())) for r in results),
            "strategies": dict(strategies), "duration_ms": round(seconds * 1000, 1)}))

    def _extract(self, batch_id: str, namespace: str, events: list[dict]) -> tuple[dict, str]:
        """One batch's result, and the strategy that made it (``failed``: its error is the
        result, and the batch goes out again)."""
        try:
            for event in events:  # storage sends bodies still encoded
                event["body"] = json.loads(event.pop("body_json"))
                source = json.loads(event.pop("source_json", None) or "{}")
                event.update(branch=source.get("branch"), commit=source.get("commit"),
                             author=source.get("author"))
            records, strategy = self.extractor.extract(namespace, events)
            for record in records:  # where its work left the code (``extract.anchors``)
                code = anchors.code(record, events)
                if code:
                    record["code"] = code
            return {"batch_id": batch_id, "records": records,
                    "changed": changed_files(events)}, strategy
        except Exception as exc:  # a bug or a poison batch: said, and handed out again
            self.log.exception("batch %s could not be extracted", batch_id)
            return {"batch_id": batch_id, "error": f"{type(exc).__name__}: {exc}"}, "failed"

if __name__ == "__main__":
    base.main(ExtractionWorker)
