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
from helpers.agents import FIRST, E2EAgent, Sandbox, in_sandbox, stored_prompts
from helpers.cli import BIN
from helpers.events import stored_events, wait_records
from helpers.model_apis import FakeChatCompletions
from test_claude_code_e2e import PARSER
from test_seed import commit, git


class QwenApi(FakeChatCompletions):
    """The shell first, then "done"; requests without tools (Qwen Code's own) get
    "done"."""

    def tool_call(self, body: dict, tools: list[str], results: list[str]
                  ) -> tuple[str, dict] | None:
        if results or "run_shell_command" not in tools:
            return None
        return "run_shell_command", {"command": "echo hello"}


def qwen_settings(sandbox: Sandbox) -> dict[str, str]:
    """The user's own settings: an OpenAI-compatible provider (here, the scripted API),
    and every tool declared upfront (by default MCP tools wait behind Qwen Code's
    tool_search, which a scripted model would have to call first)."""
    (sandbox.home / ".qwen").mkdir()
    (sandbox.home / ".qwen" / "settings.json").write_text(json.dumps(
        {"security": {"auth": {"selectedType": "openai"}}, "model": {"name": "test-model"},
         "tools": {"toolSearch": {"enabled": False}}}))
    return {"OPENAI_API_KEY": "test", "OPENAI_MODEL": "test-model",
            "OPENAI_BASE_URL": f"{sandbox.api_url}/v1", "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"}


QWEN_CODE = E2EAgent("qwen-code", "qwen", QwenApi, settings=qwen_settings,
                     argv=lambda prompt: ["-p", prompt, "--approval-mode", "yolo"])


@pytest.mark.timeout(300)  # the real CLI runs three or four times: minutes under load
@in_sandbox(QWEN_CODE)
def test_qwen_code_remembers_across_runs(sandbox):
    sandbox.install()
    settings = json.loads((sandbox.proj / ".qwen" / "settings.json").read_text())
    assert settings["ui"]["statusLine"]["command"].endswith("kirolearn-statusline")

    said, events, kinds = sandbox.first_run(4)
    assert said.strip() == "done"
    assert kinds[:4] == [("note", "qwen-code session started (startup)"),
                         ("prompt", FIRST),
                         ("tool_use", "run_shell_command"),
                         ("session_summary", "done")], kinds
    tool = events[2]["body"]["data"]
    assert tool["tool_input"] == {"command": "echo hello"}
    assert tool["tool_response"]["exit_code"] == 0 and "hello" in tool["tool_response"]["output"]
    offered = {t["function"]["name"] for b in sandbox.bodies for t in b.get("tools") or []}
    assert "mcp__kirolearn__search_memory" in offered, sorted(offered)  # our MCP server's

    done, _ = sandbox.taught_run("Say hello again with a shell command")
    assert done.stdout.strip() == "done"
    assert stored_prompts() == [FIRST, "Say hello again with a shell command"]
    line = subprocess.run([str(BIN / "kirolearn-statusline")], input=json.dumps(
        {"session_id": events[0]["session_id"],
         "workspace": {"current_dir": str(sandbox.proj)}}), env=sandbox.env,
        capture_output=True, text=True, timeout=30, check=True).stdout
    assert line.startswith("kirolearn · ") and " captured" in line, line
    assert len(stored_events()) >= 8

    sandbox.uninstall()
    # what is left is Qwen Code's own: the settings' version it added when it read them
    assert json.loads((sandbox.proj / ".qwen" / "settings.json").read_text()) == {"$version": 4}
    assert "kirolearn" not in (sandbox.home / ".qwen" / "settings.json").read_text()


class ReadsARange(FakeChatCompletions):
    """Reads lines 1–3 of the file the prompt names (read_file with an offset and a
    limit), then "done"."""

    def tool_call(self, body: dict, tools: list[str], results: list[str]
                  ) -> tuple[str, dict] | None:
        prompt = json.dumps(body["messages"])
        if results or "read_file" not in tools or "Read /" not in prompt:
            return None
        path = prompt.split("Read ", 1)[1].split()[0]
        return "read_file", {"file_path": path, "offset": 0, "limit": 3}


QWEN_CODE_READING = E2EAgent("qwen-code", "qwen", ReadsARange, settings=qwen_settings,
                             git_init=True,
                             argv=lambda prompt: ["-p", prompt, "--approval-mode", "yolo"])


@pytest.mark.timeout(300)
@in_sandbox(QWEN_CODE_READING)
def test_qwen_code_is_told_why_lines_are_as_they_are_with_a_read_of_them(sandbox):
    """A seeded commit wrote the lines: with the result of a read_file of a range (Qwen
    Code gives the model no context of a PreToolUse hook), the model is told of its
    work."""
    commit(sandbox.proj, {"src/http.py": PARSER}, "Add a parser for the HTTP header lines")
    sandbox.kl("seed", "--git", "--project", str(sandbox.proj))
    wait_records(sandbox.namespace, 60)
    sandbox.install()
    path = sandbox.proj / "src" / "http.py"
    assert sandbox.run(f"Read {path} and explain it").stdout.strip() == "done"
    sha = git(sandbox.proj, "rev-parse", "HEAD").strip()
    told = json.dumps(sandbox.bodies, ensure_ascii=False)
    assert "Why these lines are as they are (from kirolearn)" in told
    assert f"Commit {sha[:10]}, lines 1–3 of src/http.py" in told
