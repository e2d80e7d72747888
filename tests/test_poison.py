"""Inputs that must never take the daemon down: deep, wide and strange payloads, poison
spool files and import lines, fuzzed frames. After each, ingest answers, every role is
still the process it was, and every acknowledged event is stored."""

from __future__ import annotations

import json

import msgpack
import pytest
import zmq
from helpers.cli import all_up, here, kl, status
from helpers.events import make_event, stored_events
from helpers.waits import wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kirolearn import contract, paths, protocol, spool, transport
from kirolearn.roles.ingest import Ingest
from kirolearn.roles.retrieval import Retrieval
from kirolearn.roles.storage import Storage

DEEP = f"is nested more than {contract.MAX_DEPTH} levels deep"


def deep(levels: int, leaf: object = "token=abcdefgh123 https://user:pw@example.com") -> object:
    """A value nested ``levels`` deep, with words the privacy scrub looks for at the bottom."""
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def tool_use(data: object, content: str = "") -> dict:
    return make_event("tool_use", body={"type": "json", "data": data}, session_id=content or "s")


def pids() -> dict[str, int]:
    return {r["name"]: r["pid"] for r in status()["roles"]}


def test_a_deep_payload_is_refused_with_its_reason_and_the_rest_stored(ingest, daemon):
    before = pids()
    after = make_event(content="stored after the poison")
    lines = [json.dumps(tool_use(deep(600))), "[" * 5000 + "]" * 5000,
             json.dumps(tool_use({"k": deep(contract.MAX_DEPTH - 3)})), json.dumps(after)]
    results = ingest.call("put_events", {"lines": lines})["results"]
    assert [r["status"] for r in results] == ["rejected", "rejected", "stored", "stored"]
    assert DEEP in results[0]["reason"] and DEEP in results[1]["reason"]
    with pytest.raises(protocol.RemoteError) as refused:  # one event, through msgpack
        ingest.call("put_event", {"event": tool_use(deep(200))})
    assert refused.value.code == protocol.ErrorCode.INVALID_EVENT and DEEP in refused.value.reason
    still = ingest.call("put_event", {"event": make_event(content="still here")})
    assert still["status"] == "stored"
    assert pids() == before


def test_a_poison_spool_file_is_quarantined_and_the_rest_stored(home):
    directory = paths.ensure_private_dir(here().spool_dir)
    poison = tool_use(deep(600))
    (directory / f"{poison['event_id']}.json").write_text(json.dumps(poison))
    (directory / "01ARZ3NDEKTSV4RRFFQ69G5FAV.json").write_text("[" * 5000 + "]" * 5000)
    spool.write(make_event(content="delivered late"), here())
    kl("start", check=True)
    try:
        wait_for(lambda: not spool.waiting(here()), message="the spool to drain")
        assert [e["body"]["content"] for e in stored_events()] == ["delivered late"]
        kept = sorted(p.name for p in here().quarantine_dir.iterdir())
        assert kept == sorted([f"{poison['event_id']}.json", f"{poison['event_id']}.json.reason",
                               "01ARZ3NDEKTSV4RRFFQ69G5FAV.json",
                               "01ARZ3NDEKTSV4RRFFQ69G5FAV.json.reason"])
        assert DEEP in (here().quarantine_dir / f"{poison['event_id']}.json.reason").read_text()
        assert all_up(status()["roles"])
        restarted = kl("restart")  # a start that finds the quarantine still comes up
        assert restarted.returncode == 0, restarted.stderr
        doctor = kl("doctor")
        assert "ok    roles: all RUNNING" in doctor.stdout
        assert f"{poison['event_id']}.json: {DEEP}" in doctor.stdout.replace("event: ", "")
    finally:
        kl("stop", check=True)


