"""Every event becomes memory, however it arrives: a large history imported at full speed
is cut into bounded batches and every turn becomes a record; failed batches are said,
listed and retried."""

from __future__ import annotations

import contextlib
import json
import os
import time

import pytest
import zmq
from helpers.cli import here, kl, status
from helpers.events import NAMESPACE, make_event
from helpers.waits import wait_for
from hypothesis import given
from hypothesis import strategies as st

from kirolearn import config, contract, db, paths, transport
from kirolearn.db import batches, postgres, writes
from kirolearn.roles import base
from kirolearn.roles.ingest.checks import prepare
from kirolearn.roles.storage import handout
from kirolearn.roles.storage import leases as leases_role
from kirolearn.roles.storage import role as storage_role
from kirolearn.roles.storage import writer as writer_role

TURNS = 1200
TOOLS_PER_TURN = 8  # with the prompt and the turn's end: 10 events a turn, 12,000 in all


def history(tmp_path) -> tuple[str, list[str]]:
    """One project's history as JSON Lines (over 3 MB of bodies), and each turn's request."""
    requests, lines = [], []
    for turn in range(TURNS):
        session = f"session-{turn // 50}"
        request = f"Refactor module number {turn} of the billing service"
        requests.append(request)
        lines.append(json.dumps(make_event("prompt", request, session_id=session)))
        for tool in range(TOOLS_PER_TURN):
            path = f"src/billing/module_{turn}/part_{tool}.py " + "x" * 300
            lines.append(json.dumps(make_event("tool_use", path, session_id=session)))
        lines.append(json.dumps(make_event("session_summary", f"Refactored module {turn}",
                                           session_id=session)))
    source = tmp_path / "history.jsonl"
    source.write_text("\n".join(lines) + "\n")
    return str(source), requests


def test_a_large_history_imported_at_full_speed_becomes_a_record_per_turn(daemon, tmp_path):
    source, requests = history(tmp_path)
    result = kl("import", source)
    assert result.stdout.strip() == f"stored {TURNS * 10}, duplicate 0, rejected 0", result.stderr

    def extracted() -> dict | None:
        pending = status()["pending"]
        return pending if pending["events"] == 0 and pending["batches"] == 0 else None

    pending = wait_for(extracted, timeout=300, interval=1, message="every batch extracted")
    assert pending["failed"] == []
    titles = {json.loads(line)["title"] for line in kl("export", check=True).stdout.splitlines()
              if '"record_id"' in line}
    missing = [r for r in requests if r not in titles]
    assert not missing, f"{len(missing)} turns have no record, e.g. {missing[:3]}"


def test_a_take_is_committed_a_slice_at_a_time_and_no_take_goes_out_meanwhile(home,
                                                                              monkeypatch):
    """A worker's take of many batches is committed a slice at a time, each slice a
    transaction, so the loop answers the events queued meanwhile between them; until the
    last slice is in, storage is due at once and hands no worker another take."""
    monkeypatch.setattr(handout, "RESULTS_SLICE_S", 0.0)  # one batch a slice
    paths.Home(home).ensure_layout()
    role = storage_role.Storage("storage", paths.Home(home), config.load(paths.Home(home)))
    role.setup()
    worker = transport.make_socket(role.ctx, zmq.PULL, connect=paths.Home(home).endpoint("batches"))
    try:
        wait_for(role.handout._worker_free, message="the worker connected")
        batch_ids = []
        for turn in range(3):
            event = prepare(make_event("prompt", f"Rename module {turn}"))[0]
            with role.conn.transaction():
                writes.insert_event(role.conn, event, 0)
                batch_ids += batches.form_batches(role.conn, NAMESPACE, "turn_end", 1 << 20)
            role.handout.unsaved.append((batch_ids[-1], [{
                "record_id": contract.new_record_id(), "namespace": NAMESPACE,
                "title": f"Renamed module {turn}", "summary": "Renamed it.", "facts": [],
                "concepts": [], "files_touched": [], "observation_type": "decision",
                "strategy": "heuristic", "source_event_ids": [event["event_id"]],
                "created_at": contract.now_iso()}], []))

        def done() -> list[str]:
            return [row[0] for row in role.conn.execute(
                "SELECT batch_id FROM extraction_batches WHERE state = 'done' ORDER BY rowid")]

        for slices in range(1, 4):
            assert role.wake_at() <= time.monotonic() and not role.handout._worker_free()
            role.tick()
            assert done() == batch_ids[:slices]
        assert not role.handout.unsaved and role.wake_at() > time.monotonic()
        assert role.handout._worker_free()
    finally:
        worker.close()
        role.teardown()
        role.ctx.destroy(linger=0)
        for endpoint in paths.Home(home).runtime_dir().glob("*"):
            endpoint.unlink()


