"""The files each agent's configuration lives in: a function per agent of the registry
(``kirolearn.agents``), named by its entry's ``module``.

Given the project (None: the user's own configuration, for every project) and the
user's home, the files install writes, each with the parts (``install/parts.py``) that
go into it. Files are written in this order and
taken out in the reverse one, so a part may read a file listed before it (Codex's
hook trust reads the hooks it trusts).

The MCP tools that only read or add memories are pre-approved where the agent has a
way to say so (Kiro CLI ``allowedTools``, Kiro IDE ``autoApprove``, Claude Code
``permissions.allow``, Codex ``approval_mode``, a Gemini CLI policy rule); ``forget``
deletes and ``update_memory`` rewrites, so for those the agent asks (OpenCode, which
asks about nothing by default, is told to, unless the user has said otherwise).

One module, long as it is: a short function per agent, side by side, so that how one
agent's configuration differs from the others' is read at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kirolearn.agents import AGENTS
from kirolearn.install import codex_trust
from kirolearn.install.parts import (
    MCP_NAME,
    AllowRule,
    Commands,
    Default,
    FlatHooks,
    GroupedHooks,
    Listed,
    McpServer,
    Setting,
    StatusLine,
    WholeFile,
    is_ours,
)

# Not forget, nor update_memory (ASKING_TOOLS): for those the agent asks.
ASKING_TOOLS = ("forget", "update_memory")
APPROVED_TOOLS = ("search_memory", "recall", "resume_session", "timeline", "get_records",
                  "why", "save_observation", "save_session_summary")
KIRO_CLI_TOOLS = [f"@{MCP_NAME}/{tool}" for tool in APPROVED_TOOLS]
CLAUDE_TOOLS = [f"mcp__{MCP_NAME}__{tool}" for tool in APPROVED_TOOLS]


class InstallError(Exception):
    """Something the user has to fix before the configuration can be written."""


TEXT_FORMATS = ("text", "script")  # files that are all ours; a script is made executable


@dataclass(frozen=True)
class ConfigFile:
    """One file install writes: its parts, its format (json, toml, or one of
    TEXT_FORMATS), and what a new file starts from (the same left after uninstall
    means the file goes)."""

    path: Path
    parts: tuple
    format: str = "json"
    template: dict = field(default_factory=dict)


# -- Kiro CLI: one agent file holds the hooks and the MCP server ---------------------------

KIRO_AGENT_TEMPLATE = {
    "name": "kirolearn",
    "description": "Kiro's default tools, with kirolearn's long-term memory hooks.",
    "tools": ["*"],
    "resources": ["file://AGENTS.md", "file://README.md"],
    "useLegacyMcpJson": True,
}
KIRO_DEFAULT_AGENT = "chat.defaultAgent"  # in ~/.kiro/settings/cli.json: plain `kiro-cli chat`


def kiro_settings(home: Path) -> Path:
    """Kiro CLI's own settings (``kiro-cli settings``)."""
    return home / ".kiro" / "settings" / "cli.json"


def kiro_cli(project: Path | None, home: Path) -> list[ConfigFile]:
    hooks = FlatHooks("kiro-cli", {"agentSpawn": {}, "userPromptSubmit": {"timeout_ms": 5000},
                                   "postToolUse": {"matcher": "*"}, "stop": {}})
    return [ConfigFile((project or home) / ".kiro" / "agents" / "kirolearn.json",
                       (hooks, McpServer(), Listed(("allowedTools",), tuple(KIRO_CLI_TOOLS))),
                       template=KIRO_AGENT_TEMPLATE)]


DEFAULT_AGENT = Setting((KIRO_DEFAULT_AGENT,), MCP_NAME)


# -- Kiro IDE: a file per hook, and the project's MCP settings ------------------------------

KIRO_IDE_HOOKS = {  # file stem → (trigger, what it does)
    "kirolearn-prompt": ("promptSubmit", "gives the agent what kirolearn remembers"),
    "kirolearn-tool": ("postToolUse", "records each tool use"),
    "kirolearn-stop": ("agentStop", "records the end of the turn"),
}


