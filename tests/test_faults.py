"""Faults a real machine produces: roles killed mid-import, a full disk, a read-only file
system, a deleted WAL. Every acknowledged event is stored once; a fault is said at once,
shown by status and doctor, and mended by itself once fixed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from helpers.cli import KL, all_up, here, kl, status
from helpers.events import make_event, stored_events
from helpers.waits import wait_for, wait_for_count
from helpers.workspace import Workspace

from kirolearn import db, importer, paths, protocol, spool, transport

EVENTS = 12_000


def _pid(role: str) -> int:
    return next(r["pid"] for r in status()["roles"] if r["role"] == role)


def _stored_count(home) -> int:
    with db.reading(db.location(paths.Home(home))) as conn:
        return conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]


@pytest.mark.timeout(600)  # its waits fail once the import stops moving, not at a time
def test_sigkill_storage_and_ingest_mid_import_loses_nothing(store, daemon, tmp_path):
    events = [make_event("tool_use", f"src/module_{i}.py", session_id=f"s{i % 7}")
              for i in range(EVENTS)]
    source = tmp_path / "events.jsonl"
    source.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    importer = subprocess.Popen([*KL, "import", str(source)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd="/tmp")
    killed = []
    try:
        for role, after in (("storage", EVENTS // 5), ("ingest", EVENTS // 2)):
            wait_for_count(lambda: _stored_count(daemon), after, interval=0.01,
                           message="events stored")
            pid = _pid(role)
            os.kill(pid, signal.SIGKILL)
            killed.append((role, pid))
            wait_for(lambda role=role, pid=pid: next(
                (r for r in status()["roles"] if r["role"] == role and r["state"] == "RUNNING"
                 and r["pid"] != pid), None), timeout=30, message=f"{role} to be restarted")
        out, err = importer.communicate(timeout=180)
    finally:  # a test that gave up leaves no import behind to trouble the next
        if importer.poll() is None:
            importer.kill()
            importer.communicate()  # its pipes closed, not left to a later test
    assert importer.returncode == 0, err
    # Chunks were retried across the restarts: what their first attempt stored is counted
    # as stored, not as a duplicate.
    assert out.strip() == f"stored {EVENTS}, duplicate 0, rejected 0", err
    with db.reading(db.location(here())) as conn:
        ids = [row[0] for row in conn.execute("SELECT event_id FROM events")]
    assert sorted(ids) == sorted(e["event_id"] for e in events)  # each exactly once
    restarts = {r["role"]: r["restarts"] for r in status()["roles"]}
    assert restarts["storage"] == 1 and restarts["ingest"] == 1, (restarts, killed)


def test_a_chunk_sent_again_is_prepared_once(daemon, ctx):
    """An import whose wait ran out sends its chunk again while ingest still works on
    it: the copies are answered with the first's answer, never scrubbed again (each
    copy's scrub would pile up behind the last)."""
    lines = [json.dumps(make_event("prompt", f"step {i}")) for i in range(300)]
    storage = _pid("storage")
    os.kill(storage, signal.SIGSTOP)
    try:
        with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=300) as impatient:
            for _ in range(3):
                with pytest.raises(transport.Timeout):
                    impatient.call("put_events", {"lines": lines, "chunk": "run:1"})
    finally:
        os.kill(storage, signal.SIGCONT)
    with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=30_000) as patient:
        results = patient.call("put_events", {"lines": lines, "chunk": "run:1"})["results"]
    assert [r["status"] for r in results] == ["stored"] * len(lines)
    with transport.Client(here().endpoint("ingest.ctl"), ctx) as control:
        assert control.call("ping")["accepted"] == len(lines)
    with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=30_000) as another:
        again = another.call("put_events", {"lines": lines, "chunk": "other:1"})["results"]
    assert [r["status"] for r in again] == ["duplicate"] * len(lines)  # another run's


