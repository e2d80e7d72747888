"""A daemon shared over TCP: CURVE keys, clients elsewhere (shims, the CLI), their spool,
and extraction workers elsewhere. Every machine is a KIROLEARN_HOME of its own here; the
traffic stays on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import zmq
from helpers.cli import KL, all_up, here, kl
from helpers.events import NAMESPACE, make_event, wait_records
from helpers.team import allow, clone, connect, new_machine, on
from helpers.waits import wait_for
from helpers.workspace import Workspace, call, serve
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client
from ports import free_ports

from kirolearn import control, db, keys, paths, project, protocol, spool, transport
from kirolearn.roles import gateway
from kirolearn.roles.storage import leases


def stored_ids() -> set[str]:
    with sqlite3.connect(here().db_path) as conn:
        return {row[0] for row in conn.execute("SELECT event_id FROM events")}


# -- keys -------------------------------------------------------------------------------------

def test_keys_are_private_checked_and_never_silently_replaced(home):
    pair = keys.init_server(paths.Home(home))
    with pytest.raises(keys.KeysError, match="exists"):
        keys.init_server(paths.Home(home))
    assert keys.server_pair(paths.Home(home)) == pair
    for path in (keys.keys_dir(paths.Home(home)), keys.clients_dir(paths.Home(home))):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    secret = keys.keys_dir(paths.Home(home)) / "server.key_secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    client = keys.new_pair()
    keyring = keys.Keyring(paths.Home(home))
    assert keyring.name_of(client.public) is None
    keys.allow("alice", client.public.decode(), paths.Home(home))
    assert keyring.name_of(client.public) == "alice"
    assert keyring.name_of(zmq.utils.z85.decode(client.public)) == "alice"  # raw, as ZAP
    refusals = {
        "bad-key": ("bob", "not a key"),
        "already allowed": ("alice", keys.new_pair().public.decode()),
        "already allowed as alice": ("bob", client.public.decode()),
        "daemon's own": ("bob", pair.public.decode()),
        "not a client name": ("../x", keys.new_pair().public.decode()),
        "reads as 'alice'": ("Alice", keys.new_pair().public.decode()),
        "must end with a letter or digit": ("alice.", keys.new_pair().public.decode()),
    }
    for why, (name, key) in refusals.items():
        with pytest.raises(keys.KeysError, match="is not a CURVE" if why == "bad-key" else why):
            keys.allow(name, key, paths.Home(home))
    assert list(keys.allowed(paths.Home(home))) == ["alice"]
    keys.revoke("alice", paths.Home(home))
    assert keyring.name_of(client.public) is None
    with pytest.raises(keys.KeysError, match="no client or worker is allowed as alice"):
        keys.revoke("alice", paths.Home(home))
    listed = json.loads(kl("keys", "list", "--json", check=True).stdout)
    assert listed == {"server": pair.public.decode(), "clients": {}, "workers": {}, "grants": {}}
    refused = kl("keys", "add", "carol", "short")
    assert refused.returncode == 1 and "is not a CURVE public key" in refused.stderr


@given(st.text(max_size=40))
def test_an_address_is_tcp_host_port_or_refused(text):
    for url in (text, f"tcp://{text}", f"tcp://host:{text}"):
        try:
            found = transport.tcp_endpoints(url)
        except ValueError:
            continue
        ports = [int(found[name].rsplit(":", 1)[1]) for name in ("requests", "batches",
                                                                  "records")]
        assert ports == [ports[0], ports[0] + 1, ports[0] + 2] and ports[2] <= 65535
        assert found["requests"] == url


def test_listening_needs_the_daemon_key_pair_and_a_good_address(home):
    refused = kl("start", "--listen", "tcp://127.0.0.1:5555")
    assert refused.returncode == 1 and "kirolearn keys init" in refused.stderr
    kl("keys", "init", check=True)
    refused = kl("start", "--listen", "udp://127.0.0.1")
    assert refused.returncode == 1 and "tcp://HOST:PORT" in refused.stderr
    assert not control.running(here())


# -- clients elsewhere ------------------------------------------------------------------------

def test_a_client_elsewhere_is_served_only_while_its_key_is_allowed(server, machines, tmp_path):
    address, server_key = server
    laptop = new_machine(machines)
    ws = Workspace(tmp_path)
    command = connect(laptop, address, server_key)
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s-1",
              "prompt": "why did we pick postgres for the team store"}

    # Not allowed yet: the hook spools the event on the laptop, within its budget.
    result, _ = ws.hook("kirolearn-claude-code", {**prompt, "cwd": str(ws.project)},
                        KIROLEARN_HOME=str(laptop), KIROLEARN_AUTOSTART="0")
    assert result.returncode == 0 and result.stdout == ""
    waiting = spool.waiting(paths.Home(laptop))
    assert len(waiting) == 1 and not stored_ids()
    broken = spool.write({"event_id": "01" + "Z" * 24, "kind": "not an event"}, paths.Home(laptop))

    # Allowed: the next hook is answered there, and the spool follows it in the background.
    allow(command, "tester")
    result, _ = ws.hook("kirolearn-claude-code", {**prompt, "cwd": str(ws.project),
                                                   "prompt": "and the backups?"},
                        KIROLEARN_HOME=str(laptop))
    assert result.returncode == 0
    wait_for(lambda: not spool.waiting(paths.Home(laptop)) and len(stored_ids()) == 2,
             message="the laptop's spool drained to the daemon")
    assert waiting[0].stem in stored_ids()
    kept = paths.Home(laptop).quarantine_dir / broken.name  # what the daemon refused, kept here
    assert kept.exists() and kept.with_name(kept.name + ".reason").read_text().strip()
    events = [json.loads(line) for line in kl("export", check=True).stdout.splitlines()
              if '"kind"' in line]
    assert {e["actor_id"] for e in events} == {"tester"}
    assert {e["namespace"] for e in events} == {ws.namespace}

    doctor = kl("doctor", env=on(laptop, HOME=str(ws.home), USER="tester"))
    assert f"ok    connection: {address} answers" in doctor.stdout, doctor.stdout
    assert "database" not in doctor.stdout  # the daemon host's, not this machine's

    # The CLI there searches here; what a client elsewhere may not ask is refused.
    found = kl("search", "postgres", env=on(laptop, HOME=str(ws.home), USER="tester"))
    assert found.returncode == 0, found.stderr
    # A repository seeded there is seeded as the client's own: a key is its actor.
    repo = ws.home / "shop"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "cart.py").write_text("def cart_total(items):\n    return sum(items)\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=Grace Hopper", "-c",
                    "user.email=grace@example.com", "commit", "-qm", "Total the cart"],
                   check=True)
    seeded = kl("seed", "--git", "--project", str(repo),
                env=on(laptop, HOME=str(ws.home), USER="tester"))
    assert seeded.returncode == 0, seeded.stderr
    assert "events stored 4" in seeded.stdout
    with (transport.Client(address, timeout_ms=5000, curve=control.remote(paths.Home(laptop)).curve,
                           to="storage") as storage,
          pytest.raises(control.RemoteError, match="not served over TCP")):
        storage.call("ping")
    context = zmq.Context()
    try:  # an allowed client's malformed requests are answered with why, one by one
        for payload, code in ((b"\xc1 not msgpack", protocol.ErrorCode.BAD_FRAME),
                              (protocol.pack({**protocol.request("ping"), "to": [1]}),
                               protocol.ErrorCode.UNKNOWN_OP)):
            sock = transport.make_socket(context, zmq.REQ, connect=address,
                                         curve=control.remote(paths.Home(laptop)).curve)
            sock.send(payload)
            assert sock.poll(5000)
            assert protocol.parse_reply(sock.recv())["error"]["code"] == code
            sock.close()
    finally:
        context.term()

    # Revoked: refused at once, though connected; the daemon runs on.
    kl("keys", "revoke", "tester", check=True)
    result, _ = ws.hook("kirolearn-claude-code", {**prompt, "cwd": str(ws.project),
                                                   "prompt": "one more"},
                        KIROLEARN_HOME=str(laptop), KIROLEARN_AUTOSTART="0")
    assert result.returncode == 0 and len(spool.waiting(paths.Home(laptop))) == 1
    assert len(stored_ids()) == 6  # the two prompts, the seeded commit's four events
    assert control.call("ingest", "ping", home=here())["role"] == "ingest"


def test_an_mcp_server_elsewhere_saves_and_recalls_through_the_daemon(server, machines,
                                                                      tmp_path):
    address, server_key = server
    laptop = new_machine(machines)
    ws = Workspace(tmp_path)
    allow(connect(laptop, address, server_key), "tester")

    async def scenario(client: Client) -> list:
        saved = await call(client, "save_observation", title="Deploys go through the canary",
                           summary="Every deploy runs on the canary pool for an hour first.",
                           observation_type="decision", concepts=["deploy", "canary"],
                           files_touched=["deploy/pipeline.yaml"], facts=[])
        found = await call(client, "search_memory", query="canary deploy")
        return [saved, found]

    saved, found = serve(ws, scenario, KIROLEARN_HOME=str(laptop))
    assert not saved[0] and not found[0], (saved, found)
    assert "Deploys go through the canary" in found[1]
    records = [json.loads(line) for line in kl("export", check=True).stdout.splitlines()
               if '"record_id"' in line]
    assert [r["namespace"] for r in records] == [ws.namespace]  # stored here, as hers
    assert not control.running(paths.Home(laptop))


def test_strangers_and_garbage_on_the_port_change_nothing(server, ctx):
    address, server_key = server
    assert set(gateway.REMOTE_OPS) == set(control.REMOTE_TARGETS)
    host, port = address[len("tcp://"):].rsplit(":", 1)
    event = make_event("prompt", "a stranger's event", namespace=NAMESPACE)
    request = protocol.pack({**protocol.request("put_event", {"event": event}), "to": "ingest"})
    stranger = keys.new_pair()
    attempts = [
        transport.Curve(stranger.public, stranger.secret, server_key.encode()),  # unknown key
        transport.Curve(stranger.public, stranger.secret, keys.new_pair().public),  # wrong server
    ]
    for curve in attempts:
        with (transport.Client(address, ctx, timeout_ms=1000, curve=curve, to="ingest") as c,
              pytest.raises(transport.Timeout)):
            c.call("put_event", {"event": event})
    for port_offset in (0, 1, 2):  # raw bytes, a plain ZeroMQ peer, at every port
        with socket.create_connection((host, int(port) + port_offset)) as raw:
            raw.sendall(os.urandom(4096) + request)
        plain = ctx.socket(zmq.DEALER)
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(f"tcp://{host}:{int(port) + port_offset}")
        # The refused handshake tears the connection down: a send then finds no peer
        # and would wait for one for ever; whether it goes out does not matter here.
        with contextlib.suppress(zmq.Again):
            plain.send_multipart([b"", request], flags=zmq.NOBLOCK)
        assert not plain.poll(500)
        plain.close()
    # The unknown key was said in the log (the others fail their handshake before they
    # are asked about), and nothing came in; the daemon still serves.
    wait_for(lambda: stranger.public.decode() in (here().log_dir / "gateway.log").read_text(),
             message="the stranger's key refused in the gateway's log")
    assert not stored_ids()
    assert all_up(json.loads(kl("status", "--json").stdout)["roles"])
    assert control.call("ingest", "put_event", {"event": event}, home=here())["status"] == "stored"


def test_a_hook_keeps_its_budget_when_the_daemon_elsewhere_is_gone(home, machines, tmp_path):
    kl("keys", "init", check=True)
    laptop = new_machine(machines)
    ws = Workspace(tmp_path)
    address = f"tcp://127.0.0.1:{free_ports()}"  # nothing listens there
    connect(laptop, address, keys.server_pair(paths.Home(home)).public.decode())
    result, _ = ws.hook("kirolearn-claude-code", {
        "hook_event_name": "UserPromptSubmit", "session_id": "s", "cwd": str(ws.project),
        "prompt": "is anyone there"}, KIROLEARN_HOME=str(laptop), KIROLEARN_AUTOSTART="0")
    assert result.returncode == 0 and result.stdout == ""
    assert len(spool.waiting(paths.Home(laptop))) == 1
    assert not control.running(paths.Home(laptop))  # nothing was started on the laptop
    doctor = kl("doctor", env=on(laptop, HOME=str(ws.home), USER="tester"))
    assert doctor.returncode == 1 and f"FAIL  connection: {address} does not answer" in (
        doctor.stdout) and "kirolearn keys add" in doctor.stdout
    refused = kl("start", env=on(laptop))
    assert refused.returncode == 1 and "kirolearn connect --off" in refused.stderr
    assert "connected to" in kl("connect", env=on(laptop), check=True).stdout
    kl("connect", "--off", env=on(laptop), check=True)
    assert "not connected" in kl("connect", env=on(laptop), check=True).stdout


# -- extraction workers elsewhere -------------------------------------------------------------

STALL = """#!/bin/sh
# A model that takes its time: it says it has the batch, then thinks ($2 seconds) and
# answers nothing a worker can use (so it falls back to its heuristic).
touch "$1"
sleep "$2"
"""


def test_a_worker_elsewhere_killed_mid_batch_leaves_the_batch_committed_once(
        store, home, machines, tmp_path):
    kl("keys", "init", check=True)  # the lease is the default's 300 s: silence says it
    address = f"tcp://127.0.0.1:{free_ports()}"
    kl("start", "--listen", address, "--extraction-workers", "0", check=True)
    server_key = keys.server_pair(paths.Home(home)).public.decode()
    try:
        stall = tmp_path / "stall"
        stall.write_text(STALL)
        stall.chmod(0o700)
        taken = tmp_path / "taken"
        slow, quick = new_machine(machines), new_machine(machines)
        (slow / "config.toml").write_text(
            f'[extraction]\nstrategy = "command"\nllm_command = "{stall} {taken} 60"\n'
            'llm_timeout_s = 120.0\n')
        for n, machine in enumerate((slow, quick)):
            pair = keys.client_pair(paths.Home(machine), True, keys.WORKER)
            keys.allow(f"worker-{n}", pair.public.decode(), paths.Home(home), keys.WORKER)

        def worker(machine: Path) -> subprocess.Popen:
            return subprocess.Popen(
                [*KL, "worker", "extraction", "--connect", address, "--server-key", server_key],
                env=on(machine), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                cwd="/tmp", start_new_session=True)

        first = worker(slow)
        for kind, text in (("prompt", "decided: the team store is postgres"),
                           ("session_summary", "we chose postgres because ops runs it")):
            event = make_event(kind, text, namespace=NAMESPACE)
            assert control.call("ingest", "put_event", {"event": event},
                                timeout_ms=5000, home=here())["status"] == "stored"
        wait_for(taken.exists, message="the worker elsewhere in the middle of its batch")
        os.killpg(first.pid, signal.SIGKILL)  # the worker and its model, mid-batch
        first.communicate()

        second = worker(quick)
        try:
            def done() -> tuple | None:
                with db.reading(db.location(here())) as conn:
                    return conn.execute("SELECT batch_id, attempts, record_count FROM"
                                        " extraction_batches WHERE state = 'done'").fetchone()
            _, attempts, count = wait_for(done, timeout=90, message="the batch committed")
        finally:
            second.send_signal(signal.SIGINT)
            _, log = second.communicate(timeout=20)
        assert second.returncode == 0, log
        with db.reading(db.location(here())) as conn:
            batches = [tuple(row) for row in conn.execute("SELECT state FROM extraction_batches")]
            records = [tuple(row) for row in conn.execute("SELECT strategy FROM memory_records")]
        assert batches == [("done",)] and attempts >= 1
        assert count >= 1 and records == [("heuristic",)] * count
        assert '"batches": 1' in log  # the second worker did it, once
        assert "its worker elsewhere has said nothing" in (here().log_dir / "storage.log"
                                                          ).read_text()
    finally:
        kl("stop", check=True)


# -- a team's memories ------------------------------------------------------------------------

@given(st.sampled_from(["GitHub.com", "git.example.org", "10.0.0.5"]),
       st.lists(st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True), min_size=1, max_size=3))
def test_every_form_of_a_remote_url_names_one_project(host, segments):
    path = "/".join(segments)
    forms = [f"git@{host}:{path}.git", f"https://{host}/{path}", f"https://{host}/{path}.git/",
             f"ssh://git@{host}:22/{path}.git", f"https://user:token@{host}/{path}"]
    assert {project.normal_origin(url) for url in forms} == {f"{host.lower()}/{path}"}
    assert project.normal_origin(f"/srv/git/{path}") is None


def test_a_search_takes_in_the_teams_namespaces_but_not_a_private_actors():
    alice, bob, carol = ("/actor/alice/project/p/", "/actor/bob/project/p/",
                         "/actor/carol+private/project/p/")
    known = [alice, bob, carol, "/actor/alice/project/q/"]
    assert project.shared_namespaces(alice, known) == [alice, bob]
    assert project.shared_namespaces(carol, known) == [carol, alice, bob]


def test_a_connected_machine_names_a_project_alike_wherever_it_is_cloned(home, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("USER", "alice")
    first = clone(tmp_path / "home" / "a" / "app", "git@git.example.org:t/app.git")
    second = clone(tmp_path / "home" / "b" / "app", "https://git.example.org/t/app/")
    plain = tmp_path / "home" / "notes"
    (plain / ".git").mkdir(parents=True)
    where = {"home": str(tmp_path / "home"), "override": ""}
    alone = [project.resolve_project(d, **where).project_id for d in (first, second, plain)]
    assert alone == [project.sha256_hex(str(d)) for d in (first, second, plain)]  # as ever
    paths.write_private(here().remote_file, json.dumps({"endpoint": "tcp://h:5555",
                                                         "server_key": "k"}).encode())
    team = [project.resolve_project(d, **where).project_id for d in (first, second, plain)]
    assert team == [project.sha256_hex("git:git.example.org/t/app")] * 2 + [alone[2]]
    assert project.resolve_project(tmp_path / "home", **where).project_id == (
        project.sha256_hex("global:alice"))
    assert project.actor_id() == "alice"
    paths.write_private(here().remote_file, json.dumps({"endpoint": "tcp://h:5555",
                                                         "server_key": "k",
                                                         "private": True}).encode())
    assert project.actor_id() == "alice+private"


def test_a_projects_memories_are_shared_by_the_team_unless_private(store, server, machines,
                                                                 tmp_path):
    address, server_key = server
    laptops = {name: new_machine(machines) for name in ("alice", "bob")}
    clones = {"alice": clone(tmp_path / "alice" / "src" / "app", "git@git.example.org:t/app.git"),
              "bob": clone(tmp_path / "bob" / "work" / "app", "https://git.example.org/t/app")}
    for name, laptop in laptops.items():
        allow(connect(laptop, address, server_key), name)
    team_project = project.sha256_hex("git:git.example.org/t/app")

    def hook(name: str, payload: dict) -> str:
        env = {**os.environ, "KIROLEARN_HOME": str(laptops[name]), "USER": name,
               "LOGNAME": name, "HOME": str(tmp_path / name)}
        done = subprocess.run([str(Path(sys.executable).parent / "kirolearn-claude-code")],
                              input=json.dumps({"session_id": f"{name}-1",
                                                "cwd": str(clones[name]), **payload}),
                              capture_output=True, text=True, env=env, cwd=clones[name],
                              timeout=30)
        assert done.returncode == 0
        return done.stdout

    def teach(name: str, actor: str, prompt: str, answer: str) -> None:
        """A turn of ``name``'s agent; its memory stored under ``actor``."""
        namespace = project.namespace_for(actor, team_project)
        hook(name, {"hook_event_name": "UserPromptSubmit", "prompt": prompt})
        event = make_event("session_summary", answer, namespace=namespace, actor_id=actor,
                           session_id=f"{name}-1")  # the turn's end, in its session
        control.call("ingest", "put_event", {"event": event}, home=paths.Home(laptops[name]),
                     timeout_ms=5000)
        wait_records(namespace)

    def found(name: str, actor: str, query: str) -> set[str]:
        reply = control.call("retrieval", "search", {
            "query": query, "namespace": project.namespace_for(actor, team_project),
            "records": True}, home=paths.Home(laptops[name]), timeout_ms=5000)
        return {project.parts(r["namespace"])[0] for r in reply["records"]}

    teach("alice", "alice", "how do we rotate the signing keys", "rotate signing keys with"
          " the vault rotate-keys job every quarter")
    # Bob's clone is elsewhere, by another URL: the same project, and Alice's memory is his.
    context = hook("bob", {"hook_event_name": "UserPromptSubmit",
                           "prompt": "how do we rotate the signing keys"})
    assert "rotate-keys" in context
    assert found("bob", "bob", "signing keys rotate") == {"alice"}

    # Bob keeps his own to himself: Alice does not find it; he still finds hers.
    kl("connect", address, "--server-key", server_key, "--private", env=on(laptops["bob"]),
       check=True)
    teach("bob", "bob+private", "where are the signing keys kept", "the signing keys are"
          " kept in vault under secret/signing, rotated by the vault rotate-keys job")
    assert found("alice", "alice", "vault signing keys") == {"alice"}
    assert found("bob", "bob+private", "vault signing keys") == {"alice", "bob+private"}

    stats = json.loads(kl("stats", "--json", check=True).stdout)
    assert {a["actor"] for a in stats["actors"]} == {"alice", "bob", "bob+private"}
    assert "by actor:" in kl("stats", check=True).stdout


