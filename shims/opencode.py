"""OpenCode shim (``kirolearn-opencode``), run by kirolearn's OpenCode plugin.

OpenCode has plugins rather than shell hooks. The plugin install writes
(``opencode_plugin.js``) hands each hook to this shim as JSON on stdin —
``{hook, session_id, cwd, text, tool}`` — and puts what it prints into the message
as a text part the model reads. Tool arguments ``filePath``, ``oldString`` and
``newString`` are read as ``file_path``, ``old_string`` and ``new_string``, a bash
``exit`` in the metadata as its exit status.

| plugin hook | ``hook`` | event | stdout |
| --- | --- | --- | --- |
| ``chat.message``, a session's first | ``start`` | ``note`` | the session's context |
| ``chat.message`` | ``prompt`` | ``prompt`` (retrieval) | the prompt's context |
| ``tool.execute.after`` | ``tool`` | ``tool_use`` | — |
| ``session.idle`` event | ``turn_end`` | ``session_summary``: the last reply's text | — |
| ``session.deleted`` event | ``end`` | ``note`` | — |
"""

from __future__ import annotations

import sys

from kirolearn.shims import common

SURFACE = "opencode"
ROLES = ("start", "prompt", "tool", "turn_end", "end")
RENAMED = {"filePath": "file_path", "oldString": "old_string", "newString": "new_string"}


def tool_use(tool: object) -> dict:
    tool = tool if isinstance(tool, dict) else {}
    args = tool.get("args")
    args = {RENAMED.get(k, k): v for k, v in args.items()} if isinstance(args, dict) else {}
    metadata = tool.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    response: dict = {"output": tool.get("output")}
    if isinstance(metadata.get("exit"), int):
        response["exit_code"] = metadata["exit"]
    return common.tool_body(tool.get("name"), args, response)


def read(payload: dict) -> common.Hook:
    role = payload.get("hook") if payload.get("hook") in ROLES else "ignored"
    tools = (tool_use(payload.get("tool")),) if role == "tool" else ()
    return common.Hook(str(role), str(payload.get("hook")), payload.get("session_id"),
                       payload.get("cwd"), payload.get("text"), tools)


def handle(payload: dict) -> str:
    return common.answer(SURFACE, read(payload))


def main() -> int:
    return common.run_stdin_hook(handle)


if __name__ == "__main__":
    sys.exit(main())
