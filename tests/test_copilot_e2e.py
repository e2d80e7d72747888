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
from pathlib import Path

import pytest
from helpers.agents import FIRST, LINUX_X64, E2EAgent, in_sandbox, stored_prompts
from helpers.model_apis import FakeAnthropic

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


def trusted(home: Path, folders: list[Path]) -> None:
    """Folders trusted, as Copilot records when the user answers its trust question."""
    (home / ".copilot").mkdir(exist_ok=True)
    (home / ".copilot" / "config.json").write_text(
        json.dumps({"trusted_folders": list(map(str, folders))}))


COPILOT = E2EAgent(
    "copilot", "@github/copilot-linux-x64/copilot", CopilotApi, trust=trusted,
    argv=lambda prompt: ["-p", prompt],
    settings=lambda sandbox: {  # a custom provider: no GitHub account is needed then
        "COPILOT_PROVIDER_BASE_URL": sandbox.api_url, "COPILOT_PROVIDER_TYPE": "anthropic",
        "COPILOT_PROVIDER_API_KEY": "test", "COPILOT_MODEL": "claude-sonnet-4.5",
        "COPILOT_AUTO_UPDATE": "false"},
    git_init=True,  # its hooks live in a repository
    # Copilot's hooks carry no reply to end a turn with, so its turns are batched once
    # idle (30 s by default): 8 s here. A shorter wait cuts a turn in two on a loaded
    # machine, where a hook may come seconds after the one before it, and its record
    # then tells of half the turn.
    daemon_config="[storage]\nbatch_idle_s = 8\n")
ALLOW_ALL = "--allow-all-tools"


@pytest.mark.timeout(300)  # the real CLI runs three or four times: minutes under load
@in_sandbox(COPILOT)
def test_copilot_remembers_across_runs(sandbox):
    doctor = sandbox.install()
    assert "note  copilot" not in doctor  # the folder is trusted

    said, events, kinds = sandbox.first_run(4, ALLOW_ALL)
    assert "done" in said
    assert kinds == [("note", "copilot session started (new)"),
                     ("prompt", FIRST),
                     ("tool_use", "bash"),
                     ("note", "copilot session ended (complete)")], kinds
    tool = events[2]["body"]["data"]
    assert tool["tool_input"]["command"] == "echo hello"
    assert tool["tool_response"]["exit_code"] == 0 and "hello" in tool["tool_response"]["output"]

    # No --allow-all-tools: only what Copilot approves by itself runs.
    _, requests = sandbox.taught_run(ASK)
    results = [json.dumps(block.get("content")) for body in requests
               for message in body["messages"] if isinstance(message["content"], list)
               for block in message["content"]
               if isinstance(block, dict) and block.get("type") == "tool_result"]
    assert results and FIRST in results[0], results
    assert stored_prompts() == [FIRST, ASK]

    # The same first run in a repository without our hooks (trusted too), imported from
    # the transcript Copilot keeps: the record the hooks made of it.
    assert "done" in sandbox.imported_like_live(ALLOW_ALL)

    sandbox.uninstall()
    assert not (sandbox.home / ".copilot" / "mcp-config.json").exists()
    assert sorted(p.name for p in sandbox.proj.iterdir()) == [".git"]
