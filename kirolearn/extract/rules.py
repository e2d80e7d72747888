"""A rule file (CLAUDE.md, AGENTS.md, .cursorrules…) as a memory record: one record
of type ``pattern`` (strategy ``rule_file``) per file, named by the file in
``files_touched``, with an id that comes from its namespace and the file's name, so
that the file changed is a new version of the same record (``writes.put_rule``),
never a second one.

What is kept of the markdown: the first heading (the title, after the file's name),
the first paragraph (the summary), each list item or other line of prose (the facts,
``MOST_FACTS`` at most) and the headings (the concepts).
"""

from __future__ import annotations

import hashlib
import re

from kirolearn import contract

STRATEGY = contract.RULE_FILE
MOST_FACTS = 80
FACT_CHARS = 400
SUMMARY_CHARS = 600
BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)  # .mdc and steering files' header


def record_id(namespace: str, name: str) -> str:
    """The one record of this rule file in this namespace."""
    digest = hashlib.sha256(f"{namespace}\0{name}".encode()).digest()
    return "mr_" + contract.ulid_of(0, digest)


def source_id(namespace: str, name: str, text: str) -> str:
    """The file's text as a source: one per version of it."""
    digest = hashlib.sha256(f"{namespace}\0{name}\0{text}".encode()).digest()
    return contract.ulid_of(0, digest)


def _clip(text: str, most: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[:most - 1].rstrip() + "…"


def record_of(namespace: str, name: str, text: str) -> dict:
    """The record of a rule file's text (contract v1)."""
    body = FRONT_MATTER.sub("", text.replace("\r\n", "\n"))
    headings: list[str] = []
    facts: list[str] = []
    paragraph: list[str] = []  # the first lines of prose, until anything else
    open_paragraph = in_code = False
    for line in body.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
            continue
        heading = HEADING.match(line)
        words = BULLET.sub("", line).strip()
        prose = not (in_code or heading or BULLET.match(line)) and bool(words)
        if prose and (open_paragraph or not paragraph):
            paragraph.append(words)
            open_paragraph = True
        elif paragraph:
            open_paragraph = False
        if heading and heading.group(1).strip():
            headings.append(_clip(heading.group(1), 100))
        elif not in_code and words and not words.startswith("<!--"):
            facts.append(_clip(words, FACT_CHARS))
    first = headings[0] if headings else ""
    summary = _clip(" ".join(paragraph), SUMMARY_CHARS)
    return {
        "record_id": record_id(namespace, name),
        "namespace": namespace,
        "title": _clip(f"{name}: {first}" if first else f"The rules in {name}", 200),
        "summary": summary,
        "facts": list(dict.fromkeys(f for f in facts if f not in paragraph))[:MOST_FACTS],
        "concepts": list(dict.fromkeys(headings))[:30],
        "files_touched": [name],
        "observation_type": "pattern",
        "strategy": STRATEGY,
        "source_event_ids": [source_id(namespace, name, text)],
        "created_at": contract.now_iso(),
    }