def test_an_import_waits_for_a_busy_daemon_and_says_so(daemon, tmp_path):
    """Storage stopped for longer than a chunk's answer may take: the import waits, its
    progress says why, and it finishes once storage goes on."""
    lines = [json.dumps(make_event("prompt", f"step {i}")) for i in range(2000)]
    seen: list[str] = []
    storage = _pid("storage")
    os.kill(storage, signal.SIGSTOP)
    try:
        waiting = threading.Thread(target=lambda: (
            wait_for(lambda: seen, timeout=60, message="the import to say it waits"),
            os.kill(storage, signal.SIGCONT)))
        waiting.start()
        report = importer.import_lines(
            lines, here(), progress=lambda done: done.waiting and seen.append(done.waiting))
        waiting.join()
    finally:
        os.kill(storage, signal.SIGCONT)
    assert report.counts == {"stored": 2000, "duplicate": 0, "rejected": 0, "skipped": 0}
    assert seen[0].startswith("waiting for ingest (busy or restarting: ")
    assert _stored_count(daemon) == 2000


@pytest.mark.timeout(300)  # two imports, one waiting for a stopped storage: minutes under load
def test_an_import_that_waited_its_time_stops_and_goes_on_when_run_again(daemon, tmp_path):
    """Storage is stopped during an import for longer than ``import.wait_s``: the lines
    ingest answers alone (a first chunk of invalid events, rejected at the door) are
    answered, the rest wait; the import stops, saying what was answered and where; run
    again, it sends only the rest."""
    invalid = [{**make_event("prompt", f"bad {i}"), "kind": "nonsense"}
               for i in range(importer.CHUNK_LINES)]
    events = [make_event("prompt", f"step {i}") for i in range(1500)]
    source = tmp_path / "events.jsonl"
    source.write_text("\n".join(json.dumps(e) for e in invalid + events) + "\n")
    # Time enough for ingest to answer the first chunk on a busy machine: it prepares
    # an import's chunks on a thread of lower priority.
    env = {**os.environ, "KIROLEARN_IMPORT_WAIT_S": "10"}
    with source.open("rb") as file:
        key = importer.file_key(file)
    storage = _pid("storage")
    os.kill(storage, signal.SIGSTOP)
    try:
        run = subprocess.run([*KL, "import", str(source)], capture_output=True, text=True,
                             cwd="/tmp", env=env, timeout=120)
    finally:
        os.kill(storage, signal.SIGCONT)
    err = run.stderr
    assert run.returncode == 1, err
    assert "ingest did not answer for 10 s" in err, err
    assert f"0 line(s) stored, 0 duplicate, {len(invalid)} rejected" in err, err
    assert "run the same command again to go on after it" in err
    answered = importer.resume_point(here(), key)
    assert answered == len(invalid), err
    assert f"every line up to line {answered} was answered" in err

    again = kl("import", str(source), check=True, timeout=300)
    assert f"going on after line {answered}" in again.stderr
    assert f"skipped {answered} (sent by the earlier run)" in again.stdout
    with db.reading(db.location(here())) as conn:
        ids = [row[0] for row in conn.execute("SELECT event_id FROM events")]
    assert sorted(ids) == sorted(e["event_id"] for e in events)  # each exactly once
    assert importer.resume_point(here(), key) == 0  # done: a later run sends it all again


# -- the disk and the file fail under a running daemon ---------------------------------------

@pytest.fixture
def small_disk(home):
    """The home on a real 8 MiB file system of its own (tmpfs), that can fill up."""
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs",
                              str(home)], capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"a file system of its own needs mount rights: {mounted.stderr.strip()}")
    try:
        yield home
    finally:
        subprocess.run(["umount", "-l", str(home)], check=True)


