"""Wire contract v1: events and memory records, and the checks that guard them.

Standard library only, because every shim imports this module on every hook.
Validation collects *every* violation as a field-level error instead of
stopping at the first, so a client sees all that is wrong with one event.
Import cost matters here (a shim pays it on every hook): no dataclasses, and
patterns are compiled on first use, by the long-lived daemon, not at import.
The whole contract is one module, long as it is, so that a hook imports one light file
for it.
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime
from typing import Any, NamedTuple

try:  # the interpreter's own SHA-256: importing hashlib loads OpenSSL (~5 ms per hook)
    from _sha2 import sha256  # Python 3.12+
except ImportError:
    try:
        from _sha256 import sha256  # Python 3.11
    except ImportError:
        from hashlib import sha256

SCHEMA_VERSION = 1
EVENT_KINDS = ("prompt", "tool_use", "session_summary", "note")
BODY_TYPES = ("text", "message", "json")
RULE_FILE = "rule_file"  # the strategy of a rule file's record (extract.rules)
OBSERVATION_TYPES = ("tool_use", "decision", "error", "discovery", "pattern", "session_summary")
MAX_BODY_BYTES = 1024 * 1024  # serialized body cap, enforced by ingest
# An event or record is walked (without recursion) before anything else reads it: a
# value nested deeper than this, or holding more values, is refused as it stands.
MAX_DEPTH = 64
MAX_VALUES = 250_000

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Patterns, compiled on first use (see _matches).
ULID_PATTERN = r"[0-9A-HJKMNP-TV-Z]{26}\Z"
RECORD_ID_PATTERN = r"mr_[0-9A-HJKMNP-TV-Z]{26}\Z"
NAMESPACE_PATTERN = r"/actor/[^/]+/project/[^/]+/\Z"
CONTENT_HASH_PATTERN = r"sha256:[0-9a-f]{64}\Z"
COMMIT_PATTERN = r"[0-9a-f]{40}(?:[0-9a-f]{24})?\Z"  # a git object id (SHA-1 or SHA-256)
SURFACE_PATTERN = r"[a-z0-9][a-z0-9._-]{0,63}\Z"


_COMPILED: dict[str, re.Pattern] = {}


def _matches(pattern: str, value: str) -> bool:
    """Whether value matches pattern, compiling it once, when first needed: compiling
    at import would cost every hook a few milliseconds."""
    regex = _COMPILED.get(pattern) or _COMPILED.setdefault(pattern, re.compile(pattern))
    return regex.match(value) is not None


# --- identifiers ---------------------------------------------------------------------------


def new_ulid(timestamp_ms: int | None = None) -> str:
    """A ULID: 48 bits of Unix milliseconds then 80 random bits, Crockford base32."""
    ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return ulid_of(ms, os.urandom(10))


def ulid_of(timestamp_ms: int, entropy: bytes) -> str:
    """The ULID of these milliseconds and 10 bytes of entropy (the same each time: an
    event made again from the same source, ``seed``)."""
    value = (timestamp_ms << 80) | int.from_bytes(entropy[:10], "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def ulid_timestamp_ms(ulid: str) -> int:
    """The millisecond timestamp carried in the first ten characters of a ULID."""
    value = 0
    for ch in ulid[:10]:
        value = value * 32 + _CROCKFORD.index(ch)
    return value


def new_record_id() -> str:
    return "mr_" + new_ulid()


def is_ulid(value: Any) -> bool:
    # The first character caps the value at 2**128 - 1.
    return isinstance(value, str) and _matches(ULID_PATTERN, value) and value[0] <= "7"


def is_record_id(value: Any) -> bool:
    return isinstance(value, str) and _matches(RECORD_ID_PATTERN, value) and value[3] <= "7"


def is_namespace(value: Any) -> bool:
    return isinstance(value, str) and _matches(NAMESPACE_PATTERN, value)


# --- bodies ----------------------------------------------------------------------------------


_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def canonical_json(value: Any) -> str:
    """The one serialization used for size limits and hashes (stable across processes):
    ``json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))``."""
    return _CANONICAL.encode(value)


def content_hash(body: Any) -> str:
    return hash_json(canonical_json(body))


def hash_json(encoded: str) -> str:
    """content_hash of a body already in canonical JSON."""
    return "sha256:" + sha256(encoded.encode("utf-8")).hexdigest()


def body_text(body: object) -> str:
    """What a body says as text: text → its content; message → the last turn's content;
    json → the data as JSON (a string as itself). Anything else → ""."""
    if not isinstance(body, dict):
        return ""
    kind = body.get("type")
    if kind == "text":
        content = body.get("content")
    elif kind == "message":
        turns = body.get("turns")
        content = turns[-1].get("content") if turns and isinstance(turns[-1], dict) else ""
    elif kind == "json":
        data = body.get("data")
        content = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    else:
        content = ""
    return content if isinstance(content, str) else ""


TRUNCATE_BYTES = 512 * 1024  # shims cut bodies to this, well under MAX_BODY_BYTES
TRUNCATION_MARK = " [truncated by kirolearn]"


def body_size(body: Any) -> int:
    """Bytes of the body's canonical JSON: what the size limits are measured on."""
    return len(canonical_json(body).encode("utf-8"))


