"""Claude Code's transcripts: ``~/.claude/projects/<directory>/<session id>.jsonl``.

One JSON object a line (``tests/samples/claude-code.jsonl`` is one the real CLI
wrote). What is read of it:

- ``{"type": "user", "message": {"content": "…"}}``: a prompt (a string, or a list
  whose ``text`` blocks are the prompt). Not one with ``isMeta`` (Claude Code's own
  note), ``isSidechain`` (a subagent's task) or ``isCompactSummary``, nor a slash
  command's echo (``<command-name>``, ``<local-command-stdout>``);
- ``{"type": "assistant", "message": {"content": [{"type": "tool_use", "id", "name",
  "input"}, {"type": "text", "text"}]}}``: a tool called, and the reply so far;
- ``{"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id",
  "content", "is_error"}]}, "toolUseResult": …}``: the tool's result, which is what
  its ``PostToolUse`` hook is given as ``tool_response`` (or, with ``is_error``, a
  ``PostToolUseFailure`` with the ``error``);
- each line's ``sessionId``, ``cwd``, ``gitBranch`` and ``timestamp``.

A turn ends (``Stop``, with the last reply) where the next prompt starts or the
transcript ends. Attachments, summaries and queue operations are Claude Code's own
and left out, as is the context hooks added (ours among it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kirolearn.shims import claude_code as shim
from kirolearn.transcripts.replay import Replay, Transcript, json_lines, stored_files

AGENT = shim.SURFACE
NOT_PROMPTS = ("<command-name>", "<command-message>", "<local-command-stdout>",
               "<local-command-stderr>", "Caveat: The messages below were generated")


def stored(user_home: Path) -> list[Path]:
    """The transcripts Claude Code keeps for this user, oldest first."""
    found = stored_files(user_home / ".claude" / "projects", "*/*.jsonl")
    return [path for _, path in sorted(found, key=lambda f: (f[0], str(f[1])))]


def _prompt(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(block["text"] for block in content if isinstance(block, dict)
                         and block.get("type") == "text" and isinstance(block.get("text"), str))
    return ""


def transcripts(user_home: Path) -> Iterator[Transcript]:
    """Each of the user's transcripts, read."""
    return map(read, stored(user_home))


class _Reading(Replay):
    """A Claude Code transcript being read: a handler per kind of message (``HANDLERS``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(Transcript(AGENT, path, session_id=path.stem), shim.read)

    def place(self, line: dict, number: int) -> bool:
        """The session's id, directory and branch, as a line gives them (its start once its
        directory is known); whether the directory is known."""
        transcript = self.transcript
        if isinstance(line.get("sessionId"), str) and line["sessionId"]:
            transcript.session_id = line["sessionId"]
        if isinstance(line.get("cwd"), str) and not transcript.cwd:
            transcript.cwd = line["cwd"]
            self.hook({"hook_event_name": "SessionStart", "source": "import"},
                      line.get("timestamp"))
        branch = line.get("gitBranch")
        if isinstance(branch, str) and branch and branch != "HEAD":
            transcript.branch = branch
        if not transcript.cwd:
            self.problem(number, "a message before the session's directory is known")
        return bool(transcript.cwd)

    def assistant(self, line: dict, blocks: list[dict], when: object, number: int) -> None:
        """Its tool calls wait for their results; its words are the turn's reply so far."""
        for block in blocks:
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                self.calls[block["id"]] = block
            elif (block.get("type") == "text" and isinstance(block.get("text"), str)
                  and self.reply is not None):
                self.reply = block["text"]

    def user(self, line: dict, blocks: list[dict], when: object, number: int) -> None:
        """The tools' results, or a prompt (unless it is Claude Code's own words)."""
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for result in results:
            self._result(line, result, when, number)
        if results or line.get("isMeta") or line.get("isSidechain") or line.get(
                "isCompactSummary"):
            return
        text = _prompt(line["message"].get("content"))
        if text.strip() and not text.lstrip().startswith(NOT_PROMPTS):
            self.prompt({"hook_event_name": "UserPromptSubmit", "prompt": text}, text, when)

    def _result(self, line: dict, result: dict, when: object, number: int) -> None:
        call = self.calls.pop(str(result.get("tool_use_id")), None)
        if call is None:
            self.problem(number, "a tool result without its call")
            return
        used = {"tool_name": call.get("name"), "tool_input": call.get("input")}
        if result.get("is_error"):
            self.hook({"hook_event_name": "PostToolUseFailure", **used,
                       "error": _prompt(result.get("content")) or "error"}, when)
        else:
            response = line.get("toolUseResult", result.get("content"))
            self.hook({"hook_event_name": "PostToolUse", **used, "tool_response": response},
                      when)


HANDLERS = {"user": _Reading.user, "assistant": _Reading.assistant}  # by the line's type


def read(path: Path) -> Transcript:
    """One transcript, as the hooks Claude Code would have run."""
    reading = _Reading(path)
    for number, line in json_lines(path, reading.transcript):
        kind, message = line.get("type"), line.get("message")
        handler = HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None or not isinstance(message, dict) or not reading.place(line, number):
            continue
        when = line.get("timestamp")
        reading.seen(when)
        content = message.get("content")
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        handler(reading, line, blocks, when, number)
    return reading.finish()
