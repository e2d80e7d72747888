"""The one scrubber: ``<private>`` spans and secrets become ``[REDACTED:<kind>]``, and
control characters and bidirectional overrides are taken out (``CONTROLS``: text going
back into a prompt must read as it shows: no hidden NUL, no line that reverses on
screen).

Ingest runs it on every string of an event's body (text, every message turn, every
JSON key and value) and on records saved through MCP or imported; a shim runs it on
what it spools; and every exit runs it again on what it hands out (a model's prompt,
MCP answers, logs, exports, the viewer), so a rule added later protects what was
stored before it (``kirolearn scrub`` rewrites that too).

A search, the hot exit, scrubs only what today's rules have not seen: each record
carries the ``version`` of the rules its text was scrubbed with when stored, storage
scrubs again the records of another version (``writes.rescrub_records``, after an
upgrade), and until it has, a search scrubs those as they leave (``scrub_stale``).

It builds a new value and never mutates its input. Most strings hold none of the
rules' needles: one Aho-Corasick pass says so and they come back untouched.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import ahocorasick_rs

from kirolearn import contract, paths
from kirolearn.privacy import rules as rule_set

# The scrubber's own code: a change to it is a change of the rules (``Scrubber.version``).
_CODE = [Path(__file__), Path(rule_set.__file__)]

PRIVATE = "private"
MAX_ROUNDS = 8
# <private>, < PRIVATE >, </ private>, &lt;private&gt;, \u003cprivate\u003e, %3Cprivate%3E
_OPEN = r"(?:<|&lt;|&\#0*60;|&\#x0*3c;|\\u003c|%3c)"
_CLOSE = r"(?:>|&gt;|&\#0*62;|&\#x0*3e;|\\u003e|%3e)"
_TAG = re.compile(rf"{_OPEN}\s*(/|%2f)?\s*private\b[^<>&%]*?{_CLOSE}", re.IGNORECASE)


# C0 controls but tab and newline, DEL, C1 controls, the bidirectional embeddings,
# overrides and isolates, and Unicode's tag characters (text no reader sees, that a
# model reads); in a JSON text, C0 controls come escaped (``\u0000``, ``\b``).
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
                      "\U000e0000-\U000e007f]")
_ENCODED_CONTROLS = re.compile(r"\\u00[01][0-9a-fA-F]|\\u007[fF]|\\[bfr]")


def without_controls(text: str) -> str:
    return CONTROLS.sub("", text) if CONTROLS.search(text) else text


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


class Scrubber:
    """The compiled rules, with the automata that pick which of them a text needs."""

    def __init__(self, rules: list[rule_set.Rule]):
        self.rules = rules
        self.gated = [i for i, rule in enumerate(rules) if not rule.needles and not rule.exact]
        self.long = {i for i, rule in enumerate(rules) if rule.long}
        lower: dict[str, set[int]] = {}
        exact: dict[str, set[int]] = {}
        for i, rule in enumerate(rules):
            for needle in rule.needles:
                lower.setdefault(needle, set()).add(i)
            for needle in rule.exact:
                exact.setdefault(needle, set()).add(i)
        self._lower_needles = list(lower)
        self._lower_rules = [lower[n] for n in self._lower_needles]
        self._lower = ahocorasick_rs.AhoCorasick(self._lower_needles)
        self._exact_needles = list(exact)
        self._exact_rules = [exact[n] for n in self._exact_needles]
        self._exact = ahocorasick_rs.AhoCorasick(self._exact_needles)

    @functools.cached_property
    def version(self) -> str:
        """What these rules redact, as a short digest of the rules and of the code that
        runs them: text scrubbed with this version needs no second pass."""
        digest = hashlib.sha256()
        for path in _CODE:
            digest.update(path.read_bytes())
        for rule in self.rules:
            digest.update(repr((rule.kind, rule.source, rule.flags, rule.needles,
                                rule.groups, rule.exact)).encode())
        return digest.hexdigest()[:16]

    def _hits(self, automaton: Any, needles: list[str], text: str) -> list[int]:
        try:
            return [m[0] for m in automaton.find_matches_as_indexes(text, overlapping=True)]
        except UnicodeEncodeError:  # a lone surrogate: look the slow way
            return [i for i, needle in enumerate(needles) if needle in text]

    def may_match(self, text: str) -> bool:
        """False means no rule can match text (or any JSON text that encodes it)."""
        lowered = text.lower()
        return (PRIVATE in lowered or CONTROLS.search(text) is not None
                or _ENCODED_CONTROLS.search(text) is not None
                or bool(self._hits(self._lower, self._lower_needles, lowered))
                or bool(self._hits(self._exact, self._exact_needles, text))
                or rule_set.LONG_TOKEN.search(text) is not None)

    def secrets(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, kind) of each secret in text, merged where they overlap, less
        what is already a redaction marker."""
        chosen: set[int] = set()
        for i in self._hits(self._lower, self._lower_needles, text.lower()):
            chosen |= self._lower_rules[i]
        for i in self._hits(self._exact, self._exact_needles, text):
            chosen |= self._exact_rules[i]
        if (self.gated or chosen & self.long) and rule_set.LONG_TOKEN.search(text):
            chosen.update(self.gated)
        elif text.isascii():
            chosen -= self.long  # none of them matches without a long token
        if not chosen:
            return []
        spans = []
        for i in sorted(chosen):
            spans += self.rules[i].spans(text)
        return _merged(spans, [m.span() for m in rule_set.MARKER.finditer(text)])

    def redact(self, text: str) -> tuple[str, tuple[str, ...]]:
        """text scrubbed, and the kinds redacted (one per redaction). A redaction can
        change what its neighbours read as (a key's prefix, a boundary), so the rules
        run again until nothing changes: scrubbing twice is scrubbing once. Control
        characters go first (one could hide a secret from its rule)."""
        kinds: list[str] = []
        text = without_controls(text)
        if PRIVATE in text.lower():
            text = _redact_private(text, kinds)
        for _ in range(MAX_ROUNDS):
            found = self.secrets(text)
            if not found:
                break
            out, pos = [], 0
            for start, end, kind in found:
                out += [text[pos:start], marker(kind)]
                kinds.append(kind)
                pos = end
            out.append(text[pos:])
            text = "".join(out)
        return text, tuple(kinds)