def fill(path) -> None:
    """Fill the file system holding path to the last byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (65536, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)


FAULTS = {
    "full": (lambda home: fill(home / "filler"), lambda home: (home / "filler").unlink(),
             "is full"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_disk_fault_is_said_at_once_and_mended_by_itself(small_disk, ctx, fault):
    make, mend, words = FAULTS[fault]
    kl("start", check=True)
    try:
        with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as ingest:
            before = make_event(content="stored before the fault")
            assert ingest.call("put_event", {"event": before})["status"] == "stored"
            make(small_disk)
            with pytest.raises(protocol.RemoteError) as refused:  # said, not timed out
                ingest.call("put_event", {"event": make_event(content="during the fault")})
            assert refused.value.code == protocol.ErrorCode.UNAVAILABLE
            assert "storage cannot write" in refused.value.reason and words in refused.value.reason
            shown = status()
            assert shown["fault"] and words in shown["fault"]["reason"]
            assert all_up(shown["roles"])
            doctor = kl("doctor")
            assert doctor.returncode == 1 and "FAIL  writes: storage cannot write" in doctor.stdout
            mend(small_disk)
            after = make_event(content="stored after the fault")
            wait_for(lambda: _stored(ingest, after), timeout=30, message="writes to resume")
            assert status()["fault"] is None
        contents = [e["body"]["content"] for e in stored_events()]
        assert contents == ["stored before the fault", "stored after the fault"]
    finally:
        kl("stop", check=True)


def test_a_hook_while_the_disk_is_full_spools_its_event_elsewhere_and_it_is_stored_later(
        small_disk, tmp_path, monkeypatch):
    """The home's disk full: storage cannot write and the home's spool cannot take the
    event either; it goes to the spool on another file system, and is stored once the
    disk has room again."""
    monkeypatch.setenv("KIROLEARN_INGEST_SPOOL_INTERVAL_S", "0.5")
    shm = tmp_path / "runtime"
    shm.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(shm))
    ws = Workspace(tmp_path)
    kl("start", check=True)
    try:
        fill(small_disk / "filler")
        for n in range(5):
            hooked, _ = ws.hook("kirolearn-claude-code", {
                "session_id": "s-full", "transcript_path": "/x/s.jsonl", "cwd": str(ws.project),
                "hook_event_name": "UserPromptSubmit", "prompt": f"prompt {n} on a full disk"})
            assert hooked.returncode == 0
        spooled = spool.waiting(here())
        assert len(spooled) == 5 and all(p.parent.parent == shm for p in spooled)
        (small_disk / "filler").unlink()
        wait_for(lambda: sum("on a full disk" in str(e["body"]) for e in stored_events()) == 5,
                 60, 0.2, "the five events stored")
        wait_for(lambda: not spool.waiting(here()), 30, 0.2, "the spool drained")
    finally:
        kl("stop", check=True)


def _stored(ingest: transport.Client, event: dict) -> bool:
    try:
        return ingest.call("put_event", {"event": event})["status"] in ("stored", "duplicate")
    except protocol.RemoteError:
        return False


def test_a_deleted_wal_hides_nothing_from_readers(daemon, ctx):
    with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as ingest:
        first = make_event(content="committed before the WAL went")
        assert ingest.call("put_event", {"event": first})["status"] == "stored"
        Path(f"{paths.Home(daemon).db_path}-wal").unlink()
        second = make_event(content="committed after the WAL went")
        assert ingest.call("put_event", {"event": second})["status"] == "stored"

    def readable() -> list[str]:  # a reader may fail until storage has mended the WAL
        exported = kl("export")
        return [json.loads(line)["body"]["content"] for line in exported.stdout.splitlines()
                if '"kind"' in line] if exported.returncode == 0 else []

    wait_for(lambda: readable() == ["committed before the WAL went",
                                    "committed after the WAL went"], timeout=15,
             message="both events to be readable")
    assert "the WAL file was deleted" in kl("logs", "storage", "-n", "50").stdout


def test_events_acknowledged_after_the_wal_was_deleted_survive_a_crash(daemon, ctx):
    """The WAL deleted under the running writer, then events acknowledged, then storage
    killed: every acknowledged event is there after the restart (storage looks at the
    WAL before each acknowledgement, and folds a deleted one into the database)."""
    import signal

    acked = []
    with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as ingest:
        first = make_event(content="before the WAL went")
        assert ingest.call("put_event", {"event": first})["status"] == "stored"
        acked.append(first["event_id"])
        Path(f"{paths.Home(daemon).db_path}-wal").unlink()
        for n in range(60):
            event = make_event(content=f"after the WAL went, {n}")
            if _stored(ingest, event):
                acked.append(event["event_id"])
    victim = next(r for r in status()["roles"] if r["role"] == "storage")
    os.kill(victim["pid"], signal.SIGKILL)
    wait_for(lambda: any(r["role"] == "storage" and r["restarts"] == 1
                         and r["state"] == "RUNNING" for r in status()["roles"]),
             message="storage restarted")
    assert len(acked) > 1
    stored = {event["event_id"] for event in stored_events()}
    assert not set(acked) - stored, f"{len(set(acked) - stored)} acknowledged events lost"


def test_a_damaged_database_is_said_and_a_good_copy_is_taken_up(home, ctx, tmp_path):
    ws = Workspace(tmp_path)
    kl("start", check=True)
    with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as ingest:
        assert ingest.call("put_event", {"event": make_event(content="kept")})["status"] == "stored"
    kl("stop", check=True)
    path = paths.Home(home).db_path
    good = path.read_bytes()
    path.write_bytes(b"\xde\xad" * 50 + good[100:])  # the header gone: not a database
    started = kl("start")  # every role comes up, to say what is wrong; but not a success
    assert started.returncode == 1 and "is damaged" in started.stderr
    try:
        with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as ingest:
            with pytest.raises(protocol.RemoteError) as refused:
                ingest.call("put_event", {"event": make_event(content="refused")})
            assert refused.value.code == protocol.ErrorCode.UNAVAILABLE
            assert "is damaged" in refused.value.reason
            assert "is damaged" in status()["fault"]["reason"]
            doctor = kl("doctor")
            assert "FAIL  database:" in doctor.stdout and "FAIL  writes:" in doctor.stdout
            assert "waiting for extraction: unknown" in kl("status").stdout
            hooked, _ = ws.hook("kirolearn-kiro-cli", {  # an agent's turn ends meanwhile
                "hook_event_name": "stop", "cwd": str(ws.project),
                "assistant_response": "said during the fault"})
            assert hooked.returncode == 0 and len(spool.waiting(here())) == 1  # kept, not lost
            path.write_bytes(good)  # a good copy put back
            after = make_event(content="after the repair")
            wait_for(lambda: _stored(ingest, after), timeout=30, message="writes to resume")
            wait_for(lambda: not spool.waiting(here()), timeout=30, message="the spool to drain")
        assert sorted(e["body"]["content"] for e in stored_events()) == [
            "after the repair", "kept", "said during the fault"]
    finally:
        kl("stop", check=True)


def test_a_read_only_database_is_said_and_taken_up_once_writable(home, ctx):
    kl("start", check=True)
    kl("stop", check=True)
    path = str(paths.Home(home).db_path)
    mounted = subprocess.run(["mount", "--bind", path, path], capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"a read-only file needs mount rights: {mounted.stderr.strip()}")
    try:  # the file read-only, whoever opens it (root included)
        subprocess.run(["mount", "-o", "remount,bind,ro", path], check=True)
        started = kl("start")  # every role up, to say what is wrong; but not a success
        assert started.returncode == 1 and "started, but storage cannot write" in started.stderr
        with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as ingest:
            with pytest.raises(protocol.RemoteError) as refused:
                ingest.call("put_event", {"event": make_event(content="refused")})
            assert "cannot be written (a read-only file" in refused.value.reason
            assert "read-only" in status()["fault"]["reason"]
            assert "FAIL  writes: storage cannot write" in kl("doctor").stdout
            subprocess.run(["umount", "-l", path], check=True)  # writable again
            after = make_event(content="after it was made writable")
            wait_for(lambda: _stored(ingest, after), timeout=30, message="writes to resume")
        assert [e["body"]["content"] for e in stored_events()] == ["after it was made writable"]
    finally:
        subprocess.run(["umount", "-l", path], capture_output=True)
        kl("stop", check=True)
