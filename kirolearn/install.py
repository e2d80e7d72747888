"""Hook configuration for each agent: write it, merge it, remove it, check it.

``kirolearn install --agent A`` puts our hooks where agent A reads them, keeping
everything else in the file as it was; running it twice changes nothing, and a
file that changes is first copied to ``<file>.kirolearn.bak``. ``uninstall``
removes only our entries. Our entries are recognised by their command: the path
of one of our shims. A file that is not valid JSON is left alone with an error.

| agent | project (``--project DIR``) | ``--global`` |
| --- | --- | --- |
| kiro-cli | ``DIR/.kiro/agents/kirolearn.json`` | ``~/.kiro/agents/kirolearn.json`` |
| kiro-ide | ``DIR/.kiro/hooks/kirolearn-*.kiro.hook`` | (per project only) |
| claude-code | ``DIR/.claude/settings.json`` | ``~/.claude/settings.json`` |
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
    "PostToolUse": ({}, {"timeout": 5}),
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


def shim_command(agent: str) -> str:
    """The absolute path of an agent's shim (agents run hooks with their own PATH)."""
    name = f"kirolearn-{agent}"
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    return found or name


def is_ours(command: object) -> bool:
    if not isinstance(command, str) or not command.strip():
        return False
    program = os.path.basename(command.split()[0].strip("'\""))
    return program in {f"kirolearn-{agent}" for agent in AGENTS}


def config_paths(agent: str, project: Path | None, home: Path) -> list[Path]:
    """The files install writes for agent, in project or (None) in the user's home."""
    if agent == "kiro-cli":
        return [(project or home) / ".kiro" / "agents" / "kirolearn.json"]
    if agent == "kiro-ide":
        if project is None:
            raise InstallError("Kiro IDE hooks live in a project: use --project DIR")
        return [project / ".kiro" / "hooks" / f"{stem}.kiro.hook" for stem in KIRO_IDE_HOOKS]
    if agent == "claude-code":
        return [(project or home) / ".claude" / "settings.json"]
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


def write_json(path: Path, value: dict | None, before: dict | None) -> Change:
    """Write value (None: delete the file, which held only our entries), backing up a
    file that changes; returns the change."""
    if value == before:
        return Change(path, "unchanged" if value is not None else "absent")
    backup = None
    if before is not None and value is not None:
        backup = path.with_name(path.name + BACKUP_SUFFIX)
        shutil.copy2(path, backup)
    if value is None:
        path.unlink()
        return Change(path, "removed")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", "utf-8")
    if before is not None:
        shutil.copymode(path, temporary)
    os.replace(temporary, path)
    return Change(path, "created" if before is None else "updated", backup)


# -- per agent: the configuration with and without our entries ----------------------------


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
    return config


def _with_ours_kiro_cli(config: dict) -> dict:
    config = _without_ours_kiro_cli(config)
    hooks = dict(config.get("hooks") or {})
    command = shim_command("kiro-cli")
    for name in KIRO_CLI_HOOKS:
        entry: dict = {"command": command}
        if name == "userPromptSubmit":
            entry["timeout_ms"] = 5000
        if name == "postToolUse":
            entry["matcher"] = "*"
        entries = hooks.get(name)
        hooks[name] = [*(entries if isinstance(entries, list) else []), entry]
    return {**config, "hooks": hooks}


def _without_ours_claude(config: dict) -> dict:
    config = dict(config)
    hooks = config.get("hooks")
    if not isinstance(hooks, dict):
        return config
    kept = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            kept[event] = groups
            continue
        new_groups = []
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(handlers, list):
                mine = [h for h in handlers if isinstance(h, dict) and is_ours(h.get("command"))]
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
    return config


def _with_ours_claude(config: dict) -> dict:
    config = _without_ours_claude(config)
    hooks = config.get("hooks")
    hooks = dict(hooks) if isinstance(hooks, dict) else {}
    command = shim_command("claude-code")
    for event, (group_extra, handler_extra) in CLAUDE_HOOKS.items():
        group = {**group_extra, "hooks": [{"type": "command", "command": command,
                                           **handler_extra}]}
        groups = hooks.get(event)
        hooks[event] = [*(groups if isinstance(groups, list) else []), group]
    return {**config, "hooks": hooks}


