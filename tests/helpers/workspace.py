"""A user's home holding one git project, as the agents see it: its shims' hooks run
there, and the MCP server driven as an agent drives it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from helpers.cli import BIN
from helpers.events import ACTOR
from kirolearn import project


class Workspace:
    """A user's home holding one git project, as the agents see it."""

    def __init__(self, root: Path):
        self.home = root / "home"
        self.project = self.home / "proj"
        (self.project / ".git").mkdir(parents=True)
        (self.project / "src").mkdir()
        found = project.resolve_project(self.project, home=str(self.home), override="")
        self.root = found.root
        self.namespace = found.namespace(ACTOR)

    def env(self, **extra: str) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("USER_PROMPT",)}
        env.update(HOME=str(self.home), USER=ACTOR, LOGNAME=ACTOR, **extra)
        return env

    def hook(self, script: str, payload: dict | str | None = None, *args: str,
             cwd: Path | None = None, **env: str) -> tuple[subprocess.CompletedProcess, float]:
        """Run an installed shim with payload (a dict as JSON) on stdin; returns the
        finished process and its wall time."""
        started = time.monotonic()
        text = json.dumps(payload) if isinstance(payload, dict) else payload or ""
        result = subprocess.run(
            [str(BIN / script), *args], input=text,
            capture_output=True, text=True, timeout=30, cwd=cwd or self.project,
            env=self.env(**env))
        return result, time.monotonic() - started


def serve(ws: Workspace, scenario: Callable[[Client], Awaitable[object]], *args: str,
          cwd: Path | None = None, **env: str) -> object:
    """Start ``kirolearn mcp`` as the agent would (in cwd, default the project) and run
    scenario(client) against it; returns what the scenario returns."""
    environment = {k: v for k, v in ws.env(**env).items()
                   if k.startswith("KIROLEARN_") or k in ("HOME", "USER", "LOGNAME", "PATH")}
    server = StdioServerParameters(command=str(BIN / "kirolearn"), args=["mcp", *args],
                                   env=environment, cwd=str(cwd or ws.project))

    async def main() -> object:
        async with Client(server) as client:
            return await scenario(client)

    return anyio.run(main)


async def call(client: Client, tool: str, fenced: bool = False, **arguments: object
               ) -> tuple[bool, str]:
    """(is_error, text) of one tool call: stored text comes fenced as recalled notes
    (``search.context.fenced``), given here without the fence unless ``fenced``."""
    from kirolearn.search.context import FENCE, PREAMBLE

    result = await client.call_tool(tool, arguments)
    text = "\n".join(block.text for block in result.content)
    head, tail = f"<{FENCE}>\n{PREAMBLE}\n\n", f"\n</{FENCE}>"
    if not fenced and text.startswith(head):
        assert text.count(tail) == 1 and tail in text, text
        inner, _, after = text[len(head):].partition(tail)
        text = inner + after
    return result.is_error, text