def test_a_slow_worker_elsewhere_keeps_its_batch_while_it_says_it_is_working(
        home, machines, tmp_path):
    kl("keys", "init", check=True)
    address = f"tcp://127.0.0.1:{free_ports()}"
    kl("start", "--listen", address, "--extraction-workers", "0", check=True)
    try:
        stall, taken = tmp_path / "stall", tmp_path / "taken"
        stall.write_text(STALL)
        stall.chmod(0o700)
        slow = new_machine(machines)
        seconds = leases.REMOTE_SILENCE_S + 3  # longer than silence is allowed
        (slow / "config.toml").write_text(
            f'[extraction]\nstrategy = "command"\nllm_command = "{stall} {taken} {seconds}"\n'
            'llm_timeout_s = 120.0\n')
        pair = keys.client_pair(paths.Home(slow), True, keys.WORKER)
        keys.allow("slow", pair.public.decode(), paths.Home(home), keys.WORKER)
        worker = subprocess.Popen(
            [*KL, "worker", "extraction", "--connect", address, "--server-key",
             keys.server_pair(paths.Home(home)).public.decode()], env=on(slow),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd="/tmp")
        try:
            for kind, text in (("prompt", "why is the build slow"),
                               ("session_summary", "the build is slow: no cache for wheels")):
                event = make_event(kind, text, namespace=NAMESPACE)
                control.call("ingest", "put_event", {"event": event}, timeout_ms=5000, home=here())

            def done() -> tuple | None:
                with sqlite3.connect(here().db_path) as conn:
                    return conn.execute("SELECT attempts FROM extraction_batches"
                                        " WHERE state = 'done'").fetchone()
            assert wait_for(done, timeout=90, message="the slow batch committed") == (1,)
        finally:
            worker.send_signal(signal.SIGINT)
            worker.communicate(timeout=20)
        assert "said nothing" not in (here().log_dir / "storage.log").read_text()
    finally:
        kl("stop", check=True)


def test_the_printed_keys_add_takes_a_key_that_begins_with_a_dash(home):
    """Z85 has '-': the command `connect` prints for the host must still read it as a key."""
    keys.init_server(paths.Home(home))
    dashed = next(pair for pair in iter(keys.new_pair, None) if pair.public.startswith(b"-"))
    allow(f"kirolearn keys add -- dash '{dashed.public.decode()}'", "dash")
    assert keys.allowed(paths.Home(home)) == {"dash": dashed.public}