def _merged(spans: list[tuple[int, int, str]], markers: list[tuple[int, int]]
            ) -> list[tuple[int, int, str]]:
    """Overlapping spans as one (the kind of the one that starts first, the longest
    first), with the parts inside an existing marker left out (markers in order, apart:
    each span looks up the few it touches, so a text of many redactions costs no more
    than its length)."""
    starts = [m_start for m_start, _ in markers]
    pieces = []
    for start, end, kind in spans:
        at = bisect.bisect_right(starts, start) - 1
        while 0 <= at < len(markers) and markers[at][0] <= start < markers[at][1]:
            start = markers[at][1]  # it began inside a marker: after it
            at += 1
        at = bisect.bisect_left(starts, end) - 1
        while at >= 0 and markers[at][0] < end <= markers[at][1]:
            end = markers[at][0]  # it ended inside a marker: before it
            at -= 1
        if end > start:
            pieces.append((start, end, kind))
    pieces.sort(key=lambda s: (s[0], -s[1]))
    merged: list[tuple[int, int, str]] = []
    for start, end, kind in pieces:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            merged[-1] = (last[0], max(last[1], end), last[2])
        else:
            merged.append((start, end, kind))
    return merged


def _redact_private(text: str, kinds: list[str]) -> str:
    """Replace each outermost <private>…</private> span; an unclosed one runs to the end."""
    out: list[str] = []
    depth = 0
    pos = 0
    for match in _TAG.finditer(text):
        closing = match.group(1) is not None
        if depth == 0:
            if closing:
                continue  # a stray closing tag outside any span is kept as text
            out.append(text[pos:match.start()])
            depth = 1
        elif closing:
            depth -= 1
            if depth == 0:
                out.append(marker(PRIVATE))
                kinds.append(PRIVATE)
                pos = match.end()
        else:
            depth += 1
    if depth:
        out.append(marker(PRIVATE))
        kinds.append(PRIVATE)
    else:
        out.append(text[pos:])
    return "".join(out)


