"""Claude Code shim (``kirolearn-claude-code``): settings.json command hooks, stdin JSON.

| hook | event | stdout |
| --- | --- | --- |
| ``SessionStart`` | ``note`` | the project's session context |
| ``UserPromptSubmit`` | ``prompt`` (retrieval) | the prompt's context |
| ``PreToolUse`` | — | why the lines a Read of a range or an Edit is about are as they are |
| ``PostToolUse`` | ``tool_use`` ``{tool_name, tool_input, tool_response}`` | a file's memories |
| ``PostToolUseFailure`` | ``tool_use`` whose response is ``{is_error, error, …}`` | — |
| ``Stop`` | ``session_summary`` from ``last_assistant_message`` | — |
| ``SessionEnd`` | ``note`` with the reason | — |

A file's memories: what is known of a file the session first opens (``common.answer``);
why lines are as they are: the work of the commits that wrote them (``common.before_tool``).
Context goes out as ``{"hookSpecificOutput": {"hookEventName": …,
"additionalContext": …}}``, which Claude Code adds to the conversation next to
the prompt. The session is Claude Code's own ``session_id``. Codex and Gemini CLI
copy this design; their shims read their payloads with ``read``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from kirolearn.shims import common

SURFACE = "claude-code"
# A failed tool use has no tool_response: what went wrong is in these fields.
FAILURE_FIELDS = ("error", "error_type", "is_interrupt", "is_timeout")
ROLES = {"SessionStart": "start", "UserPromptSubmit": "prompt", "PreToolUse": "pre_tool",
         "PostToolUse": "tool",
         "PostToolUseFailure": "tool", "Stop": "turn_end", "SessionEnd": "end"}


def read(payload: dict, roles: dict[str, str] = ROLES) -> common.Hook:
    """A hook in Claude Code's format (roles: its event names → their roles)."""
    name = str(payload.get("hook_event_name") or "")
    role = roles.get(name, "ignored")
    text = {"start": payload.get("source"), "prompt": payload.get("prompt"),
            "turn_end": payload.get("last_assistant_message"),
            "end": payload.get("reason")}.get(role)
    tools: tuple[dict, ...] = ()
    if role == "pre_tool":
        tools = (common.tool_body(payload.get("tool_name"), payload.get("tool_input"), None),)
    if role == "tool":
        response = payload.get("tool_response") if not name.endswith("Failure") else {
            "is_error": True, **{key: payload[key] for key in FAILURE_FIELDS if key in payload}}
        tools = (common.tool_body(payload.get("tool_name"), payload.get("tool_input"),
                                  response),)
    return common.Hook(role, name, payload.get("session_id"), payload.get("cwd"), text, tools)


def main_for(surface: str, read_hook: Callable[[dict], common.Hook],
             why_after: int | None = None) -> int:
    """The whole of a shim for an agent with Claude Code's hooks: its payload read by
    read_hook, the context printed as ``hookSpecificOutput`` (``why_after``: see
    ``common.answer``)."""
    def handle(payload: dict) -> str:
        hook = read_hook(payload)
        return common.hook_specific_output(hook.name, common.answer(
            surface, hook, tool_context=True, why_after=why_after))

    return common.run_stdin_hook(handle)


def main() -> int:
    return main_for(SURFACE, read)


if __name__ == "__main__":
    sys.exit(main())
