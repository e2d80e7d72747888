"""Extraction worker: PULLs a leased batch of events, PUSHes memory records back.

Workers hold no state: storage leases each batch and commits the returned
records together with the batch's completion, so a worker may die at any point
and the batch is simply handed out again when its lease expires.

The extractor here is deliberately small: one record per turn (the request and
the tools used after it) and one per turn summary.
"""

from __future__ import annotations

import json

import zmq

from kirolearn import contract, paths, protocol, role, transport

STRATEGY = "heuristic"


def _text_of(body: dict) -> str:
    if body.get("type") == "text":
        return body.get("content", "")
    if body.get("type") == "message":
        return body["turns"][-1]["content"] if body.get("turns") else ""
    return json.dumps(body.get("data"), ensure_ascii=False)


def _title(text: str, fallback: str) -> str:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return (first or fallback)[:200]


def extract(namespace: str, events: list[dict]) -> list[dict]:
    """Turn a batch into records: one per prompt (with its tool uses), one per turn summary."""
    records: list[dict] = []
    turn: dict | None = None

    def close_turn() -> None:
        if turn is None:
            return
        tools = turn["tools"]
        summary = turn["text"]
        if tools:
            summary += "\n\nTools used: " + ", ".join(dict.fromkeys(tools))
        records.append(_record(namespace, _title(turn["text"], "Prompt"), summary, "tool_use",
                               turn["ids"]))

    for event in events:
        kind = event["kind"]
        if kind == "prompt":
            close_turn()
            turn = {"text": _text_of(event["body"]), "tools": [], "ids": [event["event_id"]]}
        elif kind == "tool_use":
            data = event["body"].get("data")
            name = data.get("tool_name") if isinstance(data, dict) else None
            if turn is not None:
                turn["tools"].append(str(name or "tool"))
                turn["ids"].append(event["event_id"])
        elif kind == "session_summary":
            text = _text_of(event["body"]).strip()
            if text:
                records.append(_record(namespace, _title(text, "Turn summary"), text,
                                       "session_summary", [event["event_id"]]))
    close_turn()
    return [r for r in records if r["summary"].strip()]


def _record(namespace: str, title: str, summary: str, kind: str, source_ids: list[str]) -> dict:
    return {
        "record_id": contract.new_record_id(), "namespace": namespace, "title": title,
        "summary": summary[:4000], "facts": [], "concepts": [], "files_touched": [],
        "observation_type": kind, "strategy": STRATEGY, "source_event_ids": source_ids,
        "created_at": contract.now_iso(),
    }


class ExtractionWorker(role.Role):
    role = "extraction"

    def setup(self) -> None:
        pull = transport.make_socket(self.ctx, zmq.PULL, hwm=1,
                                     connect=paths.endpoint("batches", self.base))
        self.add_socket(pull, self._on_batch)
        self.records = transport.make_socket(self.ctx, zmq.PUSH, linger_ms=2000,
                                             connect=paths.endpoint("records", self.base))
        self.batches_done = 0

    def control_status(self) -> dict:
        return {"batches_done": self.batches_done}

    def _on_batch(self, sock: zmq.Socket) -> None:
        try:
            batch = protocol.unpack(sock.recv())
            batch_id, namespace, events = batch["batch_id"], batch["namespace"], batch["events"]
        except (protocol.DecodeError, KeyError) as exc:
            self.log.warning("dropped a malformed batch: %s", exc)
            return
        for event in events:  # storage sends bodies still encoded
            event["body"] = json.loads(event.pop("body_json"))
        records = extract(namespace, events)
        self.records.send(protocol.pack({"batch_id": batch_id, "records": records}))
        self.batches_done += 1
        self.log.info("batch %s: %d event(s) -> %d record(s)", batch_id, len(events), len(records))


if __name__ == "__main__":
    role.main(ExtractionWorker)
