"""Agent configuration: write it, merge it, remove it, check it.

``kirolearn install --agent A`` puts our hooks and our MCP server where agent A reads
them (``install/agents.py`` says where, ``install/parts.py`` what), keeping everything
else in each file as it was; running it twice changes nothing, and a file of the
user's that changes is first copied to ``<file>.kirolearn.bak``. ``uninstall``
removes only our entries (and files that held nothing else). A file that cannot be
read (JSON or TOML that does not parse) is left alone with an error, and nothing is
written.

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

import dataclasses
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from kirolearn import agents as registry
from kirolearn.install import agents
from kirolearn.install.agents import (
    APPROVED_TOOLS,
    CLAUDE_TOOLS,
    DEFAULT_AGENT,
    KIRO_CLI_TOOLS,
    TEXT_FORMATS,
    ConfigFile,
    InstallError,
    config_files,
    kiro_settings,
)

__all__ = ["AGENTS", "APPROVED_TOOLS", "CLAUDE_TOOLS", "KIRO_CLI_TOOLS",
           "Change", "Commands", "InstallError", "agent_note", "check", "install",
           "installed", "uninstall"]
AGENTS = tuple(registry.AGENTS)
BACKUP_SUFFIX = ".kirolearn.bak"


@dataclass(frozen=True)
class Change:
    path: Path
    action: str  # created | updated | unchanged | removed | restored | absent
    backup: Path | None = None
    what: str = ""  # what of ours the file holds, as install says it

    def __str__(self) -> str:
        text = f"{self.action:<9} {self.path}" + (f": {self.what}" if self.what else "")
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


def installed(name: str) -> str:
    """The absolute path of one of this installation's commands."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name) or name


# -- reading and writing configuration files -----------------------------------------------


def read(file: ConfigFile) -> object:
    """The file's configuration (a dict; the text of a text file), None if there is no
    file; InstallError if it does not parse."""
    try:
        text = file.path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InstallError(f"cannot read {file.path}: {exc}") from exc
    if file.format in TEXT_FORMATS:
        return text
    if not text.strip():
        return {}
    try:
        value = _toml_load(text) if file.format == "toml" else json.loads(text)
    except ValueError as exc:
        raise InstallError(f"{file.path} is not valid {file.format.upper()} ({exc}); fix or"
                           " move it, then run this again") from exc
    if not isinstance(value, dict):
        raise InstallError(f"{file.path} does not hold a JSON object; fix or move it")
    return value


def _toml_load(text: str) -> dict:
    import tomlkit  # only Codex's files are TOML

    return tomlkit.parse(text).unwrap()


def _render(file: ConfigFile, value: object) -> str:
    if file.format in TEXT_FORMATS:
        return str(value)
    if file.format == "toml":
        import tomlkit

        try:  # the user's file with only what changed changed: comments and order kept
            document = tomlkit.parse(file.path.read_text("utf-8"))
        except FileNotFoundError:
            document = tomlkit.document()
        _sync(document, value)
        return tomlkit.dumps(document)
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _sync(table, value: dict) -> None:
    """Make a tomlkit table hold value, touching only the keys that differ."""
    for key in [k for k in table if k not in value]:
        del table[key]
    for key, new in value.items():
        old = table.get(key)
        if isinstance(new, dict) and hasattr(old, "unwrap") and isinstance(old.unwrap(), dict):
            _sync(old, new)
        elif old is None or old.unwrap() != new:
            table[key] = new


def write(file: ConfigFile, value: object, before: object, backup: bool) -> Change:
    """Write value (None: delete the file, which held only our entries), first copying
    a file that changes to its backup when asked; returns the change."""
    path = file.path
    if before is None and value in ({}, file.template):
        return Change(path, "absent")  # nothing of ours to write there
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
    temporary.write_text(_render(file, value), "utf-8")
    if before is not None:
        shutil.copymode(path, temporary)
    elif file.format == "script":
        temporary.chmod(0o755)
    os.replace(temporary, path)
    return Change(path, "created" if before is None else "updated", copy)


def with_ours(file: ConfigFile, config: object, commands: Commands) -> object:
    value = config if config is not None else dict(file.template)
    for part in file.parts:
        value = part.add(value, commands)
    return value


def without_ours(file: ConfigFile, config: object) -> object:
    """The configuration without our entries (None: nothing else is left)."""
    for part in reversed(file.parts):
        config = part.remove(config)
    return None if config in (None, "", {}, file.template) else config


def found(file: ConfigFile, config: object) -> dict[str, str]:
    """Our entries in one file: hook name (or file, or MCP server) → what it runs ("" for
    an entry that runs nothing, such as Codex's trust of our hooks)."""
    entries: dict[str, str] = {}
    for part in file.parts:
        entries.update(part.found(config if config is not None else {}))
    return entries


# -- the operations -------------------------------------------------------------------------


def _files(agent: str, project: Path | None, home: Path, default_agent: bool = False,
           ) -> list[ConfigFile]:
    files = config_files(agent, project, home)
    if default_agent:
        files.append(ConfigFile(kiro_settings(home), (DEFAULT_AGENT,)))
    return files


