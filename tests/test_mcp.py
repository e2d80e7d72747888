"""The MCP server, driven by the SDK's own stdio client as an agent drives it: the
installed ``kirolearn mcp`` as a subprocess, against a real daemon."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from helpers.cli import BIN, here, kl
from helpers.events import ACTOR, retrieval, settled_context
from helpers.waits import wait_for
from helpers.workspace import Workspace, call, serve
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from kirolearn import mcp_server, project, protocol, transport

TOOLS = {"search_memory", "recall", "resume_session", "timeline", "get_records", "why",
         "save_observation",
         "save_session_summary", "update_memory", "forget"}
RECORD_ID = re.compile(r"mr_[0-9A-HJKMNP-TV-Z]{26}")


@pytest.fixture
def ws(tmp_path, home):
    return Workspace(tmp_path)


def observation(title: str = "Use WAL mode for SQLite", **fields: object) -> dict:
    return {"title": title,
            "summary": "Readers never block the single writer, so retrieval stays fast.",
            "observation_type": "decision", "concepts": ["sqlite", "wal"],
            "files_touched": ["kirolearn/db.py"], "facts": ["synchronous is FULL"], **fields}


def stored(record_id: str, namespaces: list[str]) -> list[dict]:
    return retrieval("get_records", {"ids": [record_id], "namespaces": namespaces})["records"]


def saved_id(text: str) -> str:
    found = RECORD_ID.search(text)
    assert found, text
    return found.group(0)


# -- the tools as a model sees them ---------------------------------------------------------


def test_tools_are_listed_with_schemas_and_descriptions_for_a_model(ws, daemon):
    async def scenario(client: Client) -> dict:
        return {tool.name: tool for tool in (await client.list_tools()).tools}

    tools = serve(ws, scenario)
    assert set(tools) == TOOLS
    for tool in tools.values():
        first, _, rest = tool.description.partition("\n\n")
        assert first.endswith(".") and "\n" not in first, tool.name  # one line of purpose
        assert "Use it" in rest and "Returns" in rest, tool.name  # when, and what comes back
        assert tool.output_schema is None  # plain text answers
    search = tools["search_memory"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["query"]["minLength"] == 1
    assert search["properties"]["query"]["maxLength"] == 1000
    assert search["properties"]["limit"] == {"default": 10, "minimum": 1, "maximum": 100,
                                             "title": "Limit", "type": "integer"}
    assert search["properties"]["mode"]["anyOf"][0]["enum"] == ["lexical", "semantic", "hybrid"]
    save = tools["save_observation"].input_schema
    assert set(save["required"]) == {"title", "summary", "observation_type", "concepts",
                                     "files_touched", "facts"}
    props = save["properties"]
    assert props["title"]["maxLength"] == 200 and props["summary"]["maxLength"] == 4000
    assert props["observation_type"]["enum"] == ["tool_use", "decision", "error", "discovery",
                                                 "pattern"]
    assert (props["concepts"]["maxItems"], props["files_touched"]["maxItems"],
            props["facts"]["maxItems"]) == (50, 100, 50)
    summary = tools["save_session_summary"].input_schema
    assert set(summary["required"]) == {"request", "investigated", "learned", "completed",
                                        "next_steps", "files_read", "files_modified"}
    assert tools["get_records"].input_schema["properties"]["ids"]["items"]["pattern"]
    assert tools["forget"].annotations.destructive_hint is True
    assert tools["recall"].annotations.read_only_hint is True


# -- the happy paths -------------------------------------------------------------------------
# One agent session, played once against a daemon shared by the tests below (each checks
# one claim about it).


@pytest.fixture(scope="module")
def session(module_daemon, tmp_path_factory) -> dict:
    ws = Workspace(tmp_path_factory.mktemp("mcp"))

    async def scenario(client: Client) -> dict:
        out = {"first": await call(client, "save_observation", **observation(
            summary="Readers never block the writer. <private>staging host db-7</private>"
                    " password=hunter2secret")),
            "second": await call(client, "save_observation", **observation(
                "Batches close at turn end", observation_type="pattern",
                summary="A session_summary event closes the extraction batch of its project.",
                concepts=[], files_touched=[], facts=[]))}
        first = saved_id(out["first"][1])
        out["stored"] = stored(first, [ws.namespace])  # before it is forgotten below
        out["search"] = await call(client, "search_memory", query="WAL writer", limit=5)
        out["patterns"] = await call(client, "search_memory", query="writer batch",
                                     types=["pattern"])
        out["recall"] = await call(client, "recall", query="writer batch")
        out["timeline"] = await call(client, "timeline", record_id=first)
        out["timeline_query"] = await call(client, "timeline", query="extraction batch",
                                           before=1, after=0)
        out["get"] = await call(client, "get_records", ids=[first, first])
        out["forget"] = await call(client, "forget", record_id=first)
        out["after"] = await call(client, "search_memory", query="WAL writer")
        out["get_after"] = await call(client, "get_records", ids=[first])
        out["again"] = await call(client, "forget", record_id=first)
        out["nothing"] = await call(client, "recall", query="kubernetes")
        out["retrieved"] = retrieval("search", {"query": "WAL writer",
                                                "namespace": ws.namespace})
        out["stored_after"] = stored(first, [ws.namespace])
        second = saved_id(out["second"][1])
        out["update"] = await call(
            client, "update_memory", record_id=second, reason="idle batches close too",
            summary="A session_summary event, or a quiet spell, closes the extraction batch."
                    " password=hunter2secret")
        out["updated"] = await call(client, "get_records", ids=[second])
        out["update_nothing"] = await call(client, "update_memory", record_id=second,
                                           reason="no change given")
        out["update_both"] = await call(client, "update_memory", record_id=second,
                                        reason="both", title="x", invalid=True)
        out["update_gone"] = await call(client, "update_memory", record_id=first,
                                        reason="forgotten", title="x")
        out["invalidate"] = await call(client, "update_memory", record_id=second,
                                       reason="batches were replaced", invalid=True)
        out["invalid_search"] = await call(client, "search_memory", query="extraction batch")
        out["invalid_get"] = await call(client, "get_records", ids=[second])
        return out

    out = serve(ws, scenario, cwd=ws.project / "src")  # a subdirectory: the same project
    out["ids"] = saved_id(out["first"][1]), saved_id(out["second"][1])
    return out


def test_update_memory_edits_keeping_a_version_or_marks_invalid(session):
    _, second = session["ids"]
    assert session["update"] == (False, f"Updated {second} (summary); the earlier text is"
                                        " kept as a version")
    text = session["updated"][1]
    assert "or a quiet spell, closes the extraction batch. password=[REDACTED:password]" in text
    assert "; idle batches close too):\nA session_summary event closes the extraction" in text
    assert session["update_nothing"][0] and "or invalid=true alone" in session["update_nothing"][1]
    assert session["update_both"][0]
    assert session["update_gone"][0] and "nothing was changed" in session["update_gone"][1]
    assert session["invalidate"] == (False, f"Marked {second} invalid (batches were"
                                            " replaced); it is no longer recalled")
    assert second not in session["invalid_search"][1]
    assert "INVALID: batches were replaced (kept, never recalled)" in session["invalid_get"][1]


def test_save_observation_answers_with_the_id_and_title(session):
    assert not session["first"][0] and session["first"][1].startswith("Saved mr_")
    assert session["first"][1].endswith("(decision): Use WAL mode for SQLite")


def test_a_saved_record_is_in_the_shims_project_scrubbed_like_an_event(session):
    [record] = session["stored"]
    assert record["summary"] == ("Readers never block the writer. [REDACTED:private]"
                                 " password=[REDACTED:password]")
    assert record["strategy"] == "mcp_observation" and record["observation_type"] == "decision"
    assert record["concepts"] == ["sqlite", "wal"] and record["facts"] == ["synchronous is FULL"]
    assert len(record["source_event_ids"]) == 1


def test_search_memory_shows_title_summary_concepts_files_and_id(session):
    first, _ = session["ids"]
    is_error, text = session["search"]
    assert not is_error
    assert text.split("\n\n")[0] == (
        "### Use WAL mode for SQLite\n"
        "Readers never block the writer. [REDACTED:private] password=[REDACTED:password]\n"
        "Concepts: sqlite, wal\nFiles: kirolearn/db.py\n"
        f"(id: {first}, decision, {datetime.now(UTC):%Y-%m-%d})")


def test_search_memory_keeps_to_the_types_asked_for(session):
    first, second = session["ids"]
    is_error, text = session["patterns"]
    assert not is_error
    assert f"(id: {second}, pattern," in text and first not in text


def test_recall_lists_each_memory_with_a_confidence(session):
    first, second = session["ids"]
    is_error, text = session["recall"]
    head, _, bullets = text.partition("\n\n")
    assert not is_error
    assert re.fullmatch(r"Found 2 relevant memories \(as of \d{4}-\d\d-\d\d \d\d:\d\d UTC\):",
                        head)
    lines = sorted(bullets.splitlines(), key=lambda line: first not in line)
    assert len(lines) == 2
    assert re.fullmatch(r"- Readers never block the writer\. \[REDACTED:private\]"
                        rf" password=\[REDACTED:password\]"
                        rf" \(id: {first}\) \[decision\] \(\d{{4}}-\d\d-\d\d\)"
                        r" c:[01]\.\d\d", lines[0])
    assert re.fullmatch(rf"- A session_summary event .* \(id: {second}\) \[pattern\]"
                        rf" \(\d{{4}}-\d\d-\d\d\) c:[01]\.\d\d", lines[1])


def test_recall_counts_the_hits_not_the_neighbours_shown_with_them(daemon, ws):
    """A conversation's turns all match, so each hit comes with its neighbours; recall
    still lists at most eight memories."""
    for n in range(12):
        payload = {"session_id": "pottery", "transcript_path": "/x/pottery.jsonl",
                   "cwd": str(ws.project), "hook_event_name": "UserPromptSubmit",
                   "prompt": f"Pottery class note {n}: the glaze on bowl {n} cracked in the"
                             f" kiln at cone {n + 4}."}
        assert ws.hook("kirolearn-claude-code", payload)[0].returncode == 0
    ws.hook("kirolearn-claude-code", {"session_id": "pottery", "hook_event_name": "Stop",
                                      "transcript_path": "/x/pottery.jsonl",
                                      "cwd": str(ws.project), "stop_hook_active": False,
                                      "last_assistant_message": "Noted."})
    wait_for(lambda: len(retrieval("search", {"query": "glaze kiln", "namespace": ws.namespace,
                                              "mode": "lexical"})["record_ids"]) >= 10,
             message="a record per turn")
    settled_context(ws.namespace, "pottery glaze cracked in the kiln")
    shown = retrieval("search", {"query": "pottery glaze cracked in the kiln", "limit": 8,
                                 "namespace": ws.namespace, "records": True})["records"]
    assert any("neighbour_of" in r for r in shown)

    async def scenario(client: Client) -> tuple[bool, str]:
        return await call(client, "recall", query="pottery glaze cracked in the kiln")

    _, recalled = serve(ws, scenario)
    assert recalled.startswith("Found 8 relevant memories")
    assert len(recalled.split("\n\n", 1)[1].splitlines()) == 8


def test_timeline_shows_the_records_around_one_by_id_or_query(session):
    first, second = session["ids"]
    is_error, text = session["timeline"]
    rows = text.splitlines()
    assert not is_error and rows[0].startswith(f"Records around {first} in this project")
    assert re.fullmatch(rf"→ {first}  \d{{4}}-\d\d-\d\d \d\d:\d\d  decision  Use WAL mode for"
                        " SQLite", rows[1])
    assert rows[2].startswith(f"  {second}  ") and rows[2].endswith("pattern  Batches close"
                                                                      " at turn end")
    assert session["timeline_query"][1].splitlines()[1:] == [rows[1].replace("→", " "),
                                                             rows[2].replace("  ", "→ ", 1)]


def test_get_records_shows_a_record_in_full_once(session):
    first, _ = session["ids"]
    [record] = session["stored"]
    is_error, text = session["get"]
    assert not is_error and text.count("### ") == 1  # an id asked twice is shown once
    assert f"id: {first} · type: decision · strategy: mcp_observation · created: " in text
    assert "Facts:\n- synchronous is FULL" in text and "Concepts: sqlite, wal" in text
    assert f"Source events: {record['source_event_ids'][0]}" in text


def test_a_forgotten_record_is_gone_from_every_tool_and_from_prompts(session):
    first, second = session["ids"]
    assert session["forget"] == (False, f"Forgot {first}: Use WAL mode for SQLite")
    assert first not in session["after"][1] and second not in session["after"][1]
    get_after = session["get_after"]
    assert get_after[0] and "none of these records is in this project" in get_after[1]
    assert session["again"][0] and "nothing was deleted" in session["again"][1]
    # Gone from what a prompt retrieves too, and from the index itself.
    assert first not in session["retrieved"]["record_ids"]
    assert session["stored_after"] == []


def test_recall_with_no_match_says_so(session):
    assert session["nothing"] == (False, "No relevant memories found.")


def test_save_session_summary_is_the_seeds_record_and_searchable_at_once(ws, daemon):
    request = "Find out why the nightly migration of the invoices table fails " * 5

    async def scenario(client: Client) -> list:
        saved = await call(client, "save_session_summary", request=request,
                           investigated="The migration log and the schema diff.",
                           learned="The invoices table has a trigger that locks it.",
                           completed="Dropped the trigger before migrating.",
                           next_steps="", files_read=["db/migrate.py", "db/schema.sql"],
                           files_modified=["db/migrate.py", "db/triggers.sql"])
        found = await call(client, "search_memory", query="invoices trigger")
        return [saved, found]

    saved, found = serve(ws, scenario)
    assert not saved[0] and saved[1].endswith(f"(session_summary): {request.strip()[:200]}")
    [record] = stored(saved_id(saved[1]), [ws.namespace])
    assert record["title"] == request.strip()[:200] and len(record["title"]) == 200
    assert record["summary"] == (
        "## What was investigated\nThe migration log and the schema diff.\n\n"
        "## What was learned\nThe invoices table has a trigger that locks it.\n\n"
        "## What was completed\nDropped the trigger before migrating.\n\n"
        "## Next steps\n(none)")
    assert record["files_touched"] == ["db/migrate.py", "db/schema.sql", "db/triggers.sql"]
    assert (record["observation_type"], record["strategy"]) == ("session_summary",
                                                                "mcp_session_summary")
    assert record["concepts"] == [] and record["facts"] == []
    assert not found[0] and f"id: {record['record_id']}" in found[1]


def test_two_saves_with_the_same_title_both_stay_readable(ws, daemon):
    """A second summary of the same request, or a second observation with the same
    title, is a record of its own: the first one's findings are never replaced."""
    async def scenario(client: Client) -> list:
        summaries = [await call(client, "save_session_summary", request="Fix the failing tests",
                                investigated=f"Run {n}.", learned=learned, completed="",
                                next_steps="", files_read=[], files_modified=[])
                     for n, learned in enumerate(["The clock was mocked wrongly.",
                                                  "The fixture leaked a socket."])]
        observations = [await call(client, "save_observation", **observation(summary=summary))
                        for summary in ("First finding.", "Second finding.")]
        ids = [saved_id(text) for _, text in summaries + observations]
        return [ids, await call(client, "get_records", ids=ids)]

    ids, (is_error, text) = serve(ws, scenario)
    assert len(set(ids)) == 4 and not is_error and text.count("### ") == 4
    for finding in ("The clock was mocked wrongly.", "The fixture leaked a socket.",
                    "First finding.", "Second finding."):
        assert finding in text
    assert all(stored(i, [ws.namespace]) for i in ids)


