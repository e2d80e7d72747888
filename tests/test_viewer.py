"""The viewer: pages and JSON API (Starlette's test client) over what a real daemon
stored from real agent payloads, its guards, and the role inside the daemon (a real
HTTP server, the live stream, `kirolearn open`)."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from helpers.cli import kl, status
from helpers.events import NAMESPACE, make_event, retrieval, wait_records
from helpers.waits import wait_for
from helpers.workspace import Workspace
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from kirolearn import control, db, paths, project, search
from kirolearn.db import batches, writes
from kirolearn.roles.ingest.checks import prepare
from kirolearn.viewer import chart, pages, queries
from kirolearn.viewer.app import create_app
from kirolearn.viewer.auth import COOKIE
from kirolearn.viewer.listener import load_token

SESSION = "7a9c1e-claude-session"
BASE_URL = "http://127.0.0.1"
WRITE = {"tool_name": "Write",
         "tool_input": {"file_path": "src/retry.py", "content": "RETRIES = 3\nBACKOFF = 2\n"},
         "tool_response": {"filePath": "src/retry.py", "success": True}}
FAILED_TESTS = {"tool_name": "Bash", "tool_input": {"command": "pytest -q tests/test_retry.py"},
                "tool_response": {"stdout": "F.\nFAILED tests/test_retry.py::test_backoff"
                                            " - AssertionError\n1 failed, 1 passed",
                                  "stderr": "", "exit_code": 1, "interrupted": False}}


@pytest.fixture
def ws(tmp_path):
    return Workspace(tmp_path)


def claude(ws: Workspace, hook: str, **fields) -> str:
    payload = {"session_id": SESSION, "transcript_path": f"/x/{SESSION}.jsonl",
               "cwd": str(ws.project), "hook_event_name": hook, **fields}
    result, _ = ws.hook("kirolearn-claude-code", payload)
    assert result.returncode == 0, result.stderr
    return result.stdout


def one_turn(ws: Workspace) -> None:
    """A Claude Code turn: a prompt with markup in it, a file written, failing tests."""
    claude(ws, "UserPromptSubmit", prompt="Add retries with backoff to the <script>zmq</script>"
                                          " client")
    claude(ws, "PostToolUse", **WRITE)
    claude(ws, "PostToolUse", **FAILED_TESTS)
    claude(ws, "Stop", stop_hook_active=False,
           last_assistant_message="Retries are in src/retry.py; test_backoff still fails.")


def client(base: Path, token: str | None = None) -> TestClient:
    """The app for this home, as a browser that has been handed the token."""
    home = paths.Home(base)
    app_client = TestClient(create_app(home, load_token(home)), base_url=BASE_URL)
    if token is not None:
        app_client.cookies.set(COOKIE, token)
    return app_client


# -- one turn, played once, then seen through every page ------------------------------------


@pytest.fixture(scope="module")
def turn(module_daemon, tmp_path_factory) -> dict:
    """A Claude Code turn (a prompt, a file written, failing tests, a summary), its records
    extracted, then a second prompt that was given some of them."""
    ws = Workspace(tmp_path_factory.mktemp("viewer"))
    one_turn(ws)
    wait_records(ws.namespace)
    wait_for(lambda: len(retrieval("search", {"query": "retries backoff", "mode": "lexical",
                                              "namespace": ws.namespace})["record_ids"]) >= 2,
             message="the turn's records")
    shown = json.loads(claude(ws, "UserPromptSubmit", prompt="why does test_backoff fail"))
    app = client(module_daemon, load_token(paths.Home(module_daemon)))
    records = app.get("/api/memories", params={"project": ws.namespace}).json()["records"]
    return {"ws": ws, "app": app, "records": records,
            "injected": shown["hookSpecificOutput"]["additionalContext"],
            "error": next(r for r in records if r["observation_type"] == "error"),
            "turn": next(r for r in records if r["observation_type"] == "tool_use")}


def test_the_overview_counts_events_records_and_retrievals(turn):
    app, ws = turn["app"], turn["ws"]
    overview = app.get("/api/overview", params={"project": ws.namespace}).json()
    assert overview["events_by_kind"] == {"prompt": 2, "tool_use": 2, "session_summary": 1}
    assert overview["records_by_type"] == {"tool_use": 1, "error": 1}
    assert overview["strategies"] == {"heuristic": 2}
    assert overview["totals"]["pending_batches"] == 0
    assert [(p["name"], p["path"], p["label"]) for p in overview["projects"]] == [
        (Path(ws.root).name, ws.root, f"{Path(ws.root).name} ({ws.root})")]
    # the two prompts', and what the turn was given when it first wrote src/retry.py
    def all_logged() -> list[dict] | None:  # each is logged just after its answer
        found = app.get("/api/overview").json()["retrievals"]["buckets"]
        return found if sum(b["count"] for b in found) >= 3 else None

    buckets = wait_for(all_logged, message="the three logged retrievals")
    assert sum(b["count"] for b in buckets) == sum(b["ok"] + b["empty"] for b in buckets) == 3
    for path in ("/", "/?days=1", "/retrievals?outcome=ok", f"/memories?project={ws.namespace}"):
        assert app.get(path).status_code == 200, path


def test_the_overview_shows_failed_batches_with_why(home):
    conn = db.connect_writer(paths.Home(home).db_path)
    with conn.transaction():
        writes.insert_event(conn, prepare(make_event(content="a poison turn"))[0], 0)
        [batch_id] = batches.form_batches(conn, NAMESPACE, "turn_end", 1 << 20)
        batches.fail_batch(conn, batch_id, "5 attempts failed; last: ValueError: no")
    conn.close()
    app = client(home, load_token(paths.Home(home)))
    [failed] = app.get("/api/overview").json()["failed_batches"]
    assert (failed["batch_id"], failed["events"]) == (batch_id, 1)
    page = app.get("/").text
    assert "failed batches" in page and "5 attempts failed; last: ValueError: no" in page
    assert "kirolearn extraction retry" in page


def test_the_live_tail_tells_each_kind_of_event_its_own_way(turn):
    app, ws = turn["app"], turn["ws"]
    events = app.get("/api/events", params={"project": ws.namespace}).json()["events"]
    assert [e["kind"] for e in events] == ["prompt", "tool_use", "tool_use", "session_summary",
                                           "prompt"]
    prompt, write, tests, summary, _ = events
    assert prompt["detail"] == ("Add retries with backoff to the <script>zmq</script> client")
    assert (write["headline"], write["detail"], write["outcome"]) == (
        "Write", "edited `src/retry.py` (+2 −0): `RETRIES`, `BACKOFF`", "")
    assert (tests["headline"], tests["outcome"]) == ("Bash", "failed (exit 1)")
    assert tests["detail"] == ("ran `pytest -q tests/test_retry.py` → exit 1, 1 failed"
                               " (AssertionError)")
    assert "FAILED tests/test_retry.py::test_backoff" in tests["output"]
    assert summary["detail"] == "Retries are in src/retry.py; test_backoff still fails."
    assert app.get("/api/events", params={"after": tests["seq"]}).json()["events"][0] == summary
    live = app.get("/live").text
    assert "&lt;script&gt;zmq&lt;/script&gt;" in live and "<script>zmq" not in live
    # newest first; a fact's code spans shown as code, not as markdown's backticks
    assert live.index("test_backoff still fails") < live.index(
        "edited <code>src/retry.py</code>")


def test_memories_are_filtered_and_searched_lexically(turn):
    app, ws, error, record = turn["app"], turn["ws"], turn["error"], turn["turn"]
    only_errors = app.get("/api/memories", params={"type": "error"}).json()["records"]
    assert [r["record_id"] for r in only_errors] == [error["record_id"]]
    assert app.get("/api/memories", params={"strategy": "llm"}).json()["records"] == []
    assert app.get("/api/memories", params={"until": "2000-01-01"}).json()["records"] == []
    found = app.get("/api/memories", params={"q": "backoff retries", "mode": "lexical",
                                             "project": ws.namespace}).json()["records"]
    assert {error["record_id"], record["record_id"]} <= {r["record_id"] for r in found}
    page = app.get("/memories", params={"q": "backoff", "mode": "lexical"}).text
    assert record["title"].replace("<", "&lt;").replace(">", "&gt;") in page
    assert "<option value=\"heuristic\">heuristic</option>" in page


def test_hybrid_search_finds_a_memory_by_meaning(turn):
    app, record = turn["app"], turn["turn"]
    query = "exponential delay between reconnect attempts"  # none of the record's words
    wait_for(lambda: record["record_id"] in [r["record_id"] for r in app.get(
        "/api/memories", params={"q": query}).json()["records"]],
        timeout=30, message="a hybrid match with none of the words")
    assert record["record_id"] not in [r["record_id"] for r in app.get(
        "/api/memories", params={"q": query, "mode": "lexical"}).json()["records"]]


def test_a_memory_links_to_the_events_it_came_from(turn):
    app, record = turn["app"], turn["turn"]
    detail = app.get(f"/api/memories/{record['record_id']}").json()
    assert [s["kind"] for s in detail["sources"]] == ["prompt", "tool_use", "tool_use",
                                                      "session_summary"]
    html = app.get(f"/memories/{record['record_id']}").text
    for fact in record["facts"]:
        assert fact in html
    for source in detail["sources"]:
        assert f'href="/events/{source["event_id"]}"' in html
    assert app.get(f"/events/{detail['sources'][2]['event_id']}").status_code == 200


def test_a_retrieval_shows_exactly_the_context_the_agent_was_given(turn):
    app, ws, error = turn["app"], turn["ws"], turn["error"]
    logged = wait_for(lambda: [r for r in app.get("/api/retrievals", params={
        "project": ws.namespace}).json()["retrievals"]
        if r["prompt"] == "why does test_backoff fail"], message="the prompt's retrieval")
    latest = logged[0]
    assert latest["outcome"] == "ok" and latest["latency_ms"] > 0
    one = app.get(f"/api/retrievals/{latest['id']}").json()
    assert one["context"] == turn["injected"]
    assert [r["record_id"] for r in one["records"]] == one["record_ids"]
    assert error["record_id"] in one["record_ids"]
    page = app.get(f"/retrievals/{latest['id']}").text
    assert "test_backoff" in page and f'/memories/{error["record_id"]}' in page
    # the file first written asked for what is known of it: named by its tool and file,
    # not shown as the tool's JSON
    every = app.get("/api/retrievals", params={"project": ws.namespace}).json()["retrievals"]
    assert "Write: src/retry.py" in [r["prompt"] for r in every]
    assert not any(r["prompt"].startswith("{") for r in every)


def test_the_sessions_page_shows_times_as_it_orders_them(daemon, tmp_path):
    """Sessions of events whose times carry other offsets (a seeded commit keeps its
    author's): listed newest first, each at its time in UTC."""
    events = [make_event("prompt", "in Tokyo", session_id="tokyo",
                         valid_time="2024-01-01T10:00:00.000+09:00"),
              make_event("prompt", "in London", session_id="london",
                         valid_time="2024-01-01T05:00:00.000+00:00")]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    kl("import", str(tmp_path / "events.jsonl"), check=True)
    app = client(daemon, load_token(paths.Home(daemon)))
    sessions = app.get("/api/sessions").json()["sessions"]
    assert [(s["session_id"], s["last"]) for s in sessions] == [
        ("london", "2024-01-01T05:00:00+00:00"), ("tokyo", "2024-01-01T01:00:00+00:00")]


def test_a_session_shows_its_turns_in_order(turn):
    app = turn["app"]
    turns = app.get(f"/api/sessions/{SESSION}").json()["turns"]
    assert [(t["prompt"]["detail"][:10], len(t["tools"]), bool(t["summary"])) for t in turns] == [
        ("Add retrie", 2, True), ("why does t", 0, False)]
    assert SESSION in app.get("/sessions").text
    assert "test_backoff still fails" in app.get(f"/sessions/{SESSION}").text


def test_the_brief_page_shows_the_projects_brief(turn):
    app, ws = turn["app"], turn["ws"]
    asked = app.get("/api/brief", params={"project": ws.namespace}).json()
    assert asked == retrieval("brief", {"namespace": ws.namespace})
    headings = [s["heading"] for s in asked["sections"]]
    assert "Open work" in headings and "Recent changes" in headings
    page = app.get("/brief", params={"project": ws.namespace})
    assert page.status_code == 200
    for section in asked["sections"]:
        assert f"<h2>{section['heading']}</h2>" in page.text
    assert f'href="/memories/{turn["error"]["record_id"]}?project=' in page.text
    assert "Pick a project" in app.get("/brief").text


def test_export_is_what_the_cli_exports(turn):
    app, ws = turn["app"], turn["ws"]
    exported = app.get("/export", params={"project": ws.namespace})
    assert exported.headers["content-disposition"].startswith("attachment;")
    assert exported.text == kl("export", "--namespace", ws.namespace, check=True).stdout
    assert app.get("/api/export").text == kl("export", check=True).stdout


def test_forget_needs_the_token_in_the_request_and_goes_through_the_daemon(daemon, ws):
    one_turn(ws)
    wait_records(ws.namespace)
    token = load_token(paths.Home(daemon))
    app = client(daemon, token)
    record = wait_for(lambda: app.get("/api/memories").json()["records"], message="records")[0]
    path = f"/memories/{record['record_id']}/forget"

    assert app.post(path, data={}).status_code == 403  # the cookie alone is not enough
    assert app.post(path, data={"token": "x" * 43}).status_code == 403
    for malformed in ("Bearerx", "Bearer", "Bearer ", "Bearerx junk", "Basic abc"):
        # the cookie and a header that is no bearer token: still no explicit token
        assert app.post(path, headers={"authorization": malformed}).status_code == 403
    stranger = client(daemon)
    assert stranger.post(path, data={"token": token}).status_code == 401
    assert stranger.post(path, headers={"authorization": "Bearer nope"}).status_code == 401
    assert app.get(f"/api/memories/{record['record_id']}").status_code == 200

    form = app.get(f"/memories/{record['record_id']}").text
    assert f'name="token" value="{token}"' in form
    done = app.post(path, data={"token": token}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].startswith("/memories?")
    assert app.get(f"/api/memories/{record['record_id']}").status_code == 404
    assert record["record_id"] not in retrieval("search", {
        "query": record["title"], "namespace": ws.namespace, "mode": "lexical"})["record_ids"]
    assert app.post(path, data={"token": token}).status_code == 404
    other = app.get("/api/memories").json()["records"][0]
    answer = stranger.post(f"/api/memories/{other['record_id']}/forget",
                           headers={"authorization": f"Bearer {token}"})
    assert answer.json() == {"record_id": other["record_id"], "deleted": True}


PROTECTED = ["/", "/live", "/memories", "/memories/mr_x", "/retrievals", "/retrievals/1",
             "/sessions", "/sessions/s", "/events/e", "/export", "/api/overview", "/api/events",
             "/api/stream", "/api/memories", "/api/memories/mr_x", "/api/retrievals",
             "/api/retrievals/1", "/api/sessions", "/api/sessions/s", "/api/export", "/brief",
             "/api/brief"]


def test_every_page_and_api_call_needs_the_token_and_the_host_must_be_ours(home):
    db.connect_writer(paths.Home(home).db_path).close()
    token = load_token(paths.Home(home))
    stranger = client(home)
    for path in PROTECTED:
        answer = stranger.get(path)
        assert answer.status_code == 401, path
        assert token not in answer.text
    assert stranger.get("/", params={"token": "wrong"}).status_code == 401
    assert stranger.get("/api/overview", headers={"authorization": "Bearer wrong"}
                        ).status_code == 401
    assert stranger.get("/api/overview", params={"token": token}).status_code == 401

    for host in ("evil.example", "localhost", "127.0.0.1.evil.example", "[::1]"):
        answer = stranger.get("/api/overview", headers={"host": host,
                                                        "authorization": f"Bearer {token}"})
        assert answer.status_code == 400, host

    handed = stranger.get("/memories", params={"token": token, "type": "error"},
                          follow_redirects=False)
    assert handed.status_code == 303
    assert handed.headers["location"] == "/memories?type=error"  # the token leaves the URL
    cookie = handed.headers["set-cookie"]
    assert f"{COOKIE}={token}" in cookie
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
    assert stranger.get("/memories").status_code == 200  # the browser now has the cookie
    assert stranger.get("/api/overview").json()["totals"]["events"] == 0


def test_security_headers_on_every_answer_and_nothing_inline(home):
    db.connect_writer(paths.Home(home).db_path).close()
    app = client(home, load_token(paths.Home(home)))
    for path in ("/", "/live", "/static/viewer.js", "/static/viewer.css", "/nope",
                 "/api/overview", "/memories/mr_missing"):
        headers = app.get(path).headers
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
    assert client(home).get("/static/viewer.js").status_code == 200  # no secrets in it
    for page in ("/", "/live", "/memories", "/retrievals", "/sessions"):
        html = app.get(page).text
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), page  # every script is a file
        assert " style=" not in html and "<style" not in html
        assert " on" not in re.sub(r'"[^"]*"', '""', html).replace(" one", ""), page
        assert "http://" not in html and "https://" not in html  # no CDN, works offline


