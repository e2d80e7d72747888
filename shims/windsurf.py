"""Windsurf shim (``kirolearn-windsurf``): Cascade hooks in ``.windsurf/hooks.json``.

Every payload is ``{agent_action_name, trajectory_id, execution_id, timestamp,
tool_info}`` on stdin: the hook's name, the conversation (our session), and what the
action was. Cascade's hooks take no context back (a pre-hook may only block), so
Windsurf's memories reach the agent through kirolearn's MCP tools: a prompt is stored
without a search, and nothing is printed.

| hook | event |
| --- | --- |
| ``pre_user_prompt`` | ``prompt`` (``tool_info.user_prompt``) |
| ``post_write_code`` | ``tool_use``: an ``Edit`` per edit of ``tool_info.edits`` |
| ``post_read_code`` | ``tool_use``: a ``Read`` of ``tool_info.file_path`` |
| ``post_run_command`` | ``tool_use``: ``Bash`` (``command_line``, ``exit_code``, ``output``) |
| ``post_mcp_tool_use`` | ``tool_use``: ``mcp__<server>__<tool>`` with its arguments and result |
| ``post_cascade_response`` | ``session_summary`` from ``tool_info.response`` |

A command's ``tool_info.cwd`` is the directory; for the others, the directory Cascade
runs its hooks in (the workspace's).
"""

from __future__ import annotations

import sys

from kirolearn.shims import common

SURFACE = "windsurf"
ROLES = {"pre_user_prompt": "prompt", "post_write_code": "tool", "post_read_code": "tool",
         "post_run_command": "tool", "post_mcp_tool_use": "tool",
         "post_cascade_response": "turn_end"}


def tools(name: str, info: dict) -> tuple[dict, ...]:
    """The tool uses of one Cascade action, in the one shape (``common.tool_body``)."""
    path = info.get("file_path")
    if name == "post_write_code":
        edits = [e for e in info.get("edits") or [] if isinstance(e, dict)] or [{}]
        return tuple(common.tool_body("Edit", {
            "file_path": path, "old_string": edit.get("old_string", ""),
            "new_string": edit.get("new_string", "")}, {"success": True}) for edit in edits)
    if name == "post_read_code":
        return (common.tool_body("Read", {"file_path": path},
                                 {"content": info.get("content", "")}),)
    if name == "post_run_command":
        response = {"output": info.get("output", "")}
        if isinstance(info.get("exit_code"), int):
            response["exit_code"] = info["exit_code"]
        return (common.tool_body("Bash", {"command": info.get("command_line")}, response),)
    server, tool = info.get("mcp_server_name"), info.get("mcp_tool_name")
    return (common.tool_body(f"mcp__{server}__{tool}", info.get("mcp_tool_arguments"),
                             {"output": info.get("mcp_result", "")}),)


def read(payload: dict) -> common.Hook:
    name = str(payload.get("agent_action_name") or "")
    role = ROLES.get(name, "ignored")
    info = payload.get("tool_info")
    info = info if isinstance(info, dict) else {}
    cwd = info.get("cwd") if isinstance(info.get("cwd"), str) else None
    text = {"prompt": info.get("user_prompt"), "turn_end": info.get("response")}.get(role)
    return common.Hook(role, name, payload.get("trajectory_id"), cwd, text,
                       tools(name, info) if role == "tool" else ())


def main() -> int:
    return common.run_stdin_hook(
        lambda payload: common.answer(SURFACE, read(payload), prompt_context=False))


if __name__ == "__main__":
    sys.exit(main())
