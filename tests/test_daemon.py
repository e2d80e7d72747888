"""The real daemon: real processes, real sockets, a real SQLite file in a temp home."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess

import msgpack
import pytest
import zmq
from helpers.cli import KL, all_up, here, kl, processes_using, status
from helpers.events import make_event, stored_events
from helpers.waits import wait_for

from kirolearn import contract, db, paths, protocol, transport
from kirolearn.db import batches, schema
from kirolearn.roles import base


def test_start_status_stop_leaves_nothing_behind(home):
    result = kl("start", check=True)
    assert "RUNNING" in result.stdout
    roles = status()["roles"]
    assert [r["role"] for r in roles] == ["storage", "retrieval", "ingest", "viewer", "extraction"]
    for role in roles:
        if role["role"] == "viewer":  # started by the first visit (test_viewer)
            assert role["state"] == "WAITING" and role["pid"] is None
        else:
            assert role["state"] == "RUNNING" and role["pid"] > 0
        assert role["restarts"] == 0
        assert set(role) >= {"role", "pid", "state", "uptime_s", "restarts"}
    run = paths.Home(home).runtime_dir()
    assert run.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o077 == 0 for p in run.iterdir())
    second = kl("start")
    assert second.returncode != 0 and "already running" in second.stderr
    kl("stop", check=True)
    assert kl("status").returncode == 3
    assert json.loads(kl("status", "--json").stdout) == {"running": False, "roles": [],
                                                         "settings_error": None}
    assert not [p for p in run.iterdir() if p.is_socket()]
    assert kl("stop").stdout.strip() == "kirolearn is not running"


def test_stale_pidfile_and_sockets_from_a_crash_are_cleaned(home):
    run = paths.Home(home).runtime_dir()
    paths.Home(home).ensure_layout()
    (run / "supervisor.pid").write_text("999999\n")  # pid of a daemon that died
    for name in ("ingest.sock", "storage.sock"):
        sock = zmq.Context.instance().socket(zmq.REP)
        sock.bind(f"ipc://{run / name}")
        sock.close(linger=0)
        (run / name).touch()  # left behind, as after a SIGKILL
    kl("start", check=True)
    try:
        assert all_up(status()["roles"])
    finally:
        kl("stop", check=True)
        zmq.Context.instance().term()


def test_put_event_scrubs_stores_and_dedups(store, ingest, daemon):
    secret = "AKIAIOSFODNN7EXAMPLE"
    event = make_event(content=f"deploy with <private>my pin 1234</private> key {secret}")
    reply = ingest.call("put_event", {"event": event})
    assert reply == {"event_id": event["event_id"], "status": "stored"}
    assert ingest.call("put_event", {"event": event})["status"] == "duplicate"
    retried = {**event, "event_id": contract.new_ulid()}  # the same hook, sent again
    assert ingest.call("put_event", {"event": retried})["status"] == "duplicate"
    with db.reading(db.location(here())) as conn:
        [(body, digest)] = conn.execute("SELECT body_json, content_hash FROM events").fetchall()
    assert "1234" not in body and secret not in body
    assert "[REDACTED:private]" in body and "[REDACTED:aws-access-key]" in body
    assert digest == contract.content_hash(json.loads(body))


def test_a_large_event_is_prepared_beside_the_hooks_and_scrubbed_all_the_same(ingest, daemon):
    """A tool's long output (prepared off ingest's loop) is scrubbed to its end and
    stored; a prompt sent while it is prepared is answered, with its retrieval, and a
    large event resent is a duplicate."""
    secret = "AKIAIOSFODNN7EXAMPLE"
    output = "".join(f"line {n}: job done\n" for n in range(20_000))  # about 360 KiB
    large = make_event("tool_use", body={"type": "json", "data": {
        "tool_name": "execute_bash", "tool_input": {"command": "cat log"},
        "tool_response": {"result": f"<private>pin zebra-lamp</private>{output}key {secret}"}}})
    with transport.Client(here().endpoint("ingest"), timeout_ms=10_000) as other:
        sock = transport.make_socket(other.ctx, zmq.DEALER, connect=here().endpoint("ingest"))
        try:
            message = protocol.request("put_event", {"event": large})
            sock.send_multipart([b"", protocol.pack(message)])
            prompt = ingest.call("put_event", {"event": make_event("prompt", "why"),
                                               "retrieve": True})
            assert prompt["status"] == "stored" and "context" in prompt["retrieval"]
            assert sock.poll(10_000)
            reply = protocol.parse_reply(sock.recv_multipart()[-1])
        finally:
            sock.close(linger=0)
    assert reply["ok"] and reply["body"] == {"event_id": large["event_id"], "status": "stored"}
    assert ingest.call("put_event", {"event": large})["status"] == "duplicate"
    with db.reading(db.location(here())) as conn:
        [(body,)] = conn.execute("SELECT body_json FROM events WHERE event_id = $1",
                                 (large["event_id"],)).fetchall()
    assert "zebra-lamp" not in body and secret not in body and "line 19999: job done" in body
    assert "[REDACTED:private]" in body and "[REDACTED:aws-access-key]" in body


def test_only_prompts_with_retrieve_get_a_retrieval_answer(ingest):
    prompt = ingest.call("put_event", {"event": make_event("prompt", "why"), "retrieve": True})
    assert prompt["status"] == "stored"
    assert prompt["retrieval"]["context"] == "" and prompt["retrieval"]["latency_ms"] < 500
    tool = ingest.call("put_event", {"event": make_event("tool_use", "a.py"), "retrieve": True})
    assert "retrieval" not in tool


@pytest.mark.parametrize("change, code, field", [
    ({"event_id": "bad"}, protocol.ErrorCode.INVALID_EVENT, "event_id"),
    ({"kind": "chat"}, protocol.ErrorCode.INVALID_EVENT, "kind"),
    ({"body": {"type": "text", "content": "x" * (1024 * 1024 + 1)}},
     protocol.ErrorCode.TOO_LARGE, "body"),
    ({"content_hash": "sha256:" + "0" * 64}, protocol.ErrorCode.INVALID_EVENT, "content_hash"),
])
def test_bad_events_get_field_level_errors(ingest, change, code, field):
    event = make_event()
    event.update(change)
    with pytest.raises(protocol.RemoteError) as info:
        ingest.call("put_event", {"event": event})
    assert info.value.code == code
    assert field in [e["field"] for e in info.value.body["errors"]]


def test_malformed_frames_get_error_replies_and_nothing_crashes(ingest, daemon, ctx):
    pids = {r["name"]: r["pid"] for r in status()["roles"]}
    frames = [b"\xc1garbage", msgpack.packb([1, 2, 3]), msgpack.packb({"v": 7, "id": "x"}),
              msgpack.packb({"v": 1, "id": "x", "op": "put_event", "body": {"event": 5}}),
              msgpack.packb({"v": 1, "id": "x", "op": "nope", "body": {}}),
              b"\x00" * (protocol.MAX_FRAME_BYTES + 10)]
    for endpoint in ("ingest", "storage", "retrieval", "ingest.ctl", "storage.ctl"):
        for frame in frames:
            sock = transport.make_socket(ctx, zmq.REQ, connect=here().endpoint(endpoint))
            sock.send(frame)
            assert sock.poll(3000), f"{endpoint} did not answer a malformed frame"
            reply = protocol.parse_reply(sock.recv())
            assert reply["ok"] is False and reply["error"]["code"] in list(protocol.ErrorCode)
            sock.close(linger=0)
    assert ingest.call("put_event", {"event": make_event()})["status"] == "stored"
    assert {r["name"]: r["pid"] for r in status()["roles"]} == pids


def test_malformed_worker_messages_crash_nothing_and_extraction_goes_on(ingest, daemon, ctx):
    """Storage's records socket takes what any local process pushes: each bad message or
    result is dropped with a warning, and real results are still committed."""
    pids = {r["name"]: r["pid"] for r in status()["roles"]}
    bad = [b"\xc1garbage", msgpack.packb([1]), msgpack.packb({"results": "x"}),
           msgpack.packb({"batch_ids": [5], "worker_pid": 1}),
           msgpack.packb({"results": [5, {"batch_id": 3}, {"batch_id": "B" * 26, "records": 7},
                                      {"batch_id": "C" * 26, "records": [{"title": 1}],
                                       "changed": 7},
                                      {"batch_id": "D" * 26, "error": "x"}],
                          "seconds": "slow"})]
    push = transport.make_socket(ctx, zmq.PUSH, linger_ms=5000,
                                 connect=here().endpoint("records"))
    for frame in bad:
        push.send(frame)
    push.close()
    storage_log = here().log_dir / "storage.log"
    wait_for(lambda: f"batch {'D' * 26}: an attempt failed" in storage_log.read_text(),
             message="storage to read the bad messages")
    log = storage_log.read_text()
    assert log.count("dropped a malformed records message") == 2
    assert log.count("without batch_ids or results") == 1
    assert "dropped a result without a batch_id" in log and "dropped an invalid record" in log
    for kind, text in (("prompt", "why does the export crash"), ("session_summary", "fixed it")):
        assert ingest.call("put_event", {"event": make_event(kind, text)})["status"] == "stored"
    wait_for(lambda: json.loads(kl("stats", "--json").stdout)["totals"]["records"] >= 1,
             timeout=20, message="the turn's record")
    assert {r["name"]: r["pid"] for r in status()["roles"]} == pids


def test_a_hook_event_goes_ahead_of_an_import(ingest, daemon, ctx):
    """Live requests first: while storage holds an import's first chunk (stopped, to see
    the order), a prompt sent after three chunks is committed before the second."""
    storage_pid = next(r["pid"] for r in status()["roles"] if r["role"] == "storage")
    chunks = [[json.dumps(make_event("tool_use", f"chunk {c} file {i}.py")) for i in range(300)]
              for c in range(3)]
    client = transport.make_socket(ctx, zmq.DEALER, connect=here().endpoint("ingest"))
    imports, order = [], []
    try:
        with transport.Client(here().endpoint("ingest.ctl"), ctx) as control:
            os.kill(storage_pid, signal.SIGSTOP)
            try:
                for lines in chunks:
                    imports.append(protocol.request("put_events", {"lines": lines}))
                    client.send_multipart([b"", protocol.pack(imports[-1])])
                wait_for(lambda: control.call("ping")["accepted"] >= 300,
                         message="the first chunk sent to storage")
                live = protocol.request("put_event", {"event": make_event("prompt", "first?")})
                client.send_multipart([b"", protocol.pack(live)])
                wait_for(lambda: control.call("ping")["accepted"] == 301,
                         message="the prompt sent to storage, and no other chunk")
            finally:
                os.kill(storage_pid, signal.SIGCONT)
        while len(order) < 4:
            assert client.poll(10_000), "ingest stopped answering"
            reply = protocol.parse_reply(client.recv_multipart()[-1])
            assert reply["ok"], reply
            order.append(reply["id"])
    finally:
        client.close()
    assert order == [imports[0]["id"], live["id"], imports[1]["id"], imports[2]["id"]]
    assert len(stored_events()) == 901


def test_import_export_stats(store, daemon, tmp_path):
    events = [make_event("prompt", f"question {i}") for i in range(5)]
    lines = [json.dumps(e) for e in events]
    lines.insert(2, "{not json")
    lines.insert(4, json.dumps({**events[0], "event_id": "nope"}))
    lines.append(json.dumps(events[1]))  # repeated line
    lines.append(json.dumps(make_event("prompt", "half a pair")).replace(
        "half a pair", "half a pair \\ud800"))  # valid JSON text, not valid Unicode
    result = kl("import", "-", input="\n".join(lines) + "\n")
    assert result.returncode == 1
    assert result.stdout.strip() == "stored 5, duplicate 1, rejected 3"
    assert "line 3: rejected: event: not JSON" in result.stderr
    assert "line 5: rejected: event_id: must be a ULID" in result.stderr
    assert "line 9: rejected: body: must be valid Unicode text" in result.stderr
    stats = json.loads(kl("stats", "--json", check=True).stdout)
    assert stats["totals"]["events"] == 5
    assert stats["namespaces"][0]["events"] == {"prompt": 5}
    exported = [json.loads(line) for line in kl("export", check=True).stdout.splitlines()]
    assert {e["event_id"] for e in exported if "kind" in e} == {e["event_id"] for e in events}
    only = kl("export", "--namespace", "/actor/x/project/y/", check=True).stdout
    assert [json.loads(line) for line in only.splitlines()] == [
        {"kirolearn_export": 1, "schema": schema.latest()}]  # the header alone
    again = kl("import", "-", input=kl("export").stdout)
    assert again.stdout.strip().startswith("stored 0, duplicate 5")


def test_import_without_a_daemon_says_so(home):
    result = kl("import", "-", input="{}\n")
    assert result.returncode != 0 and "not running" in result.stderr


def test_turn_end_batches_become_records(store, ingest, daemon):
    prompt = make_event("prompt", "Switch storage to WAL mode")
    ingest.call("put_event", {"event": prompt})
    ingest.call("put_event", {"event": make_event("tool_use", "src/db.py")})
    ingest.call("put_event", {"event": make_event("session_summary", "Enabled WAL in db.py")})

    def records():
        stats = json.loads(kl("stats", "--json").stdout)
        return stats["totals"]["records"] == 1 and stats["totals"]["pending_batches"] == 0

    wait_for(records, message="the batch to be extracted")
    exported = [json.loads(line) for line in kl("export").stdout.splitlines()]
    [turn] = [r for r in exported if "record_id" in r]  # the conclusion is in it, once
    assert turn["title"] == "Switch storage to WAL mode"
    assert turn["summary"].endswith("Enabled WAL in db.py")


def test_scale_and_crash_restart(daemon):
    kl("scale", "extraction", "3", check=True)
    wait_for(lambda: [r["state"] for r in status()["roles"] if r["role"] == "extraction"]
             == ["RUNNING"] * 3, message="three workers")
    victim = next(r for r in status()["roles"] if r["name"] == "extraction-2")
    os.kill(victim["pid"], signal.SIGKILL)
    restarted = wait_for(lambda: next(
        (r for r in status()["roles"] if r["name"] == "extraction-2" and r["restarts"] == 1
         and r["state"] == "RUNNING"), None), message="extraction-2 to restart")
    assert restarted["pid"] != victim["pid"]
    kl("scale", "extraction", "1", check=True)
    wait_for(lambda: [r["name"] for r in status()["roles"] if r["role"] == "extraction"]
             == ["extraction-1"], message="scale down")
    assert kl("scale", "extraction", "65").returncode != 0
    kl("scale", "extraction", "0", check=True)  # workers elsewhere do it (docs/team.md)
    wait_for(lambda: not [r for r in status()["roles"] if r["role"] == "extraction"],
             message="no worker left")


def test_a_role_that_cannot_start_ends_fatal_not_looping(home):
    paths.Home(home).ensure_layout()
    conn = db.connect_writer(paths.Home(home).db_path)  # a database from a newer kirolearn
    conn.execute("INSERT INTO _migrations VALUES (999, 'future', '', '')")
    conn.close()
    kl("start")
    try:
        storage = wait_for(lambda: next(
            (r for r in status()["roles"] if r["role"] == "storage" and r["state"] == "FATAL"),
            None), timeout=30, message="storage to go FATAL")
        assert storage["pid"] is None
    finally:
        kl("stop", check=True)
    log = kl("logs", "supervisor", "-n", "200").stdout
    assert "storage entered BACKOFF state" in log
    assert "gave up: storage entered FATAL state" in log
    assert "migration(s) [999] this kirolearn does not know" in kl("logs", "storage").stdout


@pytest.mark.parametrize("text, message", [
    ("[retrieval]\nbudget = 1\n", "unknown setting retrieval.budget"),
    ("[retrieval]\nmode = 'fuzzy'\n", "retrieval.mode: must be one of lexical, semantic,"
     " hybrid, got 'fuzzy'"),
])
def test_configuration_errors_are_refused_before_anything_starts(home, text, message):
    (home / "config.toml").write_text(text)
    result = kl("start")
    assert result.returncode == 1 and "configuration error: " in result.stderr
    assert message in result.stderr
    assert not paths.Home(home).pidfile().exists()
    assert "kirolearn is not running" in kl("stop", check=True).stdout


def test_logs_show_each_role(daemon):
    out = kl("logs", "-n", "5", check=True).stdout
    for role in ("supervisor", "storage", "ingest", "retrieval", "extraction"):
        assert f"{role}: " in out
    assert "[kirolearn.storage] [INFO] started" in kl("logs", "storage").stdout


def test_concurrent_events_are_committed_in_groups(store, ingest, daemon, ctx):
    """Requests queued at storage are committed together: with storage held (stopped)
    until ingest has sent it a burst of 300 events, they take far fewer commits than
    events (without holding it, how many are queued at once depends on the machine's
    load)."""
    storage_pid = next(r["pid"] for r in status()["roles"] if r["role"] == "storage")
    sock = transport.make_socket(ctx, zmq.DEALER, connect=here().endpoint("ingest"))
    ids = []
    with transport.Client(here().endpoint("ingest.ctl"), ctx) as control:
        os.kill(storage_pid, signal.SIGSTOP)
        try:
            for i in range(300):
                message = protocol.request("put_event", {"event": make_event(content=f"burst {i}")})
                ids.append(message["id"])
                sock.send_multipart([b"", protocol.pack(message)])
            wait_for(lambda: control.call("ping")["accepted"] >= 300,
                     message="the burst sent to storage")
        finally:
            os.kill(storage_pid, signal.SIGCONT)
    replies = {}
    while len(replies) < len(ids):
        assert sock.poll(10_000)
        reply = protocol.parse_reply(sock.recv_multipart()[-1])
        replies[reply["id"]] = reply["body"]["status"]
    sock.close(linger=0)
    assert set(replies.values()) == {"stored"}
    with transport.Client(here().endpoint("storage.ctl"), ctx) as control:
        counters = control.call("ping")
    assert counters["events_stored"] == 300
    assert counters["commits"] < 300 / 3  # acknowledged in groups, not one commit each


def test_a_quiet_role_gives_back_memory_once_until_work_comes_again(ingest, daemon, ctx):
    """After ``QUIET_S`` without work (a control ping is none), each role gives back its
    caches and the heap's free pages once; work makes it do so again after the next
    quiet spell."""
    def given_back(endpoint: str) -> int:
        with transport.Client(here().endpoint(endpoint), ctx) as control:
            return control.call("ping")["memory_given_back"]

    for i in range(200):
        assert ingest.call("put_event", {"event": make_event(content=f"work {i}")}
                           )["status"] == "stored"
    ingest.call("put_event", {"event": make_event(kind="prompt", content="work 7"),
                              "retrieve": True})
    before = {name: given_back(f"{name}.ctl") for name in ("storage", "retrieval", "ingest")}
    wait_for(lambda: all(given_back(f"{name}.ctl") > count for name, count in before.items()),
             3 * base.QUIET_S + 30, 1.0, "each role quiet, its memory given back")
    once = {name: given_back(f"{name}.ctl") for name in before}
    assert ingest.call("put_event", {"event": make_event(content="more work")}
                       )["status"] == "stored"
    wait_for(lambda: given_back("storage.ctl") > once["storage"], 3 * base.QUIET_S + 30, 1.0,
             "storage quiet again after the next work")


def test_retrievals_are_logged_for_prompts(ingest, daemon):
    prompt = make_event("prompt", "what did we decide about WAL?")
    ingest.call("put_event", {"event": prompt, "retrieve": True})

    def logged():
        conn = sqlite3.connect(paths.Home(daemon).db_path)
        try:
            return conn.execute("SELECT outcome, latency_ms FROM retrievals WHERE"
                                " prompt_event_id = ?", (prompt["event_id"],)).fetchall()
        finally:
            conn.close()

    (outcome, latency), = wait_for(logged, message="the retrieval log row")
    assert outcome in ("empty", "ok") and latency >= 0


def test_an_expired_lease_is_handed_out_again_and_committed_once(store, home, monkeypatch):
    monkeypatch.setenv("KIROLEARN_STORAGE_LEASE_S", "1")
    kl("start", check=True)
    try:
        stuck = next(r for r in status()["roles"] if r["role"] == "extraction")
        os.kill(stuck["pid"], signal.SIGSTOP)  # takes the batch, never answers
        with transport.Client(here().endpoint("ingest")) as client:
            client.call("put_event", {"event": make_event("prompt", "Adopt WAL mode")})
            client.call("put_event", {"event": make_event("session_summary", "WAL adopted")})
        kl("scale", "extraction", "2", check=True)

        def records() -> int:
            return json.loads(kl("stats", "--json").stdout)["totals"]["records"]

        wait_for(lambda: records() == 1, timeout=30, message="the re-leased batch's record")
        os.kill(stuck["pid"], signal.SIGCONT)  # the stale worker now answers too
        wait_for(lambda: "already committed" in kl("logs", "storage", "-n", "100").stdout,
                 timeout=15, message="the late result to be ignored")
        assert records() == 1
        assert "handed out again (attempt 2)" in kl("logs", "storage", "-n", "100").stdout
    finally:
        kl("stop", check=True)


def test_a_killed_workers_waiting_batch_goes_out_again_at_once_not_at_lease_end(
        store, home, monkeypatch):
    """A take sent to a worker that has not claimed it yet (it waits in its queue) is
    lost with the worker's process: the supervisor tells storage, which hands it out
    again at once, though the lease has an hour to run."""
    monkeypatch.setenv("KIROLEARN_STORAGE_LEASE_S", "3600")
    kl("start", check=True)
    try:
        stuck = next(r for r in status()["roles"] if r["role"] == "extraction")
        os.kill(stuck["pid"], signal.SIGSTOP)  # the take waits in its queue, unclaimed
        with transport.Client(here().endpoint("ingest")) as client:
            client.call("put_event", {"event": make_event("prompt", "Adopt WAL mode")})
            client.call("put_event", {"event": make_event("session_summary", "WAL adopted")})
        def leased() -> bool:
            with db.reading(db.location(here())) as conn:
                return batches.next_lease_expiry(conn) is not None
        wait_for(leased, 30, 0.1, "the batch sent to the worker")
        os.kill(stuck["pid"], signal.SIGKILL)

        def records() -> int:
            return json.loads(kl("stats", "--json").stdout)["totals"]["records"]
        wait_for(lambda: records() == 1, 60, 0.2, "the batch extracted by the new worker")
        log = kl("logs", "supervisor", "-n", "100").stdout
        assert "extraction-1 exited: storage hands out its 1 batch(es) again" in log
    finally:
        kl("stop", check=True)


def test_a_killed_supervisor_takes_its_roles_with_it_and_start_recovers(home):
    kl("start", check=True)
    supervisor = status()["pid"]
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not [p for p in processes_using(home) if p != supervisor],
             timeout=15, message="orphaned roles to exit")
    assert kl("status").returncode == 3
    kl("start", check=True)
    assert all_up(status()["roles"])
    kl("stop", check=True)


def test_restart(daemon):
    before = status()["pid"]
    kl("restart", check=True)
    assert status()["pid"] != before


def test_foreground_stops_cleanly_on_ctrl_c(home):
    daemon = subprocess.Popen([*KL, "start", "--foreground"], cwd="/tmp",
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: kl("status").returncode == 0 and all_up(status()["roles"]),
                 message="foreground start")
        daemon.send_signal(signal.SIGINT)
        _, err = daemon.communicate(timeout=30)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    assert daemon.returncode == 0
    assert "success: storage entered RUNNING state" in err
    assert "stopped: storage (exit status 0)" in err
    # storage stopped last, after everything that feeds it
    order = [line.split("stopped: ")[1].split()[0] for line in err.splitlines()
             if "stopped: " in line]
    assert order[-1] == "storage" and order.index("ingest") < order.index("storage")


def test_logs_follow_prints_new_lines(daemon):
    follower = subprocess.Popen([*KL, "logs", "storage", "-f", "-n", "1"], cwd="/tmp",
                                stdout=subprocess.PIPE, text=True)
    try:
        assert "[kirolearn.storage]" in follower.stdout.readline()  # it is following now
        with transport.Client(here().endpoint("ingest")) as client:
            client.call("put_event", {"event": make_event("prompt", "follow me")})
            client.call("put_event", {"event": make_event("session_summary", "followed")})
        line = follower.stdout.readline()  # the batch commit is logged by storage
        assert "[kirolearn.storage]" in line
    finally:
        follower.terminate()
        follower.communicate()


def test_stop_ladder_escalates_to_sigterm_then_sigkill(home, monkeypatch):
    monkeypatch.setenv("KIROLEARN_SUPERVISOR_STOP_TIMEOUT_S", "0.5")
    monkeypatch.setenv("KIROLEARN_SUPERVISOR_KILL_TIMEOUT_S", "0.5")
    kl("start", check=True)
    worker = next(r for r in status()["roles"] if r["role"] == "extraction")
    os.kill(worker["pid"], signal.SIGSTOP)  # deaf to the shutdown message and to SIGTERM
    kl("stop", check=True)
    log = kl("logs", "supervisor", "-n", "50").stdout
    assert f"killing 'extraction-1' ({worker['pid']}) with SIGTERM" in log
    assert f"killing 'extraction-1' ({worker['pid']}) with SIGKILL" in log
    assert "stopped: storage (exit status 0)" in log


def test_a_role_stuck_in_a_call_is_unresponsive_then_restarted(home, monkeypatch):
    """A role whose process stands but answers nothing (stopped here, as one stuck in a
    read would be) is not RUNNING in status for long: UNRESPONSIVE, then killed and
    started again; the daemon answers prompts after."""
    monkeypatch.setenv("KIROLEARN_SUPERVISOR_UNRESPONSIVE_S", "15")
    kl("start", check=True)
    try:
        stuck = next(r for r in status()["roles"] if r["role"] == "retrieval")
        os.kill(stuck["pid"], signal.SIGSTOP)
        wait_for(lambda: next(r for r in status()["roles"] if r["role"] == "retrieval"
                              )["state"] == "UNRESPONSIVE", 60, 0.2, "UNRESPONSIVE")
        back = wait_for(lambda: next((r for r in status()["roles"] if r["role"] == "retrieval"
                                      and r["restarts"] == 1 and r["state"] == "RUNNING"),
                                     None), 60, 0.2, "retrieval restarted")
        assert back["pid"] != stuck["pid"]
        log = kl("logs", "supervisor", "-n", "50").stdout
        assert f"killing 'retrieval' ({stuck['pid']}): it has answered no ping for" in log
        assert kl("search", "anything", check=True).returncode == 0
    finally:
        kl("stop", check=True)


def test_export_and_stats_by_project_directory(ingest, daemon, tmp_path, monkeypatch):
    from kirolearn import project

    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path))
    scope = project.resolve_project(repo / "src")
    mine = make_event(content="in the repo", namespace=scope.namespace(project.actor_id()))
    ingest.call("put_event", {"event": mine})
    ingest.call("put_event", {"event": make_event(content="elsewhere")})
    out = kl("export", "--project", str(repo / "src"), check=True).stdout
    assert [e["event_id"] for e in map(json.loads, out.splitlines()) if "kind" in e] == [
        mine["event_id"]]
    stats = json.loads(kl("stats", "--project", str(repo), "--json", check=True).stdout)
    assert stats["totals"]["events"] == 1
    both = kl("export", "--project", str(repo), "--namespace", "/actor/a/project/b/")
    assert both.returncode == 2 and "not both" in both.stderr


def test_import_rejects_oversized_lines_alone(daemon):
    small = make_event(content="fits")
    big = make_event(content="x" * (1024 * 1024 + 10))  # body over the 1 MiB cap
    huge = make_event(content="y" * (3 * 1024 * 1024))  # over what a frame may carry
    lines = [json.dumps(e) for e in (small, big, huge, make_event(content="also fits"))]
    result = kl("import", "-", input="\n".join(lines) + "\n")
    assert result.stdout.strip() == "stored 2, duplicate 0, rejected 2", result.stderr
    assert "line 2: rejected: body: serialized body is" in result.stderr
    assert "line 3: rejected: the line is" in result.stderr


def test_storage_rejects_malformed_events_alone_and_keeps_going(ingest, daemon, ctx):
    storage_pid = next(r["pid"] for r in status()["roles"] if r["role"] == "storage")
    with transport.Client(here().endpoint("storage"), ctx) as storage:
        reply = storage.call("put_events", {"events": [5, {"event_id": "x"}]})
        assert [r["status"] for r in reply["results"]] == ["rejected", "rejected"]
        with pytest.raises(protocol.RemoteError) as info:
            storage.call("put_events", {"events": "not a list"})
        assert info.value.code == protocol.ErrorCode.BAD_REQUEST
        for bad in ("not a list", [{"record_id": 7}], [{"record_id": "mr_x", "why": ""}]):
            with pytest.raises(protocol.RemoteError) as info:
                storage.call("mark_stale", {"items": bad})
            assert info.value.code == protocol.ErrorCode.BAD_REQUEST
        assert storage.call("mark_stale", {"items": [{"record_id": "mr_none", "why": "gone"}]}
                            ) == {"marked": 0}  # no such record: nothing marked
    assert ingest.call("put_event", {"event": make_event()})["status"] == "stored"
    assert next(r["pid"] for r in status()["roles"] if r["role"] == "storage") == storage_pid


def test_a_prompt_with_a_bad_global_namespace_is_refused_and_not_stored(ingest, daemon):
    event = make_event("prompt", "sign my commits")
    for bad in ("/home/me", 3, ["/actor/a/project/b/"]):
        with pytest.raises(protocol.RemoteError) as info:
            ingest.call("put_event", {"event": event, "retrieve": True,
                                      "global_namespace": bad})
        assert info.value.code == protocol.ErrorCode.BAD_REQUEST
        assert "'global_namespace' must be a namespace" in info.value.reason
    assert stored_events() == []
    assert ingest.call("put_event", {"event": event, "retrieve": True})["status"] == "stored"
