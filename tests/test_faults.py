"""SIGKILL roles in the middle of an import: every acknowledged event is stored once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess

from helpers import KL, make_event, status, wait_for

from kirolearn import paths

EVENTS = 20_000


def _pid(role: str) -> int:
    return next(r["pid"] for r in status()["roles"] if r["role"] == role)


def _stored_count(home) -> int:
    conn = sqlite3.connect(f"file:{paths.db_path(home)}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    finally:
        conn.close()


def test_sigkill_storage_and_ingest_mid_import_loses_nothing(daemon, tmp_path):
    events = [make_event("tool_use", f"src/module_{i}.py", session_id=f"s{i % 7}")
              for i in range(EVENTS)]
    source = tmp_path / "events.jsonl"
    source.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    importer = subprocess.Popen([*KL, "import", str(source)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd="/tmp")
    killed = []
    for role, after in (("storage", EVENTS // 5), ("ingest", EVENTS // 2)):
        wait_for(lambda after=after: _stored_count(daemon) >= after, timeout=60,
                 interval=0.01, message=f"{after} events stored")
        pid = _pid(role)
        os.kill(pid, signal.SIGKILL)
        killed.append((role, pid))
        wait_for(lambda role=role, pid=pid: next(
            (r for r in status()["roles"] if r["role"] == role and r["state"] == "RUNNING"
             and r["pid"] != pid), None), timeout=30, message=f"{role} to be restarted")
    out, err = importer.communicate(timeout=180)
    assert importer.returncode == 0, err
    # Chunks were retried across the restarts: what their first attempt stored is counted
    # as stored, not as a duplicate.
    assert out.strip() == f"stored {EVENTS}, duplicate 0, rejected 0", err
    conn = sqlite3.connect(paths.db_path(daemon))
    ids = {row[0] for row in conn.execute("SELECT event_id FROM events")}
    conn.close()
    assert ids == {e["event_id"] for e in events}  # each exactly once (event_id is the key)
    restarts = {r["role"]: r["restarts"] for r in status()["roles"]}
    assert restarts["storage"] == 1 and restarts["ingest"] == 1, (restarts, killed)
