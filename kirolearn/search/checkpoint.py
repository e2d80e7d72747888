"""Where a session left off: its checkpoint, composed from the session's records.

A checkpoint says what the session's task was (its first request), what was done
(each turn's title and what it did, the newest ``MAX_PROGRESS``), what is left (the
sentences of its last conclusion that speak of next steps, and a command that failed
the last time it ran) and the files it touched (newest first, at most ``MAX_FILES``).
It is composed when asked (``resume_session``, the session-start context) from the
records themselves, so it is never stale, never a near-copy of them, and a session
that ended without a word (a closed terminal) has one too.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

MAX_FILES = 20
MAX_PROGRESS = 10
MAX_NEXT = 3
LINE_CHARS = 200
HEADING = "## Where the last session left off (from kirolearn)"
NEXT_CUE = re.compile(r"(?i)\b(next|todo|to do|remaining|remains|still|follow[- ]up|left to|"
                      r"not yet|later|pending|should)\b")
SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
DONE = re.compile(r"^Done: (.+?)\.?$", re.MULTILINE)
RAN = re.compile(r"^ran `(.+?)`(?: → (.*))?$")
FAILED_RUN = re.compile(r"\bexit [1-9]\d*\b|\bfailed\b")


@dataclass
class Checkpoint:
    session_id: str
    task: str
    progress: list[str]
    next_steps: list[str]
    files: list[str]
    record_ids: list[str]
    updated_at: str

    def as_dict(self) -> dict:
        return asdict(self)

    def block(self) -> str:
        """The checkpoint as markdown, the session-start context's first section."""
        parts = [HEADING, f"Task: {self.task}"]
        if self.progress:
            parts.append("Done so far:\n" + "\n".join(f"- {line}" for line in self.progress))
        if self.next_steps:
            parts.append("Next:\n" + "\n".join(f"- {line}" for line in self.next_steps))
        if self.files:
            parts.append("Files: " + ", ".join(f"`{f}`" for f in self.files))
        when = f"{self.updated_at[:10]} {self.updated_at[11:16]} UTC"
        parts.append(f"(session {self.session_id}, last active {when})")
        return "\n\n".join(parts)


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def progress_line(record: dict) -> str:
    done = DONE.search(record["summary"])
    line = one_line(record["title"], 120)
    return f"{line} ({done.group(1)})" if done else line


def failing_command(record: dict) -> str | None:
    """The command of a turn whose last run of it failed."""
    last: dict[str, bool] = {}
    for fact in record["facts"]:
        if m := RAN.match(fact):
            last[m.group(1)] = bool(FAILED_RUN.search(m.group(2) or ""))
    failing = [command for command, failed in last.items() if failed]
    return failing[-1] if failing else None


def of_session(session_id: str, records: list[dict]) -> Checkpoint | None:
    """The checkpoint of one session, from its records in turn order (None: none)."""
    turns = [r for r in records if r["observation_type"] != "error"]
    if not turns:
        return None
    last = turns[-1]
    next_steps = [one_line(s) for s in SENTENCE.findall(last["summary"])
                  if NEXT_CUE.search(s) and not s.strip().startswith("Done:")][:MAX_NEXT]
    command = failing_command(last)
    if command:
        next_steps.append(f"`{one_line(command, 160)}` failed the last time it ran")
    files = list(dict.fromkeys(f for r in reversed(records) for f in r["files_touched"]))
    return Checkpoint(
        session_id=session_id, task=one_line(turns[0]["title"]),
        progress=[progress_line(r) for r in turns[-MAX_PROGRESS:]],
        next_steps=next_steps, files=files[:MAX_FILES],
        record_ids=[r["record_id"] for r in records],
        updated_at=max(r["created_at"] for r in records))