def _fit_text(text: str, make: Any, limit: int) -> str | None:
    """The longest cut of text (plus the mark) for which ``make(cut)`` fits in limit bytes,
    shortened 10% at a time after a first cut proportional to the excess; None when
    even the bare mark does not fit."""
    cut, size = len(text), body_size(make(text))
    while cut > 0:
        cut = min(cut - 1, int(cut * min(0.9, limit / size)))
        candidate = text[:cut] + TRUNCATION_MARK
        size = body_size(make(candidate))
        if size <= limit:
            return candidate
    candidate = TRUNCATION_MARK.strip()
    return candidate if body_size(make(candidate)) <= limit else None


def _largest_string(value: Any, path: tuple = ()) -> tuple[int, tuple]:
    """(length, path) of the longest string (key paths only through dicts and lists)."""
    best = (len(value), path) if isinstance(value, str) else (-1, path)
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        found = _largest_string(item, (*path, key))
        if found[0] > best[0]:
            best = found
    return best


def _replace_at(value: Any, path: tuple, new: Any) -> Any:
    """A copy of value with the item at path replaced (copies only along the path)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _replace_at(value[head], rest, new)
    return copy


def _get_at(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


def truncate_body(body: dict, limit: int = TRUNCATE_BYTES) -> dict:
    """The body itself when it fits in limit bytes, otherwise a trimmed copy marked
    ``[truncated by kirolearn]``, per shape:

    - text: the content is cut;
    - message: the last turn's content is cut; a turn that cannot fit even empty is
      dropped and the one before it is cut (at least one turn is kept);
    - json: ``tool_response.result`` is cut first (serialized if it is not text),
      then the longest strings one by one, so the tool name and input survive; as a
      last resort the data becomes ``{"_truncated": <its JSON, cut>}``.
    """
    if body_size(body) <= limit:
        return body
    kind = body.get("type")
    if kind == "text":
        content = _fit_text(body["content"], lambda c: {"type": "text", "content": c}, limit)
        return {"type": "text", "content": content or ""}
    if kind == "message":
        return _truncate_message(body, limit)
    return _truncate_json(body, limit)


def _truncate_message(body: dict, limit: int) -> dict:
    turns = [dict(turn) for turn in body["turns"]]
    while True:
        head = turns[:-1]
        last = turns[-1]
        content = _fit_text(str(last.get("content", "")), lambda c, h=head, t=last: {
            "type": "message", "turns": [*h, {**t, "content": c}]}, limit)
        if content is not None or len(turns) == 1:
            turns[-1] = {**last, "content": content or TRUNCATION_MARK.strip()}
            return {"type": "message", "turns": turns}
        turns.pop()


def _truncate_json(body: dict, limit: int) -> dict:
    data = body.get("data")
    response = data.get("tool_response") if isinstance(data, dict) else None
    if isinstance(response, dict) and "result" in response:
        result = response["result"]
        text = result if isinstance(result, str) else canonical_json(result)
        def with_result(r: str, d: dict = data) -> dict:
            return {"type": "json", "data": {**d, "tool_response": {**d["tool_response"],
                                                                    "result": r}}}
        fitted = _fit_text(text, with_result, limit)
        data = with_result(fitted if fitted is not None else "")["data"]
        if fitted is not None:
            return {"type": "json", "data": data}
    for _ in range(64):  # longest strings first; a deep pile of short ones ends below
        length, path = _largest_string(data)
        if length <= len(TRUNCATION_MARK):
            break
        def with_leaf(v: str, d: Any = data, p: tuple = path) -> dict:
            return {"type": "json", "data": _replace_at(d, p, v)}
        fitted = _fit_text(_get_at(data, path), with_leaf, limit)
        if fitted is not None:
            return with_leaf(fitted)
        data = _replace_at(data, path, TRUNCATION_MARK.strip())
        if body_size({"type": "json", "data": data}) <= limit:
            return {"type": "json", "data": data}
    whole = canonical_json(body.get("data"))
    fitted = _fit_text(whole, lambda w: {"type": "json", "data": {"_truncated": w}}, limit)
    return {"type": "json", "data": {"_truncated": fitted or ""}}


def parse_valid_time(value: str) -> datetime:
    """ISO 8601 with an explicit offset; a naive time is ambiguous and rejected."""
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError("needs a UTC offset, e.g. 2026-01-31T09:30:00+00:00")
    return parsed


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def stored_form(event: dict, body_json: str, valid_ms: int, content_hash: str) -> dict:
    """What ingest hands storage: an event as the store's row, encoded, less
    ``transaction_time``. Ingest does all the parsing and encoding so that the single
    writer only writes."""
    source = event["source"]
    return {
        "event_id": event["event_id"], "namespace": event["namespace"], "kind": event["kind"],
        "session_id": event["session_id"], "actor_id": event["actor_id"],
        "valid_time": event["valid_time"],
        "valid_ms": valid_ms, "body_json": body_json,
        "source_json": canonical_json(source), "content_hash": content_hash,
        "parent_event_id": event.get("parent_event_id"),
        "project_path": source.get("project_path"), "schema_version": event["schema_version"],
    }


# --- validation ------------------------------------------------------------------------------


class FieldError(NamedTuple):
    field: str
    message: str
    code: str = "invalid"  # "too_large" for the body size cap

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ContractError(ValueError):
    """One or more fields violate the v1 contract; ``errors`` lists each of them."""

    def __init__(self, errors: list[FieldError]):
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))


UNPAIRED_SURROGATE = "must be valid Unicode text, not an unpaired surrogate such as \\ud800"


def check_shape(value: Any, field: str) -> None:
    """Refuse (ContractError) a value nested more than MAX_DEPTH levels deep, holding
    more than MAX_VALUES values, or with a map key that is not a string: what JSON can
    say, bounded. It walks with a stack of its own, so no input can exhaust Python's,
    and runs before any code that recurses (serializing, scrubbing) sees the value."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    count = 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ContractError([FieldError(field, f"holds more than {MAX_VALUES} values",
                                            "too_large")])
        if isinstance(item, dict | list | tuple) and depth > MAX_DEPTH:
            raise ContractError([FieldError(field, f"is nested more than {MAX_DEPTH} levels"
                                                   " deep")])
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise ContractError([FieldError(
                        field, f"has a map key that is not a string ({type(key).__name__})")])
                stack.append((child, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)


def is_text(value: str) -> bool:
    """Whether value can be stored as UTF-8 (JSON text may decode to lone surrogates)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_str(errors: list[FieldError], obj: dict, field: str, lo: int, hi: int,
               prefix: str = "", required: bool = True) -> None:
    name = prefix + field
    if field not in obj or obj[field] is None:
        if required:
            errors.append(FieldError(name, "is required"))
        return
    value = obj[field]
    if not isinstance(value, str):
        errors.append(FieldError(name, f"must be a string, got {type(value).__name__}"))
    elif not lo <= len(value) <= hi:
        errors.append(FieldError(name, f"must be {lo}–{hi} characters, got {len(value)}"))
    elif not is_text(value):
        errors.append(FieldError(name, UNPAIRED_SURROGATE))


def _check_time(errors: list[FieldError], obj: dict, field: str) -> int:
    """Check an ISO 8601 time with offset; returns it as Unix milliseconds (0 if invalid)."""
    value = obj.get(field)
    if not isinstance(value, str):
        errors.append(FieldError(field, "must be an ISO 8601 string with offset"))
        return 0
    try:
        return int(parse_valid_time(value).timestamp() * 1000)
    except ValueError as exc:
        errors.append(FieldError(field, f"is not ISO 8601 with offset ({exc})"))
        return 0


def _check_body(errors: list[FieldError], body: Any) -> str | None:
    """Check a body's shape and size; returns its canonical JSON when it is valid."""
    if not isinstance(body, dict):
        errors.append(FieldError("body", "must be an object with a 'type'"))
        return None
    kind = body.get("type")
    if kind not in BODY_TYPES:
        errors.append(FieldError("body.type", f"must be one of {', '.join(BODY_TYPES)}"))
        return None
    before = len(errors)
    allowed = {"text": {"type", "content"}, "message": {"type", "turns"}, "json": {"type", "data"}}
    extra = set(body) - allowed[kind]
    if extra:
        errors.append(FieldError("body", f"unexpected field(s) for {kind}: {sorted(extra)}"))
    if kind == "text":
        if not isinstance(body.get("content"), str):
            errors.append(FieldError("body.content", "must be a string"))
    elif kind == "message":
        turns = body.get("turns")
        if not isinstance(turns, list) or not turns:
            errors.append(FieldError("body.turns", "must be a list with at least one turn"))
        else:
            for i, turn in enumerate(turns):
                if not isinstance(turn, dict):
                    errors.append(FieldError(f"body.turns[{i}]", "must be an object"))
                    continue
                for key in ("role", "content"):
                    if not isinstance(turn.get(key), str):
                        errors.append(FieldError(f"body.turns[{i}].{key}", "must be a string"))
    elif "data" not in body:
        errors.append(FieldError("body.data", "is required"))
    if len(errors) > before:
        return None
    try:
        encoded = canonical_json(body)
    except (TypeError, ValueError) as exc:
        errors.append(FieldError("body", f"is not JSON-serializable: {exc}"))
        return None
    try:
        size = len(encoded.encode("utf-8"))
    except UnicodeEncodeError:
        errors.append(FieldError("body", UNPAIRED_SURROGATE))
        return None
    if size > MAX_BODY_BYTES:
        errors.append(FieldError(
            "body", f"serialized body is {size} bytes; the limit is {MAX_BODY_BYTES}",
            "too_large"))
        return None
    return encoded


SOURCE_FIELDS = {"surface", "version", "client_id", "project_path", "branch", "commit",
                 "author"}
EVENT_FIELDS = {
    "event_id", "kind", "body", "namespace", "actor_id", "session_id", "valid_time",
    "source", "schema_version", "content_hash", "parent_event_id",
}


class CheckedEvent(NamedTuple):
    """What validation computed on the way, for the caller to reuse."""

    body_json: str  # canonical JSON of the body
    valid_ms: int  # valid_time as Unix milliseconds


def validate_event(event: Any) -> CheckedEvent:
    """Check an event against contract v1 (ContractError lists every violation); return
    its body's canonical JSON and its time, computed on the way."""
    if not isinstance(event, dict):
        raise ContractError([FieldError("event", "must be an object")])
    check_shape(event, "event")
    errors: list[FieldError] = []
    extra = set(event) - EVENT_FIELDS
    if extra:
        errors.append(FieldError("event", f"unknown field(s): {sorted(extra)}"))
    if not is_ulid(event.get("event_id")):
        errors.append(FieldError("event_id", "must be a ULID (26 Crockford base32 characters)"))
    if event.get("kind") not in EVENT_KINDS:
        errors.append(FieldError("kind", f"must be one of {', '.join(EVENT_KINDS)}"))
    body_json = None
    if "body" not in event:
        errors.append(FieldError("body", "is required"))
    else:
        body_json = _check_body(errors, event["body"])
    namespace = event.get("namespace")
    if not isinstance(namespace, str) or not _matches(NAMESPACE_PATTERN, namespace):
        errors.append(FieldError("namespace", "must look like /actor/<user>/project/<id>/"))
    elif not is_text(namespace):
        errors.append(FieldError("namespace", UNPAIRED_SURROGATE))
    _check_str(errors, event, "actor_id", 1, 128)
    _check_str(errors, event, "session_id", 1, 128)
    valid_ms = _check_time(errors, event, "valid_time")
    _check_source(errors, event.get("source"))
    version = event.get("schema_version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        errors.append(FieldError("schema_version", f"must be {SCHEMA_VERSION}"))
    digest = event.get("content_hash")
    if digest is not None and (not isinstance(digest, str)
                               or not _matches(CONTENT_HASH_PATTERN, digest)):
        errors.append(FieldError("content_hash", "must be sha256:<64 lowercase hex>"))
    parent = event.get("parent_event_id")
    if parent is not None and not is_ulid(parent):
        errors.append(FieldError("parent_event_id", "must be a ULID"))
    if errors:
        raise ContractError(errors)
    return CheckedEvent(body_json, valid_ms)


def _check_source(errors: list[FieldError], source: object) -> None:
    if not isinstance(source, dict):
        errors.append(FieldError("source", "must be an object"))
        return
    extra = set(source) - SOURCE_FIELDS
    if extra:
        errors.append(FieldError("source", f"unknown field(s): {sorted(extra)}"))
    surface = source.get("surface")
    if not isinstance(surface, str) or not _matches(SURFACE_PATTERN, surface):
        errors.append(FieldError("source.surface", "must be a short lowercase name"))
    _check_str(errors, source, "version", 1, 64, "source.")
    _check_str(errors, source, "client_id", 1, 255, "source.")
    _check_str(errors, source, "project_path", 1, 2048, "source.", required=False)
    _check_git(errors, source, "source.")


RECORD_FIELDS = {
    "record_id", "namespace", "title", "summary", "facts", "concepts", "files_touched",
    "observation_type", "strategy", "source_event_ids", "created_at", "anchors", "code",
    "changes",
}
# ``changes`` (optional): the lines the record's edits added or removed, searched as a
# ranking of their own and never shown (``search.steps.changed``).
MAX_CHANGES_CHARS = 8000
MAX_ANCHORED_FILES = 100
MAX_ANCHORED_SYMBOLS = 50
MAX_ANCHORED_BYTES = 2 << 20  # a larger file is neither given a blob id nor checked


def _check_anchors(errors: list[FieldError], record: dict) -> None:
    """``anchors`` (optional): the code a record is about, ``{path: [name, ...]}``: files
    as the project names them, and the names the work defined in each."""
    anchors = record.get("anchors", {})
    if not isinstance(anchors, dict) or len(anchors) > MAX_ANCHORED_FILES:
        errors.append(FieldError("anchors", f"must be an object of at most"
                                            f" {MAX_ANCHORED_FILES} files"))
        return
    for path, names in anchors.items():
        if not 1 <= len(path) <= 500 or not is_text(path):
            errors.append(FieldError("anchors", "a path must be 1–500 characters"))
        elif not isinstance(names, list) or len(names) > MAX_ANCHORED_SYMBOLS or not all(
                isinstance(n, str) and 1 <= len(n) <= 100 and is_text(n) for n in names):
            errors.append(FieldError(f"anchors[{path!r}]", f"must be a list of at most"
                                                           f" {MAX_ANCHORED_SYMBOLS} names"
                                                           " of 1–100 characters"))


def _check_git(errors: list[FieldError], obj: dict, prefix: str) -> None:
    """``branch`` and ``commit`` (optional): where in git the work was, as the project's
    ``.git`` said (``project.git_head``); ``author``: the commit's author, for work
    replayed from a repository's history (``seed``)."""
    _check_str(errors, obj, "branch", 1, 255, prefix, required=False)
    _check_str(errors, obj, "author", 1, 255, prefix, required=False)
    commit = obj.get("commit")
    if commit is not None and not (isinstance(commit, str) and _matches(COMMIT_PATTERN, commit)):
        errors.append(FieldError(prefix + "commit", "must be a git commit id (hex)"))


def _check_code(errors: list[FieldError], record: dict) -> None:
    """``code`` (optional): the code as the record's work left it, ``{branch?, commit?,
    author?, blobs?}``: the branch and commit its turn was on (and the commit's author,
    for a seeded one), and the git blob id of each anchored file as it was then
    (``extract.anchors.blobs``)."""
    code = record.get("code", {})
    if not isinstance(code, dict) or set(code) - {"branch", "commit", "author", "blobs"}:
        errors.append(FieldError("code", "must be an object of branch, commit, author and"
                                         " blobs"))
        return
    _check_git(errors, code, "code.")
    blobs = code.get("blobs", {})
    if (not isinstance(blobs, dict) or len(blobs) > MAX_ANCHORED_FILES
            or not all(isinstance(path, str) and 1 <= len(path) <= 500 and is_text(path)
                       and isinstance(blob, str) and _matches(COMMIT_PATTERN, blob)
                       for path, blob in blobs.items())):
        errors.append(FieldError("code.blobs", f"must map at most {MAX_ANCHORED_FILES}"
                                               " paths to git blob ids"))


def _check_str_list(errors: list[FieldError], obj: dict, field: str, item_max: int,
                    count_max: int) -> None:
    items = obj.get(field, [])
    if not isinstance(items, list):
        errors.append(FieldError(field, "must be a list of strings"))
        return
    if len(items) > count_max:
        errors.append(FieldError(field, f"at most {count_max} items, got {len(items)}"))
    for i, item in enumerate(items):
        if not isinstance(item, str) or not 1 <= len(item) <= item_max:
            errors.append(FieldError(f"{field}[{i}]", f"must be a string of 1–{item_max} chars"))
        elif not is_text(item):
            errors.append(FieldError(f"{field}[{i}]", UNPAIRED_SURROGATE))


def validate_record(record: Any) -> dict:
    """Check a memory record against contract v1 and return it."""
    if not isinstance(record, dict):
        raise ContractError([FieldError("record", "must be an object")])
    check_shape(record, "record")
    errors: list[FieldError] = []
    extra = set(record) - RECORD_FIELDS
    if extra:
        errors.append(FieldError("record", f"unknown field(s): {sorted(extra)}"))
    if not is_record_id(record.get("record_id")):
        errors.append(FieldError("record_id", "must be mr_ followed by a ULID"))
    if not is_namespace(record.get("namespace")):
        errors.append(FieldError("namespace", "must look like /actor/<user>/project/<id>/"))
    _check_str(errors, record, "title", 1, 200)
    _check_str(errors, record, "summary", 0, 4000)  # none when it would repeat the title
    _check_str(errors, record, "changes", 0, MAX_CHANGES_CHARS, required=False)
    _check_str(errors, record, "strategy", 1, 64)
    _check_str_list(errors, record, "facts", 500, 100)
    _check_str_list(errors, record, "concepts", 100, 100)
    _check_str_list(errors, record, "files_touched", 500, 500)
    _check_anchors(errors, record)
    _check_code(errors, record)
    if record.get("observation_type") not in OBSERVATION_TYPES:
        errors.append(FieldError("observation_type",
                                 f"must be one of {', '.join(OBSERVATION_TYPES)}"))
    sources = record.get("source_event_ids")
    if not isinstance(sources, list) or not sources or not all(is_ulid(s) for s in sources):
        errors.append(FieldError("source_event_ids", "must be a non-empty list of ULIDs"))
    _check_time(errors, record, "created_at")
    if errors:
        raise ContractError(errors)
    return record


# What an export adds to a record line, and what one of its versions holds.
EXPORTED_RECORD_EXTRAS = {"versions", "invalid_reason", "embedding", "stale", "superseded_by"}
VERSION_FIELDS = {"title", "summary", "facts", "concepts", "files_touched",
                  "source_event_ids", "created_at", "replaced_at", "reason"}


class ExportedRecord(NamedTuple):
    """A record line of an export, split: the record and what the store holds beside."""

    record: dict
    versions: list
    invalid_reason: str | None
    embedding: dict | None
    stale: dict | None  # {why, at}: its code was found gone
    superseded_by: str | None  # the later record that undid its work


def split_exported_record(item: Any) -> ExportedRecord:
    """A record line of an export, each part still to be validated (raises
    ContractError for the shape of the extras)."""
    if not isinstance(item, dict) or "record_id" not in item:
        raise ContractError([FieldError("line", "is neither an event, a record nor a"
                                                " tombstone")])
    check_shape(item, "record")
    errors: list[FieldError] = []
    versions = item.get("versions", [])
    if not isinstance(versions, list) or len(versions) > 1000:
        errors.append(FieldError("versions", "must be a list of at most 1000 versions"))
    _check_str(errors, item, "invalid_reason", 1, 1000, required=False)
    embedding = item.get("embedding")
    if embedding is not None and not (
            isinstance(embedding, dict) and set(embedding) == {"hash", "vector"}
            and isinstance(embedding["hash"], str) and 0 < len(embedding["hash"]) <= 200
            and isinstance(embedding["vector"], str)):
        errors.append(FieldError("embedding", "must be {hash, vector} (base64)"))
    stale = item.get("stale")
    if stale is not None:
        if not isinstance(stale, dict) or set(stale) != {"why", "at"}:
            errors.append(FieldError("stale", "must be {why, at}"))
        else:
            _check_str(errors, stale, "why", 1, 1000, "stale.")
            _check_time(errors, stale, "at")
    superseded_by = item.get("superseded_by")
    if superseded_by is not None and not is_record_id(superseded_by):
        errors.append(FieldError("superseded_by", "must be a record id"))
    if errors:
        raise ContractError(errors)
    record = {k: v for k, v in item.items() if k not in EXPORTED_RECORD_EXTRAS}
    return ExportedRecord(record, versions, item.get("invalid_reason"), embedding, stale,
                          superseded_by)


def validate_version(version: Any) -> dict:
    """One earlier state of a record, as an export carries it."""
    if not isinstance(version, dict):
        raise ContractError([FieldError("versions[]", "must be an object")])
    errors: list[FieldError] = []
    extra = set(version) - VERSION_FIELDS
    if extra:
        errors.append(FieldError("versions[]", f"unknown field(s): {sorted(extra)}"))
    _check_str(errors, version, "title", 1, 200, "versions[].")
    _check_str(errors, version, "summary", 0, 4000, "versions[].")
    _check_str(errors, version, "reason", 1, 1000, "versions[].", required=False)
    for field, item_max, count_max in (("facts", 500, 100), ("concepts", 100, 100),
                                       ("files_touched", 500, 500)):
        if field not in version:
            errors.append(FieldError(f"versions[].{field}", "is required"))
        _check_str_list(errors, version, field, item_max, count_max)
    sources = version.get("source_event_ids")
    if not isinstance(sources, list) or not all(is_ulid(s) for s in sources):
        errors.append(FieldError("versions[].source_event_ids", "must be a list of ULIDs"))
    _check_time(errors, version, "created_at")
    _check_time(errors, version, "replaced_at")
    if errors:
        raise ContractError(errors)
    return version


def validate_tombstone(tombstone: Any) -> dict:
    """What remains of a forgotten record: its id, namespace and when."""
    if not isinstance(tombstone, dict) or set(tombstone) != {"record_id", "namespace",
                                                              "forgotten_at"}:
        raise ContractError([FieldError("tombstone", "must be {record_id, namespace,"
                                                     " forgotten_at}")])
    errors: list[FieldError] = []
    if not is_record_id(tombstone["record_id"]):
        errors.append(FieldError("tombstone.record_id", "must be mr_ followed by a ULID"))
    if not is_namespace(tombstone["namespace"]):
        errors.append(FieldError("tombstone.namespace",
                                 "must look like /actor/<user>/project/<id>/"))
    _check_time(errors, tombstone, "forgotten_at")
    if errors:
        raise ContractError(errors)
    return tombstone


def check_record_changes(changes: dict) -> None:
    """An edit's new title, summary or facts, within a record's limits."""
    errors: list[FieldError] = []
    _check_str(errors, changes, "title", 1, 200, required=False)
    _check_str(errors, changes, "summary", 1, 4000, required=False)
    if "facts" in changes:
        _check_str_list(errors, changes, "facts", 500, 100)
    for field in ("title", "summary"):
        if isinstance(changes.get(field), str) and not changes[field].strip():
            errors.append(FieldError(field, "must not be blank"))
    if errors:
        raise ContractError(errors)


# --- builders ------------------------------------------------------------------------------


def make_event(kind: str, body: dict, *, namespace: str, actor_id: str, session_id: str,
               surface: str, version: str, client_id: str, project_path: str | None = None,
               parent_event_id: str | None = None, valid_time: str | None = None,
               branch: str | None = None, commit: str | None = None,
               author: str | None = None) -> dict:
    """Assemble a v1 event with a fresh ULID, the current time and the body's hash."""
    source = {"surface": surface, "version": version, "client_id": client_id}
    for key, value in (("project_path", project_path), ("branch", branch), ("commit", commit),
                       ("author", author)):
        if value:
            source[key] = value
    event = {
        "event_id": new_ulid(),
        "kind": kind,
        "body": body,
        "namespace": namespace,
        "actor_id": actor_id,
        "session_id": session_id,
        "valid_time": valid_time or now_iso(),
        "source": source,
        "schema_version": SCHEMA_VERSION,
        "content_hash": content_hash(body),
    }
    if parent_event_id:
        event["parent_event_id"] = parent_event_id
    return event