def test_the_token_is_made_once_private_and_kept(home):
    first = load_token(paths.Home(home))
    path = paths.Home(home).viewer_token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first) >= 40 and load_token(paths.Home(home)) == first
    path.write_text("short\n")  # a damaged file is replaced, not trusted
    assert load_token(paths.Home(home)) not in (first, "short")


def test_the_viewer_runs_in_the_daemon_and_streams_events_as_they_arrive(daemon, ws):
    state = status()
    roles = {r["name"]: r for r in state["roles"]}
    assert roles["viewer"]["state"] == "WAITING"  # until the first visit (below)
    assert state["viewer"] == control.viewer_info(paths.Home(daemon))["url"]
    assert f"viewer: {state['viewer']} (kirolearn open)" in kl("status", check=True).stdout
    url = kl("open", "--url", check=True).stdout.strip()
    base, token = url.split("?token=")
    info = control.viewer_info(paths.Home(daemon))
    assert base == info["url"] == f"http://127.0.0.1:{info['port']}/"
    assert token == load_token(paths.Home(daemon))
    for private in (paths.Home(daemon).viewer_info(), paths.Home(daemon).viewer_token):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    opened = daemon / "opened.txt"  # a stand-in browser: $BROWSER gets the URL
    fake = daemon / "browser.sh"
    fake.write_text(f'#!/bin/sh\nprintf %s "$1" > {opened}\n')
    fake.chmod(0o700)
    said = kl("open", env={**os.environ, "BROWSER": f"{fake} %s"}, check=True).stdout
    assert said.strip() == f"opening {base}"
    assert opened.read_text() == url

    with httpx.Client(timeout=10) as http:
        assert http.get(base).status_code == 401
        assert http.get(base, headers={"host": "attacker.example"}).status_code == 400
        handed = http.get(url, follow_redirects=False)
        assert handed.status_code == 303
        assert http.get(base + "live").status_code == 200  # the cookie from the hand-over
        one_turn(ws)
        seen = wait_for(lambda: http.get(base + "api/events").json()["events"],
                        message="the turn's events")
        after = seen[-1]["seq"]
        with http.stream("GET", base + "api/stream", params={"after": after}) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            sent = time.monotonic()
            claude(ws, "UserPromptSubmit", prompt="is the retry fix live yet")
            lines = stream.iter_lines()
            event = next(line for line in lines if line.startswith("data:"))
            arrived = time.monotonic() - sent
        item = json.loads(event[5:])
        assert item["kind"] == "prompt" and item["detail"] == "is the retry fix live yet"
        assert item["seq"] > after
        assert arrived < pages.FEED_WAIT_S  # woken by storage's feed, not by the poll timer
    kl("stop", check=True)
    assert control.viewer_info(paths.Home(daemon)) is None
    kl("start", check=True)


