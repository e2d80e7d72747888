"""Claude Code shim (``kirolearn-claude-code``): settings.json command hooks, stdin JSON.

| hook | event | stdout |
| --- | --- | --- |
| ``SessionStart`` | ``note`` | the project's session context |
| ``UserPromptSubmit`` | ``prompt`` (retrieval) | the prompt's context |
| ``PostToolUse`` | ``tool_use`` ``{tool_name, tool_input, tool_response}`` | — |
| ``PostToolUseFailure`` | ``tool_use`` whose response is ``{is_error, error, …}`` | — |
| ``Stop`` | ``session_summary`` from ``last_assistant_message`` | — |
| ``SessionEnd`` | ``note`` with the reason | — |

Context goes out as ``{"hookSpecificOutput": {"hookEventName": …,
"additionalContext": …}}``, which Claude Code adds to the conversation next to
the prompt (it keeps strings over 10,000 characters in a file, so the context is
cut to whole records below that). The session is Claude Code's own
``session_id``.
"""

from __future__ import annotations

import json
import sys

from kirolearn.shims import common

SURFACE = "claude-code"
CONTEXT_MAX_CHARS = 9500
# A failed tool use has no tool_response: what went wrong is in these fields.
FAILURE_FIELDS = ("error", "error_type", "is_interrupt", "is_timeout")


def fit_context(context: str, limit: int = CONTEXT_MAX_CHARS) -> str:
    """The context cut to whole records (``### `` sections) within limit characters."""
    if len(context) <= limit:
        return context
    cut = context.rfind("\n\n### ", 0, limit)
    return context[:cut] if cut > 0 else context[:limit]


def output(hook: str, context: str) -> str:
    if not context:
        return ""
    return json.dumps({"hookSpecificOutput": {"hookEventName": hook,
                                              "additionalContext": fit_context(context)}})


def handle(payload: dict) -> str:
    hook = payload.get("hook_event_name")
    shim = common.Shim(SURFACE, payload.get("cwd") or None)
    given = payload.get("session_id")
    given = given if isinstance(given, str) and given else None
    session = common.Session(shim, f"{SURFACE}:{given}" if given else shim.project.project_id)
    session_id = session.current(given)
    if hook == "SessionStart":
        session.save()
        source = payload.get("source")
        what = f"{SURFACE} session started" + (f" ({source})" if isinstance(source, str) else "")
        return output(hook, shim.post(shim.event("note", common.text_body(what), session_id),
                                      retrieve="session"))
    if hook == "UserPromptSubmit":
        event = shim.event("prompt", common.text_body(payload.get("prompt")), session_id)
        session.save(prompt_event_id=event["event_id"])
        return output(hook, shim.post(event, retrieve=True))
    if hook in ("PostToolUse", "PostToolUseFailure"):
        response = payload.get("tool_response") if hook == "PostToolUse" else {
            "is_error": True, **{key: payload[key] for key in FAILURE_FIELDS if key in payload}}
        shim.post(shim.event("tool_use", common.tool_body(
            payload.get("tool_name"), payload.get("tool_input"), response),
            session_id, session.prompt_event_id))
        return ""
    if hook == "Stop":
        shim.post(shim.event("session_summary", common.text_body(
            payload.get("last_assistant_message")), session_id, session.prompt_event_id))
        return ""
    if hook == "SessionEnd":
        reason = payload.get("reason")
        what = f"{SURFACE} session ended" + (f" ({reason})" if isinstance(reason, str) else "")
        shim.post(shim.event("note", common.text_body(what), session_id))
        return ""
    common.debug(f"ignored hook {hook!r}")
    return ""


def main() -> int:
    return common.run_stdin_hook(handle)


if __name__ == "__main__":
    sys.exit(main())
