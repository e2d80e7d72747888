"""ZeroMQ plumbing shared by every process: the socket factory and the REQ client.

Rules this module enforces so no caller has to remember them:
- every socket gets LINGER, high-water marks and a maximum message size;
- every blocking receive is a poll with a timeout;
- a REQ client that times out closes its socket (LINGER 0) and opens a new one
  before the next request (the Guide's "Lazy Pirate"), so a late reply can
  never be read as the answer to a later request.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

import zmq

from kirolearn import protocol

if TYPE_CHECKING:  # logging costs a hook 8 ms to import; the shims never log
    import logging

DEFAULT_HWM = 10_000
HARD_MAX_MSG = 16 * 1024 * 1024  # libzmq drops larger messages before we see them


class Timeout(TimeoutError):
    """No reply within the deadline; the request may or may not have been processed."""


def make_socket(ctx: zmq.Context, kind: int, *, linger_ms: int = 0, hwm: int = DEFAULT_HWM,
                bind: str | None = None, connect: str | None = None) -> zmq.Socket:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, linger_ms)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    sock.setsockopt(zmq.MAXMSGSIZE, HARD_MAX_MSG)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # drop replies to vanished peers
    if bind:
        sock.bind(bind)
    if connect:
        sock.connect(connect)
    return sock


class Client:
    """Request/reply client over REQ, safe against timeouts and late replies."""

    def __init__(self, endpoint: str, ctx: zmq.Context | None = None, timeout_ms: int = 2000):
        self.endpoint = endpoint
        self.timeout_ms = timeout_ms
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self._sock: zmq.Socket | None = None

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            self._sock = make_socket(self.ctx, zmq.REQ, connect=self.endpoint)
        return self._sock

    def _reset(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def call(self, op: str, body: dict | None = None, timeout_ms: int | None = None) -> dict:
        """Send one request and return the reply body; raise Timeout or RemoteError."""
        message = protocol.request(op, body)
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
            self.ctx.term()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def send_reply(sock: zmq.Socket, envelope: list[bytes], message: dict) -> None:
    """Answer a ROUTER request: the routing envelope, then the packed reply."""
    # A peer that is gone or stuck times out and retries; never block for it.
    with contextlib.suppress(zmq.Again):
        sock.send_multipart([*envelope, protocol.pack(message)], flags=zmq.NOBLOCK)


def recv_request(sock: zmq.Socket, log: logging.Logger) -> tuple[list[bytes], dict] | None:
    """Read one ROUTER request: (routing envelope, request), or None for a malformed one,
    which has been answered with an error reply (or dropped, if it had no envelope)
    and logged."""
    frames = sock.recv_multipart()
    if len(frames) < 2:
        log.warning("dropped a frame without a routing envelope")
        return None
    envelope, payload = frames[:-1], frames[-1]
    try:
        return envelope, protocol.parse_request(payload)
    except protocol.DecodeError as exc:
        log.warning("bad request: %s", exc)
        send_reply(sock, envelope, protocol.reply_error(None, exc.code, exc.reason))
        return None