def test_a_long_session_summary_drops_whole_sections_from_the_bottom(ws, daemon):
    sections = {key: key[0] * 1500 for key, _ in mcp_server.text.SUMMARY_SECTIONS}

    async def scenario(client: Client) -> tuple[bool, str]:
        return await call(client, "save_session_summary", request="Long work", **sections,
                          files_read=[], files_modified=[])

    is_error, text = serve(ws, scenario)
    assert not is_error
    [record] = stored(saved_id(text), [ws.namespace])
    assert record["summary"] == ("## What was investigated\n" + "i" * 1500 + "\n\n"
                                 "## What was learned\n" + "l" * 1500 + "\n\n[truncated]")


# -- the summary builder, for any input ------------------------------------------------------

section_text = st.text(max_size=5000)


@given(st.text(min_size=1, max_size=500), section_text, section_text, section_text,
       section_text)
def test_session_summary_fits_and_keeps_whole_sections_in_order(request, investigated,
                                                                learned, completed, next_steps):
    sections = {"investigated": investigated, "learned": learned, "completed": completed,
                "next_steps": next_steps}
    title, summary = mcp_server.text.session_summary(request, sections)
    assert len(title) <= 200 and title == " ".join(request.split())[:200]
    assert 0 < len(summary) <= 4000
    whole = [f"## {heading}\n{sections[key].strip() or '(none)'}"
             for key, heading in mcp_server.text.SUMMARY_SECTIONS]
    if len("\n\n".join(whole)) <= 4000:
        assert summary == "\n\n".join(whole)
        return
    assert summary.endswith("\n\n[truncated]")
    body = summary.removesuffix("\n\n[truncated]")
    kept = [part for part in whole if body.startswith(part) or part.startswith(body)]
    assert kept and body.startswith(whole[0][:len(body)])  # a prefix of the sections
    count = sum(1 for n in range(1, 5) if body.startswith("\n\n".join(whole[:n])))
    if count >= 1:  # whole sections were kept: the next one did not fit
        assert body == "\n\n".join(whole[:count])
        assert count == 4 or len("\n\n".join(whole[:count + 1])) + 13 > 4000