_scrubber: Scrubber | None = None


def scrubber() -> Scrubber:
    """The scrubber of this process, built from detect-secrets on first use."""
    global _scrubber
    if _scrubber is None:
        _scrubber = Scrubber(rule_set.compile_all(rule_set.from_detect_secrets()))
    return _scrubber


def save_rules(home: paths.Home) -> None:
    """Build this process's scrubber from detect-secrets and save its rules where a
    shim reads them (ingest, at every start: an update of either is picked up)."""
    global _scrubber
    _scrubber = Scrubber(rule_set.compile_all(rule_set.save(home)))
    _redact_short.cache_clear()


def use_saved_rules(home: paths.Home) -> None:
    """Build this process's scrubber from the rules ingest saved (a shim: importing
    detect-secrets would cost it most of its time)."""
    global _scrubber
    if _scrubber is None:
        _scrubber = Scrubber(rule_set.compile_all(rule_set.load(home)))


def may_need_scrub(encoded: str) -> bool:
    """Cheap pre-check over a whole body's JSON text: False means scrub() would change
    nothing. No needle holds a character that JSON escapes, so any string of the body
    that holds one also holds it in the encoded text."""
    return scrubber().may_match(encoded)


def _redact(text: str) -> tuple[str, tuple[str, ...]]:
    nested: list[str] = []
    if text.lstrip()[:1] in "{[":
        text = _without_nested_secrets(text, nested)
    scrubbed, kinds = scrubber().redact(text)
    return scrubbed, (*nested, *kinds)


_redact_short = functools.lru_cache(maxsize=8192)(_redact)  # keys, short values repeat


def redact(text: str) -> tuple[str, tuple[str, ...]]:
    """text scrubbed, and the kind of each redaction made. A text that is JSON has the
    secrets under its keys redacted first (``_nested_secrets``): the keys say what the
    values are, where the text alone, its quotes escaped, no longer shows it."""
    return _redact_short(text) if len(text) <= 64 else _redact(text)


def scrub_text(text: str) -> str:
    return redact(text)[0]


def scrub_event(event: dict, counts: Counter | None = None) -> dict:
    """An event with its body scrubbed (and its content hash made again if that changed
    the body); the event itself when nothing was to be redacted."""
    body = scrub(event.get("body"), counts)
    if body == event.get("body"):
        return event
    return {**event, "body": body, "content_hash": contract.content_hash(body)}


NESTED_JSON_BYTES = 1 << 20  # a string this long at most is parsed as JSON


def _nested_secrets(text: str, depth: int = 0) -> list[tuple[str, str]]:
    """(value, kind) of each secret under a secret key of the JSON a string holds (a
    tool's result that is JSON text, a log line's payload), at any depth and through
    JSON held in its strings in turn: the object's keys say what its values are, which
    the text alone, its quotes escaped, no longer shows."""
    stripped = text.strip()
    if (depth > 4 or len(stripped) < 8 or len(stripped) > NESTED_JSON_BYTES
            or stripped[0] not in "{[" or stripped[-1] not in "}]"):
        return []
    try:
        parsed = json.loads(stripped)
    except (ValueError, RecursionError):
        return []
    found: list[tuple[str, str]] = []

    def walk(node: Any, key: Any = None) -> None:
        if isinstance(node, dict):
            private = rule_set.JWK_PRIVATE if "kty" in node else ()
            for k, v in node.items():
                if isinstance(v, str) and k in private and len(v) >= 8:
                    found.append((v, "private-key"))
                else:
                    walk(v, k)
        elif isinstance(node, list):
            for item in node:
                walk(item, key)
        elif isinstance(node, str):
            kind = rule_set.secret_key_kind(key) if isinstance(key, str) else None
            if kind is not None and rule_set.secret_value(node):
                found.append((node, kind))
            else:
                found.extend(_nested_secrets(node, depth + 1))

    walk(parsed)
    return found


