"""Codex's trust of our hooks: Codex runs a hook from a file only once the user has
trusted it in its ``/hooks`` screen, which records ``[hooks.state."<key>"]
trusted_hash = "sha256:…"`` in the user's ``config.toml``.

Installing kirolearn's hooks is that decision, so install records the same entries
for our hooks (and only ours), with the hashes Codex reports for them through its
app server (``codex app-server``, method ``hooks/list``). Without a ``codex`` on PATH
nothing is recorded and doctor says what to do. A hook's key is its place:
``<hooks file>:<event in snake_case>:<group>:<handler>``.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kirolearn.install.parts import Commands, is_ours

TRUSTED = "hook trust"  # the name found() gives, for doctor
APP_SERVER_TIMEOUT_S = 30


def snake(event: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()


def our_keys(hooks_file: Path) -> list[str]:
    """The keys of our hooks in the hooks file as it is on disk."""
    try:
        config = json.loads(hooks_file.read_text("utf-8"))
    except (OSError, ValueError):
        return []
    hooks = config.get("hooks") if isinstance(config, dict) else None
    keys = []
    for event, groups in (hooks.items() if isinstance(hooks, dict) else ()):
        for g, group in enumerate(groups if isinstance(groups, list) else []):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for h, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if isinstance(handler, dict) and is_ours(handler.get("command")):
                    keys.append(f"{hooks_file}:{snake(event)}:{g}:{h}")
    return keys


def current_hashes(cwd: Path, home: Path) -> dict[str, str]:
    """key → the hash Codex computes for each hook it sees from cwd ({} without Codex)."""
    codex = shutil.which("codex")
    if codex is None:
        return {}
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"clientInfo": {"name": "kirolearn", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [str(cwd)]}},
    ]
    env = {**os.environ, "HOME": str(home)}
    with subprocess.Popen([codex, "app-server"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd,
                          env=env) as server:
        try:
            assert server.stdin is not None and server.stdout is not None
            server.stdin.write("".join(json.dumps(r) + "\n" for r in requests).encode())
            server.stdin.flush()
            reply = _reply(server.stdout, 2)
        finally:
            server.kill()
    hooks = [hook for entry in (reply or {}).get("data") or [] for hook in entry["hooks"]]
    return {hook["key"]: hook["currentHash"] for hook in hooks
            if isinstance(hook, dict) and hook.get("currentHash")}


def _reply(stream, request_id: int) -> dict | None:
    """The result of request_id, read line by line until it comes (or the time is up)."""
    deadline = time.monotonic() + APP_SERVER_TIMEOUT_S
    buffered = b""
    while time.monotonic() < deadline:
        if not select.select([stream], [], [], deadline - time.monotonic())[0]:
            return None
        chunk = os.read(stream.fileno(), 1 << 16)
        if not chunk:
            return None
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") == request_id:
                return message.get("result")
    return None


@dataclass(frozen=True)
class Trust:
    """The part of Codex's user ``config.toml`` that trusts our hooks in hooks_file
    (listed after that file, so it reads what install has just written there)."""

    hooks_file: Path
    cwd: Path
    home: Path
    required: tuple[str, ...] = (TRUSTED,)
    what = "the trust of kirolearn's hooks"

    def add(self, config: dict, commands: Commands) -> dict:
        keys = our_keys(self.hooks_file)
        hashes = current_hashes(self.cwd, self.home) if keys else {}
        if not all(key in hashes for key in keys):
            return dict(config)  # no Codex to ask: doctor says how to trust them
        state = dict(self._state(config))
        state.update({key: {"trusted_hash": hashes[key]} for key in keys})
        return self._with_state(config, state)

    def remove(self, config: dict) -> dict:
        keys = set(our_keys(self.hooks_file))
        state = self._state(config)
        if not keys & set(state):
            return dict(config)
        return self._with_state(config, {k: v for k, v in state.items() if k not in keys})

    def found(self, config: dict) -> dict[str, str]:
        keys = our_keys(self.hooks_file)
        state = self._state(config)
        trusted = keys and all(isinstance(state.get(k), dict) and state[k].get("trusted_hash")
                               for k in keys)
        return {TRUSTED: ""} if trusted else {}

    @staticmethod
    def _state(config: dict) -> dict:
        hooks = config.get("hooks")
        state = hooks.get("state") if isinstance(hooks, dict) else None
        return state if isinstance(state, dict) else {}

    @staticmethod
    def _with_state(config: dict, state: dict) -> dict:
        hooks = config.get("hooks")
        hooks = {k: v for k, v in hooks.items() if k != "state"} if isinstance(hooks, dict) \
            else {}
        if state:
            hooks["state"] = state
        config = {k: v for k, v in config.items() if k != "hooks"}
        return {**config, "hooks": hooks} if hooks else config
