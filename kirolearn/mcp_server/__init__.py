"""MCP server: the agent searches, saves and forgets memories explicitly.

The agent starts it (``kirolearn mcp``) and talks to it over stdio. Its project is
the one the shims find for the same directory (``project.resolve_project``), fixed
when it starts; ``mcp.scope`` says which memories it sees (``project.SCOPES``). It holds no
state of its own: reads go to the retrieval role, writes through ingest (which
scrubs a saved record like an event). When the daemon is down it starts it, as a
shim does, and waits for it (``KIROLEARN_AUTOSTART=0``: a clear error instead).

Every input is checked against the tool's schema by the SDK before a tool runs, and
every failure reaches the model as an error result (``isError``) that says what to
do, never as a crash.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from kirolearn import __version__, config, paths, privacy
from kirolearn.mcp_server import tools
from kirolearn.mcp_server.memory import Memory, Scope, resolve_scope

SERVER_NAME = "kirolearn"

INSTRUCTIONS = """\
kirolearn is this project's long-term memory: what earlier sessions did, decided and \
learned. To continue earlier work, `resume_session` says where the last session left \
off. Before work that may have been done or discussed before, use `recall` or \
`search_memory`. To dig in cheaply, `timeline` lists the records around one as short rows \
and `get_records` fetches the full ones by id. Save a decision, a discovered cause or a \
pattern worth keeping with `save_observation`, and, at the end of substantial work, \
a recap with `save_session_summary`. `update_memory` corrects a record, or marks one \
that is no longer true invalid; `forget` deletes one that is unwanted. Never save \
secrets: text inside <private>…</private> is redacted."""


class KirolearnServer(MCPServer):
    """MCPServer whose argument errors name the fields and the rule, briefly, and which
    serves stdio in the handshake era only (``initialize``, as every agent speaks it).

    The SDK would let a client's first request choose the era for good. A client that
    opens with the 2026 era's ``server/discover`` gives up on it after a while (Copilot
    CLI: 10 s) and falls back to ``initialize``; a server still starting on a busy
    machine then finds both queued, takes the first, and refuses the handshake the
    client is waiting on: no tools for the session. Answered "method not found" at
    once, a discovery falls back however late the server starts.
    """

    async def run_stdio_async(self) -> None:
        lowlevel = self._lowlevel_server
        async with stdio_server() as (read, write), lowlevel.lifespan(lowlevel) as state:
            await serve_loop(lowlevel, read, write, lifespan_state=state,
                             init_options=lowlevel.create_initialization_options())

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if not isinstance(cause, ValidationError):
                raise
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'arguments'}: {_problem(error)}"
                for error in cause.errors(include_url=False))
            raise ToolError(f"invalid arguments for {name}: {problems}") from cause


def _problem(error: Any) -> str:
    if error["type"] == "string_pattern_mismatch" and error["ctx"]["pattern"] == r"\S":
        return "must not be blank"
    return error["msg"]


def build_server(scope: Scope, home: paths.Home, autostart: bool = True) -> MCPServer:
    """The server and its tools, bound to one scope and the daemon of ``home``."""
    privacy.use_saved_rules(home)  # what it hands the agent is scrubbed once more
    memory = Memory(scope, home, autostart)
    server = KirolearnServer(SERVER_NAME, instructions=INSTRUCTIONS, version=__version__)
    for tool, hints in tools.TOOLS:
        bound = functools.partial(tool, memory)  # the schema: the parameters after memory
        bound.__name__ = tool.__name__
        server.add_tool(bound, name=tool.__name__, description=inspect.cleandoc(tool.__doc__),
                        annotations=hints, structured_output=False)
    return server


def main(scope_name: str | None = None) -> None:
    """``kirolearn mcp``: serve on stdio until the agent closes it."""
    home = paths.Home.current()
    settings = config.load(home)
    scope = resolve_scope(scope_name or settings["mcp"]["scope"])
    build_server(scope, home, os.environ.get("KIROLEARN_AUTOSTART", "1") != "0").run()
