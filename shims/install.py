"""Agent configuration: write it, merge it, remove it, check it.

``kirolearn install --agent A`` puts our hooks and our MCP server where agent A reads
them, keeping everything else in each file as it was; running it twice changes
nothing, and a file that changes is first copied to ``<file>.kirolearn.bak``.
``uninstall`` removes only our entries (and files that held nothing else). Our
hooks are recognised by their command (one of our shims), our MCP server by its
name and command (``kirolearn mcp``). A file that is not valid JSON is left alone
with an error.

Where (``DIR`` is ``--project DIR``, ``~`` is ``--global``):

- kiro-cli: the agent ``DIR/.kiro/agents/kirolearn.json`` (or ``~/.kiro/…``), hooks
  and MCP server in one file;
- kiro-ide (per project only): ``DIR/.kiro/hooks/kirolearn-*.kiro.hook`` and the
  server in ``DIR/.kiro/settings/mcp.json``;
- claude-code: hooks in ``DIR/.claude/settings.json``, the server in ``DIR/.mcp.json``;
  with ``--global``, ``~/.claude/settings.json`` and ``~/.claude.json``.

The MCP tools that only read or add memories are pre-approved (Kiro CLI
``allowedTools``, Kiro IDE ``autoApprove``, Claude Code ``permissions.allow``);
``forget`` deletes and ``update_memory`` rewrites, so the agent asks first.

A project's files are committed and shared, so they name our commands as found on
``PATH`` (``kirolearn-claude-code``, ``kirolearn mcp``): they work for every teammate
who has kirolearn installed. The user's own files (``--global``), or any with
``absolute``, name this installation's absolute paths; so does a project's when this
installation is not what ``PATH`` finds (``Commands.on_path`` says which).

The backup is the file as the user had it: install makes one only of a file that holds
none of our entries, and uninstall puts it back byte for byte when what is left is what
it holds. A file or folder install created goes once nothing else is in it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

AGENTS = ("kiro-cli", "kiro-ide", "claude-code")
BACKUP_SUFFIX = ".kirolearn.bak"

KIRO_CLI_HOOKS = ("agentSpawn", "userPromptSubmit", "postToolUse", "stop")
KIRO_IDE_HOOKS = {  # file stem → (trigger, what it does)
    "kirolearn-prompt": ("promptSubmit", "gives the agent what kirolearn remembers"),
    "kirolearn-tool": ("postToolUse", "records each tool use"),
    "kirolearn-stop": ("agentStop", "records the end of the turn"),
}
CLAUDE_HOOKS = {  # event → extra fields of its matcher group and of its handler
    "SessionStart": ({"matcher": "startup|resume|clear|compact"}, {"timeout": 10}),
    "UserPromptSubmit": ({}, {"timeout": 5}),
    # Not "async": Claude Code kills background hooks when it exits, so a headless run
    # (`claude -p`) would lose its tool uses and its turn end (tests/test_claude_code_e2e).
    "PostToolUse": ({}, {"timeout": 5}),
    "PostToolUseFailure": ({}, {"timeout": 5}),
    "Stop": ({}, {"timeout": 5}),
    "SessionEnd": ({}, {"timeout": 5}),
}
KIRO_AGENT_TEMPLATE = {
    "name": "kirolearn",
    "description": "Kiro's default tools, with kirolearn's long-term memory hooks.",
    "tools": ["*"],
    "resources": ["file://AGENTS.md", "file://README.md"],
    "useLegacyMcpJson": True,
}
KIRO_DEFAULT_AGENT = "chat.defaultAgent"  # in ~/.kiro/settings/cli.json: plain `kiro-cli chat`
MCP_NAME = "kirolearn"
MCP_ENTRY = "MCP server"  # how check() names our MCP server among the hooks
# Not forget, nor update_memory: for those the agent asks.
APPROVED_TOOLS = ("search_memory", "recall", "resume_session", "timeline", "get_records",
                  "save_observation", "save_session_summary")
# The kinds of file we write, and how each agent names an approved tool of ours.
KIRO_AGENT, KIRO_HOOK, KIRO_MCP, KIRO_SETTINGS, CLAUDE_SETTINGS, CLAUDE_MCP = (
    "kiro-agent", "kiro-hook", "kiro-mcp", "kiro-settings", "claude-settings", "claude-mcp")
KIRO_CLI_TOOLS = [f"@{MCP_NAME}/{tool}" for tool in APPROVED_TOOLS]
CLAUDE_TOOLS = [f"mcp__{MCP_NAME}__{tool}" for tool in APPROVED_TOOLS]


class InstallError(Exception):
    """Something the user has to fix before the configuration can be written."""


@dataclass(frozen=True)
class Change:
    path: Path
    action: str  # created | updated | unchanged | removed | absent
    backup: Path | None = None

    def __str__(self) -> str:
        text = f"{self.action:<9} {self.path}"
        return text + (f" (previous version: {self.backup})" if self.backup else "")


@dataclass(frozen=True)
class Commands:
    """How a configuration names our commands: by name, found on the agent's PATH, or
    by this installation's absolute path."""
    on_path: bool

    @classmethod
    def choose(cls, absolute: bool) -> Commands:
        """By name unless absolute is asked for, or PATH finds another kirolearn (or
        none) than this one."""
        found = shutil.which("kirolearn")
        return cls(not absolute and found is not None
                   and Path(found).resolve() == Path(installed("kirolearn")).resolve())

    def program(self, name: str) -> str:
        return name if self.on_path else installed(name)

    def shim(self, agent: str) -> str:
        return self.program(f"kirolearn-{agent}")

    def mcp_server(self) -> dict:
        """Our MCP server's entry: the agent starts ``kirolearn mcp`` in the project."""
        return {"command": self.program("kirolearn"), "args": ["mcp"]}


