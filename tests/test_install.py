"""kirolearn install / uninstall / doctor on real configuration files."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from helpers.cli import kl

from kirolearn import install

USER_SETTINGS = {"model": "opus", "permissions": {"allow": ["Bash(npm test)"]},
                 "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify done"}]}],
                           "PreToolUse": [{"matcher": "Bash", "hooks": [
                               {"type": "command", "command": "guard.sh"}]}]}}


BIN = str(Path(sys.executable).parent)  # where this installation's commands are


@pytest.fixture
def user(tmp_path, home):
    """A user's home with one git project; the CLI runs there, with a PATH that does not
    hold kirolearn (as after the README's quick start)."""
    (tmp_path / "proj" / ".git").mkdir(parents=True)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != BIN)
    env = {**os.environ, "HOME": str(tmp_path), "PATH": path}
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
    theirs, ours = merged["hooks"]["PreToolUse"]  # theirs kept first; ours beside it
    assert theirs == USER_SETTINGS["hooks"]["PreToolUse"][0]
    assert ours["matcher"] == "Read|Edit|MultiEdit"
    assert ours["hooks"][0]["command"].endswith("kirolearn-claude-code")
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
    assert all(entry[0]["command"] == f"{BIN}/kirolearn-kiro-cli"
               for entry in agent["hooks"].values())
    assert "is not on PATH, so these files name" in result.stdout
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
    assert doctor.returncode == 0, doctor.stdout  # the first hook starts the daemon
    assert "note  daemon: not running; the first hook starts it" in doctor.stdout
    for agent_name in ("kiro-cli", "kiro-ide", "claude-code"):
        assert f"ok    {agent_name} (project {proj})" in doctor.stdout
    assert "absolute paths (this machine's installation)" in doctor.stdout
    assert (f"note  kiro-cli (project {proj}): plain `kiro-cli chat` uses its built-in"
            " default agent, which has no kirolearn hooks") in doctor.stdout

    result = run(env, proj, "uninstall", "--agent", "kiro-cli", "--agent", "kiro-ide",
                 "--agent", "claude-code")
    assert result.returncode == 0, result.stderr
    left = sorted(str(p.relative_to(proj)) for p in proj.rglob("*"))
    assert left == [".git"]  # nor the folders the files were in


def test_a_projects_files_name_commands_found_on_path(user, tmp_path):
    """Files teammates commit: the commands as found on PATH, which doctor says."""
    _, proj, env = user
    env = {**env, "PATH": os.pathsep.join((BIN, env["PATH"]))}
    result = run(env, proj, "install", "--agent", "claude-code", "--agent", "kiro-ide")
    assert result.returncode == 0 and "not on PATH" not in result.stdout
    settings = json.loads((proj / ".claude/settings.json").read_text())
    handlers = {event: groups[0]["hooks"][0] for event, groups in settings["hooks"].items()}
    assert {h["command"] for h in handlers.values()} == {"kirolearn-claude-code"}
    assert json.loads((proj / ".mcp.json").read_text())["mcpServers"]["kirolearn"][
        "command"] == "kirolearn"
    hook = json.loads((proj / ".kiro/hooks/kirolearn-tool.kiro.hook").read_text())
    assert hook["then"]["command"] == "kirolearn-kiro-ide postToolUse"
    doctor = run(env, proj, "doctor").stdout
    assert (f"commands on PATH (kirolearn → {BIN}/kirolearn, kirolearn-claude-code →"
            f" {BIN}/kirolearn-claude-code, kirolearn-statusline →"
            f" {BIN}/kirolearn-statusline)") in doctor
    absolute = run(env, proj, "install", "--agent", "claude-code", "--absolute")
    assert absolute.returncode == 0 and "updated" in absolute.stdout
    assert f"{BIN}/kirolearn-claude-code" in (proj / ".claude/settings.json").read_text()
    # Run where kirolearn is not on PATH, the files say so.
    (proj / ".mcp.json").write_text(json.dumps({"mcpServers": {"kirolearn": {
        "type": "stdio", "command": "kirolearn", "args": ["mcp"]}}}))
    lost = run(user[2], proj, "doctor")
    assert lost.returncode == 1 and ("the configuration runs kirolearn, which is not on PATH;"
                                     " put kirolearn's folder on PATH") in lost.stdout


def test_uninstall_puts_back_the_users_own_file_byte_for_byte(user):
    _, proj, env = user
    settings = proj / ".claude" / "settings.json"
    settings.parent.mkdir()
    theirs = '{\n    "model": "opus",\n    "env": {"A": "1"}\n}\n'
    settings.write_text(theirs)
    backup = Path(f"{settings}.kirolearn.bak")
    assert run(env, proj, "install", "--agent", "claude-code").returncode == 0
    assert run(env, proj, "install", "--agent", "claude-code", "--absolute").returncode == 0
    assert backup.read_text() == theirs  # a second install keeps the user's version
    result = run(env, proj, "uninstall", "--agent", "claude-code")
    assert result.returncode == 0 and f"restored  {settings}" in result.stdout
    assert settings.read_text() == theirs and not backup.exists()
    assert sorted(p.name for p in proj.iterdir()) == [".claude", ".git"]


def test_kiro_cli_can_be_made_the_default_agent(user):
    home, proj, env = user
    cli = home / ".kiro" / "settings" / "cli.json"
    cli.parent.mkdir(parents=True)
    cli.write_text(json.dumps({"chat.defaultModel": "auto"}))
    refused = run(env, proj, "install", "--agent", "claude-code", "--default-agent")
    assert refused.returncode == 2 and "--default-agent is for --agent kiro-cli" in refused.stderr
    assert run(env, proj, "install", "--agent", "kiro-cli", "--default-agent").returncode == 0
    assert json.loads(cli.read_text()) == {"chat.defaultModel": "auto",
                                           "chat.defaultAgent": "kirolearn"}
    doctor = run(env, proj, "doctor").stdout
    assert f"ok    kiro-cli (project {proj})" in doctor and "plain `kiro-cli chat`" not in doctor
    assert run(env, proj, "uninstall", "--agent", "kiro-cli").returncode == 0
    assert json.loads(cli.read_text()) == {"chat.defaultModel": "auto"}


def test_a_repository_outside_home_is_a_project_and_a_plain_folder_is_not(user, tmp_path):
    _, _, env = user
    elsewhere = tmp_path.parent / f"{tmp_path.name}-srv"
    (elsewhere / "repo" / ".git").mkdir(parents=True)
    (elsewhere / "plain").mkdir()
    try:
        result = run(env, elsewhere / "repo", "install", "--agent", "claude-code")
        assert result.returncode == 0, result.stderr
        assert (elsewhere / "repo" / ".claude" / "settings.json").exists()
        doctor = run(env, elsewhere / "repo", "doctor").stdout
        assert f"ok    claude-code (project {elsewhere / 'repo'})" in doctor
        refused = run(env, elsewhere, "install", "--agent", "claude-code", "--project",
                      str(elsewhere / "plain"))
        assert refused.returncode == 2 and "is in no project" in refused.stderr
        assert not (elsewhere / "plain" / ".claude").exists()
    finally:
        shutil.rmtree(elsewhere)


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
    assert (f"FAIL  claude-code (project {proj}): {settings} lacks kirolearn's"
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
    assert (f"FAIL  kiro-cli (project {proj}): {agent_file} lacks kirolearn's MCP"
            " server; run: kirolearn install --agent kiro-cli") in doctor