def _kiro_ide_hook(stem: str) -> WholeFile:
    trigger, what = KIRO_IDE_HOOKS[stem]

    def render(commands: Commands) -> dict:
        when: dict = {"type": trigger}
        if trigger == "postToolUse":
            when["toolTypes"] = ["*"]
        return {"enabled": True, "name": f"kirolearn: {trigger}",
                "description": f"kirolearn {what}.", "version": "1", "when": when,
                "then": {"type": "runCommand",
                         "command": f"{commands.shim('kiro-ide')} {trigger}"}}

    def command(config: object) -> str | None:
        if not isinstance(config, dict) or config.get("enabled") is False:
            return None
        then = config.get("then")
        found = then.get("command") if isinstance(then, dict) else None
        return found if is_ours(found) else None

    return WholeFile(f"{stem}.kiro.hook", render, command, required=(f"{stem}.kiro.hook",))


def kiro_ide(project: Path | None, home: Path) -> list[ConfigFile]:
    if project is None:
        raise InstallError("Kiro IDE hooks live in a project: use --project DIR")
    hooks = [ConfigFile(project / ".kiro" / "hooks" / f"{stem}.kiro.hook",
                        (_kiro_ide_hook(stem),)) for stem in KIRO_IDE_HOOKS]
    server = McpServer(shape=lambda entry: {**entry, "autoApprove": list(APPROVED_TOOLS)})
    return [*hooks, ConfigFile(project / ".kiro" / "settings" / "mcp.json", (server,))]


# -- Claude Code: settings.json hooks, .mcp.json (or ~/.claude.json) server -----------------

CLAUDE_HOOKS = {  # event → extra fields of its matcher group and of its handler
    "SessionStart": ({"matcher": "startup|resume|clear|compact"}, {"timeout": 10}),
    "UserPromptSubmit": ({}, {"timeout": 5}),
    # Why the lines a Read of a range or an Edit is about are as they are, before it runs.
    "PreToolUse": ({"matcher": "Read|Edit|MultiEdit"}, {"timeout": 5}),
    # Not "async": Claude Code kills background hooks when it exits, so a headless run
    # (`claude -p`) would lose its tool uses and its turn end (tests/test_claude_code_e2e).
    "PostToolUse": ({}, {"timeout": 5}),
    "PostToolUseFailure": ({}, {"timeout": 5}),
    "Stop": ({}, {"timeout": 5}),
    "SessionEnd": ({}, {"timeout": 5}),
}


def claude_code(project: Path | None, home: Path) -> list[ConfigFile]:
    settings = [GroupedHooks("claude-code", CLAUDE_HOOKS),
                Listed(("permissions", "allow"), tuple(CLAUDE_TOOLS)), StatusLine()]
    server = McpServer(shape=lambda entry: {"type": "stdio", **entry})
    if project is None:  # user scope: Claude Code keeps its servers in ~/.claude.json
        return [ConfigFile(home / ".claude" / "settings.json", tuple(settings)),
                ConfigFile(home / ".claude.json", (server,))]
    # Claude Code asks before starting a project's servers, unless the settings enable it.
    settings.append(Listed(("enabledMcpjsonServers",), (MCP_NAME,)))
    return [ConfigFile(project / ".claude" / "settings.json", tuple(settings)),
            ConfigFile(project / ".mcp.json", (server,))]


# -- Codex CLI: .codex/hooks.json, MCP server in config.toml, trust of our hooks ------------

CODEX_HOOKS = {
    "SessionStart": ({"matcher": "startup|resume|clear"}, {"timeout": 10}),
    "UserPromptSubmit": ({}, {"timeout": 5}),
    "PostToolUse": ({}, {"timeout": 5}),
    "Stop": ({}, {"timeout": 5}),
    "SessionEnd": ({}, {"timeout": 3}),  # Codex allows a session's end no more
}
# Codex gives an MCP server 1 s to start before a first turn goes on without its tools;
# ours (Python and the SDK) needs about that on an idle machine, more on a busy one.
CODEX_MCP_GRACE = Default(("mcp_optional_startup_grace_ms",), 5000)


