"""What kirolearn puts in an agent's configuration file, one kind of entry a class.

Each part adds its entries to a configuration (a dict read from JSON or TOML), takes
them out again leaving everything else as it was, and finds them (name → the
command it runs, for ``doctor``). Parts are pure: they never touch the disk, so
install can compute every file before it writes one.

Our entries are recognised by what they run: a hook by its command (one of our
shims), the MCP server by its name and ``kirolearn mcp``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

MCP_NAME = "kirolearn"
MCP_ENTRY = "MCP server"  # how found() names our MCP server among the hooks


class Commands(Protocol):
    """How a configuration names our programs (install.Commands)."""

    def program(self, name: str) -> str: ...
    def shim(self, agent: str) -> str: ...


def is_ours(command: object) -> bool:
    """Whether a hook's command runs one of our shims."""
    if not isinstance(command, str) or not command.strip():
        return False
    name = os.path.basename(command.split()[0].strip("'\""))
    return name.startswith("kirolearn-")


def is_our_mcp(entry: object) -> bool:
    """Whether an MCP server entry runs ``kirolearn mcp`` (as command and args, or as
    one argv list)."""
    if not isinstance(entry, dict):
        return False
    command = entry.get("command")
    if isinstance(command, list):
        argv = command
    else:
        argv = [command, *(entry.get("args") or [])] if isinstance(entry.get("args"), list) \
            else [command]
    return (len(argv) == 2 and isinstance(argv[0], str)
            and os.path.basename(argv[0]) == "kirolearn" and argv[1] == "mcp")


def _dict(value: object) -> dict:
    return dict(value) if isinstance(value, dict) else {}


def _set(config: dict, key: str, value: object) -> dict:
    """config with key set to value; an empty value removes the key."""
    config = dict(config)
    if value:
        config[key] = value
    else:
        config.pop(key, None)
    return config


@dataclass(frozen=True)
class GroupedHooks:
    """Hooks in Claude Code's layout, which Codex and Gemini CLI share:
    ``hooks: {Event: [{matcher?, hooks: [{type: command, command, …}]}]}``, one group of
    ours appended per event. events: event → (extra group fields, extra handler
    fields)."""

    what = "hooks"  # what a file holds of ours, as install says it

    agent: str
    events: dict[str, tuple[dict, dict]]
    key: str = "hooks"

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(self.events)

    def add(self, config: dict, commands: Commands) -> dict:
        config = self.remove(config)
        hooks = _dict(config.get(self.key))
        command = commands.shim(self.agent)
        for event, (group_extra, handler_extra) in self.events.items():
            group = {**group_extra, "hooks": [{"type": "command", "command": command,
                                               **handler_extra}]}
            groups = hooks.get(event)
            hooks[event] = [*(groups if isinstance(groups, list) else []), group]
        return {**config, self.key: hooks}

    def remove(self, config: dict) -> dict:
        hooks = config.get(self.key)
        if not isinstance(hooks, dict):
            return dict(config)
        kept = {}
        for event, groups in hooks.items():
            if not isinstance(groups, list):
                kept[event] = groups
                continue
            new_groups = []
            for group in groups:
                handlers = group.get("hooks") if isinstance(group, dict) else None
                if isinstance(handlers, list):
                    theirs = [h for h in handlers
                              if not (isinstance(h, dict) and is_ours(h.get("command")))]
                    if len(theirs) < len(handlers):
                        if not theirs:
                            continue
                        group = {**group, "hooks": theirs}
                new_groups.append(group)
            if new_groups:
                kept[event] = new_groups
        return _set(config, self.key, kept)

    def found(self, config: dict) -> dict[str, str]:
        hooks = _dict(config.get(self.key))
        return {event: handler["command"]
                for event, groups in hooks.items() if isinstance(groups, list)
                for group in groups if isinstance(group, dict)
                for handler in (group.get("hooks") or []) if isinstance(handler, dict)
                and is_ours(handler.get("command"))}


