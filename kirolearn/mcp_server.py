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

import inspect
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from kirolearn import __version__, config, contract, control, paths, privacy, project
from kirolearn.search import MODES

SERVER_NAME = "kirolearn"
RECALL_LIMIT = 8  # memories one recall returns (the seed's recallLimit)
RECALL_TEXT_CHARS = 300  # a recall bullet's text is cut here
START_WAIT_S = 15.0  # how long a call waits for a daemon it started
SEARCH_BUDGET_MS = 2000  # an explicit search may take longer than a prompt's 500 ms
NO_TOKEN_CAP = 1_000_000  # the limit, not the context's size, bounds what a tool returns
SUMMARY_MAX = 4000
TRUNCATED = "[truncated]"
SUMMARY_SECTIONS = (("investigated", "What was investigated"), ("learned", "What was learned"),
                    ("completed", "What was completed"), ("next_steps", "Next steps"))

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


class Scope(NamedTuple):
    """The namespaces one server reads, and the one it writes to."""

    name: str
    namespaces: tuple[str, ...]
    label: str  # how messages name it: "this project", …

    @property
    def saves_to(self) -> str:
        return self.namespaces[0]


def resolve_scope(name: str, cwd: str | None = None) -> Scope:
    """The scope for a server started in cwd (ConfigError for an unknown name)."""
    if name not in project.SCOPES:
        raise config.ConfigError(f"mcp.scope: must be one of {', '.join(project.SCOPES)},"
                                 f" got {name!r}")
    actor = project.actor_id()
    here = project.resolve_project(cwd).namespace(actor)
    everywhere = project.global_namespace(actor)
    if name == "global" or here == everywhere:
        return Scope(name, (everywhere,), "the global memory")
    if name == "project":
        return Scope(name, (here,), "this project")
    return Scope(name, (here, everywhere), "this project or the global memory")


def ask(target: str, op: str, body: dict, timeout_ms: int, base: Path,
        autostart: bool) -> dict:
    """The reply body of ``op`` on ``target`` (the daemon is started first when it is down
    and ``autostart``); ToolError with what to do otherwise."""
    if not control.served(base):
        if not autostart:
            raise ToolError("kirolearn is not running; start it with `kirolearn start`")
        control.start_in_background(base)
        if not control.wait_answering(target, START_WAIT_S, base):
            raise ToolError(f"kirolearn is not running and did not start within"
                            f" {START_WAIT_S:.0f} s; see"
                            f" {paths.log_dir(base) / 'supervisor.out'}, or run"
                            " `kirolearn doctor`")
    try:
        return control.call(target, op, body, timeout_ms=timeout_ms, base=base)
    except control.Timeout as exc:
        raise ToolError(f"kirolearn did not answer in time ({exc}); check it with"
                        " `kirolearn status` and `kirolearn logs`") from exc
    except control.RemoteError as exc:
        raise ToolError(f"kirolearn refused the request: {exc.reason}") from exc


# -- formatting --------------------------------------------------------------------------------


def one_line(text: str) -> str:
    return " ".join(text.split())


def utc(created_at: str, with_time: bool = True) -> str:
    """A record's time as ``YYYY-MM-DD HH:MM`` (or the date) in UTC."""
    moment = contract.parse_valid_time(created_at).astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M" if with_time else "%Y-%m-%d")


def search_block(record: dict) -> str:
    """One search result: title, summary, concepts, files, and where to find it."""
    lines = [f"### {one_line(record['title'])}", record["summary"].strip()]
    if record["concepts"]:
        lines.append("Concepts: " + ", ".join(record["concepts"]))
    if record["files_touched"]:
        lines.append("Files: " + ", ".join(record["files_touched"]))
    lines.append(f"(id: {record['record_id']}, {record['observation_type']},"
                 f" {utc(record['created_at'], with_time=False)})")
    return "\n".join(lines)