def test_the_viewer_starts_at_the_first_visit_and_exits_when_no_one_uses_it(home,
                                                                           monkeypatch):
    """A viewer nobody opens costs no process: the supervisor holds its port, starts it
    for the first connection (which it answers), and again after it idled out."""
    monkeypatch.setenv("KIROLEARN_VIEWER_IDLE_S", "1")
    kl("start", check=True)
    try:
        def viewer() -> dict:
            return next(r for r in status()["roles"] if r["name"] == "viewer")

        assert viewer()["state"] == "WAITING" and viewer()["pid"] is None
        url = kl("open", "--url", check=True).stdout.strip()
        for visits in (1, 2):
            with httpx.Client(timeout=10) as http:  # answered by the viewer it starts
                assert http.get(url, follow_redirects=True).status_code == 200
            wait_for(lambda: viewer()["state"] == "WAITING", timeout=20,
                     message="the unused viewer to exit")
            log = (paths.Home(home).log_dir / "supervisor.log").read_text()
            assert log.count("spawned: 'viewer'") == visits
            assert log.count("viewer exited unused; WAITING for the next visit") == visits
        assert viewer()["restarts"] == 0
        assert "ok    roles: all RUNNING (viewer WAITING: started on demand)" in kl(
            "doctor").stdout
    finally:
        kl("stop", check=True)
    assert control.viewer_info(paths.Home(home)) is None