@dataclass(frozen=True)
class FlatHooks:
    """Hooks as one list of handlers per event: ``hooks: {event: [{command, …}]}``
    (Kiro CLI, Cursor; Copilot CLI names the command ``bash``). events: event → extra
    fields of our handler. With named, the command names its event (Copilot's
    payloads do not)."""

    what = "hooks"

    agent: str
    events: dict[str, dict]
    command_key: str = "command"
    named: bool = False

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(self.events)

    def add(self, config: dict, commands: Commands) -> dict:
        config = self.remove(config)
        hooks = _dict(config.get("hooks"))
        command = commands.shim(self.agent)
        for event, extra in self.events.items():
            entries = hooks.get(event)
            hooks[event] = [*(entries if isinstance(entries, list) else []), {
                **extra, self.command_key: f"{command} {event}" if self.named else command}]
        return {**config, "hooks": hooks}

    def remove(self, config: dict) -> dict:
        hooks = config.get("hooks")
        if not isinstance(hooks, dict):
            return dict(config)
        kept = {}
        for event, entries in hooks.items():
            if isinstance(entries, list):
                entries = [e for e in entries if not self._ours(e)]
                if not entries:
                    continue
            kept[event] = entries
        return _set(config, "hooks", kept)

    def found(self, config: dict) -> dict[str, str]:
        return {event: entry[self.command_key]
                for event, entries in _dict(config.get("hooks")).items()
                if isinstance(entries, list) for entry in entries if self._ours(entry)}

    def _ours(self, entry: object) -> bool:
        return isinstance(entry, dict) and is_ours(entry.get(self.command_key))


@dataclass(frozen=True)
class McpServer:
    """Our MCP server under ``servers_key`` (``mcpServers``; Codex ``mcp_servers``;
    OpenCode ``mcp``). shape turns ``{command, args}`` into the agent's entry."""

    what = "the MCP server"

    servers_key: str = "mcpServers"
    shape: Callable[[dict], dict] = dict
    required: tuple[str, ...] = (MCP_ENTRY,)

    def add(self, config: dict, commands: Commands) -> dict:
        config = self.remove(config)
        servers = _dict(config.get(self.servers_key))
        servers[MCP_NAME] = self.shape({"command": commands.program("kirolearn"),
                                        "args": ["mcp"]})
        return {**config, self.servers_key: servers}

    def remove(self, config: dict) -> dict:
        servers = _dict(config.get(self.servers_key))
        if not is_our_mcp(servers.pop(MCP_NAME, None)):
            return dict(config)
        return _set(config, self.servers_key, servers)

    def found(self, config: dict) -> dict[str, str]:
        entry = _dict(config.get(self.servers_key)).get(MCP_NAME)
        if not is_our_mcp(entry) or entry.get("disabled") is True \
                or entry.get("enabled") is False:
            return {}
        command = entry["command"]
        return {MCP_ENTRY: command[0] if isinstance(command, list) else command}


@dataclass(frozen=True)
class Listed:
    """names in the list at a path of keys (the tools an agent may call without asking,
    the project servers Claude Code enables); a list left empty goes."""

    path: tuple[str, ...]
    names: tuple[str, ...]
    required: tuple[str, ...] = ()

    @property
    def what(self) -> str:
        more = f", … ({len(self.names)})" if len(self.names) > 1 else ""
        return f"{'.'.join(self.path)}: {self.names[0]}{more}"

    def add(self, config: dict, commands: Commands) -> dict:
        return self._change(config, self.path, True)

    def remove(self, config: dict) -> dict:
        return self._change(config, self.path, False)

    def found(self, config: dict) -> dict[str, str]:
        return {}

    def _change(self, config: dict, path: tuple[str, ...], present: bool) -> dict:
        key, rest = path[0], path[1:]
        if rest:
            inner = config.get(key)
            if not isinstance(inner, dict) and not present:
                return dict(config)
            return _set(config, key, self._change(_dict(inner), rest, present))
        current = config.get(key)
        current = current if isinstance(current, list) else []
        kept = [item for item in current if item not in self.names]
        return _set(config, key, kept + list(self.names) if present else kept)