def _without_nested_secrets(text: str, kinds: list[str]) -> str:
    """text with each secret of the JSON it holds (``_nested_secrets``) redacted where it
    stands, as JSON wrote it: the rest of the text keeps its form."""
    for value, kind in _nested_secrets(text):
        encoded = json.dumps(value)[1:-1]
        for form in dict.fromkeys((encoded, json.dumps(value, ensure_ascii=False)[1:-1],
                                   json.dumps(encoded)[1:-1])):
            if form and form in text:
                text = text.replace(form, marker(kind))
                kinds.append(kind)
    return text


def scrub(value: Any, counts: Counter | None = None) -> Any:
    """A copy of value with every string (dict keys included) scrubbed; each redaction's
    kind is counted in ``counts`` when given."""
    if isinstance(value, str):
        text, kinds = redact(value)
        if counts is not None and kinds:
            counts.update(kinds)
        return text
    if isinstance(value, dict):
        private = rule_set.JWK_PRIVATE if "kty" in value else ()
        return {scrub(k, counts) if isinstance(k, str) else k:
                marker("private-key") if k in private and isinstance(v, str)
                else _keyed_value(k, v, counts) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v, counts) for v in value]
    return value


def _keyed_value(key: Any, value: Any, counts: Counter | None) -> Any:
    """A JSON object's value: redacted whole under a key that names a secret
    (``{"password": "…"}`` at any depth, the commonest form of a tool's input), else
    scrubbed as any value."""
    kind = rule_set.secret_key_kind(key) if isinstance(key, str) else None
    if kind is not None and isinstance(value, str) and rule_set.secret_value(value):
        if counts is not None:
            counts[kind] += 1
        return marker(kind)
    return scrub(value, counts)


# What a redaction may lengthen (``password=[REDACTED]``), cut back to the contract.
RECORD_TEXT_LIMITS = {"title": 200, "summary": 4000, "changes": 8000}
RECORD_LIST_LIMITS = {"facts": 500, "concepts": 100, "files_touched": 500}


def version() -> str:
    """The version of this process's rules (``Scrubber.version``)."""
    return scrubber().version


def scrub_stale(records: list[dict]) -> list[dict]:
    """Records about to leave in a search's answer, each scrubbed unless its stored text
    was scrubbed with today's rules (``scrubbed_with``, which does not leave)."""
    today = version()
    out = []
    for record in records:
        clean = {k: v for k, v in record.items() if k != "scrubbed_with"}
        if record.get("scrubbed_with") != today:
            clean = scrub(clean)
        elif clean.get("stale"):  # told of by the working tree, not stored scrubbed
            clean["stale"] = scrub(clean["stale"])
        out.append(clean)
    return out


class ScrubbedRecord(dict):
    """A record as ``scrub_record`` gave it, with the version of the rules it was
    scrubbed with: scrubbing it again with them changes nothing, so it is not done (a
    worker's record is scrubbed where storage checks it, and passes where it is
    written). Only this process makes one: a record read from a socket is a plain dict."""

    __slots__ = ("scrubbed_with",)


def scrub_record(record: Any) -> Any:
    """A record's (or a version's, or an edit's) text, scrubbed like an event's body:
    one saved through MCP, imported, or made by any extraction worker."""
    if not isinstance(record, dict):
        return record
    today = version()
    if isinstance(record, ScrubbedRecord) and record.scrubbed_with == today:
        return record
    record = ScrubbedRecord(record)
    record.scrubbed_with = today
    for field_name, limit in RECORD_TEXT_LIMITS.items():
        if isinstance(record.get(field_name), str):
            record[field_name] = scrub_text(record[field_name])[:limit]
    for field_name, limit in RECORD_LIST_LIMITS.items():
        if isinstance(record.get(field_name), list):
            record[field_name] = [scrub_text(item)[:limit] if isinstance(item, str)
                                  else item for item in record[field_name]]
    return record