def test_a_viewer_that_cannot_listen_is_fatal_and_the_rest_runs(home):
    paths.Home(home).ensure_layout()
    paths.Home(home).viewer_token.mkdir()  # its token cannot be made
    started = kl("start")
    try:
        assert started.returncode == 1 and "not every role reached RUNNING" in started.stderr
        def states() -> dict[str, str]:
            return {r["name"]: r["state"] for r in status()["roles"]}

        wait_for(lambda: {s for n, s in states().items() if n != "viewer"} == {"RUNNING"},
                 message="the other roles RUNNING")
        assert states()["viewer"] == "FATAL"
        log = (paths.Home(home).log_dir / "supervisor.log").read_text()
        assert "gave up: viewer entered FATAL state: cannot listen" in log
        assert control.viewer_info(paths.Home(home)) is None
    finally:
        kl("stop", check=True)


def test_a_taken_port_moves_the_viewer_and_open_says_where(home, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    monkeypatch.setenv("KIROLEARN_VIEWER_PORT", str(port))
    try:
        kl("start", check=True)
        try:
            info = control.viewer_info(paths.Home(home))
            assert info["port"] != port
            assert kl("open", "--url", check=True).stdout.startswith(info["url"] + "?token=")
            log = (paths.Home(home).log_dir / "supervisor.log").read_text()
            assert f"port {port} is taken; the viewer listens on {info['port']}" in log
        finally:
            kl("stop", check=True)
    finally:
        taken.close()


def test_open_says_what_to_do_when_the_daemon_is_down(home):
    answer = kl("open", "--url")
    assert answer.returncode == 1
    assert "kirolearn is not running; start it with 'kirolearn start'" in answer.stderr


@given(st.lists(st.tuples(st.datetimes(min_value=datetime(2026, 5, 1),
                                       max_value=datetime(2026, 6, 2)),
                          st.floats(0, 10_000), st.sampled_from(search.OUTCOMES)), max_size=60),
       st.sampled_from([1, 7, 30]))
@settings(max_examples=60, deadline=None)
def test_latency_series_counts_every_retrieval_once_and_orders_percentiles(rows, days):
    logged = [(when.isoformat() + "+00:00", ms, outcome) for when, ms, outcome in rows]
    now = datetime(2026, 6, 1, 12, 30, tzinfo=UTC)
    series = chart.latency_series(logged, days, now)
    buckets = series["buckets"]
    assert sum(b["count"] for b in buckets) == len(rows)
    assert [b["bucket"] for b in buckets] == sorted({b["bucket"] for b in buckets})
    assert len(buckets) >= (days * 24 if days <= 2 else days)  # quiet buckets too
    for bucket in buckets:
        assert bucket["count"] == sum(bucket[o] for o in search.OUTCOMES)
        if bucket["count"]:
            assert bucket["p50_ms"] <= bucket["p95_ms"]
        else:
            assert bucket["p50_ms"] is bucket["p95_ms"] is None
    drawn = chart.chart(series)
    assert drawn["empty"] == (not rows)
    if rows:
        for bar in drawn["bars"]:
            assert bar["y"] >= 0 and bar["y"] + bar["h"] <= drawn["base_y"] + 0.2
            assert bar["x"] + bar["w"] <= drawn["right"] + 0.2


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                           max_leaves=12)


