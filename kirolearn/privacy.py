"""Privacy scrub: ``<private>`` spans and secrets become ``[REDACTED]`` before storage.

It runs once, in ingest (and on records saved through MCP), over every string of
a body: text content, every message turn, every JSON key and value. It builds a
new value and never mutates its input.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[REDACTED]"
_TAG = re.compile(r"<(/?)private>", re.IGNORECASE)

# Whole-match secrets: the match is replaced entirely.
_SECRETS = [
    re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|\Z)",
               re.DOTALL),
    re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),  # GitHub tokens
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"),  # GitLab
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),  # Slack
    re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}\b"),  # OpenAI / Anthropic
    re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b"),  # Stripe
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),  # Google API keys
    re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWTs
]
# Keyed secrets: the key stays (it says what was there), the value goes.
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_ASSIGNMENT = re.compile(
    r"""(?ix)
    \b([\w.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|
        client[_-]?secret|auth)[\w.-]*)     # the key
    (["']?\s*[:=]\s*)                       # separator, maybe after a closing quote
    (?!\[REDACTED\])
    ("[^"\n]{1,}"|'[^'\n]{1,}'|[^\s"',;]{1,})  # the value
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


def _redact_secrets(text: str) -> str:
    for pattern in _SECRETS:
        text = pattern.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
    return _ASSIGNMENT.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)


def scrub_text(text: str) -> str:
    return _redact_secrets(_redact_private(text))


def scrub(value: Any) -> Any:
    """A copy of value with every string (dict keys included) scrubbed."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value
