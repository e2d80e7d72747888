"""Cline shim (``kirolearn-cline``): an executable file per hook in ``.clinerules/hooks/``.

Cline runs the file named after a hook (``PostToolUse``, no extension) with one JSON
object on stdin: ``clineVersion, hookName, timestamp, taskId, workspaceRoots, userId``
and the hook's own object (``userPromptSubmit: {prompt}``, ``postToolUse: {toolName,
parameters, result, success}``...). It reads ``{"cancel": false, "contextModification":
…}`` back, and adds the context to the conversation. The VS Code extension names the
hooks as their files are named; the CLI (3.x) sends ``agent_start``, ``tool_result``,
``agent_end``..., with the tool's input and output as objects (``tool_result``) and the
reply (``turn.outputText``). The session is Cline's ``taskId``; the directory, the first
of ``workspaceRoots``.

| hook (extension; CLI) | event | context back |
| --- | --- | --- |
| ``TaskStart``, ``TaskResume``; ``agent_start``, ``agent_resume`` | ``note`` | the session's |
| ``UserPromptSubmit``; ``prompt_submit`` | ``prompt`` (retrieval) | the prompt's |
| ``PostToolUse``; ``tool_result`` | ``tool_use`` a command, file, edit | a file's memories |
| ``TaskComplete``; ``agent_end`` | ``session_summary`` | — |
| ``TaskCancel``, ``TaskError``, ``SessionShutdown`` (and the CLI's) | ``note`` | — |

The CLI runs its start and prompt hooks in the background and reads nothing back from
them, and sends no prompt hook for the prompt a run starts with: there, what the
memory knows reaches Cline after a tool opens a file, and through the MCP tools.
"""

from __future__ import annotations

import json
import re
import sys
from typing import NamedTuple

from kirolearn.shims import common

SURFACE = "cline"
ROLES = {"TaskStart": "start", "agent_start": "start", "TaskResume": "start",
         "agent_resume": "start", "UserPromptSubmit": "prompt", "prompt_submit": "prompt",
         "PostToolUse": "tool", "tool_result": "tool", "TaskComplete": "turn_end",
         "agent_end": "turn_end", "TaskCancel": "end", "agent_abort": "end",
         "TaskError": "end", "agent_error": "end", "SessionShutdown": "end",
         "session_shutdown": "end"}
WHY_ENDED = {"TaskCancel": "cancelled", "agent_abort": "cancelled", "TaskError": "error",
             "agent_error": "error"}
# replace_in_file's diff: SEARCH/REPLACE blocks
BLOCK = re.compile(r"-{3,} SEARCH\n(.*?)\n?={3,}\n(.*?)\n?\+{3,} REPLACE", re.DOTALL)


def _object(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _parsed(value: object) -> object:
    """A value, also one the extension sent as JSON text (its parameters are strings)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _listed(value: object) -> list:
    value = _parsed(value)
    return value if isinstance(value, list) else []


class _Used(NamedTuple):
    """One ``PostToolUse``'s tool, input and output, read from the CLI's object
    (``tool_result``) or the extension's (``postToolUse``)."""

    name: object
    input: dict
    output: object
    failed: bool
    error: object  # the CLI's
    results: list[dict]  # the CLI's, one per command or file: {query, result, success}

    def response(self, index: int | None = None) -> dict:
        """The tool's response (the ``index``-th command's or file's, where given)."""
        if index is not None and index < len(self.results):
            one = self.results[index]
            return {"output": str(one.get("result") or one.get("error") or ""),
                    "success": one.get("success") is not False}
        output = self.output
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        return {"output": text or str(self.error or ""), "success": not self.failed}


def _commands(used: _Used) -> tuple[dict, ...]:
    return tuple(common.tool_body(used.name, {"command": command}, used.response(i))
                 for i, command in enumerate(_listed(used.input.get("commands")))
                 if isinstance(command, str))


def _files(used: _Used) -> tuple[dict, ...]:
    return tuple(common.tool_body(used.name, {"path": file.get("path")}, used.response(i))
                 for i, file in enumerate(_listed(used.input.get("files")))
                 if isinstance(file, dict))


def _editor(used: _Used) -> tuple[dict, ...]:
    return (common.tool_body(used.name, {"path": used.input.get("path"),
                                         "old_string": used.input.get("old_text") or "",
                                         "new_string": used.input.get("new_text") or ""},
                             used.response()),)


def _replace_in_file(used: _Used) -> tuple[dict, ...]:
    blocks = BLOCK.findall(str(used.input.get("diff") or ""))
    return (common.tool_body(used.name, {
        "path": used.input.get("path"), "old_string": "\n".join(b[0] for b in blocks),
        "new_string": "\n".join(b[1] for b in blocks)}, used.response()),)


def _mcp_tool(used: _Used) -> tuple[dict, ...]:
    return (common.tool_body(f"mcp__{used.input.get('server_name')}__"
                             f"{used.input.get('tool_name')}",
                             _parsed(used.input.get("arguments")), used.response()),)


# A tool's name → its uses in the one shape; any other tool is one use, as it came.
SHAPES = {"run_commands": _commands, "read_files": _files, "editor": _editor,
          "replace_in_file": _replace_in_file, "use_mcp_tool": _mcp_tool}


def tools(payload: dict) -> tuple[dict, ...]:
    """The tool uses of one ``PostToolUse``, each in the one shape: a run of several
    commands, a read of several files, are one use each."""
    done = _object(payload.get("tool_result"))  # the CLI's, with objects
    post = _object(payload.get("postToolUse"))
    output = done["output"] if "output" in done else post.get("result")
    used = _Used(done.get("name") or post.get("toolName"),
                 _object(done.get("input")) or _object(post.get("parameters")), output,
                 bool(done.get("error")) or post.get("success") is False, done.get("error"),
                 [r for r in output if isinstance(r, dict)] if isinstance(output, list) else [])
    shape = SHAPES.get(used.name) if isinstance(used.name, str) else None
    return shape(used) if shape else (common.tool_body(used.name, used.input, used.response()),)


def read(payload: dict) -> common.Hook:
    name = str(payload.get("hookName") or "")
    role = ROLES.get(name, "ignored")
    roots = payload.get("workspaceRoots")
    cwd = roots[0] if isinstance(roots, list) and roots and isinstance(roots[0], str) else None
    text: object = None
    if role == "start":
        text = "resume" if "esume" in name else "startup"
    elif role == "prompt":
        text = _object(payload.get("userPromptSubmit")).get("prompt")
    elif role == "turn_end":
        text = (_object(payload.get("turn")).get("outputText")
                or _object(_object(payload.get("taskComplete")).get("taskMetadata")).get(
                    "result"))
    elif role == "end":
        text = WHY_ENDED.get(name) or payload.get("reason")
    return common.Hook(role, name, payload.get("taskId"), cwd, text,
                       tools(payload) if role == "tool" else ())


def main() -> int:
    """Cline reads the control object back from every hook: it gets one, whatever
    happens here."""
    control: dict = {"cancel": False}

    def handle() -> None:
        context = common.answer(SURFACE, read(common.parse_json_object(common.read_stdin())),
                                tool_context=True)
        if context:
            control["contextModification"] = context

    common.run(handle)
    common.emit(json.dumps(control))
    return 0


if __name__ == "__main__":
    sys.exit(main())