def _codex_server(entry: dict) -> dict:
    return {**entry, "tools": {tool: {"approval_mode": "approve"} for tool in APPROVED_TOOLS}}


def codex(project: Path | None, home: Path) -> list[ConfigFile]:
    """Codex runs a hook only once the user trusts it (its ``/hooks`` screen);
    install records that trust for our hooks in ``~/.codex/config.toml``, as the
    screen does, with the hashes Codex itself reports."""
    codex_home = Path(os.environ.get("CODEX_HOME") or home / ".codex")
    hooks_file = project / ".codex" / "hooks.json" if project else codex_home / "hooks.json"
    hooks = ConfigFile(hooks_file, (GroupedHooks("codex", CODEX_HOOKS),))
    server = McpServer("mcp_servers", _codex_server)
    trust = codex_trust.Trust(hooks_file, project or home, home)
    user_config = codex_home / "config.toml"
    if project is None:
        return [hooks, ConfigFile(user_config, (server, CODEX_MCP_GRACE, trust), "toml")]
    return [hooks, ConfigFile(project / ".codex" / "config.toml", (server, CODEX_MCP_GRACE),
                              "toml"),
            ConfigFile(user_config, (trust,), "toml")]


# -- Gemini CLI: hooks and MCP server in .gemini/settings.json, approvals in a policy -----

GEMINI_HOOKS = {  # timeouts in milliseconds
    "SessionStart": ({}, {"name": "kirolearn", "timeout": 10000}),
    "BeforeAgent": ({}, {"name": "kirolearn", "timeout": 5000}),
    "AfterTool": ({}, {"name": "kirolearn", "timeout": 5000}),
    "AfterAgent": ({}, {"name": "kirolearn", "timeout": 5000}),
    "SessionEnd": ({}, {"name": "kirolearn", "timeout": 5000}),
}


def gemini_home(home: Path) -> Path:
    """Gemini CLI's own folder (``$GEMINI_CLI_HOME/.gemini``, else ``~/.gemini``)."""
    return Path(os.environ.get("GEMINI_CLI_HOME") or home) / ".gemini"


def gemini_trusts(project: Path, home: Path) -> bool:
    """Whether Gemini CLI reads the project's settings: with folder trust on (its
    default), only in a folder its ``trustedFolders.json`` trusts (the longest
    matching rule wins; ``TRUST_PARENT`` trusts the rule's parent folder)."""
    def load(path: Path) -> dict:
        try:
            value = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    security = load(gemini_home(home) / "settings.json").get("security")
    folder_trust = security.get("folderTrust") if isinstance(security, dict) else None
    if isinstance(folder_trust, dict) and folder_trust.get("enabled") is False:
        return True
    rules = load(Path(os.environ.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH")
                      or gemini_home(home) / "trustedFolders.json"))
    here = project.resolve()
    matches = [(len(rule), level) for rule, level in rules.items()
               if level in ("TRUST_FOLDER", "TRUST_PARENT", "DO_NOT_TRUST")
               and here.is_relative_to(Path(rule).resolve().parent if level == "TRUST_PARENT"
                                       else Path(rule).resolve())]
    return bool(matches) and max(matches)[1] != "DO_NOT_TRUST"


def gemini(project: Path | None, home: Path) -> list[ConfigFile]:
    """Gemini CLI reads tool approvals from the user's policy files only (not a
    project's), so each install has its own there: uninstalling one project leaves
    the others' approvals alone."""
    settings = (project / ".gemini" if project else gemini_home(home)) / "settings.json"
    name = "kirolearn" if project is None else "kirolearn-" + hashlib.sha256(
        str(project).encode()).hexdigest()[:12]
    return [ConfigFile(settings, (GroupedHooks("gemini", GEMINI_HOOKS), McpServer())),
            ConfigFile(gemini_home(home) / "policies" / f"{name}.toml",
                       (AllowRule(APPROVED_TOOLS),), "toml")]


