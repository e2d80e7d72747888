"""Kiro CLI shim (``kirolearn-kiro-cli``): agent-config hooks, payload on stdin.

| hook | event | stdout |
| --- | --- | --- |
| ``agentSpawn`` | ``note``, a new session | the project's session context |
| ``userPromptSubmit`` | ``prompt`` (retrieval) | the prompt's context |
| ``postToolUse`` | ``tool_use`` ``{tool_name, tool_input, tool_response}`` | — |
| ``stop`` | ``session_summary`` from ``assistant_response`` (even empty) | — |

Kiro CLI v3 hook files name the same hooks in PascalCase and add ``session_id``;
both are accepted. A deferred ``postToolUse`` (``hook_events``) posts one event
per tool use.
"""

from __future__ import annotations

import sys

from kirolearn.shims import common

SURFACE = "kiro-cli"


def handle(payload: dict) -> str:
    """Post the hook's event(s); return what goes to stdout."""
    hook = str(payload.get("hook_event_name", "")).lower()
    shim = common.Shim(SURFACE, payload.get("cwd") or None)
    session = common.Session(shim, shim.project.project_id)
    given = payload.get("session_id") if isinstance(payload.get("session_id"), str) else None
    if hook == "agentspawn":
        event = shim.event("note", common.text_body(f"{SURFACE} session started"),
                           session.current(given, fresh=True))
        session.save()
        return shim.post(event, retrieve="session")
    session_id = session.current(given)
    if hook == "userpromptsubmit":
        event = shim.event("prompt", common.text_body(payload.get("prompt")), session_id)
        session.save(prompt_event_id=event["event_id"])
        return shim.post(event, retrieve=True)
    if hook == "posttooluse":
        uses = payload.get("hook_events")
        uses = [u for u in uses if isinstance(u, dict)] if isinstance(uses, list) else [payload]
        session.save()
        for use in uses:
            shim.post(shim.event("tool_use", common.tool_body(
                use.get("tool_name"), use.get("tool_input"), use.get("tool_response")),
                session_id, session.prompt_event_id))
        return ""
    if hook == "stop":
        session.save()
        shim.post(shim.event("session_summary", common.text_body(
            payload.get("assistant_response")), session_id, session.prompt_event_id))
        return ""
    common.debug(f"ignored hook {payload.get('hook_event_name')!r}")
    return ""


def main() -> int:
    return common.run_stdin_hook(handle)


if __name__ == "__main__":
    sys.exit(main())