def recall_text(records: list[dict], now: datetime | None = None) -> str:
    """The recall tool's answer: a count with the time, then one bullet per memory with
    its id, type, date and a confidence c. In hybrid and semantic search c is the
    record's ``relevance``: how close it is in meaning to the query (the cosine of their
    embeddings), on one scale for every answer, so it says how good the best match is
    too (a score relative to the best match's said 1.00 for the best of a poor lot). In
    lexical search it is the BM25 score relative to the best match's (1.00); a record
    not embedded yet, or a substring match, has none."""
    if not records:
        return "No relevant memories found."
    now = now or datetime.now(UTC)
    best = min((r["score"] for r in records if r.get("score") is not None), default=None)
    lines = []
    for record in records:
        text = one_line(record["summary"]) or one_line(record["title"])
        if len(text) > RECALL_TEXT_CHARS:
            text = text[:RECALL_TEXT_CHARS - 1].rstrip() + "…"
        line = (f"- {text} (id: {record['record_id']}) [{record['observation_type']}]"
                f" ({utc(record['created_at'], with_time=False)})")
        score = record.get("score")
        if record.get("relevance") is not None:
            line += f" c:{record['relevance']:.2f}"
        elif score is not None and best:
            line += f" c:{score / best:.2f}"
        lines.append(line)
    noun = "memory" if len(records) == 1 else "memories"
    return (f"Found {len(records)} relevant {noun} (as of {now:%Y-%m-%d %H:%M} UTC):\n\n"
            + "\n".join(lines))


def timeline_text(records: list[dict], anchor: str, label: str) -> str:
    rows = [f"Records around {anchor} in {label}, oldest first (times UTC; → marks it):"]
    for record in records:
        mark = "→" if record["record_id"] == anchor else " "
        rows.append(f"{mark} {record['record_id']}  {utc(record['created_at'])}"
                    f"  {record['observation_type']}  {one_line(record['title'])}")
    return "\n".join(rows)


def full_record(record: dict) -> str:
    seen = 1 + sum(v.get("reason") is None for v in record.get("versions") or [])
    lines = [f"### {one_line(record['title'])}",
             f"id: {record['record_id']} · type: {record['observation_type']} · strategy:"
             f" {record['strategy']} · created: {utc(record['created_at'])} UTC"
             + (f" · seen {seen} times (repeats merged in)" if seen > 1 else ""),
             "", record["summary"].strip()]
    if record["facts"]:
        lines += ["", "Facts:", *(f"- {one_line(fact)}" for fact in record["facts"])]
    if record["concepts"] or record["files_touched"]:
        lines.append("")
    if record["concepts"]:
        lines.append("Concepts: " + ", ".join(record["concepts"]))
    if record["files_touched"]:
        lines.append("Files: " + ", ".join(record["files_touched"]))
    lines += ["", "Source events: " + ", ".join(record["source_event_ids"])]
    if record.get("invalid_reason"):
        lines.insert(2, f"INVALID: {record['invalid_reason']} (kept, never recalled)")
    for number, version in enumerate(record.get("versions") or [], start=1):
        why = f"; {one_line(version['reason'])}" if version.get("reason") else ""
        lines += ["", f"Version {number} (until {utc(version['replaced_at'])} UTC{why}):",
                  version["summary"].strip()]
        if version["facts"]:
            lines += [f"- {one_line(fact)}" for fact in version["facts"]]
    return "\n".join(lines)


def session_summary(request: str, sections: dict[str, str]) -> tuple[str, str]:
    """The title and summary of a turn summary, as the seed builds them: the title is
    the request cut to 200 characters; the summary is four ``##`` sections, and when
    they exceed 4,000 characters whole sections are dropped from the bottom (the last
    one left is cut) and ``[truncated]`` says so."""
    title = one_line(request)[:200]
    parts = [f"## {heading}\n{sections[key].strip() or '(none)'}"
             for key, heading in SUMMARY_SECTIONS]
    summary = "\n\n".join(parts)
    if len(summary) <= SUMMARY_MAX:
        return title, summary
    tail = "\n\n" + TRUNCATED
    while len(parts) > 1 and len("\n\n".join(parts)) + len(tail) > SUMMARY_MAX:
        parts.pop()
    kept = "\n\n".join(parts)[:SUMMARY_MAX - len(tail)].rstrip()
    return title, kept + tail


def unique(items: Iterable[str]) -> list[str]:
    """The items in order, each once."""
    return list(dict.fromkeys(items))


# -- the tools ---------------------------------------------------------------------------------

