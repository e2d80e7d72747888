"""Extraction worker: PULLs a leased batch of events, PUSHes memory records back.

Workers hold no state: storage leases each batch and commits the returned
records, and the files the batch's tool uses changed (for ranking: ``changed_files``),
together with the batch's completion. A worker says which batch it took
(with its pid), so if it dies the batch is handed out again at once; an attempt
that fails is reported with its reason, and the batch goes out again.

Records come from the extractor ``extraction.strategy`` names (``kirolearn.extract``):
the heuristic one, or a model that falls back to it whenever it cannot be used.
"""

from __future__ import annotations

import json
import os
import time

import zmq

from kirolearn import extract, paths, protocol, tooluse, transport
from kirolearn.roles import base

NICENESS = 10


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

    def setup(self) -> None:
        os.nice(NICENESS)  # background work: hooks' acks and searches come first
        pull = transport.make_socket(self.ctx, zmq.PULL, hwm=1,
                                     connect=paths.endpoint("batches", self.base))
        self.add_socket(pull, self._on_batch)
        self.records = transport.make_socket(self.ctx, zmq.PUSH, linger_ms=2000,
                                             connect=paths.endpoint("records", self.base))
        self.extractor = extract.from_settings(self.settings, self.log)
        self.batches_done = 0

    def counters(self) -> dict:
        return {"batches_done": self.batches_done, **self.extractor.status()}

    def _on_batch(self, sock: zmq.Socket) -> None:
        try:
            batch = protocol.unpack(sock.recv())
            batch_id, namespace, events = batch["batch_id"], batch["namespace"], batch["events"]
        except (protocol.DecodeError, KeyError) as exc:
            self.log.warning("dropped a malformed batch: %s", exc)
            return
        started = time.monotonic()
        self.records.send(protocol.pack({"batch_id": batch_id, "worker_pid": os.getpid()}))
        try:
            for event in events:  # storage sends bodies still encoded
                event["body"] = json.loads(event.pop("body_json"))
            records, strategy = self.extractor.extract(namespace, events)
        except Exception as exc:  # a bug or a poison batch: said, and handed out again
            self.log.exception("batch %s could not be extracted", batch_id)
            self.records.send(protocol.pack({"batch_id": batch_id,
                                             "error": f"{type(exc).__name__}: {exc}"}))
            return
        self.records.send(protocol.pack({"batch_id": batch_id, "records": records,
                                         "changed": changed_files(events)}))
        self.batches_done += 1
        self.log.info("batch %s", json.dumps({
            "batch_id": batch_id, "namespace": namespace, "events": len(events),
            "records": len(records), "strategy": strategy,
            "duration_ms": round((time.monotonic() - started) * 1000, 1), "outcome": "ok"}))


if __name__ == "__main__":
    base.main(ExtractionWorker)