def installed(name: str) -> str:
    """The absolute path of one of this installation's commands."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name) or name


def is_ours(command: object) -> bool:
    if not isinstance(command, str) or not command.strip():
        return False
    name = os.path.basename(command.split()[0].strip("'\""))
    return name in {f"kirolearn-{agent}" for agent in AGENTS}


def is_our_mcp(entry: object) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("command"), str)
            and os.path.basename(entry["command"]) == "kirolearn"
            and entry.get("args") == ["mcp"])


def config_files(agent: str, project: Path | None, home: Path) -> list[tuple[Path, str]]:
    """The files install writes for agent, in project or (None) in the user's home, each
    with its kind."""
    if agent == "kiro-cli":
        return [((project or home) / ".kiro" / "agents" / "kirolearn.json", KIRO_AGENT)]
    if agent == "kiro-ide":
        if project is None:
            raise InstallError("Kiro IDE hooks live in a project: use --project DIR")
        return [*((project / ".kiro" / "hooks" / f"{stem}.kiro.hook", KIRO_HOOK)
                  for stem in KIRO_IDE_HOOKS),
                (project / ".kiro" / "settings" / "mcp.json", KIRO_MCP)]
    if agent == "claude-code":
        if project is None:  # user scope: Claude Code keeps its servers in ~/.claude.json
            return [(home / ".claude" / "settings.json", CLAUDE_SETTINGS),
                    (home / ".claude.json", CLAUDE_MCP)]
        return [(project / ".claude" / "settings.json", CLAUDE_SETTINGS),
                (project / ".mcp.json", CLAUDE_MCP)]
    raise InstallError(f"unknown agent {agent!r}; choose one of {', '.join(AGENTS)}")


# -- reading and writing JSON files --------------------------------------------------------


def read_json(path: Path) -> dict | None:
    """The file's JSON object, None if there is no file; InstallError if it is not one."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InstallError(f"cannot read {path}: {exc}") from exc
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InstallError(f"{path} is not valid JSON ({exc}); fix or move it, then run "
                           "this again") from exc
    if not isinstance(value, dict):
        raise InstallError(f"{path} does not hold a JSON object; fix or move it")
    return value


def write_json(path: Path, value: dict | None, before: dict | None, backup: bool) -> Change:
    """Write value (None: delete the file, which held only our entries), first copying
    a file that changes to its backup when asked; returns the change."""
    if value == before:
        return Change(path, "unchanged" if value is not None else "absent")
    copy = None
    if backup and before is not None and value is not None:
        copy = path.with_name(path.name + BACKUP_SUFFIX)
        shutil.copy2(path, copy)
    if value is None:
        path.unlink()
        return Change(path, "removed")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", "utf-8")
    if before is not None:
        shutil.copymode(path, temporary)
    os.replace(temporary, path)
    return Change(path, "created" if before is None else "updated", copy)


# -- per kind of file: the configuration with and without our entries ----------------------


