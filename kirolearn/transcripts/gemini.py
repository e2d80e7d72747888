"""Gemini CLI's transcripts: ``~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl``,
the project's directory in ``~/.gemini/tmp/<project>/.project_root``.

One JSON object a line (``tests/samples/gemini.jsonl`` is one the real CLI wrote): the
session's header (``sessionId``, ``startTime``), then its messages, a message written
again (same ``id``) as it grows, and ``{"$set": …}`` lines that change the session's
own fields. What is read of the messages, each as it was last written:

- ``{"type": "user", "content": [{"text"}]}``: a prompt; Gemini's own first message
  (``<session_context>``) is not, and the context hooks added before the user's words
  (``<hook_context>``) is taken out as the live shim takes it out. A message of
  ``functionResponse`` parts is a tool's result, read with its call;
- ``{"type": "gemini", "content": "…", "toolCalls": [{"name", "args", "result":
  [{"functionResponse": {"response": {"output"}}}], "status", "resultDisplay"}]}``: a
  reply, and each tool it called with its output, which is what the ``AfterTool`` hook
  is given as ``llmContent`` (and ``error`` when it failed).

A turn ends (``AfterAgent``, with its last reply) where the next prompt starts or the
transcript ends. A transcript whose project's directory is not known is not read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from kirolearn.code import files
from kirolearn.shims import gemini as shim
from kirolearn.transcripts.replay import Transcript, json_lines, stored_files

AGENT = shim.SURFACE
GEMINI_OWN = re.compile(r"^\s*<session_context>")


def stored(user_home: Path) -> list[Path]:
    """The transcripts Gemini CLI keeps for this user, oldest first."""
    found = stored_files(user_home / ".gemini" / "tmp", "*/chats/session-*.jsonl")
    return sorted((path for _, path in found), key=lambda p: (p.name, str(p)))


def _text(content: object) -> str:
    """A message's words, less the context hooks put before them (each part's)."""
    parts = [content] if isinstance(content, str) else [
        part["text"] for part in content if isinstance(part, dict)
        and isinstance(part.get("text"), str)] if isinstance(content, list) else []
    return "\n".join(kept for part in parts
                     if (kept := shim.HOOK_CONTEXT.sub("", part)).strip())


def _messages(path: Path, transcript: Transcript) -> tuple[dict, list[dict]]:
    """The session's header and its messages in order, each as it was last written."""
    header: dict = {}
    messages: dict[str, dict] = {}
    for number, line in json_lines(path, transcript):
        if "sessionId" in line and "type" not in line:
            header = header or line
        elif isinstance(line.get("$set"), dict):
            written = line["$set"].get("messages")
            for message in written if isinstance(written, list) else ():
                if isinstance(message, dict) and isinstance(message.get("id"), str):
                    messages[message["id"]] = message
        elif isinstance(line.get("id"), str) and line.get("type") in ("user", "gemini"):
            messages[line["id"]] = line
        elif "type" in line:
            continue  # Gemini's own: info, errors, the like
        else:
            transcript.problems.append(f"line {number}: neither a message nor a change")
    return header, list(messages.values())


def transcripts(user_home: Path) -> Iterator[Transcript]:
    """Each of the user's transcripts, read."""
    return map(read, stored(user_home))


def read(path: Path) -> Transcript:
    """One transcript, as the hooks Gemini CLI would have run."""
    transcript = Transcript(AGENT, path)
    header, messages = _messages(path, transcript)
    root_file = files.read_regular(str(path.parent.parent / ".project_root"), 4096)
    transcript.cwd = root_file.decode("utf-8", "replace").strip() if root_file else ""
    if not transcript.cwd:
        transcript.problems.append("its project's directory is not known (no .project_root)")
        return transcript
    transcript.session_id = str(header.get("sessionId") or "")
    reply: str | None = None
    last_time = header.get("startTime")

    def hook(payload: dict, when: object) -> None:
        transcript.add(when, shim.read({"session_id": transcript.session_id,
                                        "cwd": transcript.cwd, **payload}))

    def end_turn() -> None:
        nonlocal reply
        if reply is not None:
            hook({"hook_event_name": "AfterAgent", "prompt_response": reply}, last_time)
        reply = None

    if transcript.session_id:
        hook({"hook_event_name": "SessionStart", "source": "import"}, last_time)
    for message in messages if transcript.session_id else ():
        when = message.get("timestamp")
        last_time = when if isinstance(when, str) else last_time
        if message.get("type") == "gemini":
            for call in message.get("toolCalls") or []:
                if isinstance(call, dict):
                    hook(_after_tool(call), call.get("timestamp") or when)
            said = _text(message.get("content"))
            if said and reply is not None:
                reply = said
            continue
        text = _text(message.get("content"))
        if not text.strip() or GEMINI_OWN.match(text):
            continue
        end_turn()
        hook({"hook_event_name": "BeforeAgent", "prompt": text}, when)
        reply = ""
    end_turn()
    if transcript.hooks:
        hook({"hook_event_name": "SessionEnd", "reason": "import"}, last_time)
    return transcript


def _after_tool(call: dict) -> dict:
    """A tool call of a reply as Gemini's ``AfterTool`` hook reports it."""
    outputs = [part["functionResponse"].get("response") for part in call.get("result") or []
               if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict)]
    output = next((o.get("output", o.get("error")) for o in outputs if isinstance(o, dict)), "")
    failed = call.get("status") == "error"
    return {"hook_event_name": "AfterTool", "tool_name": call.get("name"),
            "tool_input": call.get("args"),
            "tool_response": {"llmContent": output if isinstance(output, str) else "",
                              "returnDisplay": call.get("resultDisplay"),
                              **({"error": output or "error"} if failed else {})}}
