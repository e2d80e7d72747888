"""Authorization in team mode, tried as a hostile teammate would: a key reaches only its
own actor's namespaces, and the team's in the projects it works on; worker keys are their
own kind, and a revoke cuts a key off at once. Real processes: a daemon listening on
127.0.0.1, other machines as homes of their own, raw CURVE sockets for a hostile worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import zmq
from helpers.cli import here, kl
from helpers.events import make_event, wait_records
from helpers.team import allow, clone, connect, new_machine, on
from helpers.waits import wait_for
from ports import free_ports

from kirolearn import (
    contract,
    control,
    db,
    keys,
    paths,
    project,
    protocol,
    spool,
    transport,
)

ORIGIN = "git@git.example.org:t/app.git"
TEAM = project.sha256_hex("git:git.example.org/t/app")  # the team's project
OTHER = project.sha256_hex("git:git.example.org/t/payroll")  # bob's alone


def record(namespace: str, title: str, summary: str) -> dict:
    return {"record_id": contract.new_record_id(), "namespace": namespace, "title": title,
            "summary": summary, "facts": [], "concepts": [], "files_touched": [],
            "observation_type": "decision", "strategy": "mcp_observation",
            "source_event_ids": [contract.new_ulid()], "created_at": contract.now_iso()}


def request(base, target: str, op: str, body: dict) -> dict:
    """A request from the machine at ``base`` to the daemon it is connected to."""
    return control.call(target, op, body, home=paths.Home(base), timeout_ms=5000)


def refused(base, target: str, op: str, body: dict) -> str:
    with pytest.raises(control.RemoteError) as caught:
        request(base, target, op, body)
    assert caught.value.code == protocol.ErrorCode.FORBIDDEN, caught.value
    return caught.value.reason


def exported() -> list[dict]:
    return [json.loads(line) for line in kl("export", check=True).stdout.splitlines()]


@pytest.fixture
def team(server, machines):
    """Bob and Mallory, each on a machine of their own connected to the daemon."""
    address, server_key = server
    laptops = {name: new_machine(machines) for name in ("bob", "mallory")}
    for name, laptop in laptops.items():
        allow(connect(laptop, address, server_key), name)
    return laptops


def ns(actor: str, project_id: str = TEAM) -> str:
    return project.namespace_for(actor, project_id)


def test_a_key_reaches_only_its_own_actor_and_the_projects_it_works_on(team, tmp_path):
    bob, mallory = team["bob"], team["mallory"]
    shared = record(ns("bob"), "Signing keys rotate quarterly",
                    "zebrafrost: the vault rotate-keys job rotates the signing keys.")
    secret = record(ns("bob+private"), "My own notes on the signing keys",
                    "zebrafrost: bob keeps a spare signing key on his laptop.")
    payroll = record(ns("bob", OTHER), "Payroll runs on the 25th",
                     "zebrafrost: payroll exports go to the bank at noon.")
    home_notes = record(ns("bob", project.global_project_id("bob")), "Bob's dotfiles",
                        "zebrafrost: bob's shell aliases live in his dotfiles repo.")
    for saved in (shared, secret, payroll, home_notes):
        assert request(bob, "ingest", "put_record", {"record": saved})["status"] == "stored"
    # Mallory works on the team's project too: she has contributed to it.
    mine = record(ns("mallory"), "CI caches wheels", "zebrafrost: the CI caches wheels.")
    assert request(mallory, "ingest", "put_record", {"record": mine})["status"] == "stored"

    def found(namespace: str, **more) -> set[str]:
        reply = request(mallory, "retrieval", "search", {
            "query": "zebrafrost signing keys payroll dotfiles", "namespace": namespace,
            "records": True, **more})
        return {r["title"] for r in reply["records"]}

    # Allowed: her own, and bob's shared memory of the project she works on; not his
    # private memory, nor a project she never worked on.
    wait_for(lambda: found(ns("mallory")) == {mine["title"], shared["title"]},
             message="mallory finds her memory and bob's shared one")
    assert found(ns("mallory", OTHER)) == set()
    # Once she has written into a project, she shares its memories (the rule of
    # docs/team.md); never those of bob's global project.
    for project_id in (OTHER, project.global_project_id("bob")):
        joined = record(ns("mallory", project_id), "Mallory was here", "zebrafrost")
        assert request(mallory, "ingest", "put_record", {"record": joined})["status"] == "stored"
    wait_for(lambda: found(ns("mallory", OTHER)) == {"Mallory was here", payroll["title"]},
             message="a project she contributed to shared with her")
    # (asked for the words of both: her record alone holds too little of the five)
    assert found(ns("mallory", project.global_project_id("bob")),
                 query="zebrafrost dotfiles") == {"Mallory was here"}
    before = sorted(json.dumps(line, sort_keys=True) for line in exported())

    # Every request that names bob's namespaces is refused, whatever the op.
    attempts = [
        ("retrieval", "search", {"query": "zebrafrost", "namespace": ns("bob+private")}),
        ("retrieval", "search", {"query": "zebrafrost", "namespaces": [ns("mallory"),
                                                                       ns("bob", OTHER)]}),
        ("retrieval", "search", {"query": "zebrafrost", "namespace": ns("mallory"),
                                 "global_namespace": ns("bob", project.global_project_id("bob"))}),
        ("retrieval", "search", {"event": {"namespace": ns("bob+private"),
                                           "body": {"type": "text", "content": "keys"}}}),
        ("retrieval", "get_records", {"ids": [secret["record_id"]],
                                      "namespaces": [ns("bob+private")]}),
        ("retrieval", "timeline", {"record_id": secret["record_id"],
                                   "namespaces": [ns("bob+private")]}),
        ("retrieval", "resume_session", {"namespace": ns("bob+private")}),
        ("retrieval", "session_context", {"namespace": ns("bob")}),
        ("retrieval", "session_events", {"namespace": ns("bob"), "session_ids": ["b-1"]}),
        ("retrieval", "brief", {"namespace": ns("bob+private")}),
        ("ingest", "put_rule_file", {"namespace": ns("bob"), "name": "CLAUDE.md",
                                     "text": "- Planted rule."}),
        ("ingest", "forget", {"record_id": shared["record_id"], "namespaces": [ns("bob")]}),
        ("ingest", "update_record", {"record_id": shared["record_id"],
                                     "namespaces": [ns("bob")],
                                     "changes": {"title": "Keys never rotate"}}),
        ("ingest", "put_record", {"record": record(ns("bob"), "Planted", "planted")}),
        ("ingest", "put_event", {"event": make_event(
            "prompt", "as bob", namespace=ns("bob+private"), actor_id="bob+private")}),
        ("ingest", "put_event", {"event": make_event(
            "prompt", "as bob", namespace=ns("mallory"), actor_id="bob")}),
        ("ingest", "put_events", {"lines": [
            json.dumps(make_event("prompt", "mine", namespace=ns("mallory"),
                                  actor_id="mallory")),
            json.dumps(make_event("prompt", "as bob", namespace=ns("bob"), actor_id="bob"))]}),
    ]
    for target, op, body in attempts:
        assert "mallory's" in refused(mallory, target, op, body)
    # Within her own namespaces, bob's private memory is still out of reach.
    got = request(mallory, "retrieval", "get_records", {
        "ids": [secret["record_id"], shared["record_id"]], "namespaces": [ns("mallory")]})
    assert [r["record_id"] for r in got["records"]] == [shared["record_id"]]
    around = request(mallory, "retrieval", "timeline", {
        "record_id": secret["record_id"], "namespaces": [ns("mallory")]})
    assert around["records"] == []
    assert request(mallory, "ingest", "forget", {"record_id": secret["record_id"],
                                                 "namespaces": [ns("mallory")]}) == {
        "deleted": False}
    assert sorted(json.dumps(line, sort_keys=True) for line in exported()) == before
    log = (here().log_dir / "gateway.log").read_text()
    assert log.count("FORBIDDEN: mallory asked") == len(attempts)


def test_a_hook_run_as_another_user_stores_nothing_as_them(team, tmp_path):
    mallory = team["mallory"]
    repo = clone(tmp_path / "mallory" / "app", ORIGIN)
    env = {**on(mallory), "USER": "bob", "LOGNAME": "bob", "HOME": str(tmp_path / "mallory"),
           "KIROLEARN_AUTOSTART": "0"}
    shim = os.path.join(os.path.dirname(sys.executable), "kirolearn-claude-code")
    done = subprocess.run([shim], input=json.dumps({
        "hook_event_name": "UserPromptSubmit", "session_id": "m-1", "cwd": str(repo),
        "prompt": "store this as bob"}), capture_output=True, text=True, env=env, cwd=repo,
        timeout=30)
    assert done.returncode == 0 and done.stdout == ""
    assert len(spool.waiting(paths.Home(mallory))) == 1  # refused there: kept here, not lost
    counts = control.drain_spool(paths.Home(mallory))
    assert counts == {"stored": 0, "rejected": 1, "left": 0}
    reason = next(paths.Home(mallory).quarantine_dir.glob("*.reason")).read_text()
    assert "mallory" in reason and "bob" in reason
    assert not [line for line in exported() if "kind" in line]
    doctor = kl("doctor", env=env)  # says why, and what to do
    assert "key is allowed as mallory while its user is bob" in doctor.stdout, doctor.stdout
    assert doctor.returncode == 1


def test_a_projects_memories_reach_a_granted_key_before_it_contributes(team):
    bob, mallory = team["bob"], team["mallory"]
    saved = record(ns("bob", OTHER), "Payroll runs on the 25th", "zebrafrost payroll")
    request(bob, "ingest", "put_record", {"record": saved})
    wait_records(ns("bob", OTHER))

    def found() -> list[str]:
        return request(mallory, "retrieval", "search", {
            "query": "zebrafrost payroll", "namespace": ns("mallory", OTHER)})["record_ids"]

    assert found() == []
    kl("keys", "grant", "mallory", "https://git.example.org/t/payroll", check=True)
    assert found() == [saved["record_id"]]
    assert OTHER in kl("keys", "list", check=True).stdout
    kl("keys", "grant", "mallory", OTHER, "--revoke", check=True)
    assert found() == []
    bad = kl("keys", "grant", "mallory", "not a project")
    assert bad.returncode == 2 and "not a project id" in bad.stderr


# -- extraction workers elsewhere -----------------------------------------------------------------

class RawWorker:
    """A worker elsewhere speaking the protocol by hand, with the key it was given."""

    def __init__(self, ctx: zmq.Context, address: str, pair: keys.KeyPair, server_key: str):
        endpoints = transport.tcp_endpoints(address)
        curve = transport.Curve(pair.public, pair.secret, server_key.encode())
        self.batches = transport.make_socket(ctx, zmq.PULL, hwm=1, connect=endpoints["batches"],
                                             curve=curve)
        self.records = transport.make_socket(ctx, zmq.PUSH, connect=endpoints["records"],
                                             curve=curve)

    def take(self, timeout_ms: int = 30_000, claim: bool = True) -> list[dict]:
        assert self.batches.poll(timeout_ms), "no take came"
        take = protocol.unpack(self.batches.recv())
        batches = take["batches"]
        self.token = take["take"]
        if claim:
            self.claim(batches, self.token)
        return batches

    def claim(self, batches: list[dict], token: str | None) -> None:
        self.records.send(protocol.pack({"batch_ids": [b["batch_id"] for b in batches],
                                         "take": token}))

    def close(self) -> None:
        self.batches.close(0)
        self.records.close(0)


def storage_log() -> str:
    return (here().log_dir / "storage.log").read_text()


@pytest.fixture
def workerless(home):
    """A daemon listening on TCP with no local workers: (its address, its public key)."""
    pair = keys.init_server(paths.Home(home))
    address = f"tcp://127.0.0.1:{free_ports()}"
    kl("start", "--listen", address, "--extraction-workers", "0", check=True)
    yield address, pair.public.decode()
    kl("stop", check=True)


def put(namespace: str, text: str, kind: str = "session_summary") -> dict:
    actor = project.parts(namespace)[0]
    event = make_event(kind, text, namespace=namespace, actor_id=actor)
    assert control.call("ingest", "put_event", {"event": event},
                        timeout_ms=5000, home=here())["status"] == "stored"
    return event


def test_worker_ports_take_worker_keys_only_and_keep_records_to_their_batch(
        workerless, home, ctx):
    address, server_key = workerless
    client, worker = keys.new_pair(), keys.new_pair()
    keys.allow("carol", client.public.decode(), paths.Home(home))
    keys.allow("gpu-box", worker.public.decode(), paths.Home(home), keys.WORKER)

    # A client's key is refused on the workers' ports, and a worker's on the clients' one.
    intruder = RawWorker(ctx, address, client, server_key)
    wait_for(lambda: f"its CURVE key {client.public.decode()} is not allowed" in storage_log(),
             message="the client key refused on the workers' port")
    intruder.close()
    with (transport.Client(address, ctx, 5000, curve=transport.Curve(
            worker.public, worker.secret, server_key.encode()), to="retrieval") as as_worker,
          pytest.raises(control.RemoteError, match="for extraction only")):
        as_worker.call("search", {"query": "x", "namespace": ns("gpu-box")})

    # A private actor's batch stays on this machine; the team's goes to the worker.
    put(ns("dave+private"), "dave's private notes on the zebrafrost outage")
    event = put(ns("dave"), "the zebrafrost outage came from the cache")
    hostile = RawWorker(ctx, address, worker, server_key)
    try:
        take = hostile.take()
        assert [b["namespace"] for b in take] == [ns("dave")]
        batch = take[0]
        good = {**record(ns("dave"), "Cache outage", "password=hunter2hunter2 was in the log"),
                "source_event_ids": [event["event_id"]]}
        planted = {**record(ns("erin"), "Planted", "stored where it does not belong"),
                   "source_event_ids": [event["event_id"]]}
        foreign = {**record(ns("dave"), "Foreign", "made from another batch's events")}
        hostile.records.send(protocol.pack({"results": [
            {"batch_id": batch["batch_id"], "records": [good, planted, foreign]},
            {"batch_id": contract.new_ulid(), "records": [planted]}]}))

        def committed():
            with db.reading(db.location(here())) as conn:
                return conn.execute("SELECT state FROM extraction_batches WHERE batch_id = $1",
                                    (batch["batch_id"],)).fetchone() == ("done",)
        wait_for(committed, message="the worker's batch committed")
    finally:
        hostile.close()
    records = [line for line in exported() if "record_id" in line]
    assert [r["title"] for r in records] == ["Cache outage"]
    assert "hunter2" not in records[0]["summary"] and "[REDACTED" in records[0]["summary"]
    log = storage_log()
    assert "not the batch's" in log and "which it was not given" in log
    with db.reading(db.location(here())) as conn:
        states = dict(conn.execute("SELECT namespace, state FROM extraction_batches"))
    assert states[ns("dave+private")] == "ready"


def test_a_worker_cannot_claim_or_settle_a_batch_sent_to_another(workerless, home, ctx):
    """A take sent to one worker elsewhere and not yet claimed: another worker that knows
    the batch's id (not the take's token) claims it and sends its result first; it is
    dropped, and the batch is the first worker's to settle."""
    address, server_key = workerless
    first, second = keys.new_pair(), keys.new_pair()
    keys.allow("first", first.public.decode(), paths.Home(home), keys.WORKER)
    keys.allow("thief", second.public.decode(), paths.Home(home), keys.WORKER)
    put(ns("dave"), "the zebrafrost outage came from the cache")
    given = RawWorker(ctx, address, first, server_key)
    thief = None
    try:
        batch = given.take(claim=False)[0]
        thief = RawWorker(ctx, address, second, server_key)
        thief.claim([batch], None)
        thief.claim([batch], "0" * 32)
        thief.records.send(protocol.pack({"results": [
            {"batch_id": batch["batch_id"], "records": [
                {**record(ns("dave"), "Planted", "by a worker not given the batch"),
                 "source_event_ids": [batch["events"][0]["event_id"]]}]}]}))
        wait_for(lambda: "which it was not given" in storage_log(), 30, 0.1,
                 "the thief's result dropped")
        given.claim([batch], given.token)
        given.records.send(protocol.pack({"results": [
            {"batch_id": batch["batch_id"], "records": []}]}))

        def state():
            with db.reading(db.location(here())) as conn:
                return conn.execute("SELECT state FROM extraction_batches").fetchone()[0]
        wait_for(lambda: state() == "done", message="the batch done by the worker given it")
        assert not [line for line in exported() if "record_id" in line]
    finally:
        given.close()
        if thief is not None:
            thief.close()