def test_a_poison_batch_is_failed_with_its_reason_listed_and_retried(home):
    """A stored event no worker can read (a body that is not JSON, as a damaged or
    hand-edited database may hold): its batch is tried, said failed with the reason, and
    handed out again on demand; the events around it still become records."""
    conn = db.connect_writer(paths.Home(home).db_path)
    assert kl("extraction", "failed").stdout.strip() == "no failed batches"
    with conn.transaction():
        poison = prepare(make_event(content="poison"))[0]
        writes.insert_event(conn, {**poison, "body_json": "{not json"}, 0)
    conn.close()
    kl("start", check=True)
    try:
        with transport.Client(here().endpoint("ingest"), timeout_ms=5000) as ingest:
            for event in (make_event("prompt", "Rename the billing module"),
                          make_event("session_summary", "Renamed it")):
                assert ingest.call("put_event", {"event": event})["status"] == "stored"
        failed = wait_for(lambda: status()["pending"]["failed"], timeout=60,
                          message="the poison batch to be failed")
        assert [f["events"] for f in failed] == [1]
        assert "attempts failed; last: JSONDecodeError" in failed[0]["error"]
        listed = kl("extraction", "failed")
        assert listed.returncode == 1 and failed[0]["batch_id"] in listed.stdout
        assert "failed batches: 1" in kl("status").stdout
        wait_for(lambda: json.loads(kl("stats", "--json").stdout)["totals"]["records"] == 1,
                 timeout=60, message="the good turn's record")
        retried = kl("extraction", "retry")
        assert retried.stdout.strip() == "1 failed batch(es) handed out again"
        wait_for(lambda: "handed out again (attempt 2)" in kl("logs", "storage").stdout,
                 timeout=30, message="the retried batch to go out again")
    finally:
        kl("stop", check=True)


def test_a_prompt_stored_before_the_previous_turn_is_batched_stays_with_its_own_turn(daemon):
    """The next prompt often arrives just after a turn's end, before storage batches that
    turn: it waits for its own tool uses rather than making a record alone."""
    def records() -> list[dict]:
        return [json.loads(line) for line in kl("export", check=True).stdout.splitlines()
                if '"record_id"' in line]

    first = [make_event("prompt", "Fix the export crash"),
             make_event("tool_use", "src/export.py"),
             make_event("session_summary", "Fixed the export crash")]
    with transport.Client(paths.Home(daemon).endpoint("ingest")) as ingest:
        ingest.call("put_events", {"events": [*first, make_event(
            "prompt", "Now document the export format")]})
        wait_for(records, message="the first turn's record")
        ingest.call("put_events", {"events": [make_event("tool_use", "docs/export.md"),
                                              make_event("session_summary", "Documented")]})
        wait_for(lambda: len(records()) == 2 and status()["pending"]["events"] == 0,
                 message="the second turn's record")
    assert sorted((r["title"], tuple(r["facts"])) for r in records()) == [
        ("Fix the export crash", ("read `src/export.py`",)),
        ("Now document the export format", ("read `docs/export.md`",))]


# -- leases, without processes ------------------------------------------------------------------

class Log:
    """A logger that keeps what it is told."""

    def __init__(self):
        self.lines: list[str] = []

    def _keep(self, message: str, *args: object) -> None:
        self.lines.append(message % args)

    info = warning = error = exception = debug = _keep


def leased(tmp_path, events: int = 1, lease_ms: int = 60_000, where: db.Location | None = None):
    """A writer on a new file (or ``where``) holding one ready batch of ``events`` events,
    and leases."""
    log = Log()
    writer = writer_role.Writer(where or tmp_path / "k.db", log)
    with writer.writing() as conn:
        for n in range(events):
            writes.insert_event(conn, prepare(make_event("prompt", f"step {n}"))[0], 0)
        (batch_id,) = batches.form_batches(conn, NAMESPACE, "turn_end", 1 << 20)
    return writer, leases_role.Leases(writer, lease_ms, log), batch_id, log


def due(writer) -> list[str]:
    return [row[0] for row in batches.due_batches(writer.conn, db.now_ms(), 10)]


def test_a_lease_hands_a_batch_out_until_it_runs_out(tmp_path):
    writer, leases, batch_id, _ = leased(tmp_path, lease_ms=50)
    try:
        assert due(writer) == [batch_id]
        leases.lease([batch_id], db.now_ms(), elsewhere=False)
        assert due(writer) == []  # out with a worker
        wait_for(lambda: due(writer) == [batch_id], timeout=5, message="the lease to run out")
    finally:
        writer.close()


def test_a_batch_whose_worker_died_goes_out_again_at_once(tmp_path):
    writer, leases, batch_id, log = leased(tmp_path)
    try:
        leases.lease([batch_id], db.now_ms(), elsewhere=False)
        leases.claimed([batch_id], 2**22 + 12345)  # a pid no process has
        assert leases.next_check(time.monotonic()) is not None
        leases.reclaim()
        assert due(writer) == [batch_id] and not leases.claims
        assert any("is gone; handing it out again" in line for line in log.lines)
    finally:
        writer.close()


