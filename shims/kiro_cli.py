"""Kiro CLI shim (``kirolearn-kiro-cli``): agent-config hooks, payload on stdin.

| hook | event | stdout |
| --- | --- | --- |
| ``agentSpawn`` | ``note``, a new session | the project's session context |
| ``userPromptSubmit`` | ``prompt`` (retrieval) | the prompt's context |
| ``postToolUse`` | ``tool_use`` ``{tool_name, tool_input, tool_response}`` | — |
| ``stop`` | ``session_summary`` from ``assistant_response`` (even empty) | — |

Kiro CLI v3 hook files name the same hooks in PascalCase and add ``session_id``;
both are accepted. A deferred ``postToolUse`` (``hook_events``) posts one event
per tool use. The context goes to stdout as it is.
"""

from __future__ import annotations

import sys

from kirolearn.shims import common

SURFACE = "kiro-cli"
ROLES = {"agentSpawn": "start", "userPromptSubmit": "prompt", "postToolUse": "tool",
         "stop": "turn_end"}
_BY_LOWER = {name.lower(): role for name, role in ROLES.items()}  # v3's PascalCase too


def read(payload: dict) -> common.Hook:
    name = str(payload.get("hook_event_name") or "")
    role = _BY_LOWER.get(name.lower(), "ignored")
    text = {"prompt": payload.get("prompt"),
            "turn_end": payload.get("assistant_response")}.get(role)
    tools: tuple[dict, ...] = ()
    if role == "tool":
        uses = payload.get("hook_events")
        uses = [u for u in uses if isinstance(u, dict)] if isinstance(uses, list) else [payload]
        tools = tuple(common.tool_body(use.get("tool_name"), use.get("tool_input"),
                                       use.get("tool_response")) for use in uses)
    given = payload.get("session_id")
    return common.Hook(role, name, given if isinstance(given, str) else None,
                       payload.get("cwd"), text, tools)


def handle(payload: dict) -> str:
    return common.answer(SURFACE, read(payload))


def main() -> int:
    return common.run_stdin_hook(handle)


if __name__ == "__main__":
    sys.exit(main())
