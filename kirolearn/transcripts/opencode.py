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
from kirolearn.transcripts.replay import Transcript

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


def read(conn: sqlite3.Connection, path: Path, session_id: str, directory: str) -> Transcript:
    """One session, as kirolearn's plugin would have handed it to the shim."""
    transcript = Transcript(AGENT, path, session_id=session_id, cwd=directory)
    try:
        rows = store.parts(conn, session_id)
    except store.Error as exc:
        transcript.problems.append(f"session {session_id}: cannot be read: {exc}")
        return transcript
    reply: str | None = None
    asked: str | None = None  # the message whose text parts are the prompt so far
    last_time: str | None = None

    def hook(payload: dict, when: object) -> None:
        transcript.add(when, shim.read({"session_id": session_id, "cwd": directory,
                                        **payload}))

    def end_turn() -> None:
        nonlocal reply
        if reply is not None:
            hook({"hook": "turn_end", "text": reply}, last_time)
        reply = None

    for message_id, message, part, created in rows:
        role, found, when = _data(message).get("role"), _data(part), _when(created)
        last_time = when or last_time
        if role == "user" and found.get("type") == "text" and not found.get("synthetic"):
            text = found.get("text")
            if not isinstance(text, str) or not text.strip() or text.lstrip().startswith(
                    f"<{FENCE}>"):
                continue
            if asked == message_id:  # another text part of the same prompt
                continue
            end_turn()
            if not transcript.hooks:
                hook({"hook": "start"}, when)
            hook({"hook": "prompt", "text": text}, when)
            asked, reply = message_id, ""
        elif role == "assistant" and found.get("type") == "tool":
            state = found.get("state") if isinstance(found.get("state"), dict) else {}
            if state.get("status") not in ("completed", "error"):
                continue
            hook({"hook": "tool", "tool": {
                "name": found.get("tool"), "args": state.get("input"),
                "output": state.get("output", state.get("error")),
                "metadata": state.get("metadata")}}, when)
        elif (role == "assistant" and found.get("type") == "text" and reply is not None
              and isinstance(found.get("text"), str) and found["text"].strip()):
            reply = found["text"]
    end_turn()
    return transcript