# -- Qwen Code: hooks, MCP server, approvals and status line in .qwen/settings.json -------

QWEN_HOOKS = {  # timeouts in seconds
    "SessionStart": ({"matcher": "startup|resume|clear"}, {"name": "kirolearn", "timeout": 10}),
    "UserPromptSubmit": ({}, {"name": "kirolearn", "timeout": 5}),
    "PostToolUse": ({}, {"name": "kirolearn", "timeout": 5}),
    "PostToolUseFailure": ({}, {"name": "kirolearn", "timeout": 5}),
    "Stop": ({}, {"name": "kirolearn", "timeout": 5}),
    "SessionEnd": ({}, {"name": "kirolearn", "timeout": 5}),
}


def qwen_code(project: Path | None, home: Path) -> list[ConfigFile]:
    """Qwen Code takes Claude Code's hooks and approvals (``permissions.allow``), Gemini
    CLI's servers (``mcpServers``), and a status line command under ``ui``. A project's
    own MCP servers wait for the user's approval in Qwen Code's interface (a headless
    run never starts them), so ours is the user's, for every project, as Copilot's is."""
    settings = (project or home) / ".qwen" / "settings.json"
    return [ConfigFile(settings, (GroupedHooks("qwen-code", QWEN_HOOKS),
                                  Listed(("permissions", "allow"), tuple(CLAUDE_TOOLS)),
                                  StatusLine(section="ui", padding=False))),
            ConfigFile(home / ".qwen" / "settings.json", (McpServer(),))]


# -- Windsurf: Cascade hooks in .windsurf/hooks.json, servers in ~/.codeium/windsurf --------

WINDSURF_HOOKS = {event: {"show_output": False} for event in (
    "pre_user_prompt", "post_write_code", "post_read_code", "post_run_command",
    "post_mcp_tool_use", "post_cascade_response")}


def windsurf_home(home: Path) -> Path:
    return home / ".codeium" / "windsurf"


def windsurf(project: Path | None, home: Path) -> list[ConfigFile]:
    """Cascade reads hooks from the workspace (``.windsurf/hooks.json``) and the user's
    folder, and MCP servers from the user's ``mcp_config.json`` only."""
    hooks = (project / ".windsurf" if project else windsurf_home(home)) / "hooks.json"
    return [ConfigFile(hooks, (FlatHooks("windsurf", WINDSURF_HOOKS),)),
            ConfigFile(windsurf_home(home) / "mcp_config.json", (McpServer(),))]


# -- Cline: an executable file per hook, the MCP server in its CLI's settings -------------

CLINE_HOOKS = ("TaskStart", "TaskResume", "UserPromptSubmit", "PostToolUse", "TaskComplete",
               "TaskCancel", "SessionShutdown")
CLINE_COMMAND = re.compile(r"^exec (\S+)", re.MULTILINE)


def _cline_hook(name: str) -> WholeFile:
    def render(commands: Commands) -> str:
        return (f"#!/bin/sh\n# Cline's {name} hook: kirolearn's long-term memory"
                f" (kirolearn install --agent cline)\nexec {commands.shim('cline')}\n")

    def command(content: object) -> str | None:
        found = CLINE_COMMAND.search(content) if isinstance(content, str) else None
        return found.group(1) if found and is_ours(found.group(1)) else None

    return WholeFile(name, render, command, required=(name,))


def cline_home(home: Path) -> Path:
    """The Cline CLI's own folder (``$CLINE_DIR``, else ``~/.cline``)."""
    return Path(os.environ.get("CLINE_DIR") or home / ".cline")


