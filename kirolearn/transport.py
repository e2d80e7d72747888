"""ZeroMQ plumbing shared by every process: the socket factory and the REQ client.

Rules this module enforces so no caller has to remember them:
- every socket gets LINGER, high-water marks and a maximum message size;
- a TCP endpoint is CURVE or nothing (``Curve``), with ZMTP heartbeats, so a peer
  whose machine vanished is noticed;
- every blocking receive is a poll with a timeout;
- a REQ client that times out closes its socket (LINGER 0) and opens a new one
  before the next request (the Guide's "Lazy Pirate"), so a late reply can
  never be read as the answer to a later request.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import zmq
from zmq.utils import z85

from kirolearn import protocol

if TYPE_CHECKING:  # logging costs a hook 8 ms to import; the shims never log
    import logging

DEFAULT_HWM = 10_000
HARD_MAX_MSG = 16 * 1024 * 1024  # libzmq drops larger messages before we see them
ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # where libzmq asks who may connect (RFC 27)
ZAP_DOMAIN = b"kirolearn"
HEARTBEAT_MS = 5000  # a TCP peer that says nothing for 3 heartbeats is disconnected


class Timeout(TimeoutError):
    """No reply within the deadline; the request may or may not have been processed."""


def tcp_endpoints(url: str) -> dict[str, str]:
    """A daemon's TCP endpoints, from the one address it is given (``tcp://HOST:PORT``):
    ``requests`` (the gateway: shims, MCP servers, the CLI) on PORT, ``batches`` to
    extraction workers on PORT+1 and their ``records`` back on PORT+2. ValueError for
    anything else."""
    scheme, _, rest = url.partition("://")
    host, _, port_text = rest.rpartition(":")
    if scheme != "tcp" or not host or "/" in rest or not port_text.isdigit():
        raise ValueError(f"{url!r} is not an address like tcp://HOST:PORT")
    port = int(port_text)
    if not 1 <= port <= 65533:
        raise ValueError(f"{url!r}: the port must be 1-65533 (PORT+1 and PORT+2 are used too)")
    return {name: f"tcp://{host}:{port + offset}"
            for offset, name in enumerate(("requests", "batches", "records"))}


class Curve(NamedTuple):
    """A socket's CURVE keys (Z85): a server's own pair, or a client's pair and the
    ``server_key`` of the server it talks to."""

    public: bytes
    secret: bytes
    server_key: bytes | None = None


def make_socket(ctx: zmq.Context, kind: int, *, linger_ms: int = 0, hwm: int = DEFAULT_HWM,
                bind: str | None = None, connect: str | None = None,
                curve: Curve | None = None) -> zmq.Socket:
    """A socket with the project's options. A TCP endpoint needs ``curve``: a server
    (``bind``) then asks the process's ZAP handler (``answer_zap``) who may connect."""
    endpoint = bind or connect or ""
    if endpoint.startswith("tcp://") and curve is None:
        raise ValueError(f"{endpoint}: a TCP endpoint must use CURVE")
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, linger_ms)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    sock.setsockopt(zmq.MAXMSGSIZE, HARD_MAX_MSG)
    if curve is not None:
        if curve.server_key is None:
            sock.setsockopt(zmq.CURVE_SERVER, 1)
            sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        else:
            sock.setsockopt(zmq.CURVE_SERVERKEY, curve.server_key)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, curve.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, curve.secret)
    if endpoint.startswith("tcp://"):
        sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_MS)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * HEARTBEAT_MS)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # drop replies to vanished peers
    if bind:
        sock.bind(bind)
    if connect:
        sock.connect(connect)
    return sock


