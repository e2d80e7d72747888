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
from kirolearn.transcripts.replay import Transcript, json_lines, stored_files

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

def read(path: Path) -> Transcript:
    """One transcript, as the hooks Claude Code would have run."""
    transcript = Transcript(AGENT, path, session_id=path.stem)
    calls: dict[str, dict] = {}  # tool_use id → the block
    reply: str | None = None  # the turn's last reply; None: no turn under way
    last_time: str | None = None

    def hook(payload: dict, when: object) -> None:
        transcript.add(when, shim.read({"session_id": transcript.session_id,
                                        "cwd": transcript.cwd, **payload}))

    def end_turn() -> None:
        nonlocal reply
        if reply is not None:
            hook({"hook_event_name": "Stop", "last_assistant_message": reply}, last_time)
        reply = None

    for number, line in json_lines(path, transcript):
        kind, message = line.get("type"), line.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            continue
        if isinstance(line.get("sessionId"), str) and line["sessionId"]:
            transcript.session_id = line["sessionId"]
        if isinstance(line.get("cwd"), str) and not transcript.cwd:
            transcript.cwd = line["cwd"]
            hook({"hook_event_name": "SessionStart", "source": "import"}, line.get("timestamp"))
        branch = line.get("gitBranch")
        if isinstance(branch, str) and branch and branch != "HEAD":
            transcript.branch = branch
        if not transcript.cwd:
            transcript.problems.append(f"line {number}: a message before the session's"
                                       " directory is known")
            continue
        when = line.get("timestamp")
        last_time = when if isinstance(when, str) else last_time
        content = message.get("content")
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        if kind == "assistant":
            for block in blocks:
                if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    calls[block["id"]] = block
                elif (block.get("type") == "text" and isinstance(block.get("text"), str)
                      and reply is not None):
                    reply = block["text"]
            continue
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for result in results:
            call = calls.pop(str(result.get("tool_use_id")), None)
            if call is None:
                transcript.problems.append(f"line {number}: a tool result without its call")
                continue
            payload = {"tool_name": call.get("name"), "tool_input": call.get("input")}
            if result.get("is_error"):
                hook({"hook_event_name": "PostToolUseFailure", **payload,
                      "error": _prompt(result.get("content")) or "error"}, when)
            else:
                response = line.get("toolUseResult", result.get("content"))
                hook({"hook_event_name": "PostToolUse", **payload, "tool_response": response},
                     when)
        if results or line.get("isMeta") or line.get("isSidechain") or line.get(
                "isCompactSummary"):
            continue
        text = _prompt(content)
        if not text.strip() or text.lstrip().startswith(NOT_PROMPTS):
            continue
        end_turn()
        hook({"hook_event_name": "UserPromptSubmit", "prompt": text}, when)
        reply = ""
    end_turn()
    if transcript.hooks:
        hook({"hook_event_name": "SessionEnd", "reason": "import"}, last_time)
    return transcript
