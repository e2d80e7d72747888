"""Inter-process protocol v1: msgpack envelopes, operation names, numeric error codes.

Every message is one msgpack map. A request is
``{"v": 1, "id": <request id>, "op": <operation>, "body": {...}}``; a reply is
``{"v": 1, "id": <same id>, "ok": true, "body": {...}}`` or
``{"v": 1, "id": <same id>, "ok": false, "error": {"code": <int>, "reason": <str>}}``.
Decoding checks the frame size before unpacking and the envelope's shape after,
so a hostile or broken peer produces a DecodeError, never a crash.
Dependencies: the standard library and msgpack only (shims import this).
"""

from __future__ import annotations

import os
from enum import IntEnum
from typing import Any

import msgpack

VERSION = 1
MAX_FRAME_BYTES = 4 * 1024 * 1024  # larger frames are refused before unpacking
# How long a maintenance op (forgetting a whole project, pruning, compacting the file) may
# take: the client waits this long, and ingest waits as long for storage on its behalf.
MAINTENANCE_MS = 600_000


class ErrorCode(IntEnum):
    """Numeric error codes carried in ``error.code``; documented in docs/protocol.md."""

    BAD_FRAME = 1  # not msgpack, not a map, or too large to unpack
    BAD_VERSION = 2  # protocol version this peer does not speak
    UNKNOWN_OP = 3  # operation name not served by this socket
    BAD_REQUEST = 4  # envelope fine, body has the wrong shape
    INVALID_EVENT = 5  # event violates the wire contract (field-level reasons)
    TOO_LARGE = 6  # body over the contract's size cap
    UNAVAILABLE = 7  # a downstream role did not answer in time
    INTERNAL = 8  # unexpected failure inside the role (logged)
    SHUTTING_DOWN = 9  # the role is stopping and takes no new work
    FORBIDDEN = 10  # the request reaches what is not its client's (see kirolearn.access)


class DecodeError(ValueError):
    def __init__(self, code: ErrorCode, reason: str):
        self.code = code
        self.reason = reason
        super().__init__(f"{code.name}: {reason}")


class RemoteError(RuntimeError):
    """An error reply from a peer."""

    def __init__(self, code: int, reason: str, body: dict | None = None):
        self.code = code
        self.reason = reason
        self.body = body or {}
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"{name}: {reason}")


def new_request_id() -> str:
    return os.urandom(8).hex()


def pack(message: dict) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def unpack(frame: bytes) -> dict:
    """Decode one frame into a map, refusing oversized or malformed input."""
    if len(frame) > MAX_FRAME_BYTES:
        raise DecodeError(ErrorCode.BAD_FRAME,
                          f"frame is {len(frame)} bytes; the limit is {MAX_FRAME_BYTES}")
    try:
        message = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise DecodeError(ErrorCode.BAD_FRAME, f"not a msgpack message: {exc}") from exc
    if not isinstance(message, dict):
        raise DecodeError(ErrorCode.BAD_FRAME, "message must be a map")
    return message


def request(op: str, body: dict | None = None, request_id: str | None = None) -> dict:
    return {"v": VERSION, "id": request_id or new_request_id(), "op": op, "body": body or {}}


def reply_ok(request_id: Any, body: dict | None = None) -> dict:
    return {"v": VERSION, "id": request_id, "ok": True, "body": body or {}}


def reply_error(request_id: Any, code: ErrorCode, reason: str, body: dict | None = None) -> dict:
    message = {"v": VERSION, "id": request_id, "ok": False,
               "error": {"code": int(code), "reason": reason}}
    if body:
        message["body"] = body
    return message


def parse_request(frame: bytes) -> dict:
    """Unpack and check a request envelope; DecodeError carries the reply's code."""
    message = unpack(frame)
    if message.get("v") != VERSION:
        raise DecodeError(ErrorCode.BAD_VERSION,
                          f"protocol version {message.get('v')!r} is not {VERSION}")
    if not isinstance(message.get("id"), str) or not isinstance(message.get("op"), str):
        raise DecodeError(ErrorCode.BAD_FRAME, "request needs string 'id' and 'op'")
    if not isinstance(message.get("body", {}), dict):
        raise DecodeError(ErrorCode.BAD_REQUEST, "'body' must be a map")
    message.setdefault("body", {})
    return message


def parse_reply(frame: bytes) -> dict:
    message = unpack(frame)
    if message.get("v") != VERSION or not isinstance(message.get("ok"), bool):
        raise DecodeError(ErrorCode.BAD_FRAME, "not a v1 reply")
    return message


def reply_body(message: dict) -> dict:
    """The body of a successful reply, or RemoteError for an error reply."""
    if message["ok"]:
        return message.get("body") or {}
    error = message.get("error") or {}
    raise RemoteError(int(error.get("code", ErrorCode.INTERNAL)), str(error.get("reason", "")),
                      message.get("body"))
