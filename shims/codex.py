"""Codex CLI shim (``kirolearn-codex``): ``.codex/hooks.json`` command hooks, stdin JSON.

Codex copies Claude Code's hooks (the same fields, the same ``hookSpecificOutput``
for context), so the payload is read by ``claude_code.read``:

| hook | event | stdout |
| --- | --- | --- |
| ``SessionStart`` | ``note`` | the project's session context |
| ``UserPromptSubmit`` | ``prompt`` (retrieval) | the prompt's context |
| ``PostToolUse`` | ``tool_use`` (``Bash`` with its ``command``) | a file's memories |
| ``Stop`` | ``session_summary`` from ``last_assistant_message`` | — |
| ``SessionEnd`` | ``note`` with the reason | — |

Codex reports an edit as ``apply_patch`` whose ``command`` is the patch; it becomes
one tool use per file (``*** Update File: path``), with the lines it added and
removed as ``new_string`` / ``old_string``, so an edit is recorded as an edit.
"""

from __future__ import annotations

import re
import sys

from kirolearn.shims import claude_code, common

SURFACE = "codex"
ROLES = {"SessionStart": "start", "UserPromptSubmit": "prompt", "PostToolUse": "tool",
         "Stop": "turn_end", "SessionEnd": "end"}
PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$")


def patch_edits(patch: str) -> list[dict]:
    """Each file a patch in Codex's format touches: ``{file_path, new_string,
    old_string}`` from its + and - lines."""
    edits: list[dict] = []
    for line in patch.splitlines():
        started = PATCH_FILE.match(line)
        if started:
            edits.append({"file_path": started.group(2).strip(), "new": [], "old": []})
        elif edits and line[:1] in "+-" and not line.startswith(("+++", "---")):
            edits[-1]["new" if line[0] == "+" else "old"].append(line[1:])
    return [{"file_path": e["file_path"], "new_string": "\n".join(e["new"]),
             "old_string": "\n".join(e["old"])} for e in edits]


def read(payload: dict) -> common.Hook:
    hook = claude_code.read(payload, ROLES)
    tool_input = payload.get("tool_input")
    patch = tool_input.get("command") if isinstance(tool_input, dict) else None
    if payload.get("tool_name") == "apply_patch" and isinstance(patch, str):
        response = payload.get("tool_response")
        tools = tuple(common.tool_body("Edit", edit, response) for edit in patch_edits(patch))
        return hook._replace(tools=tools) if tools else hook
    return hook


def main() -> int:
    return claude_code.main_for(SURFACE, read)


if __name__ == "__main__":
    sys.exit(main())
