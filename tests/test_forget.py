"""``kirolearn forget`` and ``kirolearn edit`` through the real daemon: by id, by what a
search finds or a whole project, shown and asked first; a forgotten record leaves
search, export and the file; an edit keeps the old text as a version; a wrong id
changes nothing."""

from __future__ import annotations

import json
import os

import httpx
from helpers.cli import here, kl
from helpers.events import make_event, stored_events, wait_records
from helpers.waits import wait_for
from helpers.workspace import Workspace
from test_mcp import call, saved_id, serve

from kirolearn import contract, db, project, spool
from kirolearn.db import writes


def record(namespace: str, title: str, summary: str) -> dict:
    return {"record_id": contract.new_record_id(), "namespace": namespace, "title": title,
            "summary": summary, "facts": [], "concepts": [], "files_touched": [],
            "observation_type": "decision", "strategy": "mcp_observation",
            "source_event_ids": [contract.new_ulid()], "created_at": contract.now_iso()}


def claude(ws: Workspace, **fields: str) -> None:
    payload = {"session_id": "s-1", "cwd": str(ws.project),
               "hook_event_name": "UserPromptSubmit", **fields}
    assert ws.hook("kirolearn-claude-code", payload)[0].returncode == 0


def exported_ids() -> set[str]:
    lines = kl("export", check=True).stdout.splitlines()
    return {json.loads(line).get("record_id") for line in lines} - {None}


def test_forget_by_id_and_by_query_shows_asks_and_removes(store, daemon, ingest, tmp_path):
    namespace = project.resolve_project(tmp_path).namespace(project.actor_id())
    wal = record(namespace, "Use WAL mode", "SQLite runs in WAL mode so zebraquartz readers"
                 " never block.")
    old = record(namespace, "Deploy with the legacy script", "deploy.sh pushes by rsync.")
    new = record(namespace, "Deploy through the pipeline", "CI deploys every tagged commit.")
    for r in (wal, old, new):
        assert ingest.call("put_record", {"record": r})["status"] == "stored"

    declined = kl("forget", wal["record_id"], input="n\n")
    assert declined.returncode == 1 and "Aborted" in declined.stderr
    assert f"{wal['record_id']}  Use WAL mode" in declined.stdout
    assert wal["record_id"] in exported_ids()

    done = kl("forget", wal["record_id"], "--yes", check=True)
    assert f"forgot {wal['record_id']}" in done.stdout
    assert wal["record_id"] not in exported_ids()
    found = kl("search", "WAL readers", "--project", str(tmp_path), "--json", check=True)
    assert wal["record_id"] not in json.loads(found.stdout)["record_ids"]

    searched = kl("forget", "--query", "legacy deploy script", "--yes", cwd=str(tmp_path),
                  check=True)
    assert f"{old['record_id']}  Deploy with the legacy script" in searched.stdout
    assert f"forgot {old['record_id']}" in searched.stdout
    listed = {r["record_id"] for r in (old, new) if r["record_id"] in searched.stdout}
    assert old["record_id"] in listed  # and, maybe, the other "deploy": what it showed goes
    assert exported_ids() == {old["record_id"], new["record_id"]} - listed

    nothing = kl("forget", "--query", "kubernetes helm chart", "--project", str(tmp_path),
                 "--yes", check=True)
    assert nothing.stdout.strip() == "no memories matched; nothing was forgotten"
    if store == "postgresql":  # nothing holds the word, nor counts it (VACUUM took the rows)
        with db.reading(db.location(here())) as conn:
            assert conn.execute("SELECT count(*) FROM memory_records WHERE title || summary"
                                " LIKE '%zebraquartz%'").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM record_terms WHERE term = 'zebraquartz'"
                                " AND docs > 0").fetchone()[0] == 0
        return
    kl("stop", check=True)  # neither the record nor its words in the index are left in the file
    assert b"zebraquartz" not in here().db_path.read_bytes()


def test_a_wrong_id_forgets_nothing(daemon, ingest, tmp_path):
    namespace = project.resolve_project(tmp_path).namespace(project.actor_id())
    kept = record(namespace, "Use WAL mode", "SQLite runs in WAL mode.")
    assert ingest.call("put_record", {"record": kept})["status"] == "stored"
    unknown = contract.new_record_id()

    mixed = kl("forget", kept["record_id"], unknown, "--yes")
    assert mixed.returncode == 1
    assert f"no record {unknown}; nothing was forgotten" in mixed.stderr
    malformed = kl("forget", "mr_nonsense", "--yes")
    assert malformed.returncode == 2 and "not a record id" in malformed.stderr
    for args in ((), (kept["record_id"], "--query", "wal"),
                 (kept["record_id"], "--project", str(tmp_path))):
        assert kl("forget", *args, "--yes").returncode == 2
    assert kept["record_id"] in exported_ids()