def test_recall_text_follows_the_seed():
    now = datetime(2026, 11, 22, 9, 5, tzinfo=UTC)
    records = [
        {"record_id": "mr_01M81DTYN1TXE295BSMGXKGQEE", "summary": "Use  WAL\nmode.",
         "title": "WAL", "observation_type": "decision", "created_at": "2026-11-21T23:30:00-02:00",
         "score": -4.0},
        {"record_id": "mr_01M81DTYN1TXE295BSMGXKGQEF", "summary": "x" * 400, "title": "X",
         "observation_type": "pattern", "created_at": "2026-11-20T10:00:00+00:00",
         "score": None},
    ]
    assert mcp_server.text.recall_text(records[:1], now) == (
        "Found 1 relevant memory (as of 2026-11-22 09:05 UTC):\n\n"
        "- Use WAL mode. (id: mr_01M81DTYN1TXE295BSMGXKGQEE) [decision] (2026-11-22) c:1.00")
    closeness = [{**records[0], "relevance": 0.62}, {**records[0], "relevance": 0.0}]
    assert [line.rsplit(" ", 1)[1] for line in mcp_server.text.recall_text(
        closeness, now).splitlines()[2:]] == ["c:0.62", "c:0.00"]
    text = mcp_server.text.recall_text(records, now)
    assert text.startswith("Found 2 relevant memories (as of 2026-11-22 09:05 UTC):\n\n")
    assert text.endswith("x" * 299 + "… (id: mr_01M81DTYN1TXE295BSMGXKGQEF) [pattern]"
                         " (2026-11-20)")  # a substring match has no score
    assert mcp_server.text.recall_text([], now) == "No relevant memories found."


