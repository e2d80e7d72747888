"""Privacy scrub: ``<private>`` spans and secrets become ``[REDACTED]`` before storage.

It runs once, in ingest (and on records saved through MCP), over every string of
a body: text content, every message turn, every JSON key and value. It builds a
new value and never mutates its input.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import ahocorasick_rs

REDACTED = "[REDACTED]"
_TAG = re.compile(r"<(/?)private>", re.IGNORECASE)

# Whole-match secrets, one alternation so a string is scanned once.
_SECRETS = re.compile("|".join(f"(?:{p})" for p in (
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",  # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{40,}\b",
    r"\bglpat-[A-Za-z0-9_-]{20,}\b",  # GitLab
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b",  # Slack
    r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}\b",  # OpenAI / Anthropic
    r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b",  # Stripe
    r"\bAIza[0-9A-Za-z_-]{35}\b",  # Google API keys
    r"\bnpm_[A-Za-z0-9]{36}\b",
    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWTs
)), re.DOTALL)
# Keyed secrets: the key stays (it says what was there), the value goes. The match
# starts at the keyword, so a prefix such as DB_ in DB_PASSWORD stays untouched.
# Every pattern above and below needs one of these in the lowercased text. One
# Aho-Corasick pass (all needles at once) lets the much slower patterns skip
# ordinary strings.
_NEEDLES = (
    "akia", "asia", "abia", "acca", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "glpat-", "xox", "sk-", "sk_", "rk_", "aiza", "npm_", "eyj", "-----begin", "pass", "pwd",
    "secret", "token", "key", "bearer", "basic", "://",
)


_NEEDLE_SEARCH = ahocorasick_rs.AhoCorasick(list(_NEEDLES))


def _has_needle(lowered: str) -> bool:
    try:
        return bool(_NEEDLE_SEARCH.find_matches_as_indexes(lowered))
    except UnicodeEncodeError:  # text with a lone surrogate: look the slow way
        return any(needle in lowered for needle in _NEEDLES)


_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_ASSIGNMENT = re.compile(
    r"""(?ix)
    ((?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key)
     [\w.-]*)                               # the key, from its keyword on
    (["']?\s*[:=]\s*)                       # separator, maybe after a closing quote
    (?!\[REDACTED\])
    ("[^"\n]{6,}"|'[^'\n]{6,}'|[^\s"',;]{6,})  # the value: short ones are counts, not secrets
    """
)
_URL_CREDENTIALS = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)")


def _redact_private(text: str) -> str:
    """Replace each outermost <private>…</private> span; an unclosed one runs to the end."""
    if "<" not in text:
        return text
    out: list[str] = []
    depth = 0
    pos = 0
    for match in _TAG.finditer(text):
        closing = match.group(1) == "/"
        if depth == 0:
            if closing:
                continue  # a stray closing tag outside any span is kept as text
            out.append(text[pos:match.start()])
            depth = 1
        elif closing:
            depth -= 1
            if depth == 0:
                out.append(REDACTED)
                pos = match.end()
        else:
            depth += 1
    if depth:
        out.append(REDACTED)
    else:
        out.append(text[pos:])
    return "".join(out)


def may_need_scrub(encoded: str) -> bool:
    """Cheap pre-check over a whole body's JSON text: False means scrub() would change
    nothing. The needles contain no character that JSON escapes, so any string of
    the body that holds one also holds it in the encoded text."""
    lowered = encoded.lower()
    return "<private" in lowered or _has_needle(lowered)


def _redact_secrets(text: str) -> str:
    if not _has_needle(text.lower()):
        return text  # the common case
    text = _SECRETS.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
    return _ASSIGNMENT.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)


def _scrub_text(text: str) -> str:
    return _redact_secrets(_redact_private(text))


_scrub_short = functools.lru_cache(maxsize=8192)(_scrub_text)  # JSON keys repeat a lot


def scrub_text(text: str) -> str:
    return _scrub_short(text) if len(text) <= 64 else _scrub_text(text)


def scrub(value: Any) -> Any:
    """A copy of value with every string (dict keys included) scrubbed."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value
