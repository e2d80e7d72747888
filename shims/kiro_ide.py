"""Kiro IDE shim (``kirolearn-kiro-ide <hook>``): ``.kiro/hooks/*.kiro.hook`` commands.

The hook type is the first argument; the payload is the ``USER_PROMPT``
environment variable, or stdin JSON's ``prompt`` when that is empty (some IDE
versions fill only one of them); the project is the process's working directory.

- ``promptSubmit`` → ``prompt`` (retrieval); the context goes to stdout.
- ``postToolUse`` → ``tool_use``: the camelCase ``toolName/toolArgs/toolResult/
  toolSuccess`` become ``{tool_name, tool_input, tool_response: {success, result}}``;
  a payload that is not JSON is kept as the result of tool ``unknown``.
- ``agentStop`` → ``session_summary``, skipped when the payload is empty.

The IDE has no session-start hook: the session is the project's (shared with the
CLI shim) and a new one starts after an hour without hooks.
"""

from __future__ import annotations

import json
import sys

from kirolearn.shims import common

SURFACE = "kiro-ide"


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


def handle(hook: str, text: str, cwd: str | None = None) -> str:
    shim = common.Shim(SURFACE, cwd)
    session = common.Session(shim, shim.project.project_id)
    session_id = session.current()
    if hook == "promptSubmit":
        event = shim.event("prompt", common.text_body(text), session_id)
        session.save(prompt_event_id=event["event_id"])
        return shim.post(event, retrieve=True)
    if hook == "postToolUse":
        session.save()
        shim.post(shim.event("tool_use", tool_use(text), session_id, session.prompt_event_id))
        return ""
    if hook == "agentStop":
        session.save()
        if text.strip():
            shim.post(shim.event("session_summary", common.text_body(text), session_id,
                                 session.prompt_event_id))
        return ""
    common.debug(f"unknown hook {hook!r}; expected promptSubmit, postToolUse or agentStop")
    return ""


def _main() -> None:
    hook = sys.argv[1] if len(sys.argv) > 1 else ""
    common.emit(handle(hook, payload_text()))


def main() -> int:
    return common.run(_main)


if __name__ == "__main__":
    sys.exit(main())
