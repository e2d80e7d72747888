"""What one MCP server reads and writes: its scope, and the daemon calls its tools make."""

from __future__ import annotations

from typing import NamedTuple

from mcp.server.mcpserver.exceptions import ToolError

from kirolearn import config, contract, control, paths, privacy, project

START_WAIT_S = 15.0  # how long a call waits for a daemon it started
SEARCH_BUDGET_MS = 2000  # an explicit search may take longer than a prompt's 500 ms
NO_TOKEN_CAP = 1_000_000  # the limit, not the context's size, bounds what a tool returns


class Scope(NamedTuple):
    """The namespaces one server reads, and the one it writes to."""

    name: str
    namespaces: tuple[str, ...]
    label: str  # how messages name it: "this project", …
    checkout: str | None = None  # the project's working tree (None: the global memory)

    @property
    def saves_to(self) -> str:
        return self.namespaces[0]


def resolve_scope(name: str, cwd: str | None = None) -> Scope:
    """The scope for a server started in cwd (ConfigError for an unknown name)."""
    if name not in project.SCOPES:
        raise config.ConfigError(f"mcp.scope: must be one of {', '.join(project.SCOPES)},"
                                 f" got {name!r}")
    actor = project.actor_id()
    found = project.resolve_project(cwd)
    here = found.namespace(actor)
    everywhere = project.global_namespace(actor)
    if name == "global" or here == everywhere:
        return Scope(name, (everywhere,), "the global memory")
    if name == "project":
        return Scope(name, (here,), "this project", found.checkout)
    return Scope(name, (here, everywhere), "this project or the global memory", found.checkout)


def ask(target: str, op: str, body: dict, timeout_ms: int, home: paths.Home,
        autostart: bool) -> dict:
    """The reply body of ``op`` on ``target`` (the daemon is started first when it is down
    and ``autostart``); ToolError with what to do otherwise."""
    if not control.served(home):
        if not autostart:
            raise ToolError("kirolearn is not running; start it with `kirolearn start`")
        control.start_in_background(home)
        if not control.wait_answering(target, START_WAIT_S, home):
            raise ToolError(f"kirolearn is not running and did not start within"
                            f" {START_WAIT_S:.0f} s; see"
                            f" {home.log_dir / 'supervisor.out'}, or run"
                            " `kirolearn doctor`")
    try:
        return control.call(target, op, body, timeout_ms=timeout_ms, home=home)
    except control.Timeout as exc:
        raise ToolError(f"kirolearn did not answer in time ({exc}); check it with"
                        " `kirolearn status` and `kirolearn logs`") from exc
    except control.RemoteError as exc:
        raise ToolError(f"kirolearn refused the request: {exc.reason}") from exc


class Memory:
    """The daemon as the tools of one server see it: bound to its scope and home; every
    failure a ToolError that says what to do."""

    def __init__(self, scope: Scope, home: paths.Home, autostart: bool = True):
        self.scope = scope
        self.home = home
        self.autostart = autostart

    def call(self, target: str, op: str, body: dict, timeout_ms: int = control.LOOKUP_MS) -> dict:
        return ask(target, op, body, timeout_ms, self.home, self.autostart)

    @property
    def namespaces(self) -> list[str]:
        return list(self.scope.namespaces)

    def search(self, query: str, limit: int, mode: str | None = None,
               types: list[str] | None = None) -> list[dict]:
        body = {"query": query, "namespaces": self.namespaces, "limit": limit,
                "records": True, "budget_ms": SEARCH_BUDGET_MS, "tokens": NO_TOKEN_CAP}
        if mode:
            body["mode"] = mode
        if types:
            body["types"] = types
        result = self.call("retrieval", "search", body, SEARCH_BUDGET_MS + control.LOOKUP_MS)
        if result["outcome"] in ("timeout", "error"):
            raise ToolError(f"the search did not finish ({result['outcome']}); try a shorter"
                            " query, or see `kirolearn logs retrieval`")
        return result.get("records") or []

    def records(self, ids: list[str]) -> list[dict]:
        return self.call("retrieval", "get_records",
                         {"ids": ids, "namespaces": self.namespaces})["records"]

    def save(self, record: dict) -> str:
        record = {"record_id": contract.new_record_id(), "namespace": self.scope.saves_to,
                  "source_event_ids": [contract.new_ulid()], "created_at": contract.now_iso(),
                  **record}
        saved = self.call("ingest", "put_record", {"record": record}, control.WRITE_MS)
        title = privacy.scrub_text(record["title"])  # as stored
        return f"Saved {saved['record_id']} ({record['observation_type']}): {title}"


def hits(records: list[dict]) -> list[dict]:
    """The records a search ranked, less the neighbours shown with them."""
    return [r for r in records if "neighbour_of" not in r]