def _kiro_ide_hook(stem: str) -> dict:
    trigger, what = KIRO_IDE_HOOKS[stem]
    when: dict = {"type": trigger}
    if trigger == "postToolUse":
        when["toolTypes"] = ["*"]
    return {"enabled": True, "name": f"kirolearn: {trigger}",
            "description": f"kirolearn {what}.", "version": "1", "when": when,
            "then": {"type": "runCommand", "command": f"{shim_command('kiro-ide')} {trigger}"}}


# -- the operations -------------------------------------------------------------------------


def install(agent: str, project: Path | None, home: Path) -> list[Change]:
    """Write or merge agent's hooks; returns what changed. Checks every file first, so
    an unreadable one changes nothing."""
    files = config_paths(agent, project, home)
    before = {path: read_json(path) for path in files}
    changes = []
    for path in files:
        old = before[path]
        if agent == "kiro-cli":
            new = _with_ours_kiro_cli(old if old is not None else dict(KIRO_AGENT_TEMPLATE))
        elif agent == "claude-code":
            new = _with_ours_claude(old or {})
        else:
            new = _kiro_ide_hook(path.name.removesuffix(".kiro.hook"))
        changes.append(write_json(path, new, old))
    return changes


def uninstall(agent: str, project: Path | None, home: Path) -> list[Change]:
    """Remove only our entries (and files that held nothing else)."""
    files = config_paths(agent, project, home)
    before = {path: read_json(path) for path in files}
    changes = []
    for path in files:
        old = before[path]
        if old is None:
            changes.append(Change(path, "absent"))
            continue
        if agent == "kiro-cli":
            new = _without_ours_kiro_cli(old)
            new = None if new == KIRO_AGENT_TEMPLATE else new
        elif agent == "claude-code":
            new = _without_ours_claude(old)
            new = new or None
        else:
            command = (old.get("then") or {}).get("command") if isinstance(old, dict) else None
            new = None if is_ours(command) else old
        changes.append(write_json(path, new, old))
    return changes


def our_hooks(agent: str, path: Path, config: dict) -> dict[str, str]:
    """Our entries in one configuration file: hook name (for the IDE, the file) → command."""
    found: dict[str, str] = {}
    hooks = config.get("hooks") if isinstance(config.get("hooks"), dict) else {}
    if agent == "kiro-cli":
        for name, entries in hooks.items():
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, dict) and is_ours(entry.get("command")):
                    found[name] = entry["command"]
    elif agent == "claude-code":
        for event, groups in hooks.items():
            for group in groups if isinstance(groups, list) else []:
                for handler in (group.get("hooks") or []) if isinstance(group, dict) else []:
                    if isinstance(handler, dict) and is_ours(handler.get("command")):
                        found[event] = handler["command"]
    else:
        command = (config.get("then") or {}).get("command")
        if is_ours(command) and config.get("enabled") is not False:
            found[path.name] = command
    return found


def check(agent: str, project: Path | None, home: Path) -> tuple[str, str]:
    """(state, detail) of agent's configuration there: state is "installed",
    "missing" (not installed), or "broken" (with what to fix)."""
    try:
        files = config_paths(agent, project, home)
        configs = {path: read_json(path) for path in files}
    except InstallError as exc:
        return "broken", str(exc)
    found = {path: our_hooks(agent, path, config or {}) for path, config in configs.items()}
    if not any(found.values()):
        return "missing", "not installed"
    fix = f"run: kirolearn install --agent {agent}"
    wanted = {"kiro-cli": set(KIRO_CLI_HOOKS), "claude-code": set(CLAUDE_HOOKS)}.get(agent)
    for path, hooks in found.items():
        missing = (wanted or {path.name}) - set(hooks)
        if missing and agent == "kiro-ide":
            return "broken", f"{path} is missing or disabled; {fix}"
        if missing and hooks:
            return "broken", (f"{path} lacks the kirolearn hook(s) {', '.join(sorted(missing))};"
                              f" {fix}")
    for command in {c for hooks in found.values() for c in hooks.values()}:
        program = command.split()[0]
        if os.sep in program and not os.access(program, os.X_OK):
            return "broken", (f"the hook runs {program}, which is not there"
                              f" (kirolearn moved?); {fix}")
        if os.sep not in program and shutil.which(program) is None:
            return "broken", f"the hook runs {program}, which is not on PATH"
    return "installed", ", ".join(str(p) for p in files)
