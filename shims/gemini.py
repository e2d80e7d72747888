"""Gemini CLI shim (``kirolearn-gemini``): ``.gemini/settings.json`` command hooks.

Gemini CLI's hooks follow Claude Code's (stdin JSON with ``session_id`` and ``cwd``,
``hookSpecificOutput.additionalContext`` for context) under other names; stdout
must hold JSON and nothing else, so a hook with nothing to say prints ``{}``. A
tool's ``absolute_path`` is read as its path, the shell's ``Exit Code`` as its exit
status. Gemini puts the context hooks add before the user's words in a
``<hook_context>`` block, and hands that text to the next prompt hook too: the prompt
stored is the user's words alone.

| hook | event | stdout |
| --- | --- | --- |
| ``SessionStart`` | ``note`` | the project's session context |
| ``BeforeAgent`` | ``prompt`` (retrieval) | the prompt's context, added to the turn |
| ``AfterTool`` | ``tool_use`` | a file's memories; why a ranged ``read_file``'s lines are so |
| ``AfterAgent`` | ``session_summary`` from ``prompt_response`` | — |
| ``SessionEnd`` | ``note`` with the reason | — |
"""

from __future__ import annotations

import re
import sys

from kirolearn.shims import common

SURFACE = "gemini"
ROLES = {"SessionStart": "start", "BeforeAgent": "prompt", "AfterTool": "tool",
         "AfterAgent": "turn_end", "SessionEnd": "end"}
EXIT_CODE = re.compile(r"^Exit Code: (-?\d+)", re.MULTILINE)
HOOK_CONTEXT = re.compile(r"<hook_context>.*?</hook_context>\s*", re.DOTALL)


def tool_use(payload: dict) -> dict:
    """Gemini's tool use as the tool-use body: its responses are ``{llmContent,
    returnDisplay, error}``, and its file tools name an ``absolute_path``."""
    tool_input = payload.get("tool_input")
    tool_input = dict(tool_input) if isinstance(tool_input, dict) else {}
    if isinstance(tool_input.get("absolute_path"), str):
        tool_input.setdefault("file_path", tool_input["absolute_path"])
    response = payload.get("tool_response")
    if isinstance(response, dict):
        text = response.get("llmContent")
        if isinstance(text, list):  # an MCP tool's: content parts
            text = "\n".join(part["text"] for part in text
                             if isinstance(part, dict) and isinstance(part.get("text"), str))
        text = text if isinstance(text, str) else ""
        said = EXIT_CODE.search(text)
        response = {"output": text, **({"exit_code": int(said.group(1))} if said else {}),
                    **({"error": str(response["error"]), "is_error": True}
                       if response.get("error") else {})}
    return common.tool_body(payload.get("tool_name"), tool_input, response)


def read(payload: dict) -> common.Hook:
    name = str(payload.get("hook_event_name") or "")
    role = ROLES.get(name, "ignored")
    prompt = payload.get("prompt")
    prompt = HOOK_CONTEXT.sub("", prompt) if isinstance(prompt, str) else prompt
    text = {"start": payload.get("source"), "prompt": prompt,
            "turn_end": payload.get("prompt_response"), "end": payload.get("reason")}.get(role)
    tools = (tool_use(payload),) if role == "tool" else ()
    return common.Hook(role, name, payload.get("session_id"), payload.get("cwd"), text, tools)


def handle(payload: dict) -> str:
    hook = read(payload)
    # Gemini CLI gives the model no context of a BeforeTool hook: why a read's lines are
    # as they are comes with the read's result (its offset counts lines from 0).
    return common.hook_specific_output(hook.name, common.answer(
        SURFACE, hook, tool_context=True, why_after=0)) or "{}"


def main() -> int:
    return common.run_stdin_hook(handle)


if __name__ == "__main__":
    sys.exit(main())