@dataclass(frozen=True)
class AllowRule:
    """A policy rule of Gemini CLI's letting tools of our MCP server run without asking:
    ``[[rule]] mcpName, toolName = [...], decision = "allow"`` (its policy files are
    TOML; it reads the user's, not a project's)."""

    what = "the approval of its tools"

    tools: tuple[str, ...]
    required: tuple[str, ...] = ()

    @property
    def rule(self) -> dict:
        return {"mcpName": MCP_NAME, "toolName": list(self.tools), "decision": "allow",
                "priority": 100}

    def add(self, config: dict, commands: Commands) -> dict:
        return {**self.remove(config), "rule": [*self._theirs(config), self.rule]}

    def remove(self, config: dict) -> dict:
        if not isinstance(config.get("rule"), list):
            return dict(config)
        return _set(config, "rule", self._theirs(config))

    def found(self, config: dict) -> dict[str, str]:
        return {}

    def _theirs(self, config: dict) -> list:
        rules = config.get("rule")
        return [r for r in rules if r != self.rule] if isinstance(rules, list) else []


@dataclass(frozen=True)
class Setting:
    """One setting at a path of keys set to our value (Kiro CLI's default agent, an
    OpenCode permission); removed only while it still holds our value. A path through
    something other than an object is the user's choice, left alone."""

    path: tuple[str, ...]
    value: object
    required: tuple[str, ...] = ()

    @property
    def what(self) -> str:
        return f"{'.'.join(self.path)} = {self.value!r}"

    def add(self, config: dict, commands: Commands) -> dict:
        return self._change(config, self.path, True)

    def remove(self, config: dict) -> dict:
        return self._change(config, self.path, False)

    def found(self, config: dict) -> dict[str, str]:
        return {}

    def _change(self, config: dict, path: tuple[str, ...], present: bool) -> dict:
        key, rest = path[0], path[1:]
        current = config.get(key)
        if not rest:
            if present:
                return {**config, key: self.value}
            return _set(config, key, None) if current == self.value else dict(config)
        if not isinstance(current, dict) and (current is not None or not present):
            return dict(config)
        return _set(config, key, self._change(_dict(current), rest, present))


class Default(Setting):
    """A setting we supply only where the user has none (a value of theirs is their
    choice, kept): OpenCode's permissions for our tools, Codex's MCP start-up grace."""

    def add(self, config: dict, commands: Commands) -> dict:
        current: object = config
        for key in self.path:
            if not isinstance(current, dict) or key not in current:
                return super().add(config, commands)
            current = current[key]
        return dict(config)


@dataclass(frozen=True)
class StatusLine:
    """The agent's ``statusLine`` command (Claude Code's; Qwen Code's, under ``ui``),
    showing what memory did for the session (``kirolearn-statusline``): set only where
    the user has none (theirs is never replaced), removed only while it is ours."""

    what = "the status line"

    required: tuple[str, ...] = ()  # a user's own status line is no broken install
    section: str | None = None  # the object it is kept in (None: the file's top)
    padding: bool = True  # Claude Code's: no padding

    def add(self, config: dict, commands: Commands) -> dict:
        if "statusLine" in self._inner(config) and not self.found(config):
            return dict(config)
        line = {"type": "command", **({"padding": 0} if self.padding else {}),
                "command": commands.program("kirolearn-statusline")}
        return self._outer(config, {**self._inner(config), "statusLine": line})

    def remove(self, config: dict) -> dict:
        if not self.found(config):
            return dict(config)
        return self._outer(config, _set(self._inner(config), "statusLine", None))

    def found(self, config: dict) -> dict[str, str]:
        command = _dict(self._inner(config).get("statusLine")).get("command")
        return {"statusLine": command} if is_ours(command) else {}

    def _inner(self, config: dict) -> dict:
        return _dict(config.get(self.section)) if self.section else dict(config)

    def _outer(self, config: dict, inner: dict) -> dict:
        return _set(config, self.section, inner) if self.section else inner


@dataclass(frozen=True)
class WholeFile:
    """A file that is all ours (a Kiro IDE hook, the OpenCode plugin): render makes its
    content, command finds the command in it (None: the file is not ours)."""

    name: str
    render: Callable[[Commands], object]
    command: Callable[[object], str | None]
    required: tuple[str, ...] = field(default=())

    @property
    def what(self) -> str:
        return self.name

    def add(self, config: object, commands: Commands) -> object:
        return self.render(commands)

    def remove(self, config: object) -> object:
        return None if self.command(config) else config

    def found(self, config: object) -> dict[str, str]:
        command = self.command(config)
        return {self.name: command} if command else {}
