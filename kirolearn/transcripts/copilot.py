"""GitHub Copilot CLI's transcripts: ``~/.copilot/session-state/<session id>/events.jsonl``.

One ``{"type", "data", "id", "timestamp"}`` a line (``tests/samples/copilot.jsonl`` is
one the real CLI wrote). What is read of it:

- ``session.start``: the session's ``sessionId`` and its ``context.cwd`` (and
  ``context.branch``);
- ``user.message``: a prompt, its ``content`` (``transformedContent`` is what Copilot
  sent the model, with the context it and the hooks added: not read);
- ``tool.execution_start`` (``toolCallId``, ``toolName``, ``arguments``) and
  ``tool.execution_complete`` (``success``, ``result.content``, ``error``): a tool used,
  as its ``postToolUse`` hook reports it (``toolResult.textResultForLlm``), or
  ``postToolUseFailure``.

Copilot's hooks give no reply at a turn's end (``agentStop`` carries none), so a
session is imported as they capture it: without one. The ``hook.*`` lines are the
hooks' own runs, not read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kirolearn.shims import copilot as shim
from kirolearn.transcripts.replay import Replay, Transcript, json_lines, stored_files

AGENT = shim.SURFACE


def stored(user_home: Path) -> list[Path]:
    """The transcripts Copilot CLI keeps for this user, oldest first."""
    found = stored_files(user_home / ".copilot" / "session-state", "*/events.jsonl")
    return [path for _, path in sorted(found, key=lambda f: (f[0], str(f[1])))]


def transcripts(user_home: Path) -> Iterator[Transcript]:
    """Each of the user's transcripts, read."""
    return map(read, stored(user_home))


class _Reading(Replay):
    """A Copilot CLI transcript being read: a handler per kind of line (``HANDLERS``).
    Its hooks' payloads say ``sessionId``, and their name is given apart."""

    session_key = "sessionId"

    def __init__(self, path: Path) -> None:
        super().__init__(Transcript(AGENT, path),
                         lambda payload: shim.read(payload, payload["hook_event_name"]))

    def session_end(self) -> dict:
        return {"hook_event_name": "sessionEnd", "reason": "import"}

    def start(self, data: dict, when: object) -> None:
        transcript = self.transcript
        if transcript.session_id:
            return
        context = data.get("context") if isinstance(data.get("context"), dict) else {}
        transcript.session_id = str(data.get("sessionId") or "")
        transcript.cwd = str(context.get("cwd") or "")
        branch = context.get("branch")
        transcript.branch = branch if isinstance(branch, str) and branch else None
        self.hook({"hook_event_name": "sessionStart", "source": "import"}, when)

    def user_message(self, data: dict, when: object, number: int) -> None:
        if isinstance(data.get("content"), str) and data["content"].strip():
            self.hook({"hook_event_name": "userPromptSubmitted", "prompt": data["content"]},
                      when)

    def tool_start(self, data: dict, when: object, number: int) -> None:
        self.calls[str(data.get("toolCallId"))] = data

    def tool_complete(self, data: dict, when: object, number: int) -> None:
        """A tool's end: as ``postToolUse`` reports it, or ``postToolUseFailure``."""
        call = self.calls.pop(str(data.get("toolCallId")), None)
        if call is None:
            self.problem(number, "a tool's end without its start")
            return
        used = {"toolName": call.get("toolName"), "toolArgs": call.get("arguments")}
        result = data.get("result") if isinstance(data.get("result"), dict) else {}
        if data.get("success") is False and "content" not in result:
            error = data.get("error")
            self.hook({"hook_event_name": "postToolUseFailure", **used, "error": error.get(
                "message", error) if isinstance(error, dict) else error}, when)
        else:
            self.hook({"hook_event_name": "postToolUse", **used, "toolResult": {
                "textResultForLlm": result.get("content"),
                "resultType": "success" if data.get("success") else "failure"}}, when)


# Each line's type → what is done with it; other lines are not read.
HANDLERS = {
    "user.message": _Reading.user_message,
    "tool.execution_start": _Reading.tool_start,
    "tool.execution_complete": _Reading.tool_complete,
}


def read(path: Path) -> Transcript:
    """One transcript, as the hooks Copilot CLI would have run."""
    reading = _Reading(path)
    for number, line in json_lines(path, reading.transcript):
        kind, data, when = line.get("type"), line.get("data"), line.get("timestamp")
        if not isinstance(data, dict):
            continue
        reading.seen(when)
        if kind == "session.start":
            reading.start(data, when)
        elif not reading.transcript.session_id or not reading.transcript.cwd:
            reading.problem(number, "before the session's start")
        elif isinstance(kind, str) and (handler := HANDLERS.get(kind)) is not None:
            handler(reading, data, when, number)
    return reading.finish()