class Client:
    """Request/reply client over REQ, safe against timeouts and late replies. ``to``:
    the role a daemon's gateway hands the requests to (a TCP endpoint, with ``curve``)."""

    def __init__(self, endpoint: str, ctx: zmq.Context | None = None, timeout_ms: int = 2000,
                 *, curve: Curve | None = None, to: str | None = None):
        self.endpoint = endpoint
        self.timeout_ms = timeout_ms
        self.curve = curve
        self.to = to
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self._sock: zmq.Socket | None = None

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            self._sock = make_socket(self.ctx, zmq.REQ, connect=self.endpoint, curve=self.curve)
        return self._sock

    def _reset(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def call(self, op: str, body: dict | None = None, timeout_ms: int | None = None) -> dict:
        """Send one request and return the reply body; raise Timeout or RemoteError."""
        message = protocol.request(op, body)
        if self.to:
            message["to"] = self.to
        sock = self._socket()
        deadline = time.monotonic() + (timeout_ms or self.timeout_ms) / 1000
        try:
            sock.send(protocol.pack(message), flags=zmq.NOBLOCK)
        except zmq.Again as exc:
            self._reset()
            raise Timeout(f"{self.endpoint}: cannot send {op}") from exc
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0 or not sock.poll(remaining_ms, zmq.POLLIN):
            self._reset()  # a late reply would otherwise answer the next request
            raise Timeout(f"{self.endpoint}: no reply to {op} in time")
        # REQ only ever delivers the reply to the request it sent; no id check needed.
        return protocol.reply_body(protocol.parse_reply(sock.recv()))

    def close(self) -> None:
        self._reset()
        if self._own_ctx:
            # Every socket of it closed first: one made when an exception (a signal's
            # SystemExit) cut ``_socket`` short would otherwise keep term() waiting.
            self.ctx.destroy(linger=0)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None and not issubclass(kind, Exception) and self._own_ctx:
            # A signal's SystemExit or a Ctrl-C, maybe in the middle of a zmq call: the
            # process is on its way out, and term() can wait there for good (seen under
            # load). Its finally blocks must run: the context is left to the exit.
            self._reset()
            return
        self.close()


def send_reply(sock: zmq.Socket, envelope: list[bytes], message: dict) -> None:
    """Answer a ROUTER request: the routing envelope, then the packed reply."""
    # A peer that is gone or stuck times out and retries; never block for it.
    with contextlib.suppress(zmq.Again):
        sock.send_multipart([*envelope, protocol.pack(message)], flags=zmq.NOBLOCK)


def recv_request(sock: zmq.Socket, log: logging.Logger
                 ) -> tuple[list[bytes], dict, int] | None:
    """Read one ROUTER request: (routing envelope, request, its size in bytes), or None
    for a malformed one, which has been answered with an error reply (or dropped, if it
    had no envelope) and logged."""
    frames = sock.recv_multipart()
    if len(frames) < 2:
        log.warning("dropped a frame without a routing envelope")
        return None
    envelope, payload = frames[:-1], frames[-1]
    try:
        return envelope, protocol.parse_request(payload), len(payload)
    except protocol.DecodeError as exc:
        log.warning("bad request: %s", exc)
        send_reply(sock, envelope, protocol.reply_error(None, exc.code, exc.reason))
        return None


def peer_key(frame: zmq.Frame) -> bytes | None:
    """The Z85 public key a CURVE peer authenticated with (its ZAP User-Id), or None for a
    frame from a socket without CURVE."""
    try:
        return frame.get("User-Id").encode("ascii") or None
    except zmq.ZMQError:
        return None


def answer_zap(sock: zmq.Socket, allowed: Callable[[bytes], object],
               log: logging.Logger) -> None:
    """Answer one ZAP request (RFC 27) on the process's ``ZAP_ENDPOINT`` REP socket: a
    CURVE client whose public key ``allowed`` knows gets in, with that key (Z85) as its
    User-Id; any other is refused and said in the log."""
    frames = sock.recv_multipart()
    if len(frames) < 6:  # not a ZAP request: answer something, REP must
        sock.send_multipart([b"1.0", b"", b"500", b"malformed ZAP request", b"", b""])
        return
    version, request_id, domain, address, _identity, mechanism = frames[:6]
    credentials = frames[6:]
    reply = [version, request_id]
    if domain == ZAP_DOMAIN and mechanism == b"CURVE" and len(credentials) == 1:
        key = z85.encode(credentials[0])
        if allowed(key):
            sock.send_multipart([*reply, b"200", b"OK", key, b""])
            return
        log.warning("refused a connection from %s: its CURVE key %s is not allowed",
                    address.decode("ascii", "replace"), key.decode("ascii"))
    else:
        log.warning("refused a connection from %s: %s is not CURVE",
                    address.decode("ascii", "replace"), mechanism.decode("ascii", "replace"))
    sock.send_multipart([*reply, b"400", b"not allowed", b"", b""])