def test_an_import_with_poison_lines_stores_every_other_line(daemon, tmp_path):
    events = [make_event(content=f"line {n}") for n in range(2000)]
    lines = [json.dumps(e) for e in events]
    lines[699] = "[" * 5000 + "]" * 5000
    lines[1399] = json.dumps(tool_use(deep(600)))
    source = tmp_path / "history.jsonl"
    source.write_text("\n".join(lines) + "\n")
    result = kl("import", str(source))
    assert result.stdout.strip() == "stored 1998, duplicate 0, rejected 2", result.stderr
    assert f"line 700: rejected: event: {DEEP}" in result.stderr
    [kept] = here().quarantine_dir.glob("import-*.jsonl")
    assert str(kept) in result.stderr
    quarantined = [json.loads(line) for line in kept.read_text().splitlines()]
    # kept as they came, less their secrets (the deep one holds a token and a password)
    assert [(q["line"], q["text"]) for q in quarantined] == [
        (700, lines[699]), (1400, lines[1399].replace("abcdefgh123", "[REDACTED:token]")
                            .replace(":pw@", ":[REDACTED:basic-auth-credentials]@"))]
    assert all(DEEP in q["reason"] for q in quarantined)


def test_mixed_map_keys_are_refused_and_hold_up_nothing(daemon, ctx):
    """A valid event, then one whose map keys are bytes and strings: both answered at
    once, the first stored."""
    good = make_event(content="queued before the bad one")
    bad = {**make_event(content="bad"), b"event_id": b"x"}
    sockets = []
    for event in (good, bad):
        sock = transport.make_socket(ctx, zmq.REQ, connect=here().endpoint("ingest"))
        sock.send(msgpack.packb(protocol.request("put_event", {"event": event}),
                                use_bin_type=True))
        sockets.append(sock)
    replies = []
    for sock in sockets:
        assert sock.poll(2000), "a request was not answered at once"
        replies.append(protocol.parse_reply(sock.recv()))
        sock.close(linger=0)
    assert replies[0]["ok"] and replies[0]["body"]["status"] == "stored"
    assert not replies[1]["ok"] and "map key that is not a string" in replies[1]["error"]["reason"]


# -- properties, over one daemon ---------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=8) | st.dictionaries(st.text(), children,
                                                                       max_size=8),
    max_leaves=200)
deep_values = st.builds(deep, st.integers(0, 300), json_values)


@pytest.fixture(scope="module")
def ingest_client(module_daemon):
    client = transport.Client(here().endpoint("ingest"), timeout_ms=10_000)
    yield client
    client.close()


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=json_values | deep_values)
def test_any_json_a_hook_sends_is_stored_or_refused_with_a_reason(ingest_client, data):
    event = tool_use(data)
    [result] = ingest_client.call("put_events", {"lines": [json.dumps(event)]})["results"]
    if result["status"] == "rejected":
        assert result["reason"] and result["errors"]
    else:
        assert result["status"] in ("stored", "duplicate")
    assert ingest_client.call("ping")["role"] == "ingest"


SERVICE_OPS = sorted({name for role in (Ingest, Storage, Retrieval) for klass in role.__mro__
                      for handler in vars(klass).values()
                      for socket, name in getattr(handler, "ops", ()) if socket == "service"})
msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | st.text()
    | st.binary(max_size=8),
    lambda children: st.lists(children, max_size=8) | st.dictionaries(
        st.text(max_size=12) | st.binary(max_size=4), children, max_size=8),
    max_leaves=100)
frames = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda op, body, rid: msgpack.packb({"v": 1, "id": rid, "op": op, "body": body},
                                                  use_bin_type=True),
              st.sampled_from(SERVICE_OPS) | st.text(max_size=10),
              st.dictionaries(st.text(max_size=12) | st.binary(max_size=4), msgpack_values,
                              max_size=6),
              st.text(max_size=8) | st.binary(max_size=8)),
)


@pytest.fixture(scope="module")
def raw_sockets(module_daemon):
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(endpoint=st.sampled_from(["ingest", "storage", "retrieval"]), frame=frames)
def test_every_fuzzed_request_is_answered(raw_sockets, endpoint, frame):
    sock = transport.make_socket(raw_sockets, zmq.REQ, connect=here().endpoint(endpoint))
    try:
        sock.send(frame)
        assert sock.poll(5000), f"{endpoint} did not answer {frame[:80]!r}"
        protocol.parse_reply(sock.recv())
    finally:
        sock.close(linger=0)


def test_after_the_fuzzing_every_role_is_the_process_it_was(module_daemon, ingest_client):
    started = {r["name"]: r["restarts"] for r in status()["roles"]}
    assert all_up(status()["roles"])
    assert all(count == 0 for count in started.values()), started
    assert ingest_client.call("put_event", {"event": make_event(content="after")})["status"] in (
        "stored", "duplicate")
