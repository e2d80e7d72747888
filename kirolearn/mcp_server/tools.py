"""The MCP tools, one function each: its docstring is the description the model reads,
its signature the schema the SDK checks every call against, and its answer is text.
``memory`` (bound by the server's one registration, ``TOOLS``) is the scope and the
daemon calls. An answer that carries stored text is fenced and quoted as the hooks'
context is (``search.context.fenced``): recalled notes, data, never instructions."""

from __future__ import annotations

import os
from typing import Annotated, Literal

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from kirolearn import config, contract, control, tooluse
from kirolearn.mcp_server import text
from kirolearn.mcp_server.memory import Memory, hits
from kirolearn.search.context import fenced

RECALL_LIMIT = 8  # memories one recall returns (the seed's recallLimit)
WHY_BUDGET_MS = 20_000  # git's blame of a file with a long history takes seconds

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


def search_memory(memory: Memory, query: Query,
                  limit: Annotated[int, Field(ge=1, le=100)] = 10,
                  mode: Annotated[Literal[config.MODES] | None, Field(
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
    records = memory.search(query, limit, mode, types)
    if not records:
        return (f"No memories matched \u201c{text.one_line(query)}\u201d"
                f" in {memory.scope.label}.")
    return fenced("\n\n".join(text.search_block(record) for record in records))


def recall(memory: Memory, query: Query) -> str:
    """Recall what is remembered about a topic, as a short list.

    Use it for a quick look before answering or planning. Returns up to 8 memories,
    one line each: the memory, its id, its type, its date and a confidence c: how
    close it is in meaning to the query, from 0 to 1 (above 0.5: about the same
    thing; below 0.3: barely related, found by a shared word); or "No relevant
    memories found."."""
    found = hits(memory.search(query, RECALL_LIMIT))
    return fenced(text.recall_text(found)) if found else text.recall_text(found)


def resume_session(memory: Memory) -> str:
    """Pick up where the last session in this project left off.

    Use it at the start of a session, or when asked to continue earlier work.
    Returns the last active session's checkpoint: its task, what was done (each
    turn, newest last), what is left (next steps said at its end, a command that
    was still failing) and the files it touched; or says there is none yet."""
    reply = memory.call("retrieval", "resume_session", {"namespace": memory.scope.saves_to})
    return (fenced(reply["context"]) if reply["context"]
            else f"No earlier session to resume in {memory.scope.label}.")


def why(memory: Memory, path: FilePath,
        first: Annotated[int, Field(ge=1, description="The first line, counted from 1")] = 1,
        last: Annotated[int | None, Field(ge=1, description=(
            "The last line (default: the first; the whole file when first is 1 and last"
            " is not given)"))] = None) -> str:
    """Say why lines of a file are as they are: the work of the commits that wrote them.

    Use it before changing code whose reason is not plain (a check that looks needless,
    an odd constant, a workaround), or when a change there may undo earlier work.
    Returns, for the commits that wrote lines `first` to `last` of `path` (git blame of
    the working tree; the path relative to the project), the memories of their work:
    the request, what was concluded, and whether later work undid it; the commits with
    the most of the lines first. Or says that nothing is remembered of them."""
    if memory.scope.checkout is None:
        raise ToolError("why needs a project: this server serves the global memory")
    name = tooluse.relative(path, memory.scope.checkout)
    if os.path.isabs(name):
        raise ToolError(f"{path} is not in this project ({memory.scope.checkout})")
    end = last if last is not None else (0 if first == 1 else first)
    if end and end < first:
        raise ToolError(f"last ({last}) is before first ({first})")
    reply = memory.call("retrieval", "why", {
        "namespaces": memory.namespaces, "checkout": memory.scope.checkout, "path": name,
        "first": first, "last": end, "budget_ms": WHY_BUDGET_MS}, WHY_BUDGET_MS + 2000)
    if reply["outcome"] == "unreadable":
        raise ToolError(f"{name}: no such lines in this project's working tree")
    if reply["outcome"] == "blaming":
        return f"git is still reading the history of {name}: ask again in a moment."
    return reply["context"] or (f"Nothing is remembered of the commits that wrote these"
                                f" lines of {name}.")


def timeline(memory: Memory, record_id: RecordId | None = None, query: Query | None = None,
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
        found = memory.search(query, 1)
        if not found:
            return (f"No memories matched \u201c{text.one_line(query)}\u201d"
                f" in {memory.scope.label}.")
        record_id = hits(found)[0]["record_id"]
    records = memory.call("retrieval", "timeline", {
        "record_id": record_id, "namespaces": memory.namespaces,
        "before": before, "after": after})["records"]
    if not records:
        raise ToolError(f"there is no record {record_id} in {memory.scope.label}")
    return fenced(text.timeline_text(records, record_id, memory.scope.label))


def get_records(memory: Memory,
                ids: Annotated[list[RecordId], Field(min_length=1, max_length=50)]) -> str:
    """Fetch memory records in full by id.

    Use it after `search_memory`, `recall` or `timeline` to read the records that
    matter. Returns each record's title, type, strategy, time, summary, facts,
    concepts, files and the ids of the events it came from."""
    records = memory.records(text.unique(ids))
    if not records:
        raise ToolError(f"none of these records is in {memory.scope.label}: {', '.join(ids)}")
    answer = fenced("\n\n".join(text.full_record(record) for record in records))
    missing = [i for i in text.unique(ids) if i not in {r["record_id"] for r in records}]
    if missing:
        answer += f"\n\nNot found in {memory.scope.label}: {', '.join(missing)}"
    return answer


def forget(memory: Memory, record_id: RecordId) -> str:
    """Delete one memory record for good.

    Use it when a memory is wrong, outdated or unwanted (the user asks to forget it).
    It is removed from search, recall and the context given to prompts; the captured
    events it came from stay. Returns what was deleted."""
    found = memory.records([record_id])
    if not found:
        raise ToolError(f"there is no record {record_id} in {memory.scope.label}; nothing was"
                        " deleted")
    reply = memory.call("ingest", "forget", {"record_id": record_id,
                                             "namespaces": memory.namespaces},
                        control.WRITE_MS)
    if not reply["deleted"]:
        raise ToolError(f"{record_id} was already gone; nothing was deleted")
    return f"Forgot {record_id}: {text.one_line(found[0]['title'])}"


def update_memory(memory: Memory, record_id: RecordId,
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
        edits["facts"] = text.unique(f.strip() for f in facts)
    if invalid == bool(edits):
        raise ToolError("give title, summary or facts to correct the record, or"
                        " invalid=true alone to mark it invalid")
    if any(not value for value in edits.values() if isinstance(value, str)):
        raise ToolError("title and summary must not be blank")
    found = memory.records([record_id])
    if not found:
        raise ToolError(f"there is no record {record_id} in {memory.scope.label}; nothing was"
                        " changed")
    changes = {"invalid_reason": reason.strip()} if invalid else edits
    reply = memory.call("ingest", "update_record", {
        "record_id": record_id, "namespaces": memory.namespaces, "changes": changes,
        "reason": reason.strip()}, control.WRITE_MS)
    if not reply["updated"]:
        raise ToolError(f"{record_id} was forgotten meanwhile; nothing was changed")
    if invalid:
        return f"Marked {record_id} invalid ({text.one_line(reason)}); it is no longer recalled"
    return (f"Updated {record_id} ({', '.join(sorted(changes))}); the earlier text is kept"
            " as a version")


def save_observation(
    memory: Memory,
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
    return memory.save({"title": title.strip(), "summary": summary.strip(),
                 "observation_type": observation_type, "strategy": "mcp_observation",
                 "concepts": text.unique(c.strip() for c in concepts),
                 "files_touched": text.unique(f.strip() for f in files_touched),
                 "facts": text.unique(f.strip() for f in facts)})


def save_session_summary(
    memory: Memory,
    request: Annotated[str, NonBlank, Field(max_length=10_000)],
    investigated: Section, learned: Section, completed: Section, next_steps: Section,
    files_read: Annotated[list[FilePath], Field(max_length=250)],
    files_modified: Annotated[list[FilePath], Field(max_length=250)],
) -> str:
    """Save a structured recap of the work just done, for later sessions.

    Use it at the end of a substantial piece of work: what the user asked for, what
    was investigated, learned and completed, the next steps, and the files read and
    modified. Returns the new record's id; it is searchable at once."""
    title, summary = text.session_summary(request, {
        "investigated": investigated, "learned": learned, "completed": completed,
        "next_steps": next_steps})
    return memory.save({"title": title, "summary": summary, "observation_type": "session_summary",
                 "strategy": "mcp_session_summary", "concepts": [], "facts": [],
                 "files_touched": text.unique(f.strip() for f in [*files_read,
                                                               *files_modified])})


READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
# Every tool, and what a client is told of its effects.
TOOLS = (
    (search_memory, READ_ONLY), (recall, READ_ONLY), (resume_session, READ_ONLY),
    (timeline, READ_ONLY), (get_records, READ_ONLY), (why, READ_ONLY),
    (forget, ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False)),
    (update_memory, ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                    open_world_hint=False)),
    (save_observation, WRITES), (save_session_summary, WRITES),
)
