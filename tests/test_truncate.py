"""Truncation in the shims (512 KiB per body) and the events they build, for any input."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kirolearn import contract, project
from kirolearn.shims import common

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=400)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | text,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(text, inner, max_size=6),
    max_leaves=30)
bodies = st.one_of(
    st.builds(lambda c: {"type": "text", "content": c}, text),
    st.builds(lambda turns: {"type": "message", "turns": turns}, st.lists(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                               "content": text}), min_size=1, max_size=6)),
    st.builds(lambda d: {"type": "json", "data": d}, json_value),
    st.builds(lambda name, inp, result: {"type": "json", "data": {
        "tool_name": name, "tool_input": inp,
        "tool_response": {"success": True, "result": result}}},
        st.sampled_from(["fs_read", "Bash"]), json_value, json_value),
)
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@FAST
@given(body=bodies, limit=st.integers(200, 3000))
def test_truncated_bodies_fit_and_stay_valid(body, limit):
    cut = contract.truncate_body(body, limit)
    assert cut["type"] == body["type"]
    if contract.body_size(body) <= limit:
        assert cut is body  # what fits is untouched
        return
    assert contract.body_size(cut) <= limit
    assert contract.TRUNCATION_MARK.strip() in contract.canonical_json(cut)
    event = contract.make_event("note", cut, namespace="/actor/a/project/p/", actor_id="a",
                                session_id="s", surface="kiro-cli", version="1", client_id="h")
    contract.validate_event(event)
    if body["type"] == "message":
        assert 1 <= len(cut["turns"]) <= len(body["turns"])
        assert cut["turns"][:-1] == body["turns"][:len(cut["turns"]) - 1]  # cut from the end


@FAST
@given(name=st.sampled_from(["fs_read", "Bash", "execute_bash"]), command=text,
       result=st.text(min_size=1, max_size=50).map(lambda s: s * 5000))
def test_tool_results_are_cut_first_and_the_tool_survives(name, command, result):
    body = common.tool_body(name, {"command": command}, {"success": True, "result": result})
    cut = contract.truncate_body(body, 4096)
    assert contract.body_size(cut) <= 4096
    assert cut["data"]["tool_name"] == name
    assert cut["data"]["tool_input"] == {"command": command}
    kept = cut["data"]["tool_response"]["result"]
    assert kept.endswith(contract.TRUNCATION_MARK) and result.startswith(
        kept.removesuffix(contract.TRUNCATION_MARK))


def test_the_real_limit_is_512_kib():
    big = {"type": "text", "content": "x" * (600 * 1024)}
    cut = contract.truncate_body(big)
    assert contract.body_size(cut) <= 512 * 1024 < contract.body_size(big)
    assert cut["content"].endswith(" [truncated by kirolearn]")
    huge_leaf = common.tool_body("Write", {"file_path": "a.py", "content": "é" * 400_000},
                                 {"success": True})
    cut = contract.truncate_body(huge_leaf)
    assert contract.body_size(cut) <= 512 * 1024
    assert cut["data"]["tool_name"] == "Write" and cut["data"]["tool_input"]["file_path"] == "a.py"
    many = {"type": "json", "data": list(range(200_000))}
    cut = contract.truncate_body(many)
    assert contract.body_size(cut) <= 512 * 1024 and "_truncated" in cut["data"]


@pytest.fixture(scope="module")
def user_home(tmp_path_factory):
    """A home with one git project (HOME points at it while the tests run)."""
    home = tmp_path_factory.mktemp("home")
    (home / "proj" / ".git").mkdir(parents=True)
    (home / "proj" / "a" / "b").mkdir(parents=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.delenv("KIROLEARN_PROJECT", raising=False)
        yield home


@FAST
@given(body=bodies, where=st.sampled_from(["proj", "proj/a", "proj/a/b"]))
def test_a_shim_builds_valid_events_for_any_body(user_home, body, where):
    shim = common.Shim("claude-code", str(user_home / where))
    event = shim.event("tool_use", body, "session", contract.new_ulid())
    contract.validate_event(event)
    assert event["content_hash"] == contract.content_hash(event["body"])
    assert event["source"]["project_path"] == str(user_home / "proj")
    assert event["namespace"] == project.resolve_project(user_home / "proj").namespace(
        shim.actor)
