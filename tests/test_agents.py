"""Every agent of the registry (``kirolearn.agents.AGENTS``): install, doctor and uninstall
leaving the files as they were; its shim, its command and the hooks install gives it,
one entry apart; and Codex, Gemini CLI, Copilot CLI, Cursor and OpenCode's hooks fed
the payloads each documents (../shared/reference and the agents' hook references),
events stored, context printed in each agent's format. The real CLIs run in
test_*_e2e.py (Cursor has none to run).
"""

from __future__ import annotations

import importlib
import json
import os
import tomllib
from pathlib import Path

import pytest
from helpers.cli import BIN, here, kl
from helpers.events import logged_retrieval, settled_context, wait_events, wait_records
from helpers.workspace import Workspace

from kirolearn import db, tooluse, transcripts
from kirolearn.agents import AGENTS
from kirolearn.install import APPROVED_TOOLS, agents, parts
from kirolearn.shims import statusline

ROOT = Path(__file__).parent.parent
# What a user already has where each agent keeps its configuration.
THEIRS = {
    "kiro-cli": (".kiro/agents/kirolearn.json", json.dumps({
        "name": "kirolearn", "description": "mine", "tools": ["*"],
        "hooks": {"stop": [{"command": "notify.sh"}]}}, indent=2)),
    "kiro-ide": (".kiro/settings/mcp.json", json.dumps({"mcpServers": {
        "db": {"command": "db-mcp"}}})),
    "claude-code": (".claude/settings.json", json.dumps({
        "permissions": {"allow": ["Bash(ls:*)"]},
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify.sh"}]}]}})),
    "codex": (".codex/config.toml", '# mine\nmodel = "o4"\nmcp_optional_startup_grace_ms = 0\n'
                                    '\n[mcp_servers.docs]\ncommand = "docs-mcp"\n'),
    "gemini": (".gemini/settings.json", json.dumps({"theme": "dark", "hooks": {
        "AfterTool": [{"matcher": "write_file", "hooks": [
            {"type": "command", "command": "fmt.sh"}]}]}}, indent=4)),
    "copilot": (".github/hooks/guard.json", json.dumps({"version": 1, "hooks": {
        "preToolUse": [{"type": "command", "bash": "./guard.sh"}]}})),
    "cursor": (".cursor/mcp.json", json.dumps({"mcpServers": {"db": {"command": "db-mcp"}}})),
    "qwen-code": (".qwen/settings.json", json.dumps({"ui": {"theme": "dark"}, "hooks": {
        "PostToolUse": [{"matcher": "write_file", "hooks": [
            {"type": "command", "command": "fmt.sh"}]}]}}, indent=2)),
    "windsurf": (".windsurf/hooks.json", json.dumps({"hooks": {"pre_run_command": [
        {"command": "guard.sh", "show_output": True}]}})),
    "cline": (".clinerules/hooks/PreToolUse", "#!/bin/sh\necho '{\"cancel\": false}'\n"),
    "opencode": ("opencode.json", json.dumps({"$schema": "https://opencode.ai/config.json",
                                              "model": "anthropic/claude",
                                              "permission": {"bash": "ask",
                                                             "kirolearn_forget": "allow"}})),
}
WRITTEN = {  # the files install writes in the project (besides the user's above)
    "kiro-cli": {".kiro/agents/kirolearn.json"},
    "kiro-ide": {".kiro/hooks/kirolearn-prompt.kiro.hook", ".kiro/hooks/kirolearn-tool.kiro.hook",
                 ".kiro/hooks/kirolearn-stop.kiro.hook", ".kiro/settings/mcp.json"},
    "claude-code": {".claude/settings.json", ".mcp.json"},
    "codex": {".codex/hooks.json", ".codex/config.toml"},
    "gemini": {".gemini/settings.json"},
    "copilot": {".github/hooks/kirolearn.json"},
    "cursor": {".cursor/hooks.json", ".cursor/mcp.json"},
    "opencode": {".opencode/plugins/kirolearn.js", "opencode.json"},
    "qwen-code": {".qwen/settings.json"},
    "windsurf": {".windsurf/hooks.json"},
    "cline": {f".clinerules/hooks/{name}" for name in agents.CLINE_HOOKS},
}


@pytest.fixture
def ws(tmp_path):
    return Workspace(tmp_path)


def tree(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_every_agent_of_the_registry_is_tested_here():
    assert set(THEIRS) == set(WRITTEN) == set(AGENTS)


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_an_agent_is_one_entry_its_shim_and_its_command(agent, tmp_path):
    """The entry names the shim that reads the agent's hooks; its command runs that
    shim's ``main``; and every hook install gives the agent is one its shim reads."""
    entry = AGENTS[agent]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[entry.command] == f"kirolearn.shims.{entry.module}:main"
    shim = importlib.import_module(f"kirolearn.shims.{entry.module}")
    assert callable(shim.main) and agent == shim.SURFACE
    files = agents.config_files(agent, tmp_path, tmp_path)
    # The rest of what the entry says is so: a reader of the sessions it keeps, the
    # status line installed.
    reader = ROOT / "kirolearn" / "transcripts" / f"{entry.module}.py"
    assert reader.exists() == entry.transcripts == (agent in transcripts.READERS)
    assert entry.status_line == any(isinstance(part, parts.StatusLine)
                                    for file in files for part in file.parts)
    assert (agent in statusline.SURFACES) == entry.status_line
    hooks = set()
    for file in files:
        for part in file.parts:
            if isinstance(part, parts.GroupedHooks | parts.FlatHooks):
                hooks |= set(part.events)
    if agent == "kiro-ide":  # a file per hook, named in its entry
        hooks = {trigger for trigger, _ in agents.KIRO_IDE_HOOKS.values()}
    if agent == "cline":  # a file per hook, named after it
        hooks = set(agents.CLINE_HOOKS)
    if agent == "opencode":  # its plugin hands the shim roles, not hook names
        assert set(shim.ROLES) == {"start", "prompt", "tool", "turn_end", "end"}
        return
    assert hooks and hooks <= set(shim.ROLES), hooks - set(shim.ROLES)


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_install_doctor_uninstall(ws, agent):
    env = ws.env(PATH=os.pathsep.join((str(BIN), "/usr/bin:/bin")))
    name, text = THEIRS[agent]
    (ws.project / name).parent.mkdir(parents=True, exist_ok=True)
    (ws.project / name).write_text(text)
    project_before = tree(ws.project)
    folders_before = sorted(p for p in ws.project.rglob("*") if p.is_dir())

    first = kl("install", "--agent", agent, env=env, cwd=str(ws.project))
    if agent == "codex":  # no codex on this PATH: written, and said not to work yet
        assert first.returncode == 1 and "codex is not ready:" in first.stderr
        assert "lacks kirolearn's hook trust" in first.stderr and "/hooks" in first.stderr
    else:
        assert first.returncode == 0, first.stderr
    for written in WRITTEN[agent]:
        content = (ws.project / written).read_text()
        assert "kirolearn" in content, written
    if agent not in ("copilot", "kiro-ide", "cline"):  # theirs left alone: ours are our files
        assert ".kirolearn.bak" in first.stdout
    merged = (ws.project / name).read_text()
    if agent == "codex":  # a setting of the user's that we would supply is theirs to keep
        assert tomllib.loads(merged)["mcp_optional_startup_grace_ms"] == 0
    if agent == "opencode":
        assert json.loads(merged)["permission"] == {
            "bash": "ask", "kirolearn_forget": "allow", "kirolearn_update_memory": "ask"}
    again = kl("install", "--agent", agent, env=env, cwd=str(ws.project))
    assert again.returncode == first.returncode and "updated" not in again.stdout \
        and "created" not in again.stdout, again.stdout

    doctor = kl("doctor", env=env, cwd=str(ws.project)).stdout
    if agent == "codex":  # no codex on this PATH to ask for the hashes of our hooks
        assert f"FAIL  codex (project {ws.project}): " in doctor
        assert "lacks kirolearn's hook trust" in doctor and "/hooks" in doctor
    else:
        assert f"ok    {agent} (project {ws.project}): " in doctor, doctor
        assert "commands on PATH" in doctor
    assert f"{agent} (user)" not in doctor  # a project's install is no user's, half done
    if agent == "copilot":  # no trusted folder: Copilot would not run the project's hooks
        assert f"note  copilot (project {ws.project}): Copilot CLI runs" in doctor, doctor
        (ws.home / ".copilot" / "config.json").write_text(
            f'// managed by Copilot\n{{"trusted_folders": ["{ws.project.parent}"]}}')
        assert "note  copilot" not in kl("doctor", env=env, cwd=str(ws.project)).stdout
        (ws.home / ".copilot" / "config.json").unlink()
    if agent == "gemini":  # no trustedFolders.json: Gemini would ignore the project's file
        assert f"note  gemini (project {ws.project}): Gemini CLI ignores" in doctor, doctor
        (ws.home / ".gemini" / "trustedFolders.json").write_text(
            json.dumps({str(ws.project.parent / "other"): "TRUST_PARENT"}))
        assert "note  gemini" not in kl("doctor", env=env, cwd=str(ws.project)).stdout
        (ws.home / ".gemini" / "trustedFolders.json").unlink()

    removed = kl("uninstall", "--agent", agent, env=env, cwd=str(ws.project))
    assert removed.returncode == 0, removed.stderr
    assert tree(ws.project) == project_before  # byte for byte, and nothing left of ours
    assert sorted(p.name for p in ws.home.iterdir()) == ["proj"]  # ~/.copilot, ~/.codex
    assert sorted(p for p in ws.project.rglob("*") if p.is_dir()) == folders_before


def test_what_each_agent_is_given(ws):
    env = ws.env(PATH=os.pathsep.join((str(BIN), "/usr/bin:/bin")))
    for agent in ("codex", "gemini", "cursor", "opencode"):  # codex: not on PATH to trust
        assert kl("install", "--agent", agent, env=env, cwd=str(ws.project)).returncode == (
            1 if agent == "codex" else 0)
    codex = tomllib.loads((ws.project / ".codex/config.toml").read_text())
    assert codex["mcp_servers"]["kirolearn"]["tools"]["recall"] == {"approval_mode": "approve"}
    assert "forget" not in codex["mcp_servers"]["kirolearn"]["tools"]
    # Codex's first turn waits for our MCP server (a user's own grace is kept: THEIRS).
    assert codex["mcp_optional_startup_grace_ms"] == 5000
    settings = json.loads((ws.project / ".gemini/settings.json").read_text())
    assert set(settings["hooks"]) == {"SessionStart", "BeforeAgent", "AfterTool",
                                      "AfterAgent", "SessionEnd"}
    assert settings["hooks"]["BeforeAgent"][0]["hooks"][0] == {
        "type": "command", "command": "kirolearn-gemini", "name": "kirolearn", "timeout": 5000}
    assert settings["mcpServers"]["kirolearn"] == {"command": "kirolearn", "args": ["mcp"]}
    policy, = (ws.home / ".gemini" / "policies").iterdir()  # Gemini reads the user's only
    assert tomllib.loads(policy.read_text()) == {"rule": [{
        "mcpName": "kirolearn", "toolName": list(APPROVED_TOOLS), "decision": "allow",
        "priority": 100}]}
    hooks = json.loads((ws.project / ".cursor/hooks.json").read_text())
    assert hooks["version"] == 1
    assert hooks["hooks"]["beforeSubmitPrompt"] == [{"command": "kirolearn-cursor"}]
    opencode = json.loads((ws.project / "opencode.json").read_text())
    assert opencode["mcp"]["kirolearn"] == {"type": "local", "command": ["kirolearn", "mcp"],
                                            "enabled": True}
    # OpenCode asks about nothing by default: it is told to ask before these two.
    assert opencode["permission"] == {"kirolearn_forget": "ask", "kirolearn_update_memory": "ask"}
    plugin = (ws.project / ".opencode/plugins/kirolearn.js").read_text()
    assert 'const SHIM = "kirolearn-opencode";' in plugin
    # Copilot CLI: the user's own hooks are in ~/.copilot/hooks.
    assert kl("install", "--agent", "copilot", "--global", env=env).returncode == 0
    hooks = json.loads((ws.home / ".copilot/hooks/kirolearn.json").read_text())
    assert hooks["hooks"]["userPromptSubmitted"][0]["bash"].endswith(
        "kirolearn-copilot userPromptSubmitted")
    refused = kl("install", "--agent", "kiro-ide", "--global", env=env)
    assert refused.returncode == 1 and "use --project DIR" in refused.stderr


def run_hook(ws: Workspace, shim: str, payload: dict, *args: str) -> str:
    """What the shim prints for payload. The prompt's budget is generous here: these
    tests check what each agent is given, tests/test_retrieval.py the budget."""
    result, _ = ws.hook(shim, payload, *args, KIROLEARN_RETRIEVAL_BUDGET_MS="5000")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.stdout


def check_session(events: list[dict], surface: str, ws: Workspace) -> None:
    assert {e["source"]["surface"] for e in events} == {surface}
    assert {e["namespace"] for e in events} == {ws.namespace}
    assert len({e["session_id"] for e in events}) == 1


def kinds(events: list[dict]) -> list[str]:
    return [e["kind"] for e in events]


def test_gemini_every_hook(daemon, ws):
    base = {"session_id": "g-1", "transcript_path": "/x/g-1.json", "cwd": str(ws.project),
            "timestamp": "2026-11-24T10:00:00Z"}
    hook = lambda name, **fields: run_hook(  # noqa: E731
        ws, "kirolearn-gemini", {**base, "hook_event_name": name, **fields})
    assert hook("SessionStart", source="startup") == "{}"
    assert hook("BeforeAgent", prompt="Fix the flaky retry test") == "{}"
    assert hook("AfterTool", tool_name="run_shell_command",
                tool_input={"command": "pytest -q tests/test_retry.py"},
                tool_response={"llmContent": "Command: pytest -q tests/test_retry.py\n"
                               "Output: 1 failed, 2 passed\nError: (none)\nExit Code: 1\n",
                               "returnDisplay": "1 failed"}) == "{}"
    assert hook("AfterTool", tool_name="read_file",
                tool_input={"absolute_path": str(ws.project / "src/retry.py")},
                tool_response={"llmContent": "RETRIES = 3\n"}) == "{}"
    assert hook("AfterTool", tool_name="mcp_docs_search", tool_input={"query": "retry"},
                tool_response={"llmContent": [{"text": "retry waits 2s"}]}) == "{}"
    assert hook("AfterAgent", prompt="Fix the flaky retry test", stop_hook_active=False,
                prompt_response="The retry test waits for the server now.") == "{}"
    # What Gemini hands the next prompt hook: the context hooks added, then the words
    # (the turn before may be remembered already: any answer is JSON).
    assert isinstance(json.loads(hook(
        "BeforeAgent", prompt="<hook_context>## Where the last session left off"
        " (from kirolearn)\n\nTask: x</hook_context>\n\nNow the docs")), dict)
    assert hook("SessionEnd", reason="exit") == "{}"
    events = wait_events(8)
    check_session(events, "gemini", ws)
    assert kinds(events) == ["note", "prompt", "tool_use", "tool_use", "tool_use",
                             "session_summary", "prompt", "note"]
    run = tooluse.observe(events[2]["body"]["data"])
    assert (run.kind, run.command, run.exit_status, run.failed) == (
        "run", "pytest -q tests/test_retry.py", 1, True)
    read = tooluse.observe(events[3]["body"]["data"])
    assert (read.kind, read.paths) == ("read", [str(ws.project / "src/retry.py")])
    assert events[4]["body"]["data"]["tool_response"]["output"] == "retry waits 2s"
    assert events[5]["body"]["content"] == "The retry test waits for the server now."
    assert events[6]["body"]["content"] == "Now the docs"
    assert events[7]["body"]["content"] == "gemini session ended (exit)"

    wait_records(ws.namespace)
    question = "flaky retry test"
    settled_context(ws.namespace, question)
    printed = json.loads(hook("BeforeAgent", prompt=question))["hookSpecificOutput"]
    assert printed["hookEventName"] == "BeforeAgent"
    assert "from kirolearn" in printed["additionalContext"]


def test_cursor_every_hook(daemon, ws):
    base = {"conversation_id": "c-1", "generation_id": "g-1", "model": "gpt",
            "cursor_version": "3.1", "workspace_roots": [str(ws.project)],
            "user_email": None}
    hook = lambda name, **fields: run_hook(  # noqa: E731
        ws, "kirolearn-cursor", {**base, "hook_event_name": name, **fields})
    path = str(ws.project / "src/export.py")
    assert hook("sessionStart", is_background_agent=False, composer_mode="agent") == ""
    assert hook("beforeSubmitPrompt", prompt="Add a CSV export", attachments=[]) == ""
    assert hook("afterFileEdit", file_path=path, edits=[
        {"old_string": "", "new_string": "def export_csv(rows):\n    return rows\n"}]) == ""
    assert hook("afterShellExecution", command="pytest -q", output="3 passed",
                duration=812) == ""
    assert hook("afterMCPExecution", tool_name="search_docs",
                tool_input='{"query": "csv"}', result_json='{"hits": 2}', duration=40) == ""
    assert hook("afterAgentResponse", text="Added export_csv in src/export.py.") == ""
    assert hook("sessionEnd", reason="completed", duration_ms=60000) == ""
    events = wait_events(7)
    check_session(events, "cursor", ws)
    assert kinds(events) == ["note", "prompt", "tool_use", "tool_use", "tool_use",
                             "session_summary", "note"]
    edit = tooluse.observe(events[2]["body"]["data"])
    assert (edit.kind, edit.paths, edit.added) == ("edit", [path], 2)
    assert "export_csv" in edit.identifiers
    assert tooluse.observe(events[3]["body"]["data"]).command == "pytest -q"
    assert events[4]["body"]["data"]["tool_input"] == {"query": "csv"}
    assert events[2]["parent_event_id"] == events[1]["event_id"]

    wait_records(ws.namespace)
    settled_context(ws.namespace, "CSV export")
    printed = json.loads(hook("beforeSubmitPrompt", prompt="CSV export", attachments=[]))
    assert printed["continue"] is True and "from kirolearn" in printed["additional_context"]
    started = json.loads(hook("sessionStart", conversation_id="c-2"))
    assert set(started) == {"additional_context"}


def test_copilot_every_hook(daemon, ws):
    base = {"sessionId": "cp-1", "timestamp": 1795514400000, "cwd": str(ws.project)}
    hook = lambda name, **fields: run_hook(  # noqa: E731
        ws, "kirolearn-copilot", {**base, **fields}, name)
    assert hook("sessionStart", source="new", initialPrompt="Bump the version") == ""
    assert hook("userPromptSubmitted", prompt="Bump the version") == ""
    assert hook("postToolUse", toolName="bash", toolArgs='{"command": "make test"}',
                toolResult={"resultType": "success",
                            "textResultForLlm": "ok\n<exited with exit code 2>"}) == ""
    assert hook("postToolUseFailure", toolName="edit",
                toolArgs={"path": "setup.cfg", "old_str": "1.0", "new_str": "1.1"},
                error="old_str not found") == ""
    assert hook("agentStop", transcriptPath="/x/cp-1.jsonl", stopReason="end_turn") == ""
    assert hook("sessionEnd", reason="complete") == ""
    events = wait_events(5)
    check_session(events, "copilot", ws)
    assert kinds(events) == ["note", "prompt", "tool_use", "tool_use", "note"]
    assert events[4]["body"]["content"] == "copilot session ended (complete)"
    # Its context ({"additionalContext"}) reaches the model: tests/test_copilot_e2e.py.


def test_cline_every_hook(daemon, ws):
    """Cline's hooks as its extension documents them (a file per hook; the tool's
    parameters as strings): each tool use read in the one shape, the prompt's context
    back as ``contextModification``, and a control object printed whatever happens.
    The CLI's own names and objects run in tests/test_cline_e2e.py."""
    base = {"clineVersion": "3.36.0", "timestamp": "1795514400000", "taskId": "task-1",
            "workspaceRoots": [str(ws.project)], "userId": "u-1"}
    hook = lambda name, **fields: json.loads(run_hook(  # noqa: E731
        ws, "kirolearn-cline", {**base, "hookName": name, **fields}))
    path = str(ws.project / "src/retry.py")
    assert hook("TaskStart", taskStart={"taskMetadata": {"taskId": "task-1"}}) == {
        "cancel": False}
    assert hook("UserPromptSubmit", userPromptSubmit={
        "prompt": "Make the retry back off", "attachments": []}) == {"cancel": False}
    assert hook("PostToolUse", postToolUse={
        "toolName": "replace_in_file", "parameters": {"path": path, "diff": (
            "------- SEARCH\ndelay = 1\n=======\ndelay = retry_backoff(attempt)\n"
            "+++++++ REPLACE")}, "result": "ok", "success": True,
        "executionTimeMs": 12})["cancel"] is False
    hook("PostToolUse", postToolUse={
        "toolName": "execute_command", "parameters": {"command": "pytest -q"},
        "result": "1 failed", "success": False, "executionTimeMs": 900})
    hook("PostToolUse", postToolUse={
        "toolName": "use_mcp_tool", "parameters": {
            "server_name": "kirolearn", "tool_name": "search_memory",
            "arguments": '{"query": "retry"}'}, "result": "No relevant memories found.",
        "success": True, "executionTimeMs": 40})
    hook("TaskComplete", taskComplete={"taskMetadata": {
        "taskId": "task-1", "result": "retry now backs off"}})
    hook("TaskCancel", taskCancel={"taskMetadata": {"taskId": "task-1"}})
    events = wait_events(7)
    check_session(events, "cline", ws)
    assert kinds(events) == ["note", "prompt", "tool_use", "tool_use", "tool_use",
                             "session_summary", "note"]
    edit, run = (tooluse.observe(e["body"]["data"]) for e in events[2:4])
    assert (edit.kind, edit.paths, edit.added, edit.removed) == ("edit", [path], 1, 1)
    assert "retry_backoff" in edit.identifiers
    assert (run.command, run.failed) == ("pytest -q", True)
    assert events[4]["body"]["data"]["tool_name"] == "mcp__kirolearn__search_memory"
    assert events[4]["body"]["data"]["tool_input"] == {"query": "retry"}
    assert events[5]["body"]["content"] == "retry now backs off"
    assert events[6]["body"]["content"] == "cline session ended (cancelled)"
    assert events[2]["parent_event_id"] == events[1]["event_id"]

    wait_records(ws.namespace)
    settled_context(ws.namespace, "retry back off")
    printed = hook("UserPromptSubmit", userPromptSubmit={"prompt": "retry back off",
                                                         "attachments": []})
    assert printed["cancel"] is False and "from kirolearn" in printed["contextModification"]
    broken, _ = ws.hook("kirolearn-cline", "not json")
    assert (broken.returncode, json.loads(broken.stdout)) == (0, {"cancel": False})


def test_cline_never_replaces_a_hook_file_of_the_users(ws):
    """Cline runs one file a hook a folder: one of the user's where ours would go is
    reported, and nothing is written."""
    env = ws.env(PATH=os.pathsep.join((str(BIN), "/usr/bin:/bin")))
    theirs = ws.project / ".clinerules" / "hooks" / "PostToolUse"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("#!/bin/sh\n./lint.sh\n")
    before = tree(ws.project)
    refused = kl("install", "--agent", "cline", env=env, cwd=str(ws.project))
    assert refused.returncode != 0 and "is not kirolearn's" in refused.stderr, refused.stderr
    assert tree(ws.project) == before
    assert not (ws.home / ".cline").exists()


def test_opencode_every_hook(daemon, ws):
    hook = lambda role, **fields: run_hook(  # noqa: E731
        ws, "kirolearn-opencode",
        {"hook": role, "session_id": "ses_1", "cwd": str(ws.project), **fields})
    path = str(ws.project / "src/cache.py")
    assert hook("start") == ""
    assert hook("prompt", text="Cache the user lookups") == ""
    assert hook("tool", tool={"name": "edit", "args": {
        "filePath": path, "oldString": "", "newString": "class UserCache:\n    pass\n"},
        "output": "", "metadata": {}}) == ""
    assert hook("tool", tool={"name": "bash", "args": {"command": "pytest -q"},
                              "output": "2 passed", "metadata": {"exit": 0}}) == ""
    assert hook("turn_end", text="UserCache is in src/cache.py.") == ""
    assert hook("end", text="deleted") == ""
    events = wait_events(6)
    check_session(events, "opencode", ws)
    assert kinds(events) == ["note", "prompt", "tool_use", "tool_use", "session_summary",
                             "note"]
    edit = tooluse.observe(events[2]["body"]["data"])
    assert (edit.kind, edit.paths, edit.identifiers[:1]) == ("edit", [path], ["UserCache"])
    run = tooluse.observe(events[3]["body"]["data"])
    assert (run.command, run.exit_status) == ("pytest -q", 0)

    wait_records(ws.namespace)
    settled_context(ws.namespace, "user lookups cache")
    printed = hook("prompt", text="user lookups cache")
    assert printed.startswith("<kirolearn-recall>") and "\n## Prior observations" in printed


def test_qwen_code_every_hook(daemon, ws):
    """Qwen Code's payloads, as its CLI sends them (tests/test_qwen_code_e2e.py runs it):
    the empty prompt it sends when a tool's result goes back to the model is no prompt,
    and a shell's ``Exit Code`` is its exit status."""
    base = {"session_id": "qw-1", "cwd": str(ws.project), "permission_mode": "yolo",
            "transcript_path": "/x/qw-1.jsonl"}
    hook = lambda name, **fields: run_hook(  # noqa: E731
        ws, "kirolearn-qwen-code", {**base, "hook_event_name": name, **fields})
    path = str(ws.project / "src/cache.py")
    assert hook("SessionStart", source="startup", model="qwen3-coder") == ""
    assert hook("UserPromptSubmit", prompt="Cache the user lookups",
                submitted_prompt="Cache the user lookups") == ""
    assert hook("PostToolUse", tool_name="write_file", tool_input={
        "file_path": path, "content": "class UserCache:\n    pass\n"},
        tool_response={"llmContent": f"Successfully created and wrote to new file: {path}.",
                       "returnDisplay": "Created"}, tool_use_id="toolu_1") == ""
    assert hook("UserPromptSubmit", prompt="") == ""  # the tool's result, going back
    assert hook("PostToolUse", tool_name="run_shell_command",
                tool_input={"command": "pytest -q"}, tool_response={
                    "llmContent": "Command: pytest -q\nOutput: 2 passed\nExit Code: 0",
                    "returnDisplay": "2 passed"}) == ""
    assert hook("PostToolUseFailure", tool_name="read_file", tool_input={
        "absolute_path": str(ws.project / "missing.py")}, error="File not found") == ""
    assert hook("Stop", stop_hook_active=False,
                last_assistant_message="UserCache is in src/cache.py.") == ""
    assert hook("SessionEnd", reason="prompt_input_exit") == ""
    events = wait_events(7)
    check_session(events, "qwen-code", ws)
    assert kinds(events) == ["note", "prompt", "tool_use", "tool_use", "tool_use",
                             "session_summary", "note"]
    edit = tooluse.observe(events[2]["body"]["data"])
    assert (edit.kind, edit.paths) == ("edit", [path])
    run = tooluse.observe(events[3]["body"]["data"])
    assert (run.command, run.exit_status) == ("pytest -q", 0)
    assert events[4]["body"]["data"]["tool_response"]["is_error"] is True


def test_windsurf_every_hook(daemon, ws):
    """Cascade's hooks, as Windsurf documents them: every edit of a write is an edit, a
    command keeps its exit code; a prompt is stored without a search (Cascade takes no
    context from hooks: the MCP tools recall) and nothing is printed."""
    hook = lambda name, **info: run_hook(  # noqa: E731
        ws, "kirolearn-windsurf", {"agent_action_name": name, "trajectory_id": "traj-1",
                                   "execution_id": "exec-1",
                                   "timestamp": "2026-11-28T10:00:00Z", "tool_info": info})
    path = str(ws.project / "src/cache.py")
    assert hook("pre_user_prompt", user_prompt="Cache the user lookups") == ""
    assert hook("post_read_code", file_path=path, content="") == ""
    assert hook("post_write_code", file_path=path, edits=[
        {"old_string": "", "new_string": "class UserCache:\n    pass\n"},
        {"old_string": "pass", "new_string": "size = 0"}]) == ""
    assert hook("post_run_command", command_line="pytest -q", cwd=str(ws.project),
                exit_code=1, output="1 failed") == ""
    assert hook("post_mcp_tool_use", mcp_server_name="kirolearn",
                mcp_tool_name="search_memory", mcp_tool_arguments={"query": "cache"},
                mcp_result="No relevant memories found.") == ""
    assert hook("post_cascade_response", response="UserCache is in src/cache.py.") == ""
    events = wait_events(7)
    check_session(events, "windsurf", ws)
    assert kinds(events) == ["prompt", "tool_use", "tool_use", "tool_use", "tool_use",
                             "tool_use", "session_summary"]
    read, first, second, run = (tooluse.observe(e["body"]["data"]) for e in events[1:5])
    assert (read.kind, read.paths) == ("read", [path])
    assert (first.kind, first.paths, second.kind) == ("edit", [path], "edit")
    assert (run.command, run.exit_status) == ("pytest -q", 1)
    assert events[5]["body"]["data"]["tool_name"] == "mcp__kirolearn__search_memory"
    # a prompt searched after it is logged; the one Windsurf sent before it never was
    asked = run_hook(ws, "kirolearn-claude-code", {
        "session_id": "s-2", "cwd": str(ws.project), "hook_event_name": "UserPromptSubmit",
        "prompt": "Where is the user cache?"})
    assert asked.startswith('{"hookSpecificOutput"')
    later = wait_events(8)[-1]
    logged_retrieval(later["event_id"])
    with db.reading(db.location(here())) as conn:
        assert conn.execute("SELECT 1 FROM retrievals WHERE prompt_event_id = $1",
                            (events[0]["event_id"],)).fetchone() is None


def test_codex_patch_is_an_edit_per_file(daemon, ws):
    base = {"session_id": "cx-1", "turn_id": "t-1", "transcript_path": None,
            "cwd": str(ws.project), "model": "gpt-5", "permission_mode": "default"}
    hook = lambda name, **fields: run_hook(  # noqa: E731
        ws, "kirolearn-codex", {**base, "hook_event_name": name, **fields})
    patch = ("*** Begin Patch\n*** Update File: src/app.py\n@@\n-DEBUG = True\n"
             "+DEBUG = False\n*** Add File: src/limits.py\n+MAX_RETRIES = 5\n*** End Patch\n")
    assert hook("SessionStart", source="startup") == ""
    assert hook("UserPromptSubmit", prompt="Turn debug off") == ""
    assert hook("PostToolUse", tool_name="apply_patch", tool_input={"command": patch},
                tool_response="Success. Updated the following files:\nM src/app.py",
                tool_use_id="call_2") == ""
    assert hook("Stop", stop_hook_active=False, last_assistant_message="Debug is off.") == ""
    events = wait_events(5)
    check_session(events, "codex", ws)
    assert kinds(events) == ["note", "prompt", "tool_use", "tool_use", "session_summary"]
    app, limits = (tooluse.observe(e["body"]["data"]) for e in events[2:4])
    assert (app.kind, app.paths, app.added, app.removed) == ("edit", ["src/app.py"], 1, 1)
    assert (limits.kind, limits.paths, limits.identifiers) == (
        "edit", ["src/limits.py"], ["MAX_RETRIES"])
