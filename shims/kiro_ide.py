"""Kiro IDE shim (``kirolearn-kiro-ide <hook>``): ``.kiro/hooks/*.kiro.hook`` commands.

The hook type is the first argument; the payload is the ``USER_PROMPT``
environment variable, or stdin JSON's ``prompt`` when that is empty (some IDE
versions fill only one of them); the project is the process's working directory.

- ``promptSubmit`` → ``prompt`` (retrieval); the context goes to stdout.
- ``postToolUse`` → ``tool_use``: the camelCase ``toolName/toolArgs/toolResult/
  toolSuccess`` become ``{tool_name, tool_input, tool_response: {success, result}}``;
  a payload that is not JSON is kept as the result of tool ``unknown``.
- ``agentStop`` → ``session_summary``; an empty payload is ignored.

The IDE has no session-start hook: the session is the project's (shared with the
CLI shim) and a new one starts after an hour without hooks.
"""

from __future__ import annotations

import json
import sys

from kirolearn.shims import common

SURFACE = "kiro-ide"
ROLES = {"promptSubmit": "prompt", "postToolUse": "tool", "agentStop": "turn_end"}


def payload_text() -> str:
    text = common.env_text("USER_PROMPT")
    if text.strip():
        return text
    payload = common.parse_json_object(common.read_stdin(common.STDIN_WAIT_S))
    value = payload.get("prompt")
    return value if isinstance(value, str) else ""


def tool_use(text: str) -> dict:
    """The IDE's camelCase tool payload as the tool-use body."""
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        return common.tool_body("unknown", {}, {"result": text})
    response = {"result": payload.get("toolResult")}
    if "toolSuccess" in payload:
        response = {"success": payload.get("toolSuccess"), **response}
    return common.tool_body(payload.get("toolName"), payload.get("toolArgs", {}), response)


def read(name: str, text: str, cwd: str | None = None) -> common.Hook:
    role = ROLES.get(name, "ignored")
    if role == "turn_end" and not text.strip():
        role = "ignored"
    tools = (tool_use(text),) if role == "tool" else ()
    return common.Hook(role, name, None, cwd, text, tools)


def handle(name: str, text: str, cwd: str | None = None) -> str:
    return common.answer(SURFACE, read(name, text, cwd))


def _main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    common.emit(handle(name, payload_text()))


def main() -> int:
    return common.run(_main)


if __name__ == "__main__":
    sys.exit(main())