@given(st.sampled_from(["prompt", "tool_use", "session_summary", "note"]),
       st.one_of(json_values, st.fixed_dictionaries({"type": st.just("json"),
                                                     "data": json_values})))
@settings(max_examples=150)
def test_any_stored_body_is_summarized_without_raising(kind, body):
    event = {"event_id": "01J0", "kind": kind, "body": body, "namespace": "/n/",
             "session_id": "s", "valid_time": "2026-01-01T00:00:00+00:00", "source": {}}
    item = queries.summarize_event(event, 1)
    assert isinstance(item["headline"], str) and isinstance(item["detail"], str)
    json.dumps(item)


def test_a_retrieval_past_its_budget_is_logged_with_its_reason(home, ws, monkeypatch):
    monkeypatch.setenv("KIROLEARN_RETRIEVAL_BUDGET_MS", "1")  # every search is late
    kl("start", check=True)
    try:
        # The shim polls with a budget of its own: 1 ms there would spool the prompt
        # before ingest has it, and a spooled prompt is never searched for.
        monkeypatch.setenv("KIROLEARN_RETRIEVAL_BUDGET_MS", "5000")
        app = client(home, load_token(paths.Home(home)))

        sent = 0

        def late() -> list[dict]:
            """The retrievals logged as late. A prompt is sent whenever every one sent
            is logged and none as late: one sent before ingest's connection to retrieval
            is up (a loaded machine) is logged as not sent, and a search of an empty
            database can even finish within 1 ms. Each is worded apart: the same prompt
            again in the same session soon after is taken for a retried hook, and
            dropped."""
            nonlocal sent
            found = app.get("/api/retrievals").json()["retrievals"]
            late = [r for r in found if r["outcome"] == "timeout" and r["prompt"]]
            if len(found) == sent and not late:
                assert claude(ws, "UserPromptSubmit",
                              prompt=f"anything about retries? (asked {sent + 1})") == ""
                sent += 1
            return late

        logged = wait_for(late, message="a retrieval logged as late")[0]
        assert logged["prompt"].startswith("anything about retries?")
        assert logged["error"] in ("the search ran past its budget",  # said by retrieval
                                   "retrieval did not answer within the budget")  # by ingest
        page = app.get(f"/retrievals/{logged['id']}").text
        assert logged["error"] in page
        assert "Nothing was injected." in page
        assert app.get("/retrievals", params={"outcome": "timeout"}).text.count(
            'class="outcome timeout"') == 1
        assert "anything about retries?" not in app.get("/retrievals",
                                                         params={"outcome": "ok"}).text
    finally:
        kl("stop", check=True)