def install(agent: str, project: Path | None, home: Path, absolute: bool = False,
            default_agent: bool = False) -> list[Change]:
    """Write or merge agent's hooks and MCP server (and with default_agent, make
    kirolearn Kiro CLI's default agent); returns what changed. Checks every file first,
    so an unreadable one, or a hook file of the user's where ours goes, changes
    nothing."""
    if default_agent and agent != "kiro-cli":
        raise InstallError("--default-agent is for kiro-cli")
    files = _files(agent, project, home, default_agent)
    commands = Commands.choose(absolute or project is None)
    before = [read(file) for file in files]
    for file, config in zip(files, before, strict=True):
        if file.format == "script" and config and not found(file, config):
            raise InstallError(f"{file.path} is not kirolearn's and would be replaced; move"
                               " it aside (or uninstall what wrote it), then run this again")
    changes = []
    for file, config in zip(files, before, strict=True):
        theirs = config is not None and not found(file, config)
        change = write(file, with_ours(file, config, commands), config, backup=theirs)
        changes.append(dataclasses.replace(change, what="; ".join(
            dict.fromkeys(part.what for part in file.parts))))
    return changes


def uninstall(agent: str, project: Path | None, home: Path) -> list[Change]:
    """Remove only our entries: a file left as the user had it is their backup, put
    back; a file or folder that held only ours goes. Files go in the reverse order of
    install's."""
    files = _files(agent, project, home,
                   agent == "kiro-cli" and agents.kiro_cli_note(None, home) is None)
    before = [read(file) for file in files]
    changes = []
    for file, config in reversed(list(zip(files, before, strict=True))):
        if config is None:
            changes.append(Change(file.path, "absent"))
            continue
        value = without_ours(file, config)
        backup = file.path.with_name(file.path.name + BACKUP_SUFFIX)
        if value is not None and value != config and _holds(file, backup, value):
            os.replace(backup, file.path)  # as the user had it, byte for byte
            changes.append(Change(file.path, "restored"))
        else:
            changes.append(write(file, value, config, backup=False))
        if value is None:
            inside = project if project and project in file.path.parents else home
            _remove_empty_folders(file.path.parent, inside)
    return changes[::-1]


def _holds(file: ConfigFile, backup: Path, value: object) -> bool:
    """Whether the backup holds value (a missing or broken backup holds nothing)."""
    try:
        return read(ConfigFile(backup, file.parts, file.format)) == value
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


def check(agent: str, project: Path | None, home: Path) -> tuple[str, str]:
    """(state, detail) of agent's configuration there: state is "installed",
    "missing" (not installed), or "broken" (with what to fix)."""
    try:
        files = config_files(agent, project, home)
        entries = [found(file, read(file)) for file in files]
    except InstallError as exc:
        return "broken", str(exc)
    if project is None:  # the user's files a project's install writes too tell nothing
        shared = {file.path for file in config_files(agent, home / ".project", home)}
        if not any(e for file, e in zip(files, entries, strict=True)
                   if file.path not in shared):
            return "missing", "not installed"
    if not any(entries):
        return "missing", "not installed"
    fix = f"run: kirolearn install --agent {agent}"
    problem = _missing_entries(files, entries, fix)
    names = {c.split()[0] for ours in entries for c in ours.values() if c}
    problem = problem or _missing_programs(names, fix)
    if problem:
        return "broken", problem
    how = ("commands on PATH (" + ", ".join(f"{n} → {shutil.which(n)}" for n in sorted(names))
           + ")" if all(os.sep not in n for n in names)
           else "absolute paths (this machine's installation)")
    return "installed", ", ".join(str(file.path) for file in files) + f"; {how}"


def _missing_entries(files: list[ConfigFile], entries: list[dict], fix: str) -> str | None:
    """What of kirolearn's a configuration file lacks, and what to run about it."""
    for file, ours in zip(files, entries, strict=True):
        missing = [name for part in file.parts for name in part.required if name not in ours]
        if missing and (file.format in TEXT_FORMATS or missing == [file.path.name]):
            return f"{file.path} is missing or disabled; {fix}"
        if missing:
            return f"{file.path} lacks kirolearn's {', '.join(missing)}; {fix}" + (
                " with codex on PATH (or trust them in codex: /hooks)"
                if "hook trust" in missing else "")
    return None


def _missing_programs(names: set[str], fix: str) -> str | None:
    """A program the configuration runs that is not there, and what to run about it."""
    for name in sorted(names):
        if os.sep in name and not os.access(name, os.X_OK):
            return (f"the configuration runs {name}, which is not there"
                    f" (kirolearn moved?); {fix}")
        if os.sep not in name and shutil.which(name) is None:
            return (f"the configuration runs {name}, which is not on PATH; put"
                    f" kirolearn's folder on PATH, or {fix} --absolute")
    return None


def agent_note(agent: str, project: Path | None, home: Path) -> str | None:
    """What the user still has to do before the installed agent runs our hooks (None:
    nothing): make our agent Kiro CLI's default, trust the project in Gemini CLI or
    Copilot CLI (each agent's ``note``)."""
    note = agents.note(agent)
    return note(project, home) if note is not None else None