NonBlank = Field(min_length=1, pattern=r"\S")
RecordId = Annotated[str, Field(pattern=r"^mr_[0-7][0-9A-HJKMNP-TV-Z]{25}$",
                                description="A record id (mr_ followed by 26 characters)",
                                examples=["mr_01JQ7X4Z9V3M5N8K2P6R0S1T4W"])]
Query = Annotated[str, Field(min_length=1, max_length=1000, pattern=r"\S",
                             description="What to look for, in plain words")]
# What an agent may save (a session summary has a tool of its own).
ObservationType = Literal[tuple(t for t in contract.OBSERVATION_TYPES if t != "session_summary")]
AnyType = Literal[contract.OBSERVATION_TYPES]
Concept = Annotated[str, Field(min_length=1, max_length=100, pattern=r"\S")]
FilePath = Annotated[str, Field(min_length=1, max_length=500, pattern=r"\S")]
Fact = Annotated[str, Field(min_length=1, max_length=500, pattern=r"\S")]
Section = Annotated[str, Field(max_length=10_000)]


class KirolearnServer(MCPServer):
    """MCPServer whose argument errors name the fields and the rule, briefly."""

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


def build_server(scope: Scope, base: Path, autostart: bool = True) -> MCPServer:
    """The server and its tools, bound to one scope and the daemon of ``base``."""
    privacy.use_saved_rules(base)  # what it hands the agent is scrubbed once more

    def daemon_call(target: str, op: str, body: dict,
                    timeout_ms: int = control.LOOKUP_MS) -> dict:
        return ask(target, op, body, timeout_ms, base, autostart)

    server = KirolearnServer(SERVER_NAME, instructions=INSTRUCTIONS, version=__version__)

    def tool(annotations: ToolAnnotations):
        """Register a tool: its docstring is its description; its answer is text."""
        def register(fn):
            server.add_tool(fn, description=inspect.cleandoc(fn.__doc__),
                            annotations=annotations, structured_output=False)
            return fn
        return register

    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

    def search(query: str, limit: int, mode: str | None = None,
               types: list[str] | None = None) -> list[dict]:
        body = {"query": query, "namespaces": list(scope.namespaces), "limit": limit,
                "records": True, "budget_ms": SEARCH_BUDGET_MS, "tokens": NO_TOKEN_CAP}
        if mode:
            body["mode"] = mode
        if types:
            body["types"] = types
        result = daemon_call("retrieval", "search", body, SEARCH_BUDGET_MS + control.LOOKUP_MS)
        if result["outcome"] in ("timeout", "error"):
            raise ToolError(f"the search did not finish ({result['outcome']}); try a shorter"
                            " query, or see `kirolearn logs retrieval`")
        return result.get("records") or []

    def hits(records: list[dict]) -> list[dict]:
        """The records a search ranked, less the neighbours shown with them."""
        return [r for r in records if "neighbour_of" not in r]

    def records_by_id(ids: list[str]) -> list[dict]:
        return daemon_call("retrieval", "get_records",
                           {"ids": ids, "namespaces": list(scope.namespaces)})["records"]

    def save(record: dict) -> str:
        record = {"record_id": contract.new_record_id(), "namespace": scope.saves_to,
                  "source_event_ids": [contract.new_ulid()], "created_at": contract.now_iso(),
                  **record}
        saved = daemon_call("ingest", "put_record", {"record": record}, control.WRITE_MS)
        title = privacy.scrub_text(record["title"])  # as stored
        return f"Saved {saved['record_id']} ({record['observation_type']}): {title}"

    @tool(read_only)
    def search_memory(query: Query,
                      limit: Annotated[int, Field(ge=1, le=100)] = 10,
                      mode: Annotated[Literal[MODES] | None, Field(
                          description="lexical: the words; semantic: the meaning; hybrid:"
                                      " both (the default when embeddings are on)")] = None,
                      types: Annotated[list[AnyType] | None, Field(
                          description="only memories of these types, e.g. [\"decision\","
                                      " \"error\"]")] = None,
                      ) -> str:
        """Search this project's long-term memory by keywords or meaning.

        Use it before starting on something that earlier sessions may have done, decided
        or debugged; `types` narrows it to decisions, errors, and so on. Returns the
        best-matching memory records, each as a markdown block: `### title`, its
        summary, `Concepts:`, `Files:` and its id (for `get_records`, `timeline` and
        `forget`)."""
        records = search(query, limit, mode, types)
        if not records:
            return f"No memories matched \u201c{one_line(query)}\u201d in {scope.label}."
        return "\n\n".join(search_block(record) for record in records)

    @tool(read_only)
    def recall(query: Query) -> str:
        """Recall what is remembered about a topic, as a short list.

        Use it for a quick look before answering or planning. Returns up to 8 memories,
        one line each: the memory, its id, its type, its date and a confidence c: how
        close it is in meaning to the query, from 0 to 1 (above 0.5: about the same
        thing; below 0.3: barely related, found by a shared word); or "No relevant
        memories found."."""
        return recall_text(hits(search(query, RECALL_LIMIT)))

    @tool(read_only)
    def resume_session() -> str:
        """Pick up where the last session in this project left off.

        Use it at the start of a session, or when asked to continue earlier work.
        Returns the last active session's checkpoint: its task, what was done (each
        turn, newest last), what is left (next steps said at its end, a command that
        was still failing) and the files it touched; or says there is none yet."""
        reply = daemon_call("retrieval", "resume_session", {"namespace": scope.saves_to})
        return reply["context"] or f"No earlier session to resume in {scope.label}."

    @tool(read_only)
    def timeline(record_id: RecordId | None = None, query: Query | None = None,
                 before: Annotated[int, Field(ge=0, le=50)] = 5,
                 after: Annotated[int, Field(ge=0, le=50)] = 5) -> str:
        """Show what happened around one memory, as short rows (cheap in tokens).

        Use it to see the work that led to a memory and what followed, before fetching
        any in full: give `record_id` (from a search), or `query` to start at its best
        match. Returns the records before and after it in time order, one row each: id,
        time, type, title; fetch the ones worth reading with `get_records`."""
        if (record_id is None) == (query is None):
            raise ToolError("give either record_id or query (exactly one of them)")
        if record_id is None:
            found = search(query, 1)
            if not found:
                return f"No memories matched \u201c{one_line(query)}\u201d in {scope.label}."
            record_id = hits(found)[0]["record_id"]
        records = daemon_call("retrieval", "timeline", {
            "record_id": record_id, "namespaces": list(scope.namespaces),
            "before": before, "after": after})["records"]
        if not records:
            raise ToolError(f"there is no record {record_id} in {scope.label}")
        return timeline_text(records, record_id, scope.label)

    @tool(read_only)
    def get_records(ids: Annotated[list[RecordId], Field(min_length=1, max_length=50)]) -> str:
        """Fetch memory records in full by id.

        Use it after `search_memory`, `recall` or `timeline` to read the records that
        matter. Returns each record's title, type, strategy, time, summary, facts,
        concepts, files and the ids of the events it came from."""
        records = records_by_id(unique(ids))
        if not records:
            raise ToolError(f"none of these records is in {scope.label}: {', '.join(ids)}")
        text = "\n\n".join(full_record(record) for record in records)
        missing = [i for i in unique(ids) if i not in {r["record_id"] for r in records}]
        if missing:
            text += f"\n\nNot found in {scope.label}: {', '.join(missing)}"
        return text

    @tool(ToolAnnotations(destructive_hint=True, idempotent_hint=True,
                                             open_world_hint=False))
    def forget(record_id: RecordId) -> str:
        """Delete one memory record for good.

        Use it when a memory is wrong, outdated or unwanted (the user asks to forget it).
        It is removed from search, recall and the context given to prompts; the captured
        events it came from stay. Returns what was deleted."""
        found = records_by_id([record_id])
        if not found:
            raise ToolError(f"there is no record {record_id} in {scope.label}; nothing was"
                            " deleted")
        reply = daemon_call("ingest", "forget", {"record_id": record_id,
                                                 "namespaces": list(scope.namespaces)},
                            control.WRITE_MS)
        if not reply["deleted"]:
            raise ToolError(f"{record_id} was already gone; nothing was deleted")
        return f"Forgot {record_id}: {one_line(found[0]['title'])}"

    @tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    def update_memory(record_id: RecordId,
                      reason: Annotated[str, NonBlank, Field(max_length=1000)],
                      title: Annotated[str | None, Field(max_length=200)] = None,
                      summary: Annotated[str | None, Field(max_length=4000)] = None,
                      facts: Annotated[list[Fact] | None, Field(max_length=50)] = None,
                      invalid: bool = False) -> str:
        """Correct one memory record, or mark it invalid, saying why.

        Use it when a memory is partly wrong or outdated: give the corrected `title`,
        `summary` or `facts` (they replace the old list) and the `reason`; what it said
        before is kept as a version. When it is no longer true at all, set `invalid` to
        true with the reason instead: it stays readable with `get_records` but is never
        recalled or searched again. Returns what changed."""
        edits = {k: v.strip() for k, v in (("title", title), ("summary", summary))
                 if v is not None}
        if facts is not None:
            edits["facts"] = unique(f.strip() for f in facts)
        if invalid == bool(edits):
            raise ToolError("give title, summary or facts to correct the record, or"
                            " invalid=true alone to mark it invalid")
        if any(not value for value in edits.values() if isinstance(value, str)):
            raise ToolError("title and summary must not be blank")
        found = records_by_id([record_id])
        if not found:
            raise ToolError(f"there is no record {record_id} in {scope.label}; nothing was"
                            " changed")
        changes = {"invalid_reason": reason.strip()} if invalid else edits
        reply = daemon_call("ingest", "update_record", {
            "record_id": record_id, "namespaces": list(scope.namespaces), "changes": changes,
            "reason": reason.strip()}, control.WRITE_MS)
        if not reply["updated"]:
            raise ToolError(f"{record_id} was forgotten meanwhile; nothing was changed")
        if invalid:
            return f"Marked {record_id} invalid ({one_line(reason)}); it is no longer recalled"
        return (f"Updated {record_id} ({', '.join(sorted(changes))}); the earlier text is kept"
                " as a version")

    @tool(writes)
    def save_observation(
        title: Annotated[str, NonBlank, Field(max_length=200)],
        summary: Annotated[str, NonBlank, Field(max_length=4000)],
        observation_type: ObservationType,
        concepts: Annotated[list[Concept], Field(max_length=50)],
        files_touched: Annotated[list[FilePath], Field(max_length=100)],
        facts: Annotated[list[Fact], Field(max_length=50)],
    ) -> str:
        """Save one thing worth remembering in later sessions.

        Use it for a decision and its reason, the cause of an error, a discovery about
        the code, or a pattern to follow; not for secrets. Give a short title, a summary
        that stands on its own, and lists of concepts, files and facts (empty lists are
        fine). Returns the new record's id; it is searchable at once."""
        return save({"title": title.strip(), "summary": summary.strip(),
                     "observation_type": observation_type, "strategy": "mcp_observation",
                     "concepts": unique(c.strip() for c in concepts),
                     "files_touched": unique(f.strip() for f in files_touched),
                     "facts": unique(f.strip() for f in facts)})

    @tool(writes)
    def save_session_summary(
        request: Annotated[str, NonBlank, Field(max_length=10_000)],
        investigated: Section, learned: Section, completed: Section, next_steps: Section,
        files_read: Annotated[list[FilePath], Field(max_length=250)],
        files_modified: Annotated[list[FilePath], Field(max_length=250)],
    ) -> str:
        """Save a structured recap of the work just done, for later sessions.

        Use it at the end of a substantial piece of work: what the user asked for, what
        was investigated, learned and completed, the next steps, and the files read and
        modified. Returns the new record's id; it is searchable at once."""
        title, summary = session_summary(request, {
            "investigated": investigated, "learned": learned, "completed": completed,
            "next_steps": next_steps})
        return save({"title": title, "summary": summary, "observation_type": "session_summary",
                     "strategy": "mcp_session_summary", "concepts": [], "facts": [],
                     "files_touched": unique(f.strip() for f in [*files_read,
                                                                   *files_modified])})

    return server


def main(scope_name: str | None = None) -> None:
    """``kirolearn mcp``: serve on stdio until the agent closes it."""
    base = paths.home()
    settings = config.load(base)
    scope = resolve_scope(scope_name or settings["mcp"]["scope"])
    build_server(scope, base, os.environ.get("KIROLEARN_AUTOSTART", "1") != "0").run()