def stored_record(home: Path) -> dict:
    """One record written straight into the home's database (no daemon needed)."""
    record = {"record_id": "mr_01J0000000000000000000000A", "namespace": "/actor/a/project/p/",
              "title": "Use WAL mode", "summary": "WAL lets readers go on while one writes.",
              "facts": [], "concepts": [], "files_touched": [], "observation_type": "decision",
              "strategy": "heuristic", "source_event_ids": [],
              "created_at": "2026-11-01T10:00:00+00:00"}
    conn = db.connect_writer(paths.Home(home).db_path)
    writes.insert_record(conn, record)
    conn.close()
    return record


def test_search_and_forget_say_so_when_the_daemon_is_down(home):
    record = stored_record(home)
    app = client(home, load_token(paths.Home(home)))
    page = app.get("/memories", params={"q": "wal", "project": record["namespace"]})
    assert page.status_code == 200
    assert "the daemon&#39;s retrieval role is not running" in page.text
    answer = app.get("/api/memories", params={"q": "wal"})
    assert answer.status_code == 503
    assert answer.json() == {"error": "the daemon's retrieval role is not running"}
    assert app.get("/api/memories").json()["records"][0]["title"] == "Use WAL mode"  # reads stay
    refused = app.post(f"/api/memories/{record['record_id']}/forget",
                       headers={"x-kirolearn-token": load_token(paths.Home(home))})
    assert refused.status_code == 503
    assert app.get(f"/api/memories/{record['record_id']}").status_code == 200