def test_a_batch_whose_result_the_store_could_not_take_goes_out_once_it_answers(
        tmp_path, postgres_server):
    """PostgreSQL goes away as a result is committed (its connections cut, new ones
    refused): the batch goes out again as soon as the server answers, not at lease end."""
    import psycopg

    url = postgres_server.database()
    name = url.rsplit("/", 1)[1]
    writer, leases, batch_id, log = leased(tmp_path, where=url)

    def admin(sql: str) -> None:
        with psycopg.connect(postgres_server.url(), autocommit=True) as conn:
            conn.execute(sql)

    try:
        leases.lease([batch_id], db.now_ms(), elsewhere=False)
        admin(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
        leases.strand([batch_id])  # what the handout does when the commit fails
        assert leases.next_check(time.monotonic()) is not None
        with pytest.raises(base.Unavailable):
            leases.reclaim()
        assert leases.stranded == {batch_id}  # kept until the store answers
        admin(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")

        def out_again() -> bool:
            with contextlib.suppress(base.Unavailable):
                leases.reclaim()
                return due(writer) == [batch_id]
            return False

        wait_for(out_again, timeout=30, interval=0.2, message="the batch to go out again")
        assert not leases.stranded
        assert any("could not be committed while the store was away" in line
                   for line in log.lines)
    finally:
        writer.close()
        postgres.close_pools()


def test_a_worker_elsewhere_is_heard_and_its_result_alone_is_taken(tmp_path, monkeypatch):
    writer, leases, batch_id, _ = leased(tmp_path)
    try:
        leases.lease([batch_id], db.now_ms(), elsewhere=True, token="t1")
        assert leases.unclaimed == {batch_id: "t1"}
        leases.taken([batch_id], "mallory", "t0")  # not the take's token: not hers to claim
        leases.taken([batch_id], "mallory", None)
        assert leases.unclaimed == {batch_id: "t1"} and not leases.holders
        leases.taken([batch_id, 7], "laptop", "t1")
        leases.working([batch_id], "mallory")  # not hers: changes nothing
        heard = leases.heard[batch_id]
        leases.working([batch_id], "laptop")
        assert leases.heard[batch_id] >= heard
        assert not leases.settle(batch_id, "mallory")  # a result for a batch not given her
        assert leases.settle(batch_id, "laptop") and not leases.holders
        # silent for too long: out again
        leases.lease([batch_id], db.now_ms(), elsewhere=True, token="t2")
        leases.taken([batch_id], "laptop", "t2")
        monkeypatch.setattr(leases_role, "REMOTE_SILENCE_S", -1.0)
        leases.reclaim()
        assert due(writer) == [batch_id] and not leases.heard
    finally:
        writer.close()


def test_a_batch_sent_to_this_machines_workers_goes_out_again_when_one_exits(tmp_path):
    """What a worker held, and what was sent here and not yet claimed (it may have
    waited in the exited worker's queue), goes out again; a claimed batch of another,
    live worker stays with it."""
    writer, leases, batch_id, log = leased(tmp_path)
    try:
        leases.lease([batch_id], db.now_ms(), elsewhere=False)
        assert leases.worker_gone(4242) == 1
        assert due(writer) == [batch_id] and not leases.sent_here
        leases.lease([batch_id], db.now_ms(), elsewhere=False)
        leases.claimed([batch_id], os.getpid())
        assert leases.worker_gone(4242) == 0 and due(writer) == []
        assert leases.worker_gone(os.getpid()) == 1 and due(writer) == [batch_id]
        assert any("worker 4242 exited" in line for line in log.lines)
    finally:
        writer.close()


def test_a_revoked_workers_batches_and_those_not_yet_taken_go_out_again(tmp_path):
    writer, leases, batch_id, _ = leased(tmp_path)
    try:
        leases.lease([batch_id], db.now_ms(), elsewhere=True)
        assert not leases.revoke({"laptop"}, revoked=False)  # nothing changed
        assert leases.revoke({"laptop"}, revoked=True)
        assert due(writer) == [batch_id] and not leases.unclaimed
    finally:
        writer.close()


def test_a_failing_batch_is_split_then_its_one_event_failed(tmp_path):
    writer, leases, batch_id, log = leased(tmp_path, events=2)
    try:
        leases.give_up(batch_id, "5 attempts failed")
        assert len(due(writer)) == 2  # split in two
        first = due(writer)[0]
        leases.give_up(first, "5 attempts failed")
        assert first not in due(writer)
        assert [f["batch_id"] for f in batches.failed_batches(writer.conn)] == [first]
        assert any("split in two" in line for line in log.lines)
    finally:
        writer.close()


@given(st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=20))
def test_a_take_holds_what_a_worker_does_in_about_a_tenth_of_a_second(paces):
    leases = leases_role.Leases(None, 1000, Log())
    assert leases.take_size() == 1
    for seconds in paces:
        leases.note_pace(seconds, 1)
    assert 1 <= leases.take_size() <= leases_role.TAKE_MAX_BATCHES