def _listed(config: dict, key: str, names: list[str], present: bool) -> dict:
    """config with names appended to (present) or removed from (not present) the list at
    key; a list left empty goes, so the file is as it was before."""
    config = dict(config)
    current = config.get(key)
    current = current if isinstance(current, list) else []
    kept = [item for item in current if item not in names]
    new = kept + names if present else kept
    if new:
        config[key] = new
    else:
        config.pop(key, None)
    return config


def _with_server(config: dict, entry: dict | None) -> dict:
    """config with our MCP server set to entry (None: removed)."""
    config = dict(config)
    servers = config.get("mcpServers")
    servers = dict(servers) if isinstance(servers, dict) else {}
    if is_our_mcp(servers.get(MCP_NAME)) or entry is not None:
        servers.pop(MCP_NAME, None)
    if entry is not None:
        servers[MCP_NAME] = entry
    if servers:
        config["mcpServers"] = servers
    else:
        config.pop("mcpServers", None)
    return config


def _without_ours_kiro_cli(config: dict) -> dict:
    config = dict(config)
    hooks = config.get("hooks")
    if isinstance(hooks, dict):
        kept = {}
        for name, entries in hooks.items():
            if isinstance(entries, list):
                entries = [e for e in entries
                           if not (isinstance(e, dict) and is_ours(e.get("command")))]
                if not entries:
                    continue
            kept[name] = entries
        if kept:
            config["hooks"] = kept
        else:
            config.pop("hooks")
    return _listed(_with_server(config, None), "allowedTools", KIRO_CLI_TOOLS, False)


def _with_ours_kiro_cli(config: dict, commands: Commands) -> dict:
    config = _without_ours_kiro_cli(config)
    hooks = dict(config.get("hooks") or {})
    command = commands.shim("kiro-cli")
    for name in KIRO_CLI_HOOKS:
        entry: dict = {"command": command}
        if name == "userPromptSubmit":
            entry["timeout_ms"] = 5000
        if name == "postToolUse":
            entry["matcher"] = "*"
        entries = hooks.get(name)
        hooks[name] = [*(entries if isinstance(entries, list) else []), entry]
    config = _with_server({**config, "hooks": hooks}, commands.mcp_server())
    return _listed(config, "allowedTools", KIRO_CLI_TOOLS, True)


def _without_ours_claude(config: dict) -> dict:
    config = dict(config)
    hooks = config.get("hooks")
    if isinstance(hooks, dict):
        kept = {}
        for event, groups in hooks.items():
            if not isinstance(groups, list):
                kept[event] = groups
                continue
            new_groups = []
            for group in groups:
                handlers = group.get("hooks") if isinstance(group, dict) else None
                if isinstance(handlers, list):
                    mine = [h for h in handlers
                            if isinstance(h, dict) and is_ours(h.get("command"))]
                    if mine:
                        handlers = [h for h in handlers if h not in mine]
                        if not handlers:
                            continue
                        group = {**group, "hooks": handlers}
                new_groups.append(group)
            if new_groups:
                kept[event] = new_groups
        if kept:
            config["hooks"] = kept
        else:
            config.pop("hooks")
    permissions = config.get("permissions")
    if isinstance(permissions, dict):
        permissions = _listed(permissions, "allow", CLAUDE_TOOLS, False)
        if permissions:
            config["permissions"] = permissions
        else:
            config.pop("permissions")
    return _listed(config, "enabledMcpjsonServers", [MCP_NAME], False)


def _with_ours_claude(config: dict, project: bool, commands: Commands) -> dict:
    """Our hooks; our read-and-save tools allowed; and in a project, our server in
    ``.mcp.json`` enabled (Claude Code asks before starting a project's servers)."""
    config = _without_ours_claude(config)
    hooks = config.get("hooks")
    hooks = dict(hooks) if isinstance(hooks, dict) else {}
    command = commands.shim("claude-code")
    for event, (group_extra, handler_extra) in CLAUDE_HOOKS.items():
        group = {**group_extra, "hooks": [{"type": "command", "command": command,
                                           **handler_extra}]}
        groups = hooks.get(event)
        hooks[event] = [*(groups if isinstance(groups, list) else []), group]
    permissions = config.get("permissions")
    permissions = permissions if isinstance(permissions, dict) else {}
    config = {**config, "hooks": hooks,
              "permissions": _listed(permissions, "allow", CLAUDE_TOOLS, True)}
    return _listed(config, "enabledMcpjsonServers", [MCP_NAME], True) if project else config