# -- bad input -------------------------------------------------------------------------------

BAD_CALLS = [
    ("search_memory", {}, "query: Field required"),
    ("search_memory", {"query": ""}, "query: String should have at least 1 character"),
    ("search_memory", {"query": "   "}, "query: must not be blank"),
    ("search_memory", {"query": "x" * 1001}, "query: String should have at most 1000"),
    ("search_memory", {"query": "x", "limit": 0}, "limit: Input should be greater than or"),
    ("search_memory", {"query": "x", "limit": 101}, "limit: Input should be less than or"),
    ("search_memory", {"query": 42}, "query: Input should be a valid string"),
    ("search_memory", {"query": "x", "types": ["note"]}, "types.0: Input should be"),
    ("recall", {"query": ""}, "query: String should have at least 1 character"),
    ("timeline", {}, "give either record_id or query (exactly one of them)"),
    ("timeline", {"record_id": "mr_01M81DTYN1TXE295BSMGXKGQEE", "query": "x"},
     "exactly one of them"),
    ("timeline", {"record_id": "42"}, "record_id: String should match pattern"),
    ("timeline", {"query": "x", "before": 51}, "before: Input should be less than or equal"),
    ("timeline", {"record_id": "mr_01M81DTYN1TXE295BSMGXKGQEE"},
     "there is no record mr_01M81DTYN1TXE295BSMGXKGQEE in this project"),
    ("get_records", {"ids": []}, "ids: List should have at least 1 item"),
    ("get_records", {"ids": ["nope"]}, "ids.0: String should match pattern"),
    ("get_records", {"ids": ["mr_01M81DTYN1TXE295BSMGXKGQEE"]},
     "none of these records is in this project"),
    ("forget", {}, "record_id: Field required"),
    ("forget", {"record_id": "mr_01M81DTYN1TXE295BSMGXKGQEE"}, "nothing was deleted"),
    ("save_observation", {**observation(), "title": ""}, "title: String should have at least"),
    ("save_observation", {**observation(), "title": "t" * 201}, "title: String should have at"
                                                                 " most 200"),
    ("save_observation", {**observation(), "summary": "s" * 4001}, "summary: String should"
                                                                   " have at most 4000"),
    ("save_observation", {**observation(), "summary": " \n "}, "summary: must not be blank"),
    ("save_observation", {**observation(), "observation_type": "session_summary"},
     "observation_type: Input should be 'tool_use', 'decision', 'error', 'discovery' or"
     " 'pattern'"),
    ("save_observation", {**observation(), "concepts": ["c"] * 51}, "concepts: List should"
                                                                    " have at most 50"),
    ("save_observation", {**observation(), "files_touched": ["f"] * 101}, "files_touched: List"
                                                                          " should have at most"),
    ("save_observation", {**observation(), "facts": ["f"] * 51}, "facts: List should have at"
                                                                 " most 50"),
    ("save_observation", {**observation(), "facts": ["x" * 501]}, "facts.0: String should have"
                                                                  " at most 500"),
    ("save_observation", {**observation(), "concepts": [""]}, "concepts.0: String should have"),
    ("save_observation", {k: v for k, v in observation().items() if k != "facts"},
     "facts: Field required"),
    ("save_session_summary", {"request": "r"}, "investigated: Field required"),
    ("save_session_summary", {"request": "", "investigated": "", "learned": "", "completed": "",
                              "next_steps": "", "files_read": [], "files_modified": []},
     "request: String should have at least 1 character"),
    ("save_session_summary", {"request": "r", "investigated": "", "learned": "",
                              "completed": "", "next_steps": "", "files_read": "a.py",
                              "files_modified": []}, "files_read: Input should be a valid list"),
    ("no_such_tool", {}, "Unknown tool: no_such_tool"),
]


