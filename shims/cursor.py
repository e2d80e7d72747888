"""Cursor shim (``kirolearn-cursor``): ``.cursor/hooks.json`` command hooks, stdin JSON.

Every payload names its ``conversation_id`` (the session) and ``workspace_roots``
(the first is the project).

| hook | event | stdout |
| --- | --- | --- |
| ``sessionStart`` | ``note`` | ``{"additional_context": …}`` (the session's) |
| ``sessionStart`` | ``note`` | ``{"additional_context": …}`` |
| ``afterFileEdit`` | ``tool_use`` ``Edit`` ``{file_path, edits: [{old_string, new_string}]}`` | — |
| ``afterShellExecution`` | ``tool_use`` ``Shell`` ``{command}``, its output | — |
| ``afterMCPExecution`` | ``tool_use`` of the MCP tool, its ``result_json`` | — |
| ``afterAgentResponse`` | ``session_summary`` from ``text`` | — |
| ``sessionEnd`` | ``note`` with the reason | — |
"""

from __future__ import annotations

import contextlib
import json
import sys

from kirolearn.shims import common

SURFACE = "cursor"
ROLES = {"sessionStart": "start", "beforeSubmitPrompt": "prompt", "afterFileEdit": "tool",
         "afterShellExecution": "tool", "afterMCPExecution": "tool",
         "afterAgentResponse": "turn_end", "sessionEnd": "end"}
CONTEXT_MAX_CHARS = 9500  # Cursor keeps longer context in a file the agent must read


def tool_use(name: str, payload: dict) -> dict:
    if name == "afterFileEdit":
        return common.tool_body("Edit", {"file_path": payload.get("file_path"),
                                         "edits": payload.get("edits") or []}, {"success": True})
    if name == "afterShellExecution":
        response = {"output": payload.get("output")}
        if isinstance(payload.get("exit_code"), int):
            response["exit_code"] = payload["exit_code"]
        return common.tool_body("Shell", {"command": payload.get("command")}, response)
    tool_input = payload.get("tool_input")
    if isinstance(tool_input, str):  # Cursor sends MCP arguments as a JSON string
        with contextlib.suppress(ValueError):
            tool_input = json.loads(tool_input)
    return common.tool_body(payload.get("tool_name"), tool_input, payload.get("result_json"))


def read(payload: dict) -> common.Hook:
    name = str(payload.get("hook_event_name") or "")
    role = ROLES.get(name, "ignored")
    roots = payload.get("workspace_roots")
    cwd = roots[0] if isinstance(roots, list) and roots and isinstance(roots[0], str) else None
    text = {"prompt": payload.get("prompt"), "turn_end": payload.get("text"),
            "end": payload.get("reason")}.get(role)
    tools = (tool_use(name, payload),) if role == "tool" else ()
    return common.Hook(role, name, payload.get("conversation_id"), cwd, text, tools)


def handle(payload: dict) -> str:
    hook = read(payload)
    context = common.answer(SURFACE, hook)
    if not context:
        return ""
    reply = {"additional_context": common.fit_context(context, CONTEXT_MAX_CHARS)}
    return json.dumps({"continue": True, **reply} if hook.role == "prompt" else reply)


def main() -> int:
    return common.run_stdin_hook(handle)


if __name__ == "__main__":
    sys.exit(main())
