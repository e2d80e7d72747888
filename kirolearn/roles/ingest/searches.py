"""The searches ingest asks retrieval for: one per prompt stored with ``retrieve`` (or
a session's start), each answered, or given up, within the retrieval budget. A late
answer is dropped, never injected anywhere. Every outcome goes to ``answered`` (ingest
replies to the shim) and to ``logged`` (the retrieval log, for the viewer).

The socket is IMMEDIATE: a search is never queued for a retrieval that is not there;
one that cannot be sent is offered again every ``UNSENT_RETRY_S`` until its deadline,
then logged as not sent (not as a search that ran too long).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from kirolearn import protocol
from kirolearn.roles import base
from kirolearn.roles.hints import FILE_LIMIT

UNSENT_RETRY_S = 0.01  # a search retrieval could not take yet is offered again this soon


@dataclass
class Asked:
    """One search under way, for ``waiter`` (what ``answered`` is told of)."""

    waiter: object
    event: dict  # the prompt (its id, namespace, kind, session and body)
    started: float
    deadline: float


class Searches:
    def __init__(self, sock: zmq.Socket, budget_s: float, limit: int, log: logging.Logger,
                 answered: Callable[[object, dict], None],
                 logged: Callable[[dict, dict], None]):
        self.outbox = base.Outbox(sock)
        self.budget_s = budget_s
        self.limit = limit
        self.log = log
        self.answered = answered
        self.logged = logged
        self.asked: dict[str, Asked] = {}  # by request id
        self.unsent: dict[str, tuple[Asked, bytes]] = {}  # waiting for retrieval to be there

    def ask(self, waiter: object, event: dict, client: str | None = None,
            session: bool = False, global_namespace: str | None = None,
            hints: dict | None = None) -> None:
        """Ask for the prompt's context (``session``: the project's, at a session start;
        ``hints``: the files in play, or opened, and the records given, ``check_hints``);
        ``client``: the key of a client elsewhere, whose search reads only what it may."""
        if session:
            message = protocol.request("session_context", {
                "namespace": event["namespace"], "surface": event.get("surface")})
        else:
            hints = hints or {}
            body = {**hints, "event": event, "namespace": event["namespace"],
                    "limit": FILE_LIMIT if hints.get("opened") else self.limit,
                    "budget_ms": self.budget_s * 1000,
                    "deadline_ms": time.time() * 1000 + self.budget_s * 1000}
            if global_namespace and global_namespace != event["namespace"]:
                body["global_namespace"] = global_namespace
            message = protocol.request("search", body)
        if client is not None:
            message.update(client=client, storing=event["namespace"])
        now = time.monotonic()
        asked = Asked(waiter, event, now, now + self.budget_s)
        try:
            frame = protocol.pack(message)
        except (ValueError, TypeError, OverflowError) as exc:
            self._not_sent(asked, f"the {message['op']} request could not be packed:"
                                  f" {type(exc).__name__}: {exc}")
            return
        self._send(message["id"], asked, frame)

    def _send(self, request_id: str, asked: Asked, frame: bytes) -> None:
        if self.outbox.send(frame):
            self.asked[request_id] = asked
        else:
            self.unsent[request_id] = (asked, frame)

    def _not_sent(self, asked: Asked, reason: str) -> None:
        """The search could not be asked: said in the log and in the retrieval log; the
        prompt is answered without context."""
        self.log.warning("no search for %s: %s", asked.event["event_id"], reason)
        self._finish(asked, {**empty_retrieval((time.monotonic() - asked.started) * 1000,
                                               "error"), "error": reason})

    def _finish(self, asked: Asked, retrieval: dict) -> None:
        self.logged(asked.event, retrieval)
        self.answered(asked.waiter, retrieval)

    def on_reply(self, reply: dict) -> None:
        """Retrieval's answer; one for a search given up already is dropped."""
        asked = self.asked.pop(reply.get("id"), None)
        if asked is None:
            return  # arrived after the budget: never injected anywhere
        latency = (time.monotonic() - asked.started) * 1000
        if reply["ok"]:
            body = reply["body"]
            retrieval = {"context": body.get("context", ""),
                         "record_ids": body.get("record_ids", []),
                         "latency_ms": round(latency, 3), "outcome": body.get("outcome", "ok")}
            if body.get("error"):  # logged for the viewer; the shim never sees it
                retrieval["error"] = body["error"]
        else:
            retrieval = {**empty_retrieval(latency, "error"), "error": reply["error"]["reason"]}
        self._finish(asked, retrieval)

    def drop(self, waiter: object) -> None:
        """No one waits for these searches any more (their request failed): an answer
        is dropped as a late one."""
        self.asked = {k: a for k, a in self.asked.items() if a.waiter is not waiter}
        self.unsent = {k: v for k, v in self.unsent.items() if v[0].waiter is not waiter}

    def next_deadline(self, ticked_at: float) -> float | None:
        """When to look again: soon while a search waits to be sent, else the earliest
        budget's end."""
        if self.unsent:
            return ticked_at + UNSENT_RETRY_S
        return min((asked.deadline for asked in self.asked.values()), default=None)

    def tick(self, now: float) -> None:
        """Searches not sent yet offered again (or given up at their deadline), and
        those retrieval has not answered within the budget given up."""
        for request_id, (asked, frame) in list(self.unsent.items()):
            del self.unsent[request_id]
            if now >= asked.deadline:
                self._not_sent(asked, "retrieval is not accepting requests")
            else:
                self._send(request_id, asked, frame)
        for request_id, asked in list(self.asked.items()):
            if now >= asked.deadline:
                del self.asked[request_id]
                self._finish(asked, {**empty_retrieval((now - asked.started) * 1000,
                                                       "timeout"),
                                     "error": "retrieval did not answer within the budget"})


def empty_retrieval(latency_ms: float, outcome: str) -> dict:
    return {"context": "", "record_ids": [], "latency_ms": round(latency_ms, 3), "outcome": outcome}