def cline(project: Path | None, home: Path) -> list[ConfigFile]:
    """Cline (its VS Code extension and its CLI) runs the file named after a hook, from
    the project's ``.clinerules/hooks`` and the user's ``~/Documents/Cline/Hooks``; its
    CLI reads MCP servers from ``cline_mcp_settings.json`` in its data folder."""
    hooks = project / ".clinerules" / "hooks" if project else home / "Documents" / "Cline" \
        / "Hooks"
    data = Path(os.environ.get("CLINE_DATA_DIR") or cline_home(home) / "data")
    settings = Path(os.environ.get("CLINE_MCP_SETTINGS_PATH")
                    or data / "settings" / "cline_mcp_settings.json")
    # Without a "timeout" the CLI gives a stdio server 3 s to answer its first request,
    # which a Python server on a busy machine can miss: its tools are then not offered.
    server = McpServer(shape=lambda entry: {**entry, "disabled": False, "timeout": 60,
                                            "autoApprove": list(APPROVED_TOOLS)})
    return [*(ConfigFile(hooks / name, (_cline_hook(name),), "script") for name in CLINE_HOOKS),
            ConfigFile(settings, (server,))]


# -- GitHub Copilot CLI: .github/hooks/kirolearn.json; servers in ~/.copilot -------------

COPILOT_HOOKS = {event: {"type": "command", "timeoutSec": 5} for event in (
    "sessionStart", "userPromptSubmitted", "postToolUse", "postToolUseFailure", "agentStop",
    "sessionEnd")}


def copilot_home(home: Path) -> Path:
    """Copilot CLI's own folder (``$COPILOT_HOME``, else ``~/.copilot``)."""
    return Path(os.environ.get("COPILOT_HOME") or home / ".copilot")


def copilot_trusts(project: Path, home: Path) -> bool:
    """Whether Copilot CLI reads the repository's hooks: only in a folder the user
    trusted (``trusted_folders`` in its ``config.json``, ``trustedFolders`` in its
    ``settings.json``; both may hold ``//`` comments), or inside one."""
    trusted: list = []
    for name, key in (("config.json", "trusted_folders"), ("settings.json", "trustedFolders")):
        try:
            text = (copilot_home(home) / name).read_text("utf-8")
            value = json.loads(re.sub(r"(?m)^\s*//.*$", "", text))
        except (OSError, ValueError):
            continue
        folders = value.get(key) if isinstance(value, dict) else None
        trusted += folders if isinstance(folders, list) else []
    here = project.resolve()
    return any(isinstance(f, str) and here.is_relative_to(Path(f).resolve()) for f in trusted)


def copilot(project: Path | None, home: Path) -> list[ConfigFile]:
    """Copilot CLI reads hook files from the repository (``.github/hooks``) and from the
    user's ``~/.copilot/hooks``, and MCP servers from the user's
    ``~/.copilot/mcp-config.json``. It approves read-only tools by itself."""
    server = McpServer(shape=lambda entry: {"type": "local", **entry, "tools": ["*"]})
    hooks_folder = project / ".github" / "hooks" if project else copilot_home(home) / "hooks"
    return [ConfigFile(hooks_folder / "kirolearn.json",
                       (FlatHooks("copilot", COPILOT_HOOKS, "bash", named=True),),
                       template={"version": 1}),
            ConfigFile(copilot_home(home) / "mcp-config.json", (server,))]


# -- Cursor: .cursor/hooks.json and .cursor/mcp.json ---------------------------------------

CURSOR_HOOKS = {event: {} for event in (
    "sessionStart", "beforeSubmitPrompt", "afterFileEdit", "afterShellExecution",
    "afterMCPExecution", "afterAgentResponse", "sessionEnd")}


def cursor(project: Path | None, home: Path) -> list[ConfigFile]:
    where = (project or home) / ".cursor"
    return [ConfigFile(where / "hooks.json", (FlatHooks("cursor", CURSOR_HOOKS),),
                       template={"version": 1}),
            ConfigFile(where / "mcp.json", (McpServer(),))]


# -- OpenCode: a plugin file that runs our shim, the server in opencode.json ----------------

