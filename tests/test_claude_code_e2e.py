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

import pytest
from helpers.agents import FIRST, SYSTEM_PATH, E2EAgent, Sandbox, in_sandbox
from helpers.events import stored_events, wait_records
from helpers.model_apis import FakeAnthropic
from test_seed import commit, git

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


def claude_code_env(sandbox: Sandbox) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": sandbox.api_url, "ANTHROPIC_API_KEY": "sk-ant-test",
        "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
        # In -p mode Claude Code connects MCP servers in the background: on a loaded
        # machine the first model turn can come before our server is up, and its tools
        # are then missing. Blocking makes it wait for them, for MCP_CONNECT_TIMEOUT_MS
        # (5 s by default; our server's imports alone take 20 s on a machine as loaded
        # as the suite's test), each server given MCP_TIMEOUT to start.
        "MCP_CONNECTION_NONBLOCKING": "0", "MCP_CONNECT_TIMEOUT_MS": "120000",
        "MCP_TIMEOUT": "120000"}


CLAUDE_CODE = E2EAgent(
    "claude-code", "claude", ClaudeCodeApi, settings=claude_code_env,
    argv=lambda prompt: ["-p", prompt, "--output-format", "json", "--allowedTools", "Bash"],
    path=SYSTEM_PATH)  # our hooks run by their full path


def result(said: str) -> str:
    """What Claude Code's JSON output says the run's answer was."""
    return json.loads(said)["result"]


@pytest.mark.timeout(300)  # the real CLI runs three or four times: minutes under load
@in_sandbox(CLAUDE_CODE)
def test_claude_code_remembers_across_runs(sandbox):
    sandbox.install()
    said, events, kinds = sandbox.first_run(5)
    assert result(said) == "done"
    assert kinds == [("note", "claude-code session started (startup)"),
                     ("prompt", FIRST),
                     ("tool_use", "Bash"),
                     ("session_summary", "done"),
                     ("note", kinds[-1][1])], kinds
    assert kinds[-1][1].startswith("claude-code session ended")
    tool = events[2]["body"]["data"]
    assert tool["tool_input"]["command"] == "echo hello"
    assert "hello" in json.dumps(tool["tool_response"])
    offered = {t["name"] for b in sandbox.bodies for t in b.get("tools") or []}
    assert {f"mcp__kirolearn__{tool}" for tool in (
        "search_memory", "recall", "timeline", "get_records", "save_observation",
        "save_session_summary", "forget")} <= offered, offered

    sandbox.taught_run("Say hello again with a shell command")
    assert len(stored_events()) == 10

    # Claude Code applies a project's permission rules once the user has trusted the
    # workspace (its trust dialog); this is what accepting it records.
    (sandbox.home / ".claude.json").write_text(json.dumps(
        {"projects": {str(sandbox.proj): {"hasTrustDialogAccepted": True}}}))
    seen = len(sandbox.bodies)
    assert result(sandbox.run("Remember: we release on Fridays").stdout) == "done"
    results = [block for body in sandbox.bodies[seen:] for message in body["messages"]
               if isinstance(message["content"], list) for block in message["content"]
               if isinstance(block, dict) and block.get("type") == "tool_result"]
    assert results and "Saved mr_" in json.dumps(results[-1]), results
    found = sandbox.kl("search", "release Fridays", "--project", str(sandbox.proj), "--json")
    assert found.returncode == 0, found.stderr
    [saved] = [r for r in json.loads(found.stdout)["records"] if r["strategy"] == "mcp_observation"]
    assert saved["title"] == REMEMBERED["title"] and saved["namespace"] == sandbox.namespace

    # The same first run in a project without our hooks, imported from the transcript
    # Claude Code keeps: the record the hooks made of it. The live sessions are left alone.
    assert result(sandbox.imported_like_live()) == "done"


PARSER = '''def parse_header(line):
    name, _, value = line.partition(":")
    return name.strip().lower(), value.strip()
'''


class ReadsARange(FakeAnthropic):
    """Reads lines 1–3 of the file the prompt names (a Read of a range), then "done"."""

    def tool_call(self, body: dict, results: list[str]) -> tuple[str, dict] | None:
        tools = {t.get("name") for t in body.get("tools") or []}
        prompt = first_prompt(body)
        if "Read" not in tools or results or "Read /" not in prompt:
            return None
        path = prompt.split("Read ", 1)[1].split()[0]
        return "Read", {"file_path": path, "offset": 1, "limit": 3}


CLAUDE_CODE_READING = E2EAgent(
    "claude-code", "claude", ReadsARange, settings=claude_code_env, git_init=True,
    argv=lambda prompt: ["-p", prompt, "--output-format", "json", "--allowedTools", "Read"],
    path=SYSTEM_PATH)


@pytest.mark.timeout(300)
@in_sandbox(CLAUDE_CODE_READING)
def test_claude_code_is_told_why_lines_are_as_they_are_before_it_reads_them(sandbox):
    """A seeded commit wrote the lines: Claude Code's PreToolUse hook tells the model of
    its work with the Read, before the model sees the file."""
    commit(sandbox.proj, {"src/http.py": PARSER}, "Add a parser for the HTTP header lines")
    sandbox.kl("seed", "--git", "--project", str(sandbox.proj))
    wait_records(sandbox.namespace, 60)
    sandbox.install()
    path = sandbox.proj / "src" / "http.py"
    assert result(sandbox.run(f"Read {path} and explain it").stdout) == "done"
    reads = [b for b in sandbox.bodies if "tool_result" in json.dumps(b)]
    assert reads, "the model never saw the Read's result"
    told = json.dumps(reads[0], ensure_ascii=False)
    sha = git(sandbox.proj, "rev-parse", "HEAD").strip()
    assert "Why these lines are as they are (from kirolearn)" in told
    assert "Lines 1–3 of src/http.py were written by these commits" in told
    assert f"Commit {sha[:10]}, lines 1–3 of src/http.py" in told
