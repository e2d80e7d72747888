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
import subprocess
from pathlib import Path

import pytest
from helpers.agents import (
    AGENT_BIN,
    agent_cli,
    first_run,
    imported_like_live,
    stored_prompts,
    taught,
    wait_remembered,
)
from helpers.cli import BIN, kl
from helpers.events import ACTOR, stored_events
from helpers.model_apis import ApiHandler, scripted_api

from kirolearn import project


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


@pytest.fixture
def fake_api():
    with scripted_api(FakeResponses) as server:
        yield server


@pytest.mark.timeout(300)  # the real CLI runs three or four times: minutes under load
def test_codex_remembers_across_runs(daemon, fake_api, tmp_path):
    codex_cli = agent_cli("codex")
    user_home = tmp_path / "home"
    proj = user_home / "proj"
    (proj / ".git").mkdir(parents=True)
    (user_home / ".codex").mkdir()
    # The user's own settings: a model provider (here, the scripted API), and the project
    # trusted, as Codex records when the user accepts its "trust this folder?" question.
    user_config = user_home / ".codex" / "config.toml"
    user_config.write_text(
        '# my settings\nmodel = "test-model"\nmodel_provider = "local"\n\n'
        '[model_providers.local]\nname = "local"\n'
        f'base_url = "http://127.0.0.1:{fake_api.server_port}/v1"\n'
        'wire_api = "responses"\nenv_key = "LOCAL_API_KEY"\n\n'
        f'[projects."{proj}"]\ntrust_level = "trusted"\n')
    original = user_config.read_bytes()
    env = {  # a clean environment: nothing from this machine's user leaks in
        "HOME": str(user_home), "PATH": f"{AGENT_BIN}:{BIN}:/usr/local/bin:/usr/bin:/bin",
        "USER": ACTOR, "LOGNAME": ACTOR, "KIROLEARN_HOME": str(daemon),
        "LOCAL_API_KEY": "test"}
    installed = kl("install", "--agent", "codex", env=env, cwd=str(proj))
    assert installed.returncode == 0, installed.stderr
    assert "hooks.state" in user_config.read_text()  # our hooks, trusted
    doctor = kl("doctor", env=env, cwd=str(proj))
    assert f"ok    codex (project {proj})" in doctor.stdout, doctor.stdout
    namespace = project.resolve_project(proj, home=str(user_home)).namespace(ACTOR)

    def codex(prompt: str, cwd: Path = proj) -> str:
        # A loaded machine may take 20 s to start our MCP server: the turn waits for it
        # (install's 5 s grace is for a machine that is not running a test suite).
        done = subprocess.run([str(codex_cli), "exec", "--skip-git-repo-check", "-s",
                               "danger-full-access",
                               "-c", "mcp_optional_startup_grace_ms=120000", prompt],
                              cwd=cwd, env=env, text=True, capture_output=True, timeout=180,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"codex failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    assert codex("Say hello with a shell command").strip().endswith("done")
    events, kinds = first_run(5, namespace)
    assert kinds == [("note", "codex session started (startup)"),
                     ("prompt", "Say hello with a shell command"),
                     ("tool_use", "Bash"),
                     ("session_summary", "done"),
                     ("note", kinds[-1][1])], kinds
    assert kinds[-1][1].startswith("codex session ended")
    tool = events[2]["body"]["data"]
    assert tool["tool_input"] == {"command": "echo hello"} and "hello" in tool["tool_response"]
    assert "from kirolearn" not in json.dumps(fake_api.bodies)  # nothing known yet

    wait_remembered(namespace)
    seen = len(fake_api.bodies)
    codex("Say hello again with a shell command")
    taught(fake_api.bodies[seen:], "Say hello with a shell command")
    offered = {t.get("name") for body in fake_api.bodies[seen:] for t in body.get("tools") or []}
    assert "mcp__kirolearn" in offered, offered  # our MCP server's tools
    assert len(stored_events()) == 10
    assert stored_prompts() == ["Say hello with a shell command",
                                "Say hello again with a shell command"]

    # The same first run in a project without our hooks, imported from the transcript
    # Codex keeps: the record the hooks made of it. The live sessions are left alone.
    plain = user_home / "plain"
    (plain / ".git").mkdir(parents=True)
    assert codex("Say hello with a shell command", cwd=plain).strip().endswith("done")
    imported_like_live("codex", env, namespace, plain, "Say hello with a shell command")

    removed = kl("uninstall", "--agent", "codex", env=env, cwd=str(proj))
    assert removed.returncode == 0, removed.stderr
    assert user_config.read_bytes() == original  # byte for byte
    assert sorted(p.name for p in proj.iterdir()) == [".git"]
