"""A real agent, end to end: the Codex CLI with kirolearn's hooks, run offline.

The CLI (``tests/e2e/package.json``, pinned; installed by the test command) talks to
a scripted Responses API served here on 127.0.0.1 (a custom model provider in the
user's ``config.toml``). ``kirolearn install --agent codex`` writes the project's
hooks and MCP server and records Codex's trust of our hooks, asking the same Codex
for their hashes; Codex's own hook system then runs our installed shim. The first
run's hooks must all be stored; on the second run, what the first one taught is in
the request body the fake API receives, and our MCP tools are offered.
"""

from __future__ import annotations

import json

import pytest
from helpers.agents import (
    AGENT_BIN,
    FIRST,
    SYSTEM_PATH,
    E2EAgent,
    Sandbox,
    in_sandbox,
    stored_prompts,
)
from helpers.cli import BIN
from helpers.events import stored_events
from helpers.model_apis import ApiHandler


class FakeResponses(ApiHandler):
    """Answers like the Responses API, streamed: a shell call first, then "done"."""

    def do_GET(self) -> None:
        self._send("application/json", json.dumps({"data": [], "models": []}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        answered = any(isinstance(item, dict) and item.get("type") == "function_call_output"
                       for item in body.get("input") or [])
        if answered:
            item = {"type": "message", "id": "msg_1", "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "done", "annotations": []}]}
        else:
            item = {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                    "name": "exec_command", "arguments": json.dumps({"cmd": "echo hello"}),
                    "status": "completed"}
        response = {"id": "resp_1", "object": "response", "created_at": 0,
                    "status": "completed", "model": body.get("model", "m"), "output": [item],
                    "usage": {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11,
                              "input_tokens_details": {"cached_tokens": 0},
                              "output_tokens_details": {"reasoning_tokens": 0}}}
        events = [
            {"type": "response.created",
             "response": {**response, "status": "in_progress", "output": []}},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": response},
        ]
        self._send("text/event-stream", "".join(
            f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode())


def codex_config(sandbox: Sandbox) -> dict[str, str]:
    """The user's own settings: a model provider (here, the scripted API), and the
    project trusted, as Codex records when the user accepts its "trust this folder?"
    question."""
    (sandbox.home / ".codex").mkdir()
    (sandbox.home / ".codex" / "config.toml").write_text(
        '# my settings\nmodel = "test-model"\nmodel_provider = "local"\n\n'
        '[model_providers.local]\nname = "local"\n'
        f'base_url = "{sandbox.api_url}/v1"\n'
        'wire_api = "responses"\nenv_key = "LOCAL_API_KEY"\n\n'
        f'[projects."{sandbox.proj}"]\ntrust_level = "trusted"\n')
    return {"LOCAL_API_KEY": "test"}


CODEX = E2EAgent(
    "codex", "codex", FakeResponses, settings=codex_config,
    # A loaded machine may take 20 s to start our MCP server: the turn waits for it
    # (install's 5 s grace is for a machine that is not running a test suite).
    argv=lambda prompt: ["exec", "--skip-git-repo-check", "-s", "danger-full-access",
                         "-c", "mcp_optional_startup_grace_ms=120000", prompt],
    path=f"{AGENT_BIN}:{BIN}:{SYSTEM_PATH}")  # install asks Codex for our hooks' hashes


@pytest.mark.timeout(300)  # the real CLI runs three or four times: minutes under load
@in_sandbox(CODEX)
def test_codex_remembers_across_runs(sandbox):
    user_config = sandbox.home / ".codex" / "config.toml"
    original = user_config.read_bytes()
    sandbox.install()
    assert "hooks.state" in user_config.read_text()  # our hooks, trusted

    said, events, kinds = sandbox.first_run(5)
    assert said.strip().endswith("done")
    assert kinds == [("note", "codex session started (startup)"),
                     ("prompt", FIRST),
                     ("tool_use", "Bash"),
                     ("session_summary", "done"),
                     ("note", kinds[-1][1])], kinds
    assert kinds[-1][1].startswith("codex session ended")
    tool = events[2]["body"]["data"]
    assert tool["tool_input"] == {"command": "echo hello"} and "hello" in tool["tool_response"]

    _, requests = sandbox.taught_run("Say hello again with a shell command")
    offered = {t.get("name") for body in requests for t in body.get("tools") or []}
    assert "mcp__kirolearn" in offered, offered  # our MCP server's tools
    assert len(stored_events()) == 10
    assert stored_prompts() == [FIRST, "Say hello again with a shell command"]

    # The same first run in a project without our hooks, imported from the transcript
    # Codex keeps: the record the hooks made of it. The live sessions are left alone.
    assert sandbox.imported_like_live().strip().endswith("done")

    sandbox.uninstall()
    assert user_config.read_bytes() == original  # byte for byte
    assert sorted(p.name for p in sandbox.proj.iterdir()) == [".git"]
