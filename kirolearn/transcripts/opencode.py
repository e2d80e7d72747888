"""OpenCode's sessions: its SQLite database, ``~/.local/share/opencode/opencode.db``
(``$XDG_DATA_HOME/opencode``), read only.

``tests/samples/opencode.sql`` is the rows the real CLI wrote for one session. What is
read of them:

- ``session``: its ``id`` and ``directory`` (a child session, a subagent's, is not
  read: its tool uses come to the plugin's hooks under the parent's work);
- ``message`` (``data.role``) and its ``part`` rows in order: a user message's text
  parts are the prompt (not those OpenCode or kirolearn's plugin added: ``synthetic``,
  or our recalled notes); an assistant message's ``tool`` parts, with their
  ``state`` (``input``, ``output``, ``metadata``, ``error``), are the tools used, as
  kirolearn's plugin hands them to the shim after ``tool.execute.after``; its text
  parts the reply, the turn's summary at its end (``session.idle``).

The plugin sends no end of a session but its deletion, so none is imported either.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from kirolearn.db import opencode as store
from kirolearn.search.context import FENCE
from kirolearn.shims import opencode as shim
from kirolearn.transcripts.replay import Replay, Transcript

AGENT = shim.SURFACE


def database(user_home: Path) -> Path:
    data = os.environ.get("XDG_DATA_HOME") or str(user_home / ".local" / "share")
    return Path(data) / "opencode" / "opencode.db"


def _when(ms: object) -> str | None:
    if not isinstance(ms, int) or isinstance(ms, bool) or ms < 0:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _data(text: object) -> dict:
    try:
        found = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        return {}
    return found if isinstance(found, dict) else {}


def transcripts(user_home: Path) -> Iterator[Transcript]:
    """Each of the user's OpenCode sessions, read (none when there is no database)."""
    path = database(user_home)
    if not path.is_file():
        return
    try:
        conn = store.connect(path)
        sessions = store.sessions(conn)
    except store.Error as exc:
        failed = Transcript(AGENT, path)
        failed.problems.append(f"cannot be read: {exc}")
        yield failed
        return
    try:
        for session_id, directory in sessions:
            yield read(conn, path, session_id, directory)
    finally:
        conn.close()


class _Reading(Replay):
    """An OpenCode session being read, part by part: a handler per (message role, part
    type) (``HANDLERS``), as kirolearn's plugin hands them to the shim."""

    def __init__(self, transcript: Transcript) -> None:
        super().__init__(transcript, shim.read)
        self.asked: str | None = None  # the message whose text parts are the prompt so far

    def turn_end(self, reply: str) -> dict:
        return {"hook": "turn_end", "text": reply}

    def session_end(self) -> None:
        return None  # the plugin sends none

    def user_text(self, message_id: str, part: dict, when: str | None) -> None:
        """A prompt (its first text part; not one kirolearn's context was given in)."""
        text = part.get("text")
        if (part.get("synthetic") or not isinstance(text, str) or not text.strip()
                or text.lstrip().startswith(f"<{FENCE}>") or self.asked == message_id):
            return
        self.end_turn()
        if not self.transcript.hooks:
            self.hook({"hook": "start"}, when)
        self.prompt({"hook": "prompt", "text": text}, text, when)
        self.asked = message_id

    def tool(self, message_id: str, part: dict, when: str | None) -> None:
        state = part.get("state") if isinstance(part.get("state"), dict) else {}
        if state.get("status") in ("completed", "error"):
            self.hook({"hook": "tool", "tool": {
                "name": part.get("tool"), "args": state.get("input"),
                "output": state.get("output", state.get("error")),
                "metadata": state.get("metadata")}}, when)

    def assistant_text(self, message_id: str, part: dict, when: str | None) -> None:
        """The assistant's words, kept as the turn's reply (its last, when the turn ends)."""
        if self.reply is not None and isinstance(part.get("text"), str) and part["text"].strip():
            self.reply = part["text"]


# Each part's (message role, part type) → what is done with it; other parts are not read.
HANDLERS = {
    ("user", "text"): _Reading.user_text,
    ("assistant", "tool"): _Reading.tool,
    ("assistant", "text"): _Reading.assistant_text,
}


def read(conn: sqlite3.Connection, path: Path, session_id: str, directory: str) -> Transcript:
    """One session, as kirolearn's plugin would have handed it to the shim."""
    reading = _Reading(Transcript(AGENT, path, session_id=session_id, cwd=directory))
    try:
        rows = store.parts(conn, session_id)
    except store.Error as exc:
        reading.transcript.problems.append(f"session {session_id}: cannot be read: {exc}")
        return reading.transcript
    for message_id, message, part, created in rows:
        role, found, when = _data(message).get("role"), _data(part), _when(created)
        reading.seen(when)
        what = found.get("type")
        handler = HANDLERS.get((role, what)) if isinstance(role, str) and isinstance(
            what, str) else None
        if handler is not None:
            handler(reading, message_id, found, when)
    return reading.finish()