def test_forget_a_project_while_the_viewer_tails_and_an_mcp_client_is_open(home, tmp_path):
    """Everything of one project goes (its text overwritten in the file), the other
    project stays, and the open viewer stream and MCP session go on working."""
    ws, other = Workspace(tmp_path / "a"), Workspace(tmp_path / "b")
    kl("start", env={**os.environ, "KIROLEARN_INGEST_SPOOL_INTERVAL_S": "3600"}, check=True)
    try:
        forget_a_project(ws, other)
    finally:
        kl("stop", check=True)  # the WAL folded in: what is on disk is all there is
    assert b"zebra-quartz" not in here().db_path.read_bytes()


def forget_a_project(ws: Workspace, other: Workspace) -> None:
    claude(ws, prompt="where is the zebra-quartz config loaded")
    claude(other, prompt="the other project's prompt")
    spool.write(contract.make_event(  # a hook's event, spooled and not yet drained
        "prompt", {"type": "text", "content": "spooled zebra-quartz prompt"},
        namespace=ws.namespace, actor_id="tester", session_id="s-1", surface="claude-code",
        version="0.1.0", client_id="testhost", project_path=ws.root), here())
    url = kl("open", "--url", check=True).stdout.strip()
    base = url.split("?token=")[0]
    with httpx.Client(timeout=10) as http:
        http.get(url)  # the hand-over sets the cookie
        after = wait_for(lambda: http.get(base + "api/events").json()["events"],
                         message="the prompts")[-1]["seq"]
        with http.stream("GET", base + "api/stream", params={"after": after}) as stream:

            async def scenario(client) -> list[tuple[bool, str]]:
                saved = await call(client, "save_observation", title="zebra-quartz config",
                                   summary="The zebra-quartz settings load from cfg/zq.toml.",
                                   observation_type="discovery", concepts=[],
                                   files_touched=[], facts=[])
                record_id = saved_id(saved[1])
                found = await call(client, "search_memory", query="zebra-quartz")
                listing = kl("forget", "--project", str(ws.project), "--all", input="y\n",
                             env=ws.env())
                assert listing.returncode == 0, listing.stderr
                assert f"{ws.namespace}: 1 event(s) and 1 record(s)" in listing.stdout
                assert "forgot 1 event(s) and 1 record(s)" in listing.stdout
                return [saved, found, await call(client, "search_memory", query="zebra-quartz"),
                        await call(client, "get_records", ids=[record_id]),
                        await call(client, "save_observation", title="After the forget",
                                   summary="Saving still works.", observation_type="pattern",
                                   concepts=[], files_touched=[], facts=[])]

            saved, found, searched, fetched, again = serve(ws, scenario)
            claude(ws, prompt="a prompt after the forget")
            event = next(line for line in stream.iter_lines() if line.startswith("data:"))
        assert json.loads(event[5:])["detail"] == "a prompt after the forget"
        memories = http.get(base + "api/memories").json()
    assert not saved[0] and "zebra-quartz" in found[1]
    assert searched == (False, "No memories matched \u201czebra-quartz\u201d in this project.")
    assert fetched[0] and "none of these records" in fetched[1]
    assert not again[0]
    assert [m["title"] for m in memories["records"]] == ["After the forget"]
    assert not spool.waiting(here())  # discarded with the project, never stored
    kept = json.loads(kl("stats", "--json", check=True).stdout)["namespaces"]
    assert {n["namespace"]: n["events_total"] for n in kept} == {
        ws.namespace: 1, other.namespace: 1}


