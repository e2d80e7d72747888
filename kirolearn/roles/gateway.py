"""Gateway: the daemon's one door on TCP, for shims, MCP servers and the CLI elsewhere.

Started only when ``network.listen`` names an address (``tcp://HOST:PORT``). It binds a
ROUTER there with CURVE: a client gets in only with a public key that ``kirolearn
keys add`` allowed. This process's ZAP handler asks the keyring, which reads the
allowed keys again whenever they change, so ``keys add`` and ``keys revoke`` need no
restart; a client revoked while connected is refused at its next request.

A request names the role it is for (``to``: ingest or retrieval, never storage or a
control socket) and one of the ops that role serves to clients (``REMOTE_OPS``); it
is passed on unchanged to that role's own socket, whose reply comes back the same
way. Every write therefore meets ingest's checks and privacy scrub, as a local one
does. Extraction workers elsewhere talk to storage's own TCP sockets (PORT+1, +2).
"""

from __future__ import annotations

import contextlib

import zmq

from kirolearn import config, keys, paths, protocol, transport
from kirolearn.roles import base

Code = protocol.ErrorCode

# What a client elsewhere may ask, per role (the roles of control.REMOTE_TARGETS).
REMOTE_OPS = {
    "ingest": frozenset({"ping", "put_event", "put_events", "put_record", "forget",
                         "update_record"}),
    "retrieval": frozenset({"ping", "search", "get_records", "timeline", "resume_session",
                            "session_context"}),
}


class Gateway(base.Role):
    role = "gateway"

    def setup(self) -> None:
        try:
            endpoint = transport.tcp_endpoints(self.settings["network"]["listen"])["requests"]
            pair = keys.server_pair(self.base)
        except ValueError as exc:  # keys.KeysError too: FATAL, with what to do
            raise config.ConfigError(str(exc)) from exc
        self.keyring = keys.Keyring(self.base)
        self.answer_zap(self.keyring.name_of)
        self.front = self.add_socket(
            self.bind(zmq.ROUTER, endpoint, curve=transport.Curve(pair.public, pair.secret)),
            self._on_request)
        self.roles = {target: self.add_socket(
            transport.make_socket(self.ctx, zmq.DEALER, connect=paths.endpoint(target, self.base)),
            self._on_reply) for target in REMOTE_OPS}
        self.passed = self.refused = 0
        self.log.info("listening on %s (CURVE)", endpoint)

    def counters(self) -> dict:
        return {"passed": self.passed, "refused": self.refused}

    def _on_request(self, sock: zmq.Socket) -> None:
        for _ in range(base.REQUESTS_PER_PASS):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self._pass_on([frame.bytes for frame in frames],
                          self.keyring.name_of(transport.peer_key(frames[-1])))

    def _pass_on(self, frames: list[bytes], client: str | None) -> None:
        """Hand one request to its role, or answer it with why not."""
        envelope, payload = frames[:-1], frames[-1]
        if client is None or not envelope:  # revoked since it connected: nothing for it
            self.refused += 1
            self.log.warning("dropped a request from a client that is no longer allowed")
            return
        try:
            message = protocol.parse_request(payload)
        except protocol.DecodeError as exc:
            self.refused += 1
            self.log.warning("bad request from %s: %s", client, exc)
            transport.send_reply(self.front, envelope,
                                 protocol.reply_error(None, exc.code, exc.reason))
            return
        target, op = message.get("to"), message["op"]
        if not isinstance(target, str) or op not in REMOTE_OPS.get(target, ()):
            self.refused += 1
            reason = f"{target}.{op} is not served over TCP (see docs/team.md)"
            transport.send_reply(self.front, envelope,
                                 protocol.reply_error(message["id"], Code.UNKNOWN_OP, reason))
            return
        try:
            self.roles[target].send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            transport.send_reply(self.front, envelope, protocol.reply_error(
                message["id"], Code.UNAVAILABLE, f"the daemon's {target} is not running"))
            return
        self.passed += 1

    def _on_reply(self, sock: zmq.Socket) -> None:
        """A role's replies, back to the clients as they are (a client gone is skipped)."""
        for _ in range(base.REQUESTS_PER_PASS):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            with contextlib.suppress(zmq.Again):
                self.front.send_multipart(frames, flags=zmq.NOBLOCK)


if __name__ == "__main__":
    base.main(Gateway)