def test_every_bad_input_is_an_error_result_and_changes_nothing(ws, daemon):
    async def scenario(client: Client) -> list:
        results = [await call(client, tool, **arguments) for tool, arguments, _ in BAD_CALLS]
        results.append(await call(client, "recall", query="anything at all"))  # still serving
        return results

    results = serve(ws, scenario)
    for (tool, arguments, expected), (is_error, text) in zip(BAD_CALLS, results, strict=False):
        assert is_error, (tool, arguments, text)
        assert expected in text, (tool, arguments, text)
        assert "errors.pydantic.dev" not in text
    assert results[-1] == (False, "No relevant memories found.")
    stats = json.loads(kl("stats", "--json", check=True).stdout)
    assert stats["totals"]["records"] == 0


# -- scopes ------------------------------------------------------------------------------------


def test_scopes_project_global_and_both(ws, daemon):
    everywhere = project.resolve_project(ws.home, home=str(ws.home), override="").namespace(ACTOR)

    async def save(client: Client, title: str, summary: str) -> str:
        return saved_id((await call(client, "save_observation", **observation(
            title, summary=summary, concepts=[], files_touched=[], facts=[])))[1])

    async def in_project(client: Client) -> list[str]:
        return [await save(client, "Project rule", "Deploys go through the release branch."),
                await save(client, "Shared rule", "Commit messages say why, not what.")]

    async def in_global(client: Client) -> list[str]:
        return [await save(client, "Global habit", "Run the tests before every release."),
                await save(client, "Shared rule", "Commit messages say why, not what.")]

    mine = serve(ws, in_project)
    theirs = serve(ws, in_global, "--scope", "global")
    assert stored(mine[0], [ws.namespace]) and stored(theirs[0], [everywhere])
    started_at_home = serve(ws, in_global, cwd=ws.home)  # outside any project: global
    assert all(stored(i, [everywhere]) for i in started_at_home + theirs)  # never merged

    async def look(client: Client) -> tuple[bool, str]:
        return await call(client, "search_memory", query="release rule messages")

    async def forget_mine(client: Client) -> tuple[bool, str]:
        return await call(client, "forget", record_id=mine[0])

    project_only = serve(ws, look)[1]
    assert mine[0] in project_only and theirs[0] not in project_only
    global_only = serve(ws, look, "--scope", "global")[1]
    assert theirs[0] in global_only and mine[0] not in global_only
    refused = serve(ws, forget_mine, "--scope", "global")
    assert refused[0] and "no record" in refused[1] and stored(mine[0], [ws.namespace])
    both = serve(ws, look, KIROLEARN_MCP_SCOPE="project+global")[1]
    # Saved twice to global, alike: shown once (either may be the one).
    assert mine[0] in both and (theirs[0] in both) != (started_at_home[0] in both)
    assert both.count("### Shared rule") == 1  # the same memory in both: shown once
    assert sum(i in both for i in (mine[1], theirs[1], started_at_home[1])) == 1


