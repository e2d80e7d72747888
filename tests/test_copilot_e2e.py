"""A real agent, end to end: GitHub Copilot CLI with kirolearn's hooks, run offline.

The CLI (``tests/e2e/package.json``: its Linux x64 build, pinned; installed by the
test command) talks to a scripted Anthropic API on 127.0.0.1 as a custom provider
(``COPILOT_PROVIDER_BASE_URL``: no GitHub account is needed then). ``kirolearn
install --agent copilot`` writes the repository's hook file and the user's MCP
server; Copilot's own hook system runs our installed shim. The first run's hooks
must all be stored; on the second, what the first one taught is in the request the
fake API receives, and the model's call of our ``search_memory`` (a read-only tool,
which Copilot approves by itself) finds it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.agents import (
    LINUX_X64,
    agent_cli,
    first_run,
    imported_like_live,
    stored_prompts,
    taught,
    wait_remembered,
)
from helpers.cli import BIN, kl
from helpers.events import ACTOR
from helpers.model_apis import FakeAnthropic, scripted_api

from kirolearn import project

pytestmark = LINUX_X64
ASK = "What did we do about saying hello?"


class CopilotApi(FakeAnthropic):
    """A shell call, then "done"; asked ASK, our search_memory, then "done"; requests
    without tools (Copilot's own) get "done"."""

    def tool_call(self, body: dict, results: list[str]) -> tuple[str, dict] | None:
        if results or not any(t.get("name") == "bash" for t in body.get("tools") or []):
            return None
        if ASK in json.dumps(body.get("messages")):
            return "kirolearn-search_memory", {"query": "hello"}
        return "bash", {"command": "echo hello", "description": "Say hello"}


@pytest.fixture
def fake_api():
    with scripted_api(CopilotApi) as server:
        yield server


@pytest.fixture
def daemon_batching_soon(home):
    """The daemon, batching a turn 8 s after its last event: Copilot's hooks carry no
    reply to end a turn with, so its turns are batched once idle (30 s by default). A
    shorter wait cuts a turn in two on a loaded machine, where a hook may come seconds
    after the one before it, and its record then tells of half the turn."""
    (home / "config.toml").write_text("[storage]\nbatch_idle_s = 8\n")
    kl("start", check=True)
    yield home
    kl("stop", check=True)


@pytest.mark.timeout(300)  # the real CLI runs three or four times: minutes under load
def test_copilot_remembers_across_runs(daemon_batching_soon, fake_api, tmp_path):
    daemon = daemon_batching_soon
    copilot_cli = agent_cli("@github/copilot-linux-x64/copilot")
    user_home = tmp_path / "home"
    proj = user_home / "proj"
    proj.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(proj)], check=True)  # hooks live in a repository
    # The project trusted, as Copilot records when the user answers its trust question.
    (user_home / ".copilot").mkdir()
    (user_home / ".copilot" / "config.json").write_text(
        json.dumps({"trusted_folders": [str(proj)]}))
    env = {  # a clean environment: nothing from this machine's user leaks in
        "HOME": str(user_home), "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "USER": ACTOR, "LOGNAME": ACTOR, "KIROLEARN_HOME": str(daemon), "NO_COLOR": "1",
        "COPILOT_PROVIDER_BASE_URL": f"http://127.0.0.1:{fake_api.server_port}",
        "COPILOT_PROVIDER_TYPE": "anthropic", "COPILOT_PROVIDER_API_KEY": "test",
        "COPILOT_MODEL": "claude-sonnet-4.5", "COPILOT_AUTO_UPDATE": "false"}
    installed = kl("install", "--agent", "copilot", env=env, cwd=str(proj))
    assert installed.returncode == 0, installed.stderr
    doctor = kl("doctor", env=env, cwd=str(proj))
    assert f"ok    copilot (project {proj})" in doctor.stdout, doctor.stdout
    assert "note  copilot" not in doctor.stdout  # the folder is trusted
    namespace = project.resolve_project(proj, home=str(user_home)).namespace(ACTOR)

    def copilot(prompt: str, *options: str, cwd: Path = proj) -> str:
        done = subprocess.run([str(copilot_cli), "-p", prompt, *options], cwd=cwd, env=env,
                              text=True, capture_output=True, timeout=180,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"copilot failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    assert "done" in copilot("Say hello with a shell command", "--allow-all-tools")
    events, kinds = first_run(4, namespace)
    assert kinds == [("note", "copilot session started (new)"),
                     ("prompt", "Say hello with a shell command"),
                     ("tool_use", "bash"),
                     ("note", "copilot session ended (complete)")], kinds
    tool = events[2]["body"]["data"]
    assert tool["tool_input"]["command"] == "echo hello"
    assert tool["tool_response"]["exit_code"] == 0 and "hello" in tool["tool_response"]["output"]
    assert "from kirolearn" not in json.dumps(fake_api.bodies)  # nothing known yet

    wait_remembered(namespace)
    seen = len(fake_api.bodies)
    copilot(ASK)  # no --allow-all-tools: only what Copilot approves by itself runs
    taught(fake_api.bodies[seen:], "Say hello with a shell command")
    results = [json.dumps(block.get("content")) for body in fake_api.bodies[seen:]
               for message in body["messages"] if isinstance(message["content"], list)
               for block in message["content"]
               if isinstance(block, dict) and block.get("type") == "tool_result"]
    assert results and "Say hello with a shell command" in results[0], results
    assert stored_prompts() == ["Say hello with a shell command", ASK]

    # The same first run in a repository without our hooks (trusted too), imported from
    # the transcript Copilot keeps: the record the hooks made of it.
    plain = user_home / "plain"
    plain.mkdir()
    subprocess.run(["git", "init", "-q", str(plain)], check=True)
    (user_home / ".copilot" / "config.json").write_text(
        json.dumps({"trusted_folders": [str(proj), str(plain)]}))
    assert "done" in copilot("Say hello with a shell command", "--allow-all-tools", cwd=plain)
    imported_like_live("copilot", env, namespace, plain, "Say hello with a shell command")

    mcp_config = user_home / ".copilot" / "mcp-config.json"
    removed = kl("uninstall", "--agent", "copilot", env=env, cwd=str(proj))
    assert removed.returncode == 0, removed.stderr
    assert not mcp_config.exists()
    assert sorted(p.name for p in proj.iterdir()) == [".git"]
