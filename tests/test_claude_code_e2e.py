"""A real agent, end to end: the Claude Code CLI with kirolearn's hooks, run offline.

The CLI (``tests/e2e/package.json``, pinned; installed by the test command) talks
to a scripted Anthropic Messages API served here on 127.0.0.1, and its own hook
system runs our installed shim, and Claude Code starts our MCP server from the
project's ``.mcp.json``. The first run's hooks must all be stored; on the second
run, what the first one taught must reach the model: it is in the request body the
fake API receives. A third run has the model call our ``save_observation`` tool,
allowed by what ``kirolearn install`` wrote, and the record is stored.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.agents import agent_cli, first_run, imported_like_live, taught, wait_remembered
from helpers.cli import kl
from helpers.events import ACTOR, stored_events
from helpers.model_apis import FakeAnthropic, scripted_api

from kirolearn import project

SAVE_TOOL = "mcp__kirolearn__save_observation"
REMEMBERED = {"title": "Releases are cut on Fridays", "observation_type": "decision",
              "summary": "The team cuts a release every Friday after the tests pass.",
              "concepts": ["release"], "files_touched": [], "facts": []}


def first_prompt(body: dict) -> str:
    content = body["messages"][0]["content"]
    blocks = [content] if isinstance(content, str) else [
        b.get("text", "") for b in content if isinstance(b, dict)]
    return " ".join(blocks)


WAIT_TOOL = "WaitForMcpServers"  # Claude Code's own, while an MCP server is starting


class ClaudeCodeApi(FakeAnthropic):
    """A shell call first (Bash; or, asked to remember something, our save_observation),
    then "done"; requests without tools (Claude Code's own, such as titles) get "done".
    Told that our tool is not there yet (on a loaded machine the CLI may ask the model
    before our server is up), it does what the error says, as a model does: waits for
    the server with WaitForMcpServers, then calls the tool again."""

    def tool_call(self, body: dict, results: list[str]) -> tuple[str, dict] | None:
        tools = {t.get("name") for t in body.get("tools") or []}
        if "Bash" not in tools:
            return None
        if "Remember" not in first_prompt(body):
            return None if results else ("Bash", {"command": "echo hello",
                                                  "description": "Say hello"})
        if not results:
            return SAVE_TOOL, REMEMBERED
        if len(results) >= 8:  # it never came up: give up, and the test says so
            return None
        if "No such tool available" in results[-1] and WAIT_TOOL in tools:
            return WAIT_TOOL, {"servers": ["kirolearn"]}
        if "No such tool available" not in results[-1] and "Saved mr_" not in results[-1]:
            return SAVE_TOOL, REMEMBERED  # after the wait
        return None


@pytest.fixture
def fake_api():
    with scripted_api(ClaudeCodeApi) as server:
        yield server


@pytest.mark.timeout(300)  # the real CLI runs three or four times: minutes under load
def test_claude_code_remembers_across_runs(daemon, fake_api, tmp_path):
    claude_cli = agent_cli("claude")
    user_home = tmp_path / "home"
    proj = user_home / "proj"
    (proj / ".git").mkdir(parents=True)
    env = {  # a clean environment: nothing from this machine's user leaks in
        "HOME": str(user_home), "PATH": "/usr/local/bin:/usr/bin:/bin", "USER": ACTOR,
        "LOGNAME": ACTOR, "KIROLEARN_HOME": str(daemon),
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{fake_api.server_port}",
        "ANTHROPIC_API_KEY": "sk-ant-test", "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        # In -p mode Claude Code connects MCP servers in the background: on a loaded
        # machine the first model turn can come before our server is up, and its tools
        # are then missing. Blocking makes it wait for them, for MCP_CONNECT_TIMEOUT_MS
        # (5 s by default; our server's imports alone take 20 s on a machine as loaded
        # as the suite's test), each server given MCP_TIMEOUT to start.
        "MCP_CONNECTION_NONBLOCKING": "0", "MCP_CONNECT_TIMEOUT_MS": "120000",
        "MCP_TIMEOUT": "120000",
    }
    installed = kl("install", "--agent", "claude-code", "--project", str(proj), env=env,
                   cwd=str(proj))
    assert installed.returncode == 0, installed.stderr
    namespace = project.resolve_project(proj, home=str(user_home)).namespace(ACTOR)

    def claude(prompt: str, cwd: Path = proj) -> dict:
        done = subprocess.run([str(claude_cli), "-p", prompt, "--output-format", "json",
                               "--allowedTools", "Bash"], cwd=cwd, env=env, text=True,
                              capture_output=True, timeout=180)
        assert done.returncode == 0, f"claude failed:\n{done.stdout}\n{done.stderr}"
        return json.loads(done.stdout)

    first = claude("Say hello with a shell command")
    assert first["result"] == "done"
    events, kinds = first_run(5, namespace)
    assert kinds == [("note", "claude-code session started (startup)"),
                     ("prompt", "Say hello with a shell command"),
                     ("tool_use", "Bash"),
                     ("session_summary", "done"),
                     ("note", kinds[-1][1])], kinds
    assert kinds[-1][1].startswith("claude-code session ended")
    tool = events[2]["body"]["data"]
    assert tool["tool_input"]["command"] == "echo hello"
    assert "hello" in json.dumps(tool["tool_response"])
    assert "from kirolearn" not in json.dumps(fake_api.bodies)  # nothing known yet
    offered = {t["name"] for b in fake_api.bodies for t in b.get("tools") or []}
    assert {f"mcp__kirolearn__{tool}" for tool in (
        "search_memory", "recall", "timeline", "get_records", "save_observation",
        "save_session_summary", "forget")} <= offered, offered

    wait_remembered(namespace)
    seen = len(fake_api.bodies)
    claude("Say hello again with a shell command")
    taught(fake_api.bodies[seen:], "Say hello with a shell command")
    assert len(stored_events()) == 10

    # Claude Code applies a project's permission rules once the user has trusted the
    # workspace (its trust dialog); this is what accepting it records.
    (user_home / ".claude.json").write_text(json.dumps(
        {"projects": {str(proj): {"hasTrustDialogAccepted": True}}}))
    seen = len(fake_api.bodies)
    assert claude("Remember: we release on Fridays")["result"] == "done"
    results = [block for body in fake_api.bodies[seen:] for message in body["messages"]
               if isinstance(message["content"], list) for block in message["content"]
               if isinstance(block, dict) and block.get("type") == "tool_result"]
    assert results and "Saved mr_" in json.dumps(results[-1]), results
    found = kl("search", "release Fridays", "--project", str(proj), "--json", env=env,
               cwd=str(proj))
    assert found.returncode == 0, found.stderr
    [saved] = [r for r in json.loads(found.stdout)["records"] if r["strategy"] == "mcp_observation"]
    assert saved["title"] == REMEMBERED["title"] and saved["namespace"] == namespace

    # The same first run in a project without our hooks, imported from the transcript
    # Claude Code keeps: the record the hooks made of it. The live sessions are left alone.
    plain = user_home / "plain"
    (plain / ".git").mkdir(parents=True)
    assert claude("Say hello with a shell command", cwd=plain)["result"] == "done"
    imported_like_live("claude-code", env, namespace, plain, "Say hello with a shell command")
