"""Qwen Code shim (``kirolearn-qwen-code``): ``.qwen/settings.json`` command hooks.

Qwen Code's hooks follow Claude Code's (stdin JSON with ``session_id`` and ``cwd``,
``hookSpecificOutput.additionalContext`` for context), so the payload is read by
``claude_code.read``; its tools are Gemini CLI's (it is a fork of it), whose responses
are ``{llmContent, returnDisplay}``, read by ``gemini.tool_use``. When a tool's result
goes back to the model, Qwen Code runs ``UserPromptSubmit`` again with an empty
prompt: that is no prompt, and is ignored.

| hook | event | stdout |
| --- | --- | --- |
| ``SessionStart`` | ``note`` | the project's session context |
| ``UserPromptSubmit`` | ``prompt`` (retrieval) | the prompt's context |
| ``PostToolUse`` | ``tool_use`` ``{tool_name, tool_input, tool_response}`` | (below) |
| ``PostToolUseFailure`` | ``tool_use`` whose response is ``{is_error, error, …}`` | — |
| ``Stop`` | ``session_summary`` from ``last_assistant_message`` | — |
| ``SessionEnd`` | ``note`` with the reason | — |

After a tool: a file's memories, and why the lines a ``read_file`` of a range read are
as they are.
"""

from __future__ import annotations

import sys

from kirolearn.shims import claude_code, common, gemini

SURFACE = "qwen-code"
ROLES = {"SessionStart": "start", "UserPromptSubmit": "prompt", "PostToolUse": "tool",
         "PostToolUseFailure": "tool", "Stop": "turn_end", "SessionEnd": "end"}


def read(payload: dict) -> common.Hook:
    hook = claude_code.read(payload, ROLES)
    if hook.role == "prompt" and not (isinstance(hook.text, str) and hook.text.strip()):
        return hook._replace(role="ignored")  # a tool's result on its way to the model
    if hook.name == "PostToolUse":
        return hook._replace(tools=(gemini.tool_use(payload),))
    return hook


def main() -> int:
    # Qwen Code gives the model no context of a PreToolUse hook: why a read's lines are
    # as they are comes with the read's result (its offset counts lines from 0).
    return claude_code.main_for(SURFACE, read, why_after=0)


if __name__ == "__main__":
    sys.exit(main())