def _kiro_ide_hook(stem: str, commands: Commands) -> dict:
    trigger, what = KIRO_IDE_HOOKS[stem]
    when: dict = {"type": trigger}
    if trigger == "postToolUse":
        when["toolTypes"] = ["*"]
    return {"enabled": True, "name": f"kirolearn: {trigger}",
            "description": f"kirolearn {what}.", "version": "1", "when": when,
            "then": {"type": "runCommand", "command": f"{commands.shim('kiro-ide')} {trigger}"}}


def with_ours(kind: str, path: Path, config: dict | None, project: bool,
              commands: Commands) -> dict:
    """The file's configuration with our entries in it."""
    if kind == KIRO_AGENT:
        return _with_ours_kiro_cli(config if config is not None else dict(KIRO_AGENT_TEMPLATE),
                                   commands)
    if kind == KIRO_HOOK:
        return _kiro_ide_hook(path.name.removesuffix(".kiro.hook"), commands)
    if kind == KIRO_SETTINGS:
        return {**(config or {}), KIRO_DEFAULT_AGENT: MCP_NAME}
    if kind == CLAUDE_SETTINGS:
        return _with_ours_claude(config or {}, project, commands)
    entry = commands.mcp_server()
    if kind == KIRO_MCP:
        entry["autoApprove"] = list(APPROVED_TOOLS)
    else:
        entry = {"type": "stdio", **entry}
    return _with_server(config or {}, entry)


def without_ours(kind: str, config: dict) -> dict | None:
    """The file's configuration without our entries (None: nothing is left)."""
    if kind == KIRO_AGENT:
        left = _without_ours_kiro_cli(config)
        return None if left == KIRO_AGENT_TEMPLATE else left
    if kind == KIRO_HOOK:
        return None if is_ours((config.get("then") or {}).get("command")) else config
    if kind == KIRO_SETTINGS:
        left = {k: v for k, v in config.items()
                if not (k == KIRO_DEFAULT_AGENT and v == MCP_NAME)}
        return left or None
    left = (_without_ours_claude(config) if kind == CLAUDE_SETTINGS
            else _with_server(config, None))
    return left or None


# -- the operations -------------------------------------------------------------------------


def install(agent: str, project: Path | None, home: Path, absolute: bool = False,
            default_agent: bool = False) -> list[Change]:
    """Write or merge agent's hooks and MCP server (and with default_agent, make
    kirolearn Kiro CLI's default agent); returns what changed. Checks every file first,
    so an unreadable one changes nothing."""
    files = config_files(agent, project, home)
    if default_agent:
        if agent != "kiro-cli":
            raise InstallError("--default-agent is for kiro-cli")
        files.append((kiro_settings(home), KIRO_SETTINGS))
    commands = Commands.choose(absolute or project is None)
    before = {path: read_json(path) for path, _ in files}
    changes = []
    for path, kind in files:
        value = with_ours(kind, path, before[path], project is not None, commands)
        theirs = before[path] is not None and not our_entries(kind, path, before[path])
        changes.append(write_json(path, value, before[path], backup=theirs))
    return changes


def uninstall(agent: str, project: Path | None, home: Path) -> list[Change]:
    """Remove only our entries: a file left as the user had it is their backup, put
    back; a file or folder that held only ours goes."""
    files = config_files(agent, project, home)
    if agent == "kiro-cli" and (read_json(kiro_settings(home)) or {}).get(
            KIRO_DEFAULT_AGENT) == MCP_NAME:
        files.append((kiro_settings(home), KIRO_SETTINGS))
    before = {path: read_json(path) for path, _ in files}
    changes = []
    for path, kind in files:
        if before[path] is None:
            changes.append(Change(path, "absent"))
            continue
        value = without_ours(kind, before[path])
        backup = path.with_name(path.name + BACKUP_SUFFIX)
        if value is not None and value != before[path] and _holds(backup, value):
            os.replace(backup, path)  # as the user had it, byte for byte
            changes.append(Change(path, "restored"))
        else:
            changes.append(write_json(path, value, before[path], backup=False))
        if value is None:
            _remove_empty_folders(path.parent, home if kind == KIRO_SETTINGS else project or home)
    return changes


def kiro_settings(home: Path) -> Path:
    """Kiro CLI's own settings (``kiro-cli settings``)."""
    return home / ".kiro" / "settings" / "cli.json"


