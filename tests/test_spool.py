"""No event is lost because the daemon was down, slow, or answered late."""

from __future__ import annotations

import json
import os
import signal

import pytest
from helpers.cli import all_up, here, kl, status
from helpers.events import stored_events, wait_events
from helpers.waits import wait_for
from helpers.workspace import Workspace

from kirolearn import paths, spool


@pytest.fixture
def ws(tmp_path):
    return Workspace(tmp_path)


HOOKS = [  # one prompt per surface: the hook that waits longest
    ("kirolearn-kiro-cli", {"hook_event_name": "userPromptSubmit", "prompt": "first"}, ()),
    ("kirolearn-kiro-ide", None, ("promptSubmit",)),
    ("kirolearn-claude-code", {"hook_event_name": "UserPromptSubmit", "session_id": "s1",
                               "prompt": "third"}, ()),
]


def spooled() -> list[dict]:
    return [json.loads(p.read_text()) for p in spool.waiting(here())]


def test_daemon_down_events_wait_in_the_spool_and_are_stored_once(home, ws):
    for script, payload, args in HOOKS:
        if payload is not None:
            payload = {**payload, "cwd": str(ws.project)}
        # It never waits for the daemon that is not there (how fast it returns,
        # benchmarks/shim.py measures).
        result, _ = ws.hook(script, payload, *args, KIROLEARN_AUTOSTART="0",
                            USER_PROMPT="second")
        assert result.returncode == 0
        assert result.stdout == "" and result.stderr == ""
    waiting = spooled()
    assert [e["body"]["content"] for e in waiting] == ["first", "second", "third"]
    assert all(e["namespace"] == ws.namespace for e in waiting)
    assert oct(here().spool_dir.stat().st_mode & 0o777) == "0o700"
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in spool.waiting(here()))
    assert not here().daemon_running()  # autostart was off

    kl("start", check=True)
    try:
        events = wait_events(3)
        assert sorted(e["event_id"] for e in events) == sorted(e["event_id"] for e in waiting)
        # A spool file goes once storage has committed its event (event ids are unique).
        wait_for(lambda: not spool.waiting(here()), message="the spool to drain")
        assert len(stored_events()) == 3  # once each
    finally:
        kl("stop", check=True)


def test_a_hook_starts_the_daemon_when_it_is_down(home, ws):
    payload = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "prompt": "hello",
               "cwd": str(ws.project)}
    result, _ = ws.hook("kirolearn-claude-code", payload)
    # It did not wait for the start: when it returned, its event was still in the spool,
    # which the daemon drains once it is up (an order of events, where a time bound
    # fails on a busy machine).
    waiting = spool.waiting(here())
    assert result.returncode == 0 and result.stdout == ""
    assert len(waiting) == 1
    try:
        wait_for(here().daemon_running, timeout=20, message="the daemon to start")
        events = wait_events(1, timeout=20)
        assert [e["body"]["content"] for e in events] == ["hello"]
        wait_for(lambda: all_up(status()["roles"]), timeout=20,
                 message="every role RUNNING")
        wait_for(lambda: not spool.waiting(here()), message="the spool to drain")
    finally:
        wait_for(lambda: kl("stop").returncode == 0 and not here().daemon_running(),
                 timeout=30, message="the daemon to stop")


def test_a_late_acknowledgement_stores_the_event_once(daemon, ws):
    """Ingest frozen: the shim gives up within its budget and spools the event, which
    ingest also takes once it runs again. Storage keeps one copy."""
    ingest = next(r for r in status()["roles"] if r["name"] == "ingest")
    os.kill(ingest["pid"], signal.SIGSTOP)
    try:
        payload = {"hook_event_name": "postToolUse", "cwd": str(ws.project),
                   "tool_name": "fs_read", "tool_input": {"path": "a.py"},
                   "tool_response": {"success": True, "result": ["x"]}}
        result, _ = ws.hook("kirolearn-kiro-cli", payload)  # returns: it gave up
        assert result.returncode == 0 and result.stdout == ""
        assert len(spooled()) == 1
    finally:
        os.kill(ingest["pid"], signal.SIGCONT)
    wait_for(lambda: not spool.waiting(here()), message="the spool to drain")
    events = wait_events(1)
    assert len(stored_events()) == 1  # the spooled copy and a late one share an event id
    assert events[0]["body"]["data"]["tool_name"] == "fs_read"


def test_a_bad_spool_file_is_set_aside_and_the_rest_stored(home, ws):
    directory = paths.ensure_private_dir(here().spool_dir)
    (directory / "01ARZ3NDEKTSV4RRFFQ69G5FAV.json").write_text("{not json")
    (directory / "01ARZ3NDEKTSV4RRFFQ69G5FAW.json").write_text('{"kind": "prompt"}')
    result, _ = ws.hook("kirolearn-kiro-cli", {"hook_event_name": "stop", "cwd": str(ws.project),
                                               "assistant_response": "ok"},
                        KIROLEARN_AUTOSTART="0")
    assert result.returncode == 0
    kl("start", check=True)
    try:
        wait_for(lambda: not spool.waiting(here()), message="the spool to drain")
        assert [e["body"]["content"] for e in stored_events()] == ["ok"]
        quarantine = here().quarantine_dir
        rejected = sorted(p.name for p in quarantine.iterdir())
        assert rejected == ["01ARZ3NDEKTSV4RRFFQ69G5FAV.json",
                            "01ARZ3NDEKTSV4RRFFQ69G5FAV.json.reason",
                            "01ARZ3NDEKTSV4RRFFQ69G5FAW.json",
                            "01ARZ3NDEKTSV4RRFFQ69G5FAW.json.reason"]
        reason = quarantine / "01ARZ3NDEKTSV4RRFFQ69G5FAV.json.reason"
        assert "unreadable spool file" in reason.read_text()
        doctor = kl("doctor")
        assert "note  quarantine: 2 item(s)" in doctor.stdout
        assert "01ARZ3NDEKTSV4RRFFQ69G5FAV.json: event: unreadable spool file" in doctor.stdout
        assert all_up(status()["roles"])
    finally:
        kl("stop", check=True)
