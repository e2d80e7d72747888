"""Retrieval role: answers ``search`` for prompt events, under ingest's deadline.

It serves the protocol end to end (``ping``, ``search``) but searches nothing
yet: every prompt gets an empty context. The lexical search over the records'
FTS5 index goes behind the same ``search`` operation.
"""

from __future__ import annotations

import zmq

from kirolearn import paths, protocol, role, transport


class Retrieval(role.Role):
    role = "retrieval"

    def setup(self) -> None:
        self.bind(zmq.ROUTER, paths.endpoint("retrieval", self.base), self._on_request)

    def _on_request(self, sock: zmq.Socket) -> None:
        received = transport.recv_request(sock, self.log)
        if received is None:
            return
        envelope, request = received
        op = request["op"]
        if op == "ping":
            reply = protocol.reply_ok(request["id"], {"role": self.role})
        elif op == "search":  # no search yet: every prompt gets no context
            reply = protocol.reply_ok(request["id"], {
                "context": "", "record_ids": [], "outcome": "empty", "latency_ms": 0.0})
        else:
            reply = protocol.reply_error(request["id"], protocol.ErrorCode.UNKNOWN_OP,
                                         f"retrieval does not serve {op!r}")
        transport.send_reply(sock, envelope, reply)


if __name__ == "__main__":
    role.main(Retrieval)