def _holds(backup: Path, value: dict) -> bool:
    """Whether the backup holds value (a missing or broken backup holds nothing)."""
    try:
        return read_json(backup) == value
    except InstallError:
        return False


def _remove_empty_folders(folder: Path, root: Path) -> None:
    """Remove folder and its parents below root while they are empty."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty, or not ours to remove
            return
        folder = folder.parent


def our_entries(kind: str, path: Path, config: dict) -> dict[str, str]:
    """Our entries in one file: hook name (for the IDE, the file; MCP_ENTRY for the MCP
    server) → the command it runs."""
    found: dict[str, str] = {}
    hooks = config.get("hooks") if isinstance(config.get("hooks"), dict) else {}
    if kind == KIRO_AGENT:
        for name, entries in hooks.items():
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, dict) and is_ours(entry.get("command")):
                    found[name] = entry["command"]
    elif kind == CLAUDE_SETTINGS:
        for event, groups in hooks.items():
            for group in groups if isinstance(groups, list) else []:
                for handler in (group.get("hooks") or []) if isinstance(group, dict) else []:
                    if isinstance(handler, dict) and is_ours(handler.get("command")):
                        found[event] = handler["command"]
    elif kind == KIRO_HOOK:
        command = (config.get("then") or {}).get("command")
        if is_ours(command) and config.get("enabled") is not False:
            found[path.name] = command
    if kind in (KIRO_AGENT, KIRO_MCP, CLAUDE_MCP):
        servers = config.get("mcpServers")
        entry = servers.get(MCP_NAME) if isinstance(servers, dict) else None
        if is_our_mcp(entry) and entry.get("disabled") is not True:
            found[MCP_ENTRY] = entry["command"]
    return found


def check(agent: str, project: Path | None, home: Path) -> tuple[str, str]:
    """(state, detail) of agent's configuration there: state is "installed",
    "missing" (not installed), or "broken" (with what to fix)."""
    try:
        files = config_files(agent, project, home)
        found = {path: our_entries(kind, path, read_json(path) or {}) for path, kind in files}
    except InstallError as exc:
        return "broken", str(exc)
    if not any(found.values()):
        return "missing", "not installed"
    fix = f"run: kirolearn install --agent {agent}"
    hooks = {"kiro-cli": set(KIRO_CLI_HOOKS), "claude-code": set(CLAUDE_HOOKS)}.get(agent)
    for (path, kind), entries in zip(files, found.values(), strict=True):
        if kind == KIRO_HOOK and path.name not in entries:
            return "broken", f"{path} is missing or disabled; {fix}"
        missing = (hooks or set()) - set(entries) if kind in (KIRO_AGENT, CLAUDE_SETTINGS) else ()
        if missing:
            return "broken", (f"{path} lacks the kirolearn hook(s) {', '.join(sorted(missing))};"
                              f" {fix}")
        if kind in (KIRO_AGENT, KIRO_MCP, CLAUDE_MCP) and MCP_ENTRY not in entries:
            return "broken", f"{path} lacks the kirolearn MCP server (or it is disabled); {fix}"
    names = {c.split()[0] for entries in found.values() for c in entries.values()}
    for name in sorted(names):
        if os.sep in name and not os.access(name, os.X_OK):
            return "broken", (f"the configuration runs {name}, which is not there"
                              f" (kirolearn moved?); {fix}")
        if os.sep not in name and shutil.which(name) is None:
            return "broken", (f"the configuration runs {name}, which is not on PATH; put"
                              f" kirolearn's folder on PATH, or {fix} --absolute")
    how = ("commands on PATH (" + ", ".join(f"{n} → {shutil.which(n)}" for n in sorted(names))
           + ")" if all(os.sep not in n for n in names)
           else "absolute paths (this machine's installation)")
    return "installed", ", ".join(str(path) for path, _ in files) + f"; {how}"


def default_agent_note(home: Path) -> str | None:
    """What to run when plain ``kiro-cli chat`` does not use our agent (None: it does)."""
    try:
        default = (read_json(kiro_settings(home)) or {}).get(KIRO_DEFAULT_AGENT)
    except InstallError as exc:
        return str(exc)
    if default == MCP_NAME:
        return None
    uses = f"agent {default!r}" if default else "its built-in default agent"
    return (f"plain `kiro-cli chat` uses {uses}, which has no kirolearn hooks; run"
            f" `kiro-cli chat --agent {MCP_NAME}`, or make it the default: kirolearn"
            " install --agent kiro-cli --default-agent")
