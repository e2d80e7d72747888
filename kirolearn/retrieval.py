"""Retrieval role: answers ``search`` with memory records and the agent's context block.

Ingest asks it for every prompt sent with ``retrieve: true`` (``search``) and for
every session start sent with ``retrieve: "session"`` (``session_context``);
``kirolearn search`` and the MCP server ask it directly. It searches on its own read-only connection
(WAL lets it read while storage writes; see ``search``). Every search runs under a
deadline: the request's budget, cut shorter by the sender's ``deadline_ms`` when
given, so a request that waited in the queue past its sender's patience is answered
``timeout`` at once instead of being searched for nobody.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from dataclasses import dataclass

import zmq

from kirolearn import contract, paths, protocol, role, search, transport

MAX_LIMIT = 100
MAX_NAMESPACES = 8
MAX_IDS = 100  # records one get_records may ask for
MAX_AROUND = 50  # records a timeline may show on each side
MAX_BUDGET_MS = 60_000


class BadSearch(ValueError):
    pass


@dataclass
class SearchRequest:
    namespaces: tuple[str, ...]
    query: str
    limit: int
    budget_ms: float
    deadline: float | None  # time.monotonic()
    with_records: bool


def parse_search(body: dict, default_limit: int, default_budget_ms: float) -> SearchRequest:
    """A search request's body, checked (BadSearch says what is wrong).

    The query is ``query`` (text) or comes from ``event`` (a prompt: text content,
    last message turn, or JSON data); the namespace is ``namespace`` or the event's,
    or ``namespaces`` (several, searched as one).
    """
    event = body.get("event")
    if "query" in body:
        query = body["query"]
        if not isinstance(query, str):
            raise BadSearch("'query' must be a string")
    elif isinstance(event, dict):
        query = contract.body_text(event.get("body"))
    else:
        raise BadSearch("give 'query' (a string) or 'event' (a prompt event)")
    if "namespaces" in body:
        namespaces = parse_namespaces(body)
    else:
        namespace = body.get("namespace",
                             event.get("namespace") if isinstance(event, dict) else None)
        if not isinstance(namespace, str) or not namespace:
            raise BadSearch("'namespace' must be a non-empty string")
        namespaces = (namespace,)
    limit = body.get("limit", default_limit)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= MAX_LIMIT:
        raise BadSearch(f"'limit' must be an integer from 0 to {MAX_LIMIT}")
    budget_ms = body.get("budget_ms", default_budget_ms)
    if (not isinstance(budget_ms, int | float) or isinstance(budget_ms, bool)
            or not 0 <= budget_ms <= MAX_BUDGET_MS):
        raise BadSearch(f"'budget_ms' must be a number from 0 to {MAX_BUDGET_MS}")
    deadline = None
    deadline_ms = body.get("deadline_ms")
    if deadline_ms is not None:
        if not isinstance(deadline_ms, int | float) or isinstance(deadline_ms, bool):
            raise BadSearch("'deadline_ms' must be a number (milliseconds since the epoch)")
        deadline = time.monotonic() + (deadline_ms - time.time() * 1000) / 1000
    with_records = body.get("records", False)
    if not isinstance(with_records, bool):
        raise BadSearch("'records' must be true or false")
    return SearchRequest(namespaces, query, limit, float(budget_ms), deadline, with_records)


def parse_namespaces(body: dict) -> tuple[str, ...]:
    namespaces = body.get("namespaces")
    if (not isinstance(namespaces, list) or not 1 <= len(namespaces) <= MAX_NAMESPACES
            or not all(isinstance(n, str) and n for n in namespaces)):
        raise BadSearch(f"'namespaces' must be a list of 1 to {MAX_NAMESPACES} non-empty strings")
    return tuple(namespaces)


def parse_count(body: dict, key: str, default: int, most: int) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
        raise BadSearch(f"'{key}' must be an integer from 0 to {most}")
    return value


class Retrieval(role.Role):
    role = "retrieval"

    def setup(self) -> None:
        self.default_limit = self.settings["retrieval"]["limit"]
        self.default_budget_ms = self.settings["retrieval"]["budget_ms"]
        self.session_tokens = self.settings["retrieval"]["session_tokens"]
        self.searcher = search.Searcher(paths.db_path(self.base))
        self.outcomes: Counter[str] = Counter()
        self.bind(zmq.ROUTER, paths.endpoint("retrieval", self.base), self._on_request)

    def teardown(self) -> None:
        if hasattr(self, "searcher"):
            self.searcher.close()

    def control_status(self) -> dict:
        return {"searches": dict(self.outcomes)}

    def _on_request(self, sock: zmq.Socket) -> None:
        received = transport.recv_request(sock, self.log)
        if received is None:
            return
        envelope, request = received
        op, rid = request["op"], request["id"]
        if op == "ping":
            reply = protocol.reply_ok(rid, {"role": self.role})
        elif op == "search":
            try:
                asked = parse_search(request["body"], self.default_limit,
                                     self.default_budget_ms)
            except BadSearch as exc:
                reply = protocol.reply_error(rid, protocol.ErrorCode.BAD_REQUEST, str(exc))
            else:
                result = self.searcher.search(asked.namespaces, asked.query, asked.limit,
                                              asked.budget_ms, asked.deadline)
                self.outcomes[result.outcome] += 1
                if result.error:
                    self.log.warning("search failed (%s): %s", result.outcome, result.error)
                reply = protocol.reply_ok(rid, result.as_dict(asked.with_records))
        elif op == "session_context":
            reply = self._session_context(rid, request["body"])
        elif op in ("get_records", "timeline"):
            reply = self._lookup(rid, op, request["body"])
        else:
            reply = protocol.reply_error(rid, protocol.ErrorCode.UNKNOWN_OP,
                                         f"retrieval does not serve {op!r}")
        transport.send_reply(sock, envelope, reply)

    def _lookup(self, rid: str, op: str, body: dict) -> dict:
        """``get_records {ids, namespaces}`` and ``timeline {record_id, namespaces, before,
        after}``: records by id, and the records around one."""
        try:
            namespaces = parse_namespaces(body)
            if op == "get_records":
                ids = body.get("ids")
                if (not isinstance(ids, list) or not 1 <= len(ids) <= MAX_IDS
                        or not all(isinstance(i, str) for i in ids)):
                    raise BadSearch(f"'ids' must be a list of 1 to {MAX_IDS} record ids")
            else:
                record_id = body.get("record_id")
                if not isinstance(record_id, str):
                    raise BadSearch("'record_id' must be a string")
                before = parse_count(body, "before", 5, MAX_AROUND)
                after = parse_count(body, "after", 5, MAX_AROUND)
        except BadSearch as exc:
            return protocol.reply_error(rid, protocol.ErrorCode.BAD_REQUEST, str(exc))
        try:
            if op == "get_records":
                records = self.searcher.get_records(ids, namespaces)
            else:
                records = self.searcher.timeline(record_id, namespaces, before, after)
        except sqlite3.Error as exc:
            self.searcher.close()  # reopened on the next request
            self.log.warning("%s failed: %s", op, exc)
            return protocol.reply_error(rid, protocol.ErrorCode.INTERNAL,
                                        f"the database could not be read: {exc}")
        return protocol.reply_ok(rid, {"records": records})

    def _session_context(self, rid: str, body: dict) -> dict:
        namespace = body.get("namespace")
        tokens = body.get("tokens", self.session_tokens)
        if not isinstance(namespace, str) or not namespace:
            return protocol.reply_error(rid, protocol.ErrorCode.BAD_REQUEST,
                                        "'namespace' must be a non-empty string")
        if not isinstance(tokens, int) or isinstance(tokens, bool) or not 0 <= tokens <= 100_000:
            return protocol.reply_error(rid, protocol.ErrorCode.BAD_REQUEST,
                                        "'tokens' must be an integer from 0 to 100000")
        result = self.searcher.session_context(namespace, tokens)
        self.outcomes[result.outcome] += 1
        if result.error:
            self.log.warning("session context failed: %s", result.error)
        return protocol.reply_ok(rid, result.as_dict())


if __name__ == "__main__":
    role.main(Retrieval)
