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
from collections.abc import Iterator
from pathlib import Path

from kirolearn.shims import codex as shim
from kirolearn.transcripts.replay import Transcript, json_lines, stored_files

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

def read(path: Path) -> Transcript:
    """One transcript, as the hooks Codex would have run."""
    transcript = Transcript(AGENT, path)
    calls: dict[str, dict] = {}  # call_id → the call
    shell_outputs: dict[str, str] = {}  # call_id → what the command printed
    reply: str | None = None  # the turn's last reply; None: no turn under way
    prompted = ""  # the turn's prompt, said once however many ways Codex logs it
    last_time: str | None = None

    def hook(payload: dict, when: object) -> None:
        transcript.add(when, shim.read({"session_id": transcript.session_id,
                                        "cwd": transcript.cwd, **payload}))

    def end_turn(said: object = None) -> None:
        nonlocal reply, prompted
        if reply is not None:
            hook({"hook_event_name": "Stop",
                  "last_assistant_message": said if isinstance(said, str) else reply},
                 last_time)
        reply, prompted = None, ""

    for number, line in json_lines(path, transcript):
        kind, payload, when = line.get("type"), line.get("payload"), line.get("timestamp")
        if not isinstance(payload, dict):
            continue
        last_time = when if isinstance(when, str) else last_time
        if kind == "session_meta":
            if not transcript.session_id:
                transcript.session_id = str(payload.get("id") or payload.get("session_id") or "")
                transcript.cwd = str(payload.get("cwd") or "")
                git = payload.get("git")
                branch = git.get("branch") if isinstance(git, dict) else None
                transcript.branch = branch if isinstance(branch, str) and branch else None
                hook({"hook_event_name": "SessionStart", "source": "import"}, when)
            continue
        if not transcript.session_id or not transcript.cwd:
            transcript.problems.append(f"line {number}: before the session's meta line")
            continue
        item = payload.get("item") if isinstance(payload.get("item"), dict) else {}
        what = payload.get("type")
        if kind == "event_msg" and what in ("user_message", "item_completed"):
            text = payload.get("message") if what == "user_message" else (
                "\n".join(part.get("text", "") for part in item.get("content") or []
                          if isinstance(part, dict) and isinstance(part.get("text"), str))
                if item.get("type") == "UserMessage" else None)
            if item.get("type") == "CommandExecution" and isinstance(
                    item.get("aggregated_output"), str):
                shell_outputs[str(item.get("id"))] = item["aggregated_output"]
            if isinstance(text, str) and text.strip() and text != prompted:
                end_turn()
                hook({"hook_event_name": "UserPromptSubmit", "prompt": text}, when)
                reply, prompted = "", text
        elif kind == "event_msg" and what == "task_complete":
            end_turn(payload.get("last_agent_message"))
        elif kind == "response_item" and what in ("function_call", "custom_tool_call"):
            calls[str(payload.get("call_id"))] = payload
        elif kind == "response_item" and what in ("function_call_output",
                                                  "custom_tool_call_output"):
            call_id = str(payload.get("call_id"))
            call = calls.pop(call_id, None)
            if call is None:
                transcript.problems.append(f"line {number}: a tool's output without its call")
                continue
            hook({"hook_event_name": "PostToolUse",
                  **tool_payload(call, payload.get("output"), shell_outputs.pop(call_id, None))},
                 when)
        elif (kind == "response_item" and what == "message" and payload.get("role") == "assistant"
              and reply is not None):
            texts = [part.get("text") for part in payload.get("content") or []
                     if isinstance(part, dict) and isinstance(part.get("text"), str)]
            reply = "\n".join(texts) or reply
    end_turn()
    if transcript.hooks:
        hook({"hook_event_name": "SessionEnd", "reason": "import"}, last_time)
    return transcript
