"""A real agent, end to end: OpenCode with kirolearn's plugin, run offline.

The CLI (``tests/e2e/package.json``: OpenCode's Linux x64 build, pinned; installed by
the test command) talks to a scripted Anthropic API on 127.0.0.1 (its ``anthropic``
provider's ``baseURL`` in the user's configuration). ``kirolearn install --agent
opencode`` writes the project's plugin and MCP server; OpenCode loads the plugin,
which runs our installed shim. The first run's hooks must all be stored; on the
second, what the first one taught is in the request the fake API receives, the model's
call of our ``search_memory`` finds it, and its call of ``forget`` is put to the user
rather than run (``opencode run``, with no one to ask, turns it down).
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

OPENCODE_VERSION = "1.18.33"  # tests/e2e/package.json
ASK = "What did we do about saying hello?"

pytestmark = LINUX_X64


def user_words(body: dict) -> str:
    """The user's own text in a request: its first part (the context our plugin adds
    comes after it)."""
    first = body["messages"][0]["content"][0]
    return first.get("text", "") if isinstance(first, dict) else ""


class OpenCodeApi(FakeAnthropic):
    """A shell call, then "done"; asked ASK, our search_memory, then our forget; requests
    without tools (OpenCode's own, such as the session's title) get "done"."""

    def tool_call(self, body: dict, results: list[str]) -> tuple[str, dict] | None:
        if not any(t.get("name") == "bash" for t in body.get("tools") or []):
            return None
        if ASK in user_words(body):
            calls = [("kirolearn_search_memory", {"query": "hello"}),
                     ("kirolearn_forget", {"record_id": "mr_00000000000000000000000000"})]
            return calls[len(results)] if len(results) < len(calls) else None
        return None if results else ("bash", {"command": "echo hello",
                                              "description": "Say hello"})


@pytest.fixture
def fake_api():
    with scripted_api(OpenCodeApi) as server:
        yield server


def plugin_kit_installed(folder: Path) -> None:
    """folder as OpenCode leaves it after fetching its plugin kit from npm, which it does
    in each configuration folder once a plugin is configured, and waits for."""
    needs = {"dependencies": {"@opencode-ai/plugin": OPENCODE_VERSION}}
    (folder / "node_modules").mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps(needs))
    (folder / "package-lock.json").write_text(json.dumps({"packages": {"": needs}}))


def tool_results(bodies: list[dict]) -> list[str]:
    return [json.dumps(block.get("content")) for body in bodies for message in body["messages"]
            if isinstance(message["content"], list) for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"]


@pytest.mark.timeout(300)  # the real CLI runs three or four times: minutes under load
def test_opencode_remembers_across_runs(daemon, fake_api, tmp_path):
    opencode_cli = agent_cli("opencode-linux-x64/bin/opencode")
    user_home = tmp_path / "home"
    proj = user_home / "proj"
    (proj / ".git").mkdir(parents=True)
    # The user's own configuration: a model, its provider pointed at the scripted API.
    user_config = user_home / ".config" / "opencode" / "opencode.json"
    user_config.parent.mkdir(parents=True)
    user_config.write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json", "model": "anthropic/claude-sonnet-4-5",
        "provider": {"anthropic": {"options": {
            "baseURL": f"http://127.0.0.1:{fake_api.server_port}/v1"}}}}, indent=2))
    original = user_config.read_bytes()
    env = {  # a clean environment: nothing from this machine's user leaks in
        "HOME": str(user_home), "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "USER": ACTOR, "LOGNAME": ACTOR, "KIROLEARN_HOME": str(daemon),
        "ANTHROPIC_API_KEY": "test", "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "npm_config_registry": "http://127.0.0.1:9/"}  # and no npm registry to reach
    for folder in (user_config.parent, proj / ".opencode"):
        plugin_kit_installed(folder)
    installed = kl("install", "--agent", "opencode", env=env, cwd=str(proj))
    assert installed.returncode == 0, installed.stderr
    doctor = kl("doctor", env=env, cwd=str(proj))
    assert f"ok    opencode (project {proj})" in doctor.stdout, doctor.stdout
    namespace = project.resolve_project(proj, home=str(user_home)).namespace(ACTOR)

    def opencode(prompt: str, check: bool = True, cwd: Path = proj) -> str:
        # One argument a word: `opencode run` quotes an argument that holds spaces.
        done = subprocess.run([str(opencode_cli), "run", *prompt.split()], cwd=cwd, env=env,
                              text=True, capture_output=True, timeout=180,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0 or not check, \
            f"opencode failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    assert opencode("Say hello with a shell command").startswith("done")  # stdout, then stderr
    events, kinds = first_run(4, namespace)
    assert kinds == [("note", "opencode session started"),
                     ("prompt", "Say hello with a shell command"),
                     ("tool_use", "bash"),
                     ("session_summary", "done")], kinds
    tool = events[2]["body"]["data"]
    assert tool["tool_input"]["command"] == "echo hello"
    assert tool["tool_response"] == {"output": "hello\n", "exit_code": 0}
    assert "from kirolearn" not in json.dumps(fake_api.bodies)  # nothing known yet

    wait_remembered(namespace)
    seen = len(fake_api.bodies)
    said = opencode(ASK, check=False)  # asking, with no one to answer, ends the run
    assert "permission requested: kirolearn_forget" in said, said
    taught(fake_api.bodies[seen:], "Say hello with a shell command")
    found = tool_results(fake_api.bodies[seen:])
    assert found and "Say hello with a shell command" in found[0], found
    assert stored_prompts() == ["Say hello with a shell command", ASK]

    # The same first run in a project without our plugin, imported from the database
    # OpenCode keeps: the record the hooks made of it.
    plain = user_home / "plain"
    (plain / ".git").mkdir(parents=True)
    assert opencode("Say hello with a shell command", cwd=plain).startswith("done")
    imported_like_live("opencode", env, namespace, plain, "Say hello with a shell command")

    removed = kl("uninstall", "--agent", "opencode", env=env, cwd=str(proj))
    assert removed.returncode == 0, removed.stderr
    assert user_config.read_bytes() == original  # never ours
    # Ours are gone; OpenCode's own plugin kit stays in .opencode.
    assert not (proj / "opencode.json").exists()
    assert not (proj / ".opencode" / "plugins").exists()