def test_edit_in_the_editor_keeps_the_old_text_as_a_version(daemon, ingest, tmp_path):
    namespace = project.resolve_project(tmp_path).namespace(project.actor_id())
    kept = {**record(namespace, "Use WAL mode", "SQLite runs in WAL mode."),
            "facts": ["synchronous is FULL"]}
    assert ingest.call("put_record", {"record": kept})["status"] == "stored"
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i -e 's/^Use WAL mode$/Use WAL mode, always/'"
                      " -e 's/^- synchronous is FULL$/- synchronous is NORMAL/' \"$1\"\n")
    editor.chmod(0o700)
    env = {**os.environ, "EDITOR": str(editor)}
    done = kl("edit", kept["record_id"], "--reason", "measured", env=env, check=True)
    assert f"edited {kept['record_id']} (facts, title)" in done.stdout
    [line] = [json.loads(x) for x in kl("export", check=True).stdout.splitlines()
              if kept["record_id"] in x and '"title"' in x]
    assert (line["title"], line["facts"], line["summary"]) == (
        "Use WAL mode, always", ["synchronous is NORMAL"], "SQLite runs in WAL mode.")
    [version] = line["versions"]
    assert (version["title"], version["facts"], version["reason"]) == (
        "Use WAL mode", ["synchronous is FULL"], "measured")

    unchanged = kl("edit", kept["record_id"], env={**os.environ, "EDITOR": "true"}, check=True)
    assert unchanged.stdout.strip() == f"nothing changed in {kept['record_id']}"
    editor.write_text("#!/bin/sh\nsed -i -e 's/^\\[facts\\]$//' \"$1\"\n")
    broken = kl("edit", kept["record_id"], env=env)
    assert broken.returncode == 2 and "no [facts] section; nothing was changed" in broken.stderr
    blank = kl("edit", kept["record_id"], "--title", "  ")
    assert blank.returncode == 1 and "title: must not be blank" in blank.stderr
    both = kl("edit", kept["record_id"], "--title", "x", "--invalid", "wrong")
    assert both.returncode == 2
    assert kl("export", check=True).stdout.count('"reason": "measured"') == 1  # one edit only


def test_a_forgotten_memory_leaves_the_retrieval_log_its_events_and_the_file(
        store, daemon, ingest, tmp_path):
    ws = Workspace(tmp_path)
    claude(ws, prompt="why does the quokkaflux cache expire every hour")
    summary = make_event("session_summary", "the quokkaflux cache expires hourly because"
                         " the upstream rotates its keys", namespace=ws.namespace,
                         session_id="s-1")
    assert ingest.call("put_event", {"event": summary})["status"] == "stored"
    wait_records(ws.namespace)
    # A later prompt, without the word, is given the memory: the log keeps its text.
    later, _ = ws.hook("kirolearn-claude-code", {
        "session_id": "s-2", "cwd": str(ws.project), "hook_event_name": "UserPromptSubmit",
        "prompt": "why does the cache expire every hour"})
    assert "quokkaflux" in later.stdout

    def logged() -> int:
        with db.reading(db.location(here())) as conn:
            return conn.execute("SELECT count(*) FROM retrievals WHERE context LIKE"
                                " '%quokkaflux%'").fetchone()[0]
    wait_for(logged, message="the retrieval log holding the memory's text")

    done = kl("forget", "--query", "quokkaflux", "--yes", cwd=str(ws.project), env=ws.env(),
              check=True)
    assert "forgot mr_" in done.stdout
    with db.reading(db.location(here())) as conn:
        for table, column in (("retrievals", "context"), ("events", "body_json"),
                              ("memory_records", "summary")):
            assert conn.execute(f"SELECT count(*) FROM {table} WHERE {column} LIKE"
                                " '%quokkaflux%'").fetchone()[0] == 0, table
        assert conn.execute("SELECT count(*) FROM retrievals WHERE context = $1",
                            (writes.FORGOTTEN_CONTEXT,)).fetchone()[0] >= 1
    assert [e["body"].get("content") for e in stored_events() if e["kind"] == "prompt"] == [
        "why does the cache expire every hour"]  # the forgotten turn's events went with it
    if store == "sqlite":
        kl("stop", check=True)  # the WAL folded in: what is on disk is all there is
        assert b"quokkaflux" not in here().db_path.read_bytes()


def test_forget_by_query_says_where_it_stopped_and_can_take_every_match(daemon, ingest,
                                                                        tmp_path):
    namespace = project.resolve_project(tmp_path).namespace(project.actor_id())
    for n in range(13):
        saved = record(namespace, f"Flaky test number {n}", f"the zorbleflake test {n} flakes")
        assert ingest.call("put_record", {"record": saved})["status"] == "stored"
    first = kl("forget", "--query", "zorbleflake", "--yes", cwd=str(tmp_path), check=True)
    assert first.stdout.count("forgot mr_") == 10
    assert "stopped at its limit of 10: more may match" in first.stdout
    assert len(exported_ids()) == 3
    rest = kl("forget", "--query", "zorbleflake", "--all-matches", "--limit", "5",
              cwd=str(tmp_path))
    assert rest.returncode == 2 and "not both" in rest.stderr
    rest = kl("forget", "--query", "zorbleflake", "--all-matches", "--yes", cwd=str(tmp_path),
              check=True)
    assert rest.stdout.count("forgot mr_") == 3 and "no more memories match" in rest.stdout
    assert exported_ids() == set()
