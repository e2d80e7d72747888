"""A real agent, end to end: the Cline CLI with kirolearn's hooks, run offline.

The CLI (``tests/e2e/package.json``, pinned; installed by the test command) talks to a
scripted OpenAI-compatible Chat Completions API on 127.0.0.1, set up as a user would
(``cline auth``). ``kirolearn install --agent cline`` writes an executable file per hook
in the project's ``.clinerules/hooks`` and our MCP server in the CLI's settings; Cline
runs the files. The first run's edit, command and reply must be stored; on the second,
the file the model reads brings back what the first run did to it (the CLI reads
context back from its tool hooks, not from its start: see ``shims/cline.py``), and our
MCP tools are offered.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
from pathlib import Path

import pytest
from helpers.agents import LINUX_X64, E2EAgent, Sandbox, in_sandbox
from helpers.cli import processes_with
from helpers.events import wait_events, wait_records
from helpers.model_apis import FakeChatCompletions
from helpers.waits import wait_for

from kirolearn import tooluse
from kirolearn.install.agents import CLINE_HOOKS

pytestmark = LINUX_X64
NOTES = "def greet(name):\n    return f'hello {name}'\n"


class ClineApi(FakeChatCompletions):
    """Asked to create notes.py: the editor, then a command; asked to read it, a read;
    then "done"."""

    project: Path

    def tool_call(self, body: dict, tools: list[str], results: list[str]
                  ) -> tuple[str, dict] | None:
        if "editor" not in tools:
            return None
        asked = json.dumps(body.get("messages"))
        path = str(self.project / "notes.py")
        if "Create notes.py" in asked:
            calls = [("editor", {"path": path, "new_text": NOTES}),
                     ("run_commands", {"commands": ["python3 -c 'import notes'"]})]
        elif "Read notes.py" in asked:
            calls = [("read_files", {"files": [{"path": path}]})]
        else:
            calls = []
        return calls[len(results)] if len(results) < len(calls) else None


def stop_hub(user_home: Path) -> None:
    """Stop the background hub the Cline CLI starts (and leaves running) for this home,
    and the MCP servers it runs: every process of this home's user."""
    def left() -> list[int]:
        return processes_with(f"HOME={user_home}")

    for pid in left():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not left(), 30, 0.1, "the Cline hub's processes to end")


def cline_auth(sandbox: Sandbox) -> dict[str, str]:
    """The scripted API set up as a user would (``cline auth``)."""
    ClineApi.project = sandbox.proj
    configured = subprocess.run(
        [str(sandbox.cli), "auth", "-p", "openai-compatible", "-k", "test", "-m",
         "test-model", "-b", f"{sandbox.api_url}/v1"],
        cwd=sandbox.proj, env=sandbox.env, text=True, capture_output=True, timeout=120,
        stdin=subprocess.DEVNULL)
    assert configured.returncode == 0, configured.stderr
    return {}


CLINE = E2EAgent("cline", "cline", ClineApi, settings=cline_auth, after=stop_hub,
                 argv=lambda prompt: [prompt])


@pytest.mark.timeout(300)  # the real CLI runs three times: minutes under load
@in_sandbox(CLINE)
def test_cline_remembers_across_runs(sandbox):
    proj = sandbox.proj
    sandbox.install()
    for name in CLINE_HOOKS:
        hook = proj / ".clinerules" / "hooks" / name
        assert hook.stat().st_mode & stat.S_IXUSR, hook
        assert "exec kirolearn-cline" in hook.read_text()  # by name: fit to commit
    settings = sandbox.home / ".cline" / "data" / "settings" / "cline_mcp_settings.json"
    # Cline gives a server without a timeout 3 s to start: too little on a busy machine.
    assert json.loads(settings.read_text())["mcpServers"]["kirolearn"]["timeout"] == 60

    assert "done" in sandbox.run("Create notes.py with a greet function").stdout
    assert (proj / "notes.py").read_text() == NOTES
    events = wait_events(4)
    assert len({e["session_id"] for e in events}) == 1, events
    assert all(e["namespace"] == sandbox.namespace for e in events), events
    # The start hook runs in the background, so its note may come after the tools.
    notes = [e for e in events if e["kind"] == "note"]
    assert [n["body"]["content"] for n in notes] == ["cline session started (startup)"]
    rest = [e for e in events if e["kind"] != "note"]
    assert [e["kind"] for e in rest] == ["tool_use", "tool_use", "session_summary"]
    edit, run = (tooluse.observe(e["body"]["data"]) for e in rest[:2])
    assert (edit.kind, edit.paths) == ("edit", [str(proj / "notes.py")])
    assert "greet" in edit.identifiers
    assert (run.kind, run.command, run.failed) == ("run", "python3 -c 'import notes'", False)
    assert rest[2]["body"]["content"] == "done"

    wait_records(sandbox.namespace)
    seen = len(sandbox.bodies)
    assert "done" in sandbox.run("Read notes.py and say what it does").stdout
    # The hub started our MCP server in the first run (whose first request may go out
    # before the server is up); it serves the second from the start.
    offered = {t["function"]["name"] for t in sandbox.bodies[seen].get("tools") or []}
    assert "kirolearn__search_memory" in offered, sorted(offered)
    later = json.dumps(sandbox.bodies[seen:])
    assert '<hook_context source=\\"PostToolUse\\"' in later, later[-2000:]
    assert "## Prior observations from kirolearn" in later
    assert "edited `notes.py`" in later

    sandbox.uninstall()
    assert not (proj / ".clinerules").exists()
    assert "kirolearn" not in (settings.read_text() if settings.exists() else "")
