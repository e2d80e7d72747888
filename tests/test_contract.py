"""Wire contract v1: round trips, field-level errors, ULIDs, size cap."""

from __future__ import annotations

import json

import msgpack
import pytest
import ulid as python_ulid
from helpers.events import NAMESPACE, make_event
from hypothesis import given
from hypothesis import strategies as st

from kirolearn import contract

text = st.text(max_size=200)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=20,
)
bodies = st.one_of(
    st.builds(lambda c: {"type": "text", "content": c}, text),
    st.builds(lambda turns: {"type": "message", "turns": turns}, st.lists(
        st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from(["user", "assistant"]),
                  text), min_size=1, max_size=4)),
    st.builds(lambda d: {"type": "json", "data": d}, json_values),
)


@given(kind=st.sampled_from(contract.EVENT_KINDS), body=bodies,
       session=st.text(min_size=1, max_size=128))
def test_valid_events_survive_msgpack_and_json_round_trips(kind, body, session):
    event = contract.make_event(kind, body, namespace=NAMESPACE, actor_id="me",
                                session_id=session, surface="kiro-cli", version="1",
                                client_id="host", project_path="/p")
    checked = contract.validate_event(event)
    assert checked.body_json == contract.canonical_json(event["body"])
    for decoded in (msgpack.unpackb(msgpack.packb(event), raw=False),
                    json.loads(json.dumps(event))):
        assert decoded == event
        contract.validate_event(decoded)
        assert contract.content_hash(decoded["body"]) == event["content_hash"]


@given(body=bodies)
def test_content_hash_is_independent_of_key_order(body):
    reordered = dict(reversed(list(body.items())))
    assert contract.content_hash(body) == contract.content_hash(reordered)


def _fields(exc: contract.ContractError) -> set[str]:
    return {e.field for e in exc.errors}


@pytest.mark.parametrize("change, field", [
    ({"event_id": "not-a-ulid"}, "event_id"),
    ({"event_id": "01ARZ3NDEKTSV4RRFFQ69G5FAI"}, "event_id"),  # I is not Crockford
    ({"event_id": "81ARZ3NDEKTSV4RRFFQ69G5FAV"}, "event_id"),  # overflows 128 bits
    ({"kind": "chat"}, "kind"),
    ({"body": {"type": "text"}}, "body.content"),
    ({"body": {"type": "message", "turns": []}}, "body.turns"),
    ({"body": {"type": "message", "turns": [{"role": "user"}]}}, "body.turns[0].content"),
    ({"body": {"type": "json"}}, "body.data"),
    ({"body": {"type": "xml", "content": "<a/>"}}, "body.type"),
    ({"body": "just text"}, "body"),
    ({"namespace": "/actor/me/"}, "namespace"),
    ({"namespace": "/actor/a/b/project/c/"}, "namespace"),
    ({"actor_id": ""}, "actor_id"),
    ({"session_id": "x" * 129}, "session_id"),
    ({"valid_time": "2026-01-01T10:00:00"}, "valid_time"),
    ({"valid_time": "yesterday"}, "valid_time"),
    ({"valid_time": 1700000000}, "valid_time"),
    ({"source": {"surface": "Kiro CLI!", "version": "1", "client_id": "h"}}, "source.surface"),
    ({"source": {"surface": "kiro-cli", "client_id": "h"}}, "source.version"),
    ({"schema_version": 2}, "schema_version"),
    ({"schema_version": True}, "schema_version"),
    ({"content_hash": "md5:abc"}, "content_hash"),
    ({"parent_event_id": "nope"}, "parent_event_id"),
    ({"extra": 1}, "event"),
    # JSON's "\ud800" decodes to a lone surrogate, which cannot be stored as UTF-8
    ({"body": {"type": "text", "content": "a\ud800"}}, "body"),
    ({"actor_id": "me\udfff"}, "actor_id"),
    ({"namespace": "/actor/\ud800/project/x/"}, "namespace"),
    ({"source": {"surface": "kiro-cli", "version": "1", "client_id": "\ud800"}},
     "source.client_id"),
])
def test_each_violation_names_its_field(change, field):
    event = make_event()
    event.update(change)
    with pytest.raises(contract.ContractError) as info:
        contract.validate_event(event)
    assert field in _fields(info.value), info.value.errors


def test_all_violations_are_reported_at_once():
    with pytest.raises(contract.ContractError) as info:
        contract.validate_event({"kind": "x", "schema_version": 9})
    assert {"event_id", "kind", "body", "namespace", "actor_id", "session_id", "valid_time",
            "source", "schema_version"} <= _fields(info.value)
    with pytest.raises(contract.ContractError):
        contract.validate_event(["not", "an", "object"])


def test_body_over_one_mebibyte_is_rejected_as_too_large():
    event = make_event(content="x" * (contract.MAX_BODY_BYTES))
    with pytest.raises(contract.ContractError) as info:
        contract.validate_event(event)
    assert [e.code for e in info.value.errors] == ["too_large"]
    contract.validate_event(make_event(content="x" * (contract.MAX_BODY_BYTES - 100)))


def test_valid_time_accepts_z_and_offsets():
    for value, ms in (("2026-01-31T09:30:00Z", 1769851800000),
                      ("2026-01-31T09:30:00.123+05:30", 1769851800123 - 5.5 * 3600 * 1000)):
        assert contract.validate_event(make_event(valid_time=value)).valid_ms == ms


def test_our_ulids_read_back_in_python_ulid_and_vice_versa():
    for _ in range(200):
        ours = contract.new_ulid()
        theirs = python_ulid.ULID.from_str(ours)
        assert str(theirs) == ours
        assert int(theirs.timestamp * 1000) == contract.ulid_timestamp_ms(ours)
        other = str(python_ulid.ULID())
        assert contract.is_ulid(other)
        assert contract.ulid_timestamp_ms(other) == int(
            python_ulid.ULID.from_str(other).timestamp * 1000)


@given(st.integers(0, 2**48 - 1))
def test_ulid_timestamp_round_trip(ms):
    value = contract.new_ulid(ms)
    assert contract.is_ulid(value)
    assert contract.ulid_timestamp_ms(value) == ms
    assert python_ulid.ULID.from_str(value).milliseconds == ms


def test_ulids_sort_by_time():
    early, late = contract.new_ulid(1_000), contract.new_ulid(2_000)
    assert early < late


def valid_record(**change) -> dict:
    record = {
        "record_id": contract.new_record_id(), "namespace": NAMESPACE, "title": "t",
        "summary": "s", "facts": ["f"], "concepts": ["c"], "files_touched": ["a.py"],
        "observation_type": "decision", "strategy": "heuristic",
        "source_event_ids": [contract.new_ulid()], "created_at": contract.now_iso(),
    }
    record.update(change)
    return record


@pytest.mark.parametrize("change, field", [
    ({"record_id": contract.new_ulid()}, "record_id"),
    ({"title": ""}, "title"),
    ({"title": "x" * 201}, "title"),
    ({"summary": "x" * 4001}, "summary"),
    ({"facts": ["x" * 501]}, "facts[0]"),
    ({"observation_type": "idea"}, "observation_type"),
    ({"source_event_ids": []}, "source_event_ids"),
    ({"created_at": "now"}, "created_at"),
])
def test_record_violations_name_their_field(change, field):
    contract.validate_record(valid_record())
    with pytest.raises(contract.ContractError) as info:
        contract.validate_record(valid_record(**change))
    assert field in _fields(info.value)