def test_a_refusal_behind_forget_is_a_400_and_a_bug_a_500(home, monkeypatch):
    """Only the daemon's refusal is the client's fault (400, with the daemon's reason); a
    daemon that does not answer is a 503; anything else raised behind a call is a bug,
    answered 500 and never dressed as 400."""
    record = stored_record(home)
    token = load_token(paths.Home(home))
    app = TestClient(create_app(paths.Home(home), token), base_url=BASE_URL,
                     raise_server_exceptions=False)
    forget = f"/api/memories/{record['record_id']}/forget"
    headers = {"authorization": f"Bearer {token}"}

    def refuse(*args, **kwargs):
        raise control.RemoteError(4, "'namespaces' must be a non-empty list")

    def broken(*args, **kwargs):
        raise KeyError("deleted")

    def silent(*args, **kwargs):
        raise control.Timeout("no reply")

    monkeypatch.setattr(control, "listening", lambda *args: True)
    monkeypatch.setattr(control, "call", silent)
    silence = app.post(forget, headers=headers)
    assert silence.status_code == 503
    assert silence.json() == {"error": "the daemon's ingest role did not answer"}
    monkeypatch.setattr(control, "call", refuse)
    refused = app.post(forget, headers=headers)
    assert refused.status_code == 400
    assert refused.json() == {"error": "'namespaces' must be a non-empty list"}
    monkeypatch.setattr(control, "call", broken)
    assert app.post(forget, headers=headers).status_code == 500


