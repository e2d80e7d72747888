"""Claude Code's status line (``kirolearn-statusline``): installed where the user has
none (theirs never replaced), and showing what memory did for the session from the
file its hooks keep, with no daemon call."""

from __future__ import annotations

import json
import subprocess

from helpers.cli import BIN, kl
from helpers.waits import wait_for
from helpers.workspace import Workspace


def status_line(ws: Workspace, payload: dict) -> str:
    return subprocess.run([str(BIN / "kirolearn-statusline")], input=json.dumps(payload),
                          capture_output=True, text=True, env=ws.env(), timeout=30,
                          check=True).stdout


def claude(ws: Workspace, event: str, **fields) -> None:
    result, _ = ws.hook("kirolearn-claude-code", {
        "session_id": "s-1", "transcript_path": "/x/s.jsonl", "cwd": str(ws.project),
        "hook_event_name": event, **fields})
    assert result.returncode == 0, result.stderr


def test_the_status_line_says_what_was_recalled_and_captured(daemon, tmp_path):
    ws = Workspace(tmp_path)
    kl("install", "--agent", "claude-code", env=ws.env(), cwd=str(ws.project), check=True)
    settings = json.loads((ws.project / ".claude" / "settings.json").read_text())
    assert settings["statusLine"]["command"].endswith("kirolearn-statusline")
    asked = {"session_id": "s-1", "cwd": str(ws.project)}
    assert status_line(ws, asked) == "kirolearn\n"  # nothing yet in this session

    claude(ws, "UserPromptSubmit", prompt="Add retry with backoff to the HTTP client")
    target = ws.project / "src" / "client.py"
    claude(ws, "PostToolUse", tool_name="Write",
           tool_input={"file_path": str(target), "content": "def retry_request(): pass\n"},
           tool_response={"type": "create", "filePath": str(target)})
    claude(ws, "Stop", stop_hook_active=False, last_assistant_message="Added retry_request.")
    assert status_line(ws, asked) == "kirolearn · 0 recalled · 3 captured\n"
    wait_for(lambda: "retry" in kl("search", "retry backoff", "--project", str(ws.project),
                                   env=ws.env()).stdout, 30, 0.2, "the turn's record")
    claude(ws, "UserPromptSubmit", prompt="How does the HTTP client retry with backoff?")
    assert status_line(ws, asked) == "kirolearn · 1 recalled · 4 captured\n"

    kl("pause", "--project", str(ws.project), env=ws.env(), check=True)
    assert status_line(ws, asked) == "kirolearn · paused\n"
    assert status_line(ws, {}) == "kirolearn\n"


def test_a_status_line_of_the_users_own_is_never_replaced(home, tmp_path):
    ws = Workspace(tmp_path)
    (ws.project / ".claude").mkdir()
    theirs = {"statusLine": {"type": "command", "command": "~/bin/my-line"}}
    (ws.project / ".claude" / "settings.json").write_text(json.dumps(theirs))
    kl("install", "--agent", "claude-code", env=ws.env(), cwd=str(ws.project), check=True)
    settings = json.loads((ws.project / ".claude" / "settings.json").read_text())
    assert settings["statusLine"] == theirs["statusLine"] and "hooks" in settings
    kl("uninstall", "--agent", "claude-code", env=ws.env(), cwd=str(ws.project), check=True)
    assert json.loads((ws.project / ".claude" / "settings.json").read_text()) == theirs