def test_an_unknown_scope_is_refused_before_serving(ws):
    result = kl("mcp", env={**ws.env(), "KIROLEARN_MCP_SCOPE": "everything"},
                cwd=str(ws.project))
    assert result.returncode != 0
    assert "mcp.scope: must be one of project, global, project+global" in result.stderr


# -- the daemon down -----------------------------------------------------------------------------


def test_a_call_starts_the_daemon_when_it_is_down(ws):
    async def scenario(client: Client) -> tuple[bool, str]:
        return await call(client, "save_observation", **observation())

    try:
        is_error, text = serve(ws, scenario)
        assert not is_error, text
        assert here().daemon_running()
        assert stored(saved_id(text), [ws.namespace])
    finally:
        kl("stop")


def test_with_autostart_off_a_call_says_how_to_start_it(ws):
    async def scenario(client: Client) -> list:
        return [await call(client, "recall", query="anything"),
                await call(client, "save_observation", **observation())]

    for is_error, text in serve(ws, scenario, KIROLEARN_AUTOSTART="0"):
        assert is_error and "kirolearn is not running; start it with `kirolearn start`" in text
    assert not here().daemon_running()


# -- the daemon's side: ingest and retrieval operations --------------------------------------


def record(namespace: str, **fields: object) -> dict:
    from kirolearn import contract

    return {"record_id": contract.new_record_id(), "namespace": namespace, "title": "T",
            "summary": "S", "facts": [], "concepts": [], "files_touched": [],
            "observation_type": "decision", "strategy": "mcp_observation",
            "source_event_ids": [contract.new_ulid()], "created_at": contract.now_iso(),
            **fields}


