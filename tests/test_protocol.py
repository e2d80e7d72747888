"""Envelopes, defensive decoding, and the Lazy Pirate client."""

from __future__ import annotations

import logging
import threading
import time

import msgpack
import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st

from kirolearn import protocol, transport

values = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
                      | st.text(max_size=50),
                      lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=10), c,
                                                                            max_size=3),
                      max_leaves=10)


@given(op=st.text(min_size=1, max_size=20), body=st.dictionaries(st.text(max_size=10), values))
def test_requests_round_trip(op, body):
    message = protocol.request(op, body)
    assert protocol.parse_request(protocol.pack(message)) == message


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_decode_error(frame):
    try:
        protocol.parse_request(frame)
    except protocol.DecodeError as exc:
        assert isinstance(exc.code, protocol.ErrorCode)


@pytest.mark.parametrize("frame, code", [
    (b"\xc1", protocol.ErrorCode.BAD_FRAME),
    (msgpack.packb([1, 2]), protocol.ErrorCode.BAD_FRAME),
    (msgpack.packb({"v": 2, "id": "a", "op": "ping"}), protocol.ErrorCode.BAD_VERSION),
    (msgpack.packb({"v": 1, "op": "ping"}), protocol.ErrorCode.BAD_FRAME),
    (msgpack.packb({"v": 1, "id": "a", "op": "ping", "body": [1]}),
     protocol.ErrorCode.BAD_REQUEST),
    (msgpack.packb({1: 2}), protocol.ErrorCode.BAD_FRAME),  # non-string keys
])
def test_malformed_requests_get_a_code(frame, code):
    with pytest.raises(protocol.DecodeError) as info:
        protocol.parse_request(frame)
    assert info.value.code == code


def test_size_is_checked_before_unpacking(monkeypatch):
    def explode(*_a, **_k):
        raise AssertionError("unpacked an oversized frame")

    monkeypatch.setattr(msgpack, "unpackb", explode)
    with pytest.raises(protocol.DecodeError) as info:
        protocol.unpack(b"\x00" * (protocol.MAX_FRAME_BYTES + 1))
    assert "limit" in info.value.reason


def test_error_replies_raise_remote_error():
    reply = protocol.reply_error("x", protocol.ErrorCode.INVALID_EVENT, "kind: bad")
    with pytest.raises(protocol.RemoteError) as info:
        protocol.reply_body(protocol.parse_reply(protocol.pack(reply)))
    assert info.value.code == protocol.ErrorCode.INVALID_EVENT


class SlowServer:
    """A REP server that answers the first request late and the rest at once."""

    def __init__(self, ctx: zmq.Context, endpoint: str, first_delay: float):
        self.sock = transport.make_socket(ctx, zmq.ROUTER, bind=endpoint)
        self.first_delay = first_delay
        self.stop = threading.Event()
        self.replied_late = threading.Event()  # the reply to the first request is sent
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        count = 0
        while not self.stop.is_set():
            if not self.sock.poll(20):
                continue
            envelope, request, _ = transport.recv_request(self.sock,
                                                          logging.getLogger("test"))
            count += 1
            if count == 1:
                time.sleep(self.first_delay)
            transport.send_reply(self.sock, envelope, protocol.reply_ok(
                request["id"], {"echo": request["body"]["n"]}))
            if count == 1:
                self.replied_late.set()
        self.sock.close(linger=0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def test_lazy_pirate_never_takes_a_late_reply_for_a_later_request(ctx, tmp_path):
    endpoint = f"ipc://{tmp_path}/slow.sock"
    server = SlowServer(ctx, endpoint, first_delay=0.3)
    client = transport.Client(endpoint, ctx, timeout_ms=100)
    try:
        with pytest.raises(transport.Timeout):
            client.call("echo", {"n": 1})
        assert server.replied_late.wait(5)  # the late reply to n=1 is on its way to a closed socket
        assert client.call("echo", {"n": 2}) == {"echo": 2}
        assert client.call("echo", {"n": 3}) == {"echo": 3}
    finally:
        client.close()
        server.close()


def test_client_times_out_when_nobody_listens(ctx, tmp_path):
    client = transport.Client(f"ipc://{tmp_path}/nobody.sock", ctx, timeout_ms=50)
    with pytest.raises(transport.Timeout):
        client.call("ping")
    client.close()


def test_a_client_closes_even_with_a_socket_an_interruption_left_open(tmp_path):
    """A SIGTERM's SystemExit can cut a call short after its socket was made and before
    the client held it: closing must not wait on that socket (a benchmark stopped by
    its time limit hung there, its daemon never stopped)."""
    client = transport.Client(f"ipc://{tmp_path}/nobody.sock", timeout_ms=50)
    stray = transport.make_socket(client.ctx, zmq.REQ, connect=f"ipc://{tmp_path}/x.sock")
    closed = threading.Event()
    threading.Thread(target=lambda: (client.close(), closed.set()), daemon=True).start()
    assert closed.wait(10)
    assert stray.closed
