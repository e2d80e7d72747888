"""A real agent, end to end: Qwen Code with kirolearn's hooks, run offline.

The CLI (``tests/e2e/package.json``, pinned; installed by the test command) talks to a
scripted OpenAI-compatible Chat Completions API served here on 127.0.0.1
(``OPENAI_BASE_URL``). ``kirolearn install --agent qwen-code`` writes the project's
hooks, MCP server and status line into ``.qwen/settings.json``; Qwen Code's own hook
system then runs our installed shim. The first run's hooks must all be stored; on the
second run, what the first one taught is in the request the fake API receives, and
our MCP tools are offered.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers.agents import agent_cli, first_run, stored_prompts, taught, wait_remembered
from helpers.cli import BIN, kl
from helpers.events import ACTOR, stored_events
from helpers.model_apis import FakeChatCompletions, scripted_api

from kirolearn import project


class QwenApi(FakeChatCompletions):
    """The shell first, then "done"; requests without tools (Qwen Code's own) get
    "done"."""

    def tool_call(self, body: dict, tools: list[str], results: list[str]
                  ) -> tuple[str, dict] | None:
        if results or "run_shell_command" not in tools:
            return None
        return "run_shell_command", {"command": "echo hello"}


@pytest.fixture
def fake_api():
    with scripted_api(QwenApi) as server:
        yield server


def test_qwen_code_remembers_across_runs(daemon, fake_api, tmp_path):
    qwen_cli = agent_cli("qwen")
    user_home = tmp_path / "home"
    proj = user_home / "proj"
    (proj / ".git").mkdir(parents=True)
    (user_home / ".qwen").mkdir()
    # The user's own settings: an OpenAI-compatible provider (here, the scripted API), and
    # every tool declared upfront (by default MCP tools wait behind Qwen Code's
    # tool_search, which a scripted model would have to call first).
    user_settings = user_home / ".qwen" / "settings.json"
    user_settings.write_text(json.dumps({"security": {"auth": {"selectedType": "openai"}},
                                         "model": {"name": "test-model"},
                                         "tools": {"toolSearch": {"enabled": False}}}))
    env = {  # a clean environment: nothing from this machine's user leaks in
        "HOME": str(user_home), "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "USER": ACTOR, "LOGNAME": ACTOR, "KIROLEARN_HOME": str(daemon), "NO_COLOR": "1",
        "OPENAI_API_KEY": "test", "OPENAI_MODEL": "test-model",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{fake_api.server_port}/v1",
        "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"}
    installed = kl("install", "--agent", "qwen-code", env=env, cwd=str(proj))
    assert installed.returncode == 0, installed.stderr
    settings = json.loads((proj / ".qwen" / "settings.json").read_text())
    assert settings["ui"]["statusLine"]["command"].endswith("kirolearn-statusline")
    doctor = kl("doctor", env=env, cwd=str(proj))
    assert f"ok    qwen-code (project {proj})" in doctor.stdout, doctor.stdout
    namespace = project.resolve_project(proj, home=str(user_home)).namespace(ACTOR)

    def qwen(prompt: str) -> str:
        done = subprocess.run([str(qwen_cli), "-p", prompt, "--approval-mode", "yolo"],
                              cwd=proj, env=env, text=True, capture_output=True,
                              timeout=180, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"qwen failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    assert qwen("Say hello with a shell command").strip() == "done"
    events, kinds = first_run(4, namespace)
    assert kinds[:4] == [("note", "qwen-code session started (startup)"),
                         ("prompt", "Say hello with a shell command"),
                         ("tool_use", "run_shell_command"),
                         ("session_summary", "done")], kinds
    tool = events[2]["body"]["data"]
    assert tool["tool_input"] == {"command": "echo hello"}
    assert tool["tool_response"]["exit_code"] == 0 and "hello" in tool["tool_response"]["output"]
    assert "from kirolearn" not in json.dumps(fake_api.bodies)  # nothing known yet
    offered = {t["function"]["name"] for b in fake_api.bodies for t in b.get("tools") or []}
    assert "mcp__kirolearn__search_memory" in offered, sorted(offered)  # our MCP server's

    wait_remembered(namespace)
    seen = len(fake_api.bodies)
    assert qwen("Say hello again with a shell command").strip() == "done"
    taught(fake_api.bodies[seen:], "Say hello with a shell command")
    assert stored_prompts() == ["Say hello with a shell command",
                                "Say hello again with a shell command"]
    session = events[0]["session_id"]
    line = subprocess.run([str(BIN / "kirolearn-statusline")], input=json.dumps(
        {"session_id": session, "workspace": {"current_dir": str(proj)}}), env=env,
        capture_output=True, text=True, timeout=30, check=True).stdout
    assert line.startswith("kirolearn · ") and " captured" in line, line
    assert len(stored_events()) >= 8

    removed = kl("uninstall", "--agent", "qwen-code", env=env, cwd=str(proj))
    assert removed.returncode == 0, removed.stderr
    # what is left is Qwen Code's own: the settings' version it added when it read them
    assert json.loads((proj / ".qwen" / "settings.json").read_text()) == {"$version": 4}
    assert "kirolearn" not in user_settings.read_text()
