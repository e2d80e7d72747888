"""Gateway: the daemon's one door on TCP, for shims, MCP servers and the CLI elsewhere.

Started only when ``network.listen`` names an address (``tcp://HOST:PORT``). It binds a
ROUTER there with CURVE: a client gets in only with a public key that ``kirolearn
keys add`` allowed. This process's ZAP handler asks the keyring, which reads the
allowed keys again whenever they change, so ``keys add`` and ``keys revoke`` need no
restart; a client revoked while connected is refused at its next request.

A request names the role it is for (``to``: ingest or retrieval, never storage or a
control socket) and one of the ops that role serves to clients (``REMOTE_OPS``). The
key is the client's actor: the request is checked against what that actor may reach
(``access.check``; refused ``FORBIDDEN``, and said in the log, when it names another's
namespace), stamped with the client's name (``client``, whatever the request said),
and passed on to that role's own socket, whose reply comes back the same way. Every
write therefore meets ingest's checks and privacy scrub, as a local one does.

Extraction workers elsewhere talk to storage's own TCP sockets (PORT+1, +2) with keys
of their own kind; here such a key may only ``ping`` (a worker checks that the daemon
answers before it starts).
"""

from __future__ import annotations

import zmq

from kirolearn import access, config, keys, protocol, transport
from kirolearn.roles import base

Code = protocol.ErrorCode

# What a client elsewhere may ask, per role (the roles of control.REMOTE_TARGETS).
REMOTE_OPS = {
    "ingest": frozenset({"ping", "put_event", "put_events", "put_record", "put_rule_file",
                         "forget", "update_record"}),
    "retrieval": frozenset({"ping", "search", "get_records", "timeline", "resume_session",
                            "session_context", "session_events", "brief"}),
}


class Gateway(base.Role):
    role = "gateway"

    def setup(self) -> None:
        try:
            endpoint = transport.tcp_endpoints(self.settings["network"]["listen"])["requests"]
            pair = keys.server_pair(self.home)
        except ValueError as exc:  # keys.KeysError too: FATAL, with what to do
            raise config.ConfigError(str(exc)) from exc
        self.keyring = keys.Keyring(self.home)
        self.workers = keys.Keyring(self.home, keys.WORKER)
        self.answer_zap(lambda key: self.keyring.name_of(key) or self.workers.name_of(key))
        self.front = self.add_socket(
            self.bind(zmq.ROUTER, endpoint, curve=transport.Curve(pair.public, pair.secret)),
            self._on_request)
        self.roles = {target: self.add_socket(
            transport.make_socket(self.ctx, zmq.DEALER, connect=self.home.endpoint(target)),
            self._on_reply) for target in REMOTE_OPS}
        self.passed = self.refused = 0
        # Whose each connection waiting for replies is (its routing id → its key's names,
        # and how many replies it waits for), so that a reply still on its way to a key
        # revoked meanwhile is dropped.
        self.routes: dict[bytes, tuple[str | None, str | None, int]] = {}
        self.log.info("listening on %s (CURVE)", endpoint)

    def counters(self) -> dict:
        return {"passed": self.passed, "refused": self.refused}

    def _on_request(self, sock: zmq.Socket) -> None:
        for _ in range(base.REQUESTS_PER_PASS):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            key = transport.peer_key(frames[-1])
            client = self.keyring.name_of(key)
            worker = None if client else self.workers.name_of(key)
            self._pass_on([frame.bytes for frame in frames], client, worker)

    def _pass_on(self, frames: list[bytes], client: str | None,
                 worker: str | None = None) -> None:
        """Hand one request to its role, or answer it with why not."""
        envelope, payload = frames[:-1], frames[-1]
        if (client is None and worker is None) or not envelope:  # revoked since it connected
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
            if client is None:  # a worker's key: it may see whether the daemon answers
                if op != "ping":
                    raise access.Forbidden(f"worker {worker}'s key is for extraction only")
            else:
                access.check(client, target, op, message["body"])
        except access.Forbidden as exc:
            self.refused += 1
            self.log.warning("FORBIDDEN: %s asked %s.%s: %s", client or f"worker {worker}",
                             target, op, exc)
            transport.send_reply(self.front, envelope, protocol.reply_error(
                message["id"], Code.FORBIDDEN, str(exc)))
            return
        # Passed on as the roles read it: the envelope's own keys, and whose it is.
        message = {**protocol.request(op, message["body"], message["id"]),
                   "client": client or f"worker {worker}"}
        if not base.send_now(self.roles[target], *envelope, protocol.pack(message)):
            transport.send_reply(self.front, envelope, protocol.reply_error(
                message["id"], Code.UNAVAILABLE, f"the daemon's {target} is not running"))
            return
        waiting = self.routes.get(envelope[0], (None, None, 0))[2]
        self.routes[envelope[0]] = client, worker, waiting + 1
        self.passed += 1

    def _on_reply(self, sock: zmq.Socket) -> None:
        """A role's replies, back to the clients as they are (a client gone, or whose key
        was revoked since it asked, is skipped)."""
        for _ in range(base.REQUESTS_PER_PASS):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if not self._still_allowed(frames[0]):
                self.log.warning("dropped a reply to a key revoked since it asked")
                continue
            base.send_now(self.front, *frames)

    def _still_allowed(self, route: bytes) -> bool:
        client, worker, waiting = self.routes.pop(route, (None, None, 0))
        if waiting > 1:
            self.routes[route] = client, worker, waiting - 1
        if client is not None:
            return client in self.keyring.names()
        return worker is not None and worker in self.workers.names()


if __name__ == "__main__":
    base.main(Gateway)