def test_many_projects_are_searched_and_counted_by_name(daemon, tmp_path):
    """Twelve projects (more than one search takes): "All projects" searches them all;
    stats names each by its folder, with its path, not by its namespace's hash."""
    lines = []
    for n in range(12):
        (tmp_path / f"app{n:02d}" / ".git").mkdir(parents=True)
        here = project.resolve_project(str(tmp_path / f"app{n:02d}"))
        namespace = here.namespace("tester")
        prompt = make_event("prompt", f"tune the connection pool of service {n}",
                            namespace=namespace, session_id=f"s{n}",
                            source={"surface": "kiro-cli", "version": "0.1.0",
                                    "client_id": "testhost", "project_path": here.checkout})
        lines += [prompt, make_event("session_summary", "Pool size is now 20.",
                                     namespace=namespace, session_id=f"s{n}",
                                     source=prompt["source"])]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    kl("import", str(tmp_path / "events.jsonl"), check=True)
    wait_for(lambda: json.loads(kl("stats", "--json", check=True).stdout)["totals"]["records"]
             == 12, message="a record of each project")
    app = client(daemon, load_token(paths.Home(daemon)))
    found = app.get("/api/memories", params={"q": "connection pool"})
    assert found.status_code == 200, found.text
    assert len({r["namespace"] for r in found.json()["records"]}) == 12
    shown = kl("stats", check=True).stdout
    for n in range(12):
        assert f"app{n:02d} ({tmp_path / f'app{n:02d}'})" in shown
    assert "/actor/" not in shown
    named = json.loads(kl("stats", "--json", check=True).stdout)["namespaces"]
    assert [(n["name"], n["path"]) for n in named] == [
        (f"app{n:02d}", str(tmp_path / f"app{n:02d}")) for n in range(12)]
