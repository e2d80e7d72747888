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
from pathlib import Path

import pytest
from helpers.agents import FIRST, LINUX_X64, E2EAgent, Sandbox, in_sandbox, stored_prompts
from helpers.model_apis import FakeAnthropic

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


def opencode_config(sandbox: Sandbox) -> dict[str, str]:
    """The user's own configuration: a model, its provider pointed at the scripted API;
    OpenCode's plugin kit where it fetches one."""
    user_config = sandbox.home / ".config" / "opencode" / "opencode.json"
    user_config.parent.mkdir(parents=True)
    user_config.write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json", "model": "anthropic/claude-sonnet-4-5",
        "provider": {"anthropic": {"options": {"baseURL": f"{sandbox.api_url}/v1"}}}},
        indent=2))
    for folder in (user_config.parent, sandbox.proj / ".opencode"):
        plugin_kit_installed(folder)
    return {"ANTHROPIC_API_KEY": "test", "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_CLAUDE_CODE": "1",
            "npm_config_registry": "http://127.0.0.1:9/"}  # and no npm registry to reach


OPENCODE = E2EAgent(
    "opencode", "opencode-linux-x64/bin/opencode", OpenCodeApi, settings=opencode_config,
    # One argument a word: `opencode run` quotes an argument that holds spaces.
    argv=lambda prompt: ["run", *prompt.split()])


@pytest.mark.timeout(300)  # the real CLI runs three or four times: minutes under load
@in_sandbox(OPENCODE)
def test_opencode_remembers_across_runs(sandbox):
    user_config = sandbox.home / ".config" / "opencode" / "opencode.json"
    original = user_config.read_bytes()
    sandbox.install()

    said, events, kinds = sandbox.first_run(4)
    assert said.startswith("done")
    assert kinds == [("note", "opencode session started"),
                     ("prompt", FIRST),
                     ("tool_use", "bash"),
                     ("session_summary", "done")], kinds
    tool = events[2]["body"]["data"]
    assert tool["tool_input"]["command"] == "echo hello"
    assert tool["tool_response"] == {"output": "hello\n", "exit_code": 0}

    # Asking, with no one to answer, ends the run.
    done, requests = sandbox.taught_run(ASK, check=False)
    assert "permission requested: kirolearn_forget" in done.stdout + done.stderr, done
    found = tool_results(requests)
    assert found and FIRST in found[0], found
    assert stored_prompts() == [FIRST, ASK]

    # The same first run in a project without our plugin, imported from the database
    # OpenCode keeps: the record the hooks made of it.
    assert sandbox.imported_like_live().startswith("done")

    sandbox.uninstall()
    assert user_config.read_bytes() == original  # never ours
    # Ours are gone; OpenCode's own plugin kit stays in .opencode.
    assert not (sandbox.proj / "opencode.json").exists()
    assert not (sandbox.proj / ".opencode" / "plugins").exists()