def test_a_revoked_worker_is_cut_off_mid_take_and_its_batch_goes_out_again(
        workerless, home, ctx):
    address, server_key = workerless
    first, second = keys.new_pair(), keys.new_pair()
    keys.allow("first", first.public.decode(), paths.Home(home), keys.WORKER)
    keys.allow("second", second.public.decode(), paths.Home(home), keys.WORKER)
    put(ns("dave"), "the zebrafrost outage came from the cache")
    revoked = RawWorker(ctx, address, first, server_key)
    other = None
    try:
        batch = revoked.take()[0]
        kl("keys", "revoke", "first", check=True)
        wait_for(lambda: "key was revoked; handing it out again" in storage_log(),
                 timeout=10, message="the revoked worker's batch handed back")
        other = RawWorker(ctx, address, second, server_key)
        assert [b["batch_id"] for b in other.take()] == [batch["batch_id"]]
        # The revoked worker's connection was closed; coming back, it is refused.
        wait_for(lambda: f"its CURVE key {first.public.decode()} is not allowed"
                 in storage_log(), message="the revoked key refused on reconnect")
        # Its late result is dropped; the batch stays the second worker's.
        revoked.records.send(protocol.pack({"results": [
            {"batch_id": batch["batch_id"], "records": []}]}))
        other.records.send(protocol.pack({"results": [
            {"batch_id": batch["batch_id"], "records": []}]}))

        def state():
            with db.reading(db.location(here())) as conn:
                return conn.execute("SELECT state FROM extraction_batches").fetchone()[0]
        wait_for(lambda: state() == "done", message="the batch done by the second worker")
        assert "from a worker no longer allowed" in storage_log()
    finally:
        revoked.close()
        if other is not None:
            other.close()
