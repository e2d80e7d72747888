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
from kirolearn.transcripts.replay import Transcript, json_lines, stored_files

AGENT = shim.SURFACE


def stored(user_home: Path) -> list[Path]:
    """The transcripts Copilot CLI keeps for this user, oldest first."""
    found = stored_files(user_home / ".copilot" / "session-state", "*/events.jsonl")
    return [path for _, path in sorted(found, key=lambda f: (f[0], str(f[1])))]


def transcripts(user_home: Path) -> Iterator[Transcript]:
    """Each of the user's transcripts, read."""
    return map(read, stored(user_home))


def read(path: Path) -> Transcript:
    """One transcript, as the hooks Copilot CLI would have run."""
    transcript = Transcript(AGENT, path)
    calls: dict[str, dict] = {}  # toolCallId → the call's start
    last_time: str | None = None

    def hook(name: str, payload: dict, when: object) -> None:
        transcript.add(when, shim.read({"sessionId": transcript.session_id,
                                        "cwd": transcript.cwd, **payload}, name))

    for number, line in json_lines(path, transcript):
        kind, data, when = line.get("type"), line.get("data"), line.get("timestamp")
        if not isinstance(data, dict):
            continue
        last_time = when if isinstance(when, str) else last_time
        if kind == "session.start":
            context = data.get("context") if isinstance(data.get("context"), dict) else {}
            if not transcript.session_id:
                transcript.session_id = str(data.get("sessionId") or "")
                transcript.cwd = str(context.get("cwd") or "")
                branch = context.get("branch")
                transcript.branch = branch if isinstance(branch, str) and branch else None
                hook("sessionStart", {"source": "import"}, when)
            continue
        if not transcript.session_id or not transcript.cwd:
            transcript.problems.append(f"line {number}: before the session's start")
            continue
        if kind == "user.message" and isinstance(data.get("content"), str):
            if data["content"].strip():
                hook("userPromptSubmitted", {"prompt": data["content"]}, when)
        elif kind == "tool.execution_start":
            calls[str(data.get("toolCallId"))] = data
        elif kind == "tool.execution_complete":
            call = calls.pop(str(data.get("toolCallId")), None)
            if call is None:
                transcript.problems.append(f"line {number}: a tool's end without its start")
                continue
            used = {"toolName": call.get("toolName"), "toolArgs": call.get("arguments")}
            result = data.get("result") if isinstance(data.get("result"), dict) else {}
            if data.get("success") is False and "content" not in result:
                error = data.get("error")
                hook("postToolUseFailure", {**used, "error": error.get("message", error)
                                            if isinstance(error, dict) else error}, when)
            else:
                hook("postToolUse", {**used, "toolResult": {
                    "textResultForLlm": result.get("content"),
                    "resultType": "success" if data.get("success") else "failure"}}, when)
    if transcript.hooks:
        hook("sessionEnd", {"reason": "import"}, last_time)
    return transcript