OPENCODE_PLUGIN = Path(__file__).with_name("opencode_plugin.js")
OPENCODE_TEMPLATE = {"$schema": "https://opencode.ai/config.json"}  # OpenCode adds it too
OPENCODE_COMMAND = re.compile(r'^const SHIM = (".*");$', re.MULTILINE)


def _opencode_plugin() -> WholeFile:
    def render(commands: Commands) -> str:
        text = OPENCODE_PLUGIN.read_text("utf-8")
        return OPENCODE_COMMAND.sub(lambda _: "const SHIM = "
                                    + json.dumps(commands.shim("opencode")) + ";", text)

    def command(content: object) -> str | None:
        found = OPENCODE_COMMAND.search(content) if isinstance(content, str) else None
        shim = json.loads(found.group(1)) if found else None
        return shim if is_ours(shim) else None

    return WholeFile("kirolearn.js", render, command, required=("kirolearn.js",))


def opencode(project: Path | None, home: Path) -> list[ConfigFile]:
    """OpenCode runs every tool without asking unless told otherwise: ours need nothing,
    but ``forget`` and ``update_memory`` are set to ask."""
    server = McpServer("mcp", lambda entry: {
        "type": "local", "command": [entry["command"], *entry["args"]], "enabled": True})
    asks = tuple(Default(("permission", f"{MCP_NAME}_{tool}"), "ask") for tool in ASKING_TOOLS)
    where = project or home / ".config" / "opencode"
    plugins = (project / ".opencode" if project else where) / "plugins"
    return [ConfigFile(plugins / "kirolearn.js", (_opencode_plugin(),), "text"),
            ConfigFile(where / "opencode.json", (server, *asks), template=OPENCODE_TEMPLATE)]


# -- what is left for the user to do ------------------------------------------------------------

def kiro_cli_note(project: Path | None, home: Path) -> str | None:
    """What to run when plain ``kiro-cli chat`` does not use our agent (None: it does)."""
    path = kiro_settings(home)
    try:
        settings = json.loads(path.read_text("utf-8")) if path.exists() else {}
    except (OSError, ValueError) as exc:
        return f"{path} cannot be read ({exc}); fix or remove it"
    default = settings.get(KIRO_DEFAULT_AGENT) if isinstance(settings, dict) else None
    if default == MCP_NAME:
        return None
    uses = f"agent {default!r}" if default else "its built-in default agent"
    return (f"plain `kiro-cli chat` uses {uses}, which has no kirolearn hooks; run"
            f" `kiro-cli chat --agent {MCP_NAME}`, or make it the default: kirolearn"
            " install --agent kiro-cli --default-agent")


def gemini_note(project: Path | None, home: Path) -> str | None:
    if project is None or gemini_trusts(project, home):
        return None
    return (f"Gemini CLI ignores {project / '.gemini' / 'settings.json'} until you trust"
            " the folder: start gemini there and choose to trust it (or run /permissions)")


def copilot_note(project: Path | None, home: Path) -> str | None:
    if project is None or copilot_trusts(project, home):
        return None
    return (f"Copilot CLI runs {project / '.github' / 'hooks'} only in a folder you trust:"
            " start copilot there and choose to trust it for future sessions")


# -- each agent's, by the registry --------------------------------------------------------------

def config_files(agent: str, project: Path | None, home: Path) -> list[ConfigFile]:
    """The files install writes for agent, in project or (None) in the user's home: the
    function of this module named by the agent's entry (``kirolearn.agents``)."""
    if agent not in AGENTS:
        raise InstallError(f"unknown agent {agent!r}; choose one of {', '.join(AGENTS)}")
    return globals()[AGENTS[agent].module](project, home)


def note(agent: str) -> Callable[[Path | None, Path], str | None] | None:
    """What says what the user may still have to do once the agent is installed
    (``<module>_note`` here; None: nothing ever)."""
    return globals().get(f"{AGENTS[agent].module}_note")
