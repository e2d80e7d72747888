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
import subprocess
from pathlib import Path

import pytest
from helpers.agents import (
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

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        answered = any("functionResponse" in part for content in body.get("contents") or []
                       for part in content.get("parts") or [])
        if answered:
            part: dict = {"text": "done"}
        elif ASK in user_words(body):
            part = {"functionCall": {"name": SEARCH_TOOL, "args": {"query": "hello"}}}
        else:
            part = {"functionCall": {"name": "run_shell_command",
                                     "args": {"command": "echo hello"}}}
        answer = {"candidates": [{"content": {"role": "model", "parts": [part]},
                                  "finishReason": "STOP", "index": 0}],
                  "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 1,
                                    "totalTokenCount": 11}}
        if "alt=sse" in self.path:
            self._send("text/event-stream", f"data: {json.dumps(answer)}\n\n".encode())
        else:
            self._send("application/json", json.dumps(answer).encode())


@pytest.fixture
def fake_api():
    with scripted_api(FakeGemini) as server:
        yield server


@pytest.mark.timeout(300)  # the real CLI runs three or four times: minutes under load
def test_gemini_remembers_across_runs(daemon, fake_api, tmp_path):
    gemini_cli = agent_cli("gemini")
    user_home = tmp_path / "home"
    proj = user_home / "proj"
    (proj / ".git").mkdir(parents=True)
    gemini_home = user_home / ".gemini"
    gemini_home.mkdir()
    # The user's own settings: an API key chosen as the way in, and the project trusted,
    # as Gemini records when the user answers its "trust this folder?" question.
    (gemini_home / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    (gemini_home / "trustedFolders.json").write_text(json.dumps({str(proj): "TRUST_FOLDER"}))
    env = {  # a clean environment: nothing from this machine's user leaks in
        "HOME": str(user_home), "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "USER": ACTOR, "LOGNAME": ACTOR, "KIROLEARN_HOME": str(daemon),
        "GEMINI_API_KEY": "test", "NO_COLOR": "1",
        "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{fake_api.server_port}"}
    installed = kl("install", "--agent", "gemini", env=env, cwd=str(proj))
    assert installed.returncode == 0, installed.stderr
    assert len(list((gemini_home / "policies").glob("kirolearn-*.toml"))) == 1
    doctor = kl("doctor", env=env, cwd=str(proj))
    assert f"ok    gemini (project {proj})" in doctor.stdout, doctor.stdout
    assert "note  gemini" not in doctor.stdout  # the folder is trusted
    namespace = project.resolve_project(proj, home=str(user_home)).namespace(ACTOR)

    def gemini(prompt: str, *options: str, cwd: Path = proj) -> str:
        done = subprocess.run([str(gemini_cli), "-m", "test-model", "-p", prompt, *options],
                              cwd=cwd, env=env, text=True, capture_output=True,
                              timeout=180, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"gemini failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    assert gemini("Say hello with a shell command", "--approval-mode", "yolo").strip() \
        == "done"
    events, kinds = first_run(5, namespace)
    assert kinds == [("note", "gemini session started (startup)"),
                     ("prompt", "Say hello with a shell command"),
                     ("tool_use", "run_shell_command"),
                     ("session_summary", "done"),
                     ("note", "gemini session ended (exit)")], kinds
    tool = events[2]["body"]["data"]
    assert tool["tool_input"] == {"command": "echo hello"}
    assert "hello" in tool["tool_response"]["output"]
    assert "from kirolearn" not in json.dumps(fake_api.bodies)  # nothing known yet

    wait_remembered(namespace)
    seen = len(fake_api.bodies)
    gemini(ASK)  # default approval mode: a tool that asks is denied
    taught(fake_api.bodies[seen:], "Say hello with a shell command")
    results = [part["functionResponse"]["response"] for body in fake_api.bodies[seen:]
               for content in body["contents"] for part in content["parts"]
               if part.get("functionResponse", {}).get("name") == SEARCH_TOOL]
    assert results and "Say hello with a shell command" in json.dumps(results[-1]), results
    # What Gemini hands the prompt hook carries the session's context before the
    # user's words: only the words are stored.
    assert stored_prompts() == ["Say hello with a shell command", ASK]
    stored = stored_events()
    assert ("tool_use", SEARCH_TOOL) in [(e["kind"], e["body"].get("data", {}).get(
        "tool_name")) for e in stored]

    # The same first run in a project without our hooks (trusted too), imported from the
    # transcript Gemini keeps: the record the hooks made of it.
    plain = user_home / "plain"
    (plain / ".git").mkdir(parents=True)
    (gemini_home / "trustedFolders.json").write_text(json.dumps(
        {str(proj): "TRUST_FOLDER", str(plain): "TRUST_FOLDER"}))
    assert gemini("Say hello with a shell command", "--approval-mode", "yolo",
                  cwd=plain).strip() == "done"
    imported_like_live("gemini", env, namespace, plain, "Say hello with a shell command")

    settings = (gemini_home / "settings.json").read_bytes()
    removed = kl("uninstall", "--agent", "gemini", env=env, cwd=str(proj))
    assert removed.returncode == 0, removed.stderr
    assert (gemini_home / "settings.json").read_bytes() == settings  # never ours
    assert not (gemini_home / "policies").exists()
    assert sorted(p.name for p in proj.iterdir()) == [".git"]
