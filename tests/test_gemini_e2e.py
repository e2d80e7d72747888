"""A real agent, end to end: the Gemini CLI with kirolearn's hooks, run offline.

The CLI (``tests/e2e/package.json``, pinned; installed by the test command) talks to
a scripted Gemini API served here on 127.0.0.1 (``GOOGLE_GEMINI_BASE_URL``, with an
API key). ``kirolearn install --agent gemini`` writes the project's hooks and MCP
server and the user's policy rule for our tools; Gemini's own hook system then runs
our installed shim. The first run's hooks must all be stored; on the second run,
what the first one taught is in the request the fake API receives, and the model's
call of our ``search_memory`` runs without asking (a headless run denies any tool
call that would ask) and finds it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.agents import FIRST, E2EAgent, Sandbox, in_sandbox, stored_prompts
from helpers.events import stored_events, wait_records
from helpers.model_apis import ApiHandler
from test_claude_code_e2e import PARSER
from test_seed import commit, git

SEARCH_TOOL = "mcp_kirolearn_search_memory"
ASK = "What did we do about saying hello?"  # the model answers by searching our memory
HOOK_CONTEXT = re.compile(r"<hook_context>.*?</hook_context>", re.DOTALL)


def user_words(body: dict) -> str:
    """The user's text in a request, without what hooks added (``<hook_context>``)."""
    first = body["contents"][0]["parts"]
    return HOOK_CONTEXT.sub("", " ".join(p.get("text", "") for p in first))


class FakeGemini(ApiHandler):
    """Answers like the Gemini API: a tool call first (the shell; or, asked ASK, our
    search_memory), then "done"."""

    def part(self, body: dict, answered: bool) -> dict:
        """The model's answer to body (``answered``: a tool's result is in it)."""
        if answered:
            return {"text": "done"}
        if ASK in user_words(body):
            return {"functionCall": {"name": SEARCH_TOOL, "args": {"query": "hello"}}}
        return {"functionCall": {"name": "run_shell_command", "args": {"command": "echo hello"}}}

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        answered = any("functionResponse" in part for content in body.get("contents") or []
                       for part in content.get("parts") or [])
        answer = {"candidates": [{"content": {"role": "model",
                                              "parts": [self.part(body, answered)]},
                                  "finishReason": "STOP", "index": 0}],
                  "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 1,
                                    "totalTokenCount": 11}}
        if "alt=sse" in self.path:
            self._send("text/event-stream", f"data: {json.dumps(answer)}\n\n".encode())
        else:
            self._send("application/json", json.dumps(answer).encode())


def gemini_settings(sandbox: Sandbox) -> dict[str, str]:
    """The user's own settings: an API key chosen as the way in."""
    (sandbox.home / ".gemini").mkdir()
    (sandbox.home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    return {"GEMINI_API_KEY": "test", "GOOGLE_GEMINI_BASE_URL": sandbox.api_url}


def trusted(home: Path, folders: list[Path]) -> None:
    """Folders trusted, as Gemini records when the user answers its "trust this
    folder?" question."""
    (home / ".gemini" / "trustedFolders.json").write_text(
        json.dumps(dict.fromkeys(map(str, folders), "TRUST_FOLDER")))


GEMINI = E2EAgent("gemini", "gemini", FakeGemini, settings=gemini_settings, trust=trusted,
                  argv=lambda prompt: ["-m", "test-model", "-p", prompt])
YOLO = ("--approval-mode", "yolo")


@pytest.mark.timeout(300)  # the real CLI runs three or four times: minutes under load
@in_sandbox(GEMINI)
def test_gemini_remembers_across_runs(sandbox):
    gemini_home = sandbox.home / ".gemini"
    doctor = sandbox.install()
    assert len(list((gemini_home / "policies").glob("kirolearn-*.toml"))) == 1
    assert "note  gemini" not in doctor  # the folder is trusted

    said, events, kinds = sandbox.first_run(5, *YOLO)
    assert said.strip() == "done"
    assert kinds == [("note", "gemini session started (startup)"),
                     ("prompt", FIRST),
                     ("tool_use", "run_shell_command"),
                     ("session_summary", "done"),
                     ("note", "gemini session ended (exit)")], kinds
    tool = events[2]["body"]["data"]
    assert tool["tool_input"] == {"command": "echo hello"}
    assert "hello" in tool["tool_response"]["output"]

    _, requests = sandbox.taught_run(ASK)  # default approval mode: a tool that asks is denied
    results = [part["functionResponse"]["response"] for body in requests
               for content in body["contents"] for part in content["parts"]
               if part.get("functionResponse", {}).get("name") == SEARCH_TOOL]
    assert results and FIRST in json.dumps(results[-1]), results
    # What Gemini hands the prompt hook carries the session's context before the
    # user's words: only the words are stored.
    assert stored_prompts() == [FIRST, ASK]
    assert ("tool_use", SEARCH_TOOL) in [(e["kind"], e["body"].get("data", {}).get(
        "tool_name")) for e in stored_events()]

    # The same first run in a project without our hooks (trusted too), imported from the
    # transcript Gemini keeps: the record the hooks made of it.
    assert sandbox.imported_like_live(*YOLO).strip() == "done"

    settings = (gemini_home / "settings.json").read_bytes()
    sandbox.uninstall()
    assert (gemini_home / "settings.json").read_bytes() == settings  # never ours
    assert not (gemini_home / "policies").exists()
    assert sorted(p.name for p in sandbox.proj.iterdir()) == [".git"]


class ReadsARange(FakeGemini):
    """Reads lines 1–3 (an offset from 0 and a limit) of the file the prompt names with
    read_file, then "done"."""

    def part(self, body: dict, answered: bool) -> dict:
        words = user_words(body)
        if answered or "Read /" not in words:
            return {"text": "done"}
        path = words.split("Read ", 1)[1].split()[0]
        return {"functionCall": {"name": "read_file", "args": {
            "file_path": path, "offset": 0, "limit": 3}}}


GEMINI_READING = E2EAgent("gemini", "gemini", ReadsARange, settings=gemini_settings,
                          trust=trusted, git_init=True,
                          argv=lambda prompt: ["-m", "test-model", "-p", prompt])


@pytest.mark.timeout(300)
@in_sandbox(GEMINI_READING)
def test_gemini_is_told_why_lines_are_as_they_are_with_a_read_of_them(sandbox):
    """A seeded commit wrote the lines: with the result of a read_file of a range (Gemini
    gives the model no context of a BeforeTool hook), the model is told of its work."""
    commit(sandbox.proj, {"src/http.py": PARSER}, "Add a parser for the HTTP header lines")
    sandbox.kl("seed", "--git", "--project", str(sandbox.proj))
    wait_records(sandbox.namespace, 60)
    sandbox.install()
    path = sandbox.proj / "src" / "http.py"
    assert sandbox.run(f"Read {path} and explain it", *YOLO).stdout.strip() == "done"
    sha = git(sandbox.proj, "rev-parse", "HEAD").strip()
    told = json.dumps(sandbox.bodies, ensure_ascii=False)
    assert "Why these lines are as they are (from kirolearn)" in told
    assert f"Commit {sha[:10]}, lines 1–3 of src/http.py" in told
