"""Retrieval role: answers searches for prompt events on read-only SQLite connections.

This first version serves the protocol end to end (``ping``, ``search``) and
answers every search with an empty result; the lexical search of the seed
lands behind the same ``search`` operation.
"""

from __future__ import annotations

import time

import zmq

from kirolearn import paths, protocol, role, transport


class Retrieval(role.Role):
    role = "retrieval"

    def setup(self) -> None:
        self.bind(zmq.ROUTER, paths.endpoint("retrieval", self.base), self._on_request)

    def _on_request(self, sock: zmq.Socket) -> None:
        envelope, request, error = transport.recv_request(sock)
        if request is None:
            if error:
                transport.send_reply(sock, envelope, error)
            return
        op = request["op"]
        if op == "ping":
            reply = protocol.reply_ok(request["id"], {"role": self.role})
        elif op == "search":
            started = time.monotonic()
            reply = protocol.reply_ok(request["id"], {
                "context": "", "record_ids": [], "outcome": "empty",
                "latency_ms": round((time.monotonic() - started) * 1000, 3)})
        else:
            reply = protocol.reply_error(request["id"], protocol.ErrorCode.UNKNOWN_OP,
                                         f"retrieval does not serve {op!r}")
        transport.send_reply(sock, envelope, reply)


if __name__ == "__main__":
    role.main(Retrieval)
