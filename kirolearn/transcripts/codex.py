"""Codex's transcripts: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``
(and ``archived_sessions/``).

One ``{"timestamp", "type", "payload"}`` a line (``tests/samples/codex.jsonl`` is one
the real CLI wrote). What is read of it:

- ``session_meta``: the session's ``id``, its ``cwd`` and, where Codex read it, its
  ``git.branch``;
- ``event_msg`` ``user_message`` (or ``item_completed`` of a ``UserMessage``): a
  prompt. The ``response_item`` messages of the user and developer roles are not:
  they also carry the context Codex and its hooks added (ours among it);
- ``response_item`` ``function_call`` / ``custom_tool_call`` (``name``, ``arguments``
  or ``input``, ``call_id``) and their ``…_output``: a tool used. A shell command
  (``exec_command``, ``shell``) is the ``Bash`` its hooks report, with the command's
  output (``item_completed`` of its ``CommandExecution``) as the response; a patch
  (``apply_patch``) is split into its files' edits as the live shim splits it;
- ``event_msg`` ``task_complete``: the turn's end, with ``last_agent_message``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from kirolearn.shims import codex as shim
from kirolearn.transcripts.replay import Replay, Transcript, json_lines, stored_files

AGENT = shim.SURFACE
SHELL = ("exec_command", "shell", "local_shell", "container.exec")


def stored(user_home: Path) -> list[Path]:
    """The transcripts Codex keeps for this user, oldest first."""
    root = user_home / ".codex"
    found = [*stored_files(root / "sessions", "**/rollout-*.jsonl"),
             *stored_files(root / "archived_sessions", "**/rollout-*.jsonl")]
    return sorted((path for _, path in found), key=lambda p: (p.name, str(p)))


def _arguments(call: dict) -> object:
    if "input" in call:  # a custom tool's: the text itself
        return call["input"]
    try:
        return json.loads(call.get("arguments") or "{}")
    except (ValueError, RecursionError):
        return call.get("arguments")


def tool_payload(call: dict, output: object, shell_output: str | None) -> dict:
    """A tool call and its output as Codex's ``PostToolUse`` hook reports it."""
    name, arguments = str(call.get("name") or ""), _arguments(call)
    if name in SHELL and isinstance(arguments, dict):
        command = arguments.get("cmd", arguments.get("command"))
        if isinstance(command, list):
            command = " ".join(str(part) for part in command)
        return {"tool_name": "Bash", "tool_input": {"command": command},
                "tool_response": output if shell_output is None else shell_output}
    if name == "apply_patch":
        patch = arguments.get("input") if isinstance(arguments, dict) else arguments
        return {"tool_name": "apply_patch", "tool_input": {"command": patch},
                "tool_response": output}
    return {"tool_name": name, "tool_input": arguments, "tool_response": output}


def transcripts(user_home: Path) -> Iterator[Transcript]:
    """Each of the user's transcripts, read."""
    return map(read, stored(user_home))


class _Reading(Replay):
    """A Codex transcript being read: a handler per kind of line (``HANDLERS``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(Transcript(AGENT, path), shim.read)
        self.shell_outputs: dict[str, str] = {}  # call_id → what the command printed

    def meta(self, payload: dict, when: object) -> None:
        transcript = self.transcript
        if transcript.session_id:
            return
        transcript.session_id = str(payload.get("id") or payload.get("session_id") or "")
        transcript.cwd = str(payload.get("cwd") or "")
        git = payload.get("git")
        branch = git.get("branch") if isinstance(git, dict) else None
        transcript.branch = branch if isinstance(branch, str) and branch else None
        self.hook({"hook_event_name": "SessionStart", "source": "import"}, when)

    def user_message(self, payload: dict, when: object, number: int) -> None:
        self._said(payload.get("message"), when)

    def item_completed(self, payload: dict, when: object, number: int) -> None:
        """A finished item: the user's message (a prompt), or a command's output."""
        item = payload.get("item") if isinstance(payload.get("item"), dict) else {}
        if item.get("type") == "CommandExecution" and isinstance(
                item.get("aggregated_output"), str):
            self.shell_outputs[str(item.get("id"))] = item["aggregated_output"]
        if item.get("type") == "UserMessage":
            self._said("\n".join(part.get("text", "") for part in item.get("content") or []
                                 if isinstance(part, dict) and isinstance(part.get("text"), str)),
                       when)

    def _said(self, text: object, when: object) -> None:
        """The user said this: a prompt, once however many ways Codex logs it."""
        if isinstance(text, str) and text.strip() and text != self.prompted:
            self.prompt({"hook_event_name": "UserPromptSubmit", "prompt": text}, text, when)

    def task_complete(self, payload: dict, when: object, number: int) -> None:
        self.end_turn(payload.get("last_agent_message"))

    def call(self, payload: dict, when: object, number: int) -> None:
        self.calls[str(payload.get("call_id"))] = payload

    def output(self, payload: dict, when: object, number: int) -> None:
        call_id = str(payload.get("call_id"))
        call = self.calls.pop(call_id, None)
        if call is None:
            self.problem(number, "a tool's output without its call")
            return
        self.hook({"hook_event_name": "PostToolUse", **tool_payload(
            call, payload.get("output"), self.shell_outputs.pop(call_id, None))}, when)

    def message(self, payload: dict, when: object, number: int) -> None:
        """The assistant's words, kept as the turn's reply (its last, when the turn ends)."""
        if payload.get("role") != "assistant" or self.reply is None:
            return
        texts = [part.get("text") for part in payload.get("content") or []
                 if isinstance(part, dict) and isinstance(part.get("text"), str)]
        self.reply = "\n".join(texts) or self.reply


# Each line's (type, its payload's type) → what is done with it; other lines are not read.
HANDLERS = {
    ("event_msg", "user_message"): _Reading.user_message,
    ("event_msg", "item_completed"): _Reading.item_completed,
    ("event_msg", "task_complete"): _Reading.task_complete,
    ("response_item", "function_call"): _Reading.call,
    ("response_item", "custom_tool_call"): _Reading.call,
    ("response_item", "function_call_output"): _Reading.output,
    ("response_item", "custom_tool_call_output"): _Reading.output,
    ("response_item", "message"): _Reading.message,
}


def _handler(kind: object, what: object) -> Callable | None:
    return HANDLERS.get((kind, what)) if isinstance(kind, str) and isinstance(what, str) else None


def read(path: Path) -> Transcript:
    """One transcript, as the hooks Codex would have run."""
    reading = _Reading(path)
    for number, line in json_lines(path, reading.transcript):
        kind, payload, when = line.get("type"), line.get("payload"), line.get("timestamp")
        if not isinstance(payload, dict):
            continue
        reading.seen(when)
        if kind == "session_meta":
            reading.meta(payload, when)
        elif not reading.transcript.session_id or not reading.transcript.cwd:
            reading.problem(number, "before the session's meta line")
        elif (handler := _handler(kind, payload.get("type"))) is not None:
            handler(reading, payload, when, number)
    return reading.finish()
