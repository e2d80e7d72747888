"""kirolearn install / uninstall / doctor on real configuration files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import kl

from kirolearn.shims import install

USER_SETTINGS = {"model": "opus", "permissions": {"allow": ["Bash(npm test)"]},
                 "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify done"}]}],
                           "PreToolUse": [{"matcher": "Bash", "hooks": [
                               {"type": "command", "command": "guard.sh"}]}]}}


@pytest.fixture
def user(tmp_path, home):
    """A user's home with one git project; the CLI runs there."""
    (tmp_path / "proj" / ".git").mkdir(parents=True)
    env = {**os.environ, "HOME": str(tmp_path)}
    return tmp_path, tmp_path / "proj", env


def run(env: dict, cwd: Path, *args: str):
    return kl(*args, env=env, cwd=str(cwd))


def test_claude_code_settings_are_merged_backed_up_and_restored(user):
    _, proj, env = user
    settings = proj / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(USER_SETTINGS))
    first = run(env, proj, "install", "--agent", "claude-code")
    assert first.returncode == 0, first.stderr
    assert "updated" in first.stdout and ".kirolearn.bak" in first.stdout
    merged = json.loads(settings.read_text())
    assert merged["model"] == "opus"
    assert merged["permissions"] == {"allow": ["Bash(npm test)", *install.CLAUDE_TOOLS]}
    assert "mcp__kirolearn__forget" not in merged["permissions"]["allow"]  # it asks first
    assert merged["enabledMcpjsonServers"] == ["kirolearn"]
    assert merged["hooks"]["PreToolUse"] == USER_SETTINGS["hooks"]["PreToolUse"]
    assert merged["hooks"]["Stop"][0] == USER_SETTINGS["hooks"]["Stop"][0]
    assert set(merged["hooks"]) == {"PreToolUse", "Stop", "SessionStart", "UserPromptSubmit",
                                    "PostToolUse", "PostToolUseFailure", "SessionEnd"}
    command = merged["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    assert os.path.isabs(command) and command.endswith("kirolearn-claude-code")
    assert os.access(command, os.X_OK)
    assert json.loads(Path(str(settings) + ".kirolearn.bak").read_text()) == USER_SETTINGS

    before = settings.read_bytes()
    again = run(env, proj, "install", "--agent", "claude-code")
    assert again.returncode == 0 and "unchanged" in again.stdout
    assert settings.read_bytes() == before  # idempotent

    removed = run(env, proj, "uninstall", "--agent", "claude-code")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(settings.read_text()) == USER_SETTINGS
    assert not (proj / ".mcp.json").exists()


def test_the_mcp_server_is_registered_beside_the_users_own(user):
    _, proj, env = user
    theirs = {"mcpServers": {"github": {"command": "gh-mcp", "args": []}}}
    (proj / ".mcp.json").write_text(json.dumps(theirs))
    assert run(env, proj, "install", "--agent", "claude-code").returncode == 0
    servers = json.loads((proj / ".mcp.json").read_text())["mcpServers"]
    assert servers["github"] == theirs["mcpServers"]["github"]
    ours = servers["kirolearn"]
    assert ours["type"] == "stdio" and ours["args"] == ["mcp"]
    assert os.path.isabs(ours["command"]) and ours["command"].endswith("/kirolearn")
    assert os.access(ours["command"], os.X_OK)
    assert run(env, proj, "uninstall", "--agent", "claude-code").returncode == 0
    assert json.loads((proj / ".mcp.json").read_text()) == theirs


def test_every_agent_installs_and_uninstalls_cleanly(user):
    _, proj, env = user
    result = run(env, proj, "install", "--agent", "kiro-cli", "--agent", "kiro-ide",
                 "--agent", "claude-code")
    assert result.returncode == 0, result.stderr
    agent = json.loads((proj / ".kiro/agents/kirolearn.json").read_text())
    assert set(agent["hooks"]) == {"agentSpawn", "userPromptSubmit", "postToolUse", "stop"}
    assert agent["hooks"]["postToolUse"][0]["matcher"] == "*"
    assert all(entry[0]["command"].endswith("kirolearn-kiro-cli")
               for entry in agent["hooks"].values())
    assert agent["mcpServers"]["kirolearn"]["args"] == ["mcp"]
    assert agent["mcpServers"]["kirolearn"]["command"].endswith("/kirolearn")
    assert agent["allowedTools"] == install.KIRO_CLI_TOOLS
    ide_mcp = json.loads((proj / ".kiro/settings/mcp.json").read_text())["mcpServers"]
    assert ide_mcp["kirolearn"]["args"] == ["mcp"]
    assert ide_mcp["kirolearn"]["autoApprove"] == list(install.APPROVED_TOOLS)
    assert json.loads((proj / ".mcp.json").read_text())["mcpServers"]["kirolearn"]
    hooks = sorted(p.name for p in (proj / ".kiro/hooks").iterdir())
    assert hooks == ["kirolearn-prompt.kiro.hook", "kirolearn-stop.kiro.hook",
                     "kirolearn-tool.kiro.hook"]
    prompt_hook = json.loads((proj / ".kiro/hooks/kirolearn-prompt.kiro.hook").read_text())
    assert prompt_hook["when"] == {"type": "promptSubmit"}
    assert prompt_hook["then"]["type"] == "runCommand"
    assert prompt_hook["then"]["command"].endswith("kirolearn-kiro-ide promptSubmit")

    doctor = run(env, proj, "doctor")
    assert doctor.returncode == 1  # the daemon is not running
    assert "FAIL  daemon: not running; run: kirolearn start" in doctor.stdout
    for agent_name in install.AGENTS:
        assert f"ok    {agent_name} (project {proj})" in doctor.stdout

    result = run(env, proj, "uninstall", "--agent", "kiro-cli", "--agent", "kiro-ide",
                 "--agent", "claude-code")
    assert result.returncode == 0, result.stderr
    left = sorted(str(p.relative_to(proj)) for p in proj.rglob("*") if p.is_file())
    assert left == []


def test_global_install_writes_the_users_own_files(user):
    home, proj, env = user
    claude_state = {"numStartups": 12, "projects": {str(proj): {"allowedTools": []}}}
    (home / ".claude.json").write_text(json.dumps(claude_state))
    assert run(env, proj, "install", "--agent", "kiro-cli", "--global").returncode == 0
    assert run(env, proj, "install", "--agent", "claude-code", "--global").returncode == 0
    assert (home / ".kiro/agents/kirolearn.json").exists()
    settings = json.loads((home / ".claude/settings.json").read_text())
    assert "UserPromptSubmit" in settings["hooks"]
    assert "enabledMcpjsonServers" not in settings  # user-scope servers need no approval
    state = json.loads((home / ".claude.json").read_text())
    assert state["numStartups"] == 12 and state["projects"] == claude_state["projects"]
    assert state["mcpServers"]["kirolearn"]["args"] == ["mcp"]
    assert run(env, proj, "uninstall", "--agent", "claude-code", "--global").returncode == 0
    assert json.loads((home / ".claude.json").read_text()) == claude_state
    refused = run(env, proj, "install", "--agent", "kiro-ide", "--global")
    assert refused.returncode != 0 and "--project DIR" in refused.stderr


def test_a_broken_file_is_left_alone_with_a_clear_error(user):
    _, proj, env = user
    settings = proj / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"model": "opus",')
    result = run(env, proj, "install", "--agent", "claude-code")
    assert result.returncode != 0
    assert "is not valid JSON" in result.stderr and str(settings) in result.stderr
    assert settings.read_text() == '{"model": "opus",'
    assert not Path(str(settings) + ".kirolearn.bak").exists()
    doctor = run(env, proj, "doctor")
    assert f"FAIL  claude-code (project {proj}): {settings} is not valid JSON" in doctor.stdout


def test_doctor_says_what_to_fix(user, daemon):
    _, proj, env = user
    assert run(env, proj, "install", "--agent", "claude-code").returncode == 0
    healthy = run(env, proj, "doctor")
    assert healthy.returncode == 0, healthy.stdout
    for line in ("ok    daemon: running", "ok    roles: all RUNNING", "ok    sockets: ingest",
                 "ok    database:", "ok    spool: empty", "ok    claude-code (project"):
        assert line in healthy.stdout
    # A hook pointing at a shim that is gone (kirolearn reinstalled elsewhere).
    settings = proj / ".claude" / "settings.json"
    config = json.loads(settings.read_text())
    config["hooks"]["Stop"][0]["hooks"][0]["command"] = "/nowhere/bin/kirolearn-claude-code"
    settings.write_text(json.dumps(config))
    broken = run(env, proj, "doctor")
    assert broken.returncode == 1
    assert ("FAIL  claude-code (project" in broken.stdout
            and "/nowhere/bin/kirolearn-claude-code, which is not there" in broken.stdout
            and "run: kirolearn install --agent claude-code" in broken.stdout)


def test_doctor_names_a_hook_that_was_removed_by_hand(user):
    _, proj, env = user
    assert run(env, proj, "install", "--agent", "claude-code", "--agent", "kiro-ide"
               ).returncode == 0
    settings = proj / ".claude" / "settings.json"
    config = json.loads(settings.read_text())
    del config["hooks"]["UserPromptSubmit"]
    settings.write_text(json.dumps(config))
    (proj / ".kiro/hooks/kirolearn-stop.kiro.hook").unlink()
    doctor = run(env, proj, "doctor").stdout
    assert (f"FAIL  claude-code (project {proj}): {settings} lacks the kirolearn hook(s)"
            " UserPromptSubmit; run: kirolearn install --agent claude-code") in doctor
    assert (f"FAIL  kiro-ide (project {proj}): {proj}/.kiro/hooks/kirolearn-stop.kiro.hook is"
            " missing or disabled; run: kirolearn install --agent kiro-ide") in doctor


def test_doctor_names_a_missing_mcp_server(user):
    _, proj, env = user
    assert run(env, proj, "install", "--agent", "kiro-cli").returncode == 0
    agent_file = proj / ".kiro/agents/kirolearn.json"
    agent = json.loads(agent_file.read_text())
    del agent["mcpServers"]
    agent_file.write_text(json.dumps(agent))
    doctor = run(env, proj, "doctor").stdout
    assert (f"FAIL  kiro-cli (project {proj}): {agent_file} lacks the kirolearn MCP server"
            " (or it is disabled); run: kirolearn install --agent kiro-cli") in doctor