def test_ingest_checks_put_record_and_forget(ingest):
    from helpers.events import NAMESPACE

    def refused(op: str, body: dict) -> protocol.RemoteError:
        with pytest.raises(protocol.RemoteError) as caught:
            ingest.call(op, body)
        assert caught.value.code == protocol.ErrorCode.BAD_REQUEST
        return caught.value

    assert "record: must be an object" in refused("put_record", {}).reason
    error = refused("put_record", {"record": record(NAMESPACE, title="", extra=1)})
    assert {e["field"] for e in error.body["errors"]} == {"record", "title"}
    assert "namespaces" in refused("forget", {"record_id": record(NAMESPACE)["record_id"],
                                              "namespaces": ["/etc/"]}).reason
    assert "record_id" in refused("forget", {"record_id": "x", "namespaces": [NAMESPACE]}).reason

    # A redaction that lengthens a field is cut back to the contract's limit.
    long_title = "password=" + "p" * 191
    first = ingest.call("put_record", {"record": record(NAMESPACE, title=long_title)})
    assert first["status"] == "stored"
    [saved] = retrieval("get_records", {"ids": [first["record_id"]], "namespaces": [NAMESPACE]}
                        )["records"]
    assert saved["title"] == "password=[REDACTED:password]"
    # The same title, type, strategy and files again: a record of its own.
    again = ingest.call("put_record", {"record": record(NAMESPACE, title=long_title,
                                                        summary="Newer")})
    assert again["status"] == "stored" and again["record_id"] != first["record_id"]
    assert ingest.call("forget", {"record_id": first["record_id"],
                                  "namespaces": [NAMESPACE]}) == {"deleted": True}
    assert ingest.call("forget", {"record_id": first["record_id"],
                                  "namespaces": [NAMESPACE]}) == {"deleted": False}


def test_retrieval_checks_get_records_and_timeline(daemon):
    from helpers.events import NAMESPACE

    with transport.Client(here().endpoint("retrieval"), timeout_ms=5000) as client:
        for op, body, reason in [
            ("get_records", {"ids": ["x"]}, "'namespaces' must be a list"),
            ("get_records", {"ids": [], "namespaces": [NAMESPACE]}, "'ids' must be a list"),
            ("timeline", {"namespaces": [NAMESPACE]}, "'record_id' must be a string"),
            ("timeline", {"record_id": "x", "namespaces": [NAMESPACE], "before": -1},
             "'before' must be an integer from 0 to 50"),
            ("search", {"query": "x", "namespaces": []}, "'namespaces' must be a list"),
        ]:
            with pytest.raises(protocol.RemoteError) as caught:
                client.call(op, body)
            assert caught.value.code == protocol.ErrorCode.BAD_REQUEST
            assert reason in caught.value.reason
        assert client.call("timeline", {"record_id": "mr_01M81DTYN1TXE295BSMGXKGQEE",
                                        "namespaces": [NAMESPACE]}) == {"records": []}


def test_the_server_exits_when_the_agent_closes_it(ws, daemon):
    """Closing stdin ends the server: no process is left behind (the home fixture fails
    the test on a leaked one)."""
    import subprocess

    server = subprocess.Popen([str(BIN / "kirolearn"), "mcp"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              cwd=ws.project, env=ws.env())
    server.stdin.close()
    assert server.wait(timeout=15) == 0
    server.stdout.close()
    server.stderr.close()


def test_a_client_that_gave_up_on_discovery_gets_its_handshake(ws, daemon):
    """Copilot CLI opens with the 2026 era's ``server/discover`` and, after 10 s without
    an answer, sends ``initialize``. A server that starts late (a busy machine) finds
    both waiting: the discovery is refused at once and the handshake served, so the
    session has its tools."""
    import subprocess

    envelope = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "copilot-cli", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}
    asked = [{"jsonrpc": "2.0", "id": 0, "method": "server/discover",
              "params": {"_meta": envelope}},
             {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "copilot-cli", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    server = subprocess.Popen([str(BIN / "kirolearn"), "mcp"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=ws.project, env=ws.env())
    # All queued before the server reads a line: it is still importing.
    out, err = server.communicate("".join(json.dumps(m) + "\n" for m in asked), timeout=120)
    assert server.returncode == 0, err
    answers = {a["id"]: a for a in map(json.loads, out.splitlines())}
    assert answers[0]["error"]["code"] == -32601  # method not found: fall back now
    assert answers[1]["result"]["serverInfo"]["name"] == "kirolearn"
    assert {t["name"] for t in answers[2]["result"]["tools"]} == TOOLS


def test_a_record_seen_again_says_how_often_and_keeps_each_version():
    version = {"title": "t", "summary": "first", "facts": ["ran `pytest`"], "concepts": [],
               "files_touched": [], "source_event_ids": [], "created_at": "2026-11-20T10:00:00Z",
               "replaced_at": "2026-11-21T10:00:00Z", "reason": None}
    record = {"record_id": "mr_01M81DTYN1TXE295BSMGXKGQEE", "title": "Fix the export",
              "summary": "first\n\nagain", "facts": ["ran `pytest`"], "concepts": [],
              "files_touched": [], "observation_type": "tool_use", "strategy": "heuristic",
              "source_event_ids": ["A" * 26, "B" * 26], "created_at": "2026-11-21T10:00:00Z",
              "versions": [version, {**version, "reason": "corrected"}]}
    text = mcp_server.text.full_record(record)
    assert "· seen 2 times (repeats merged in)" in text.splitlines()[1]  # an edit is no repeat
    assert "Version 1 (until 2026-11-21 10:00 UTC):" in text
    assert "seen" not in mcp_server.text.full_record({**record, "versions": []})
