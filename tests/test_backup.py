"""Backup and restore through the CLI and the real daemon: a copy taken while a large
import runs holds every event acknowledged before it, is sound, and is put back with
the daemon restarted; bad paths and files that are not a usable backup are refused and
change nothing."""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest
from helpers.cli import KL, all_up, kl, status
from helpers.events import make_event
from helpers.waits import wait_for, wait_for_count

from kirolearn import paths

EVENTS = 12_000


def _read(db: Path, sql: str) -> list[tuple]:
    """Beside the running daemon (a reader), or a stopped file as it is (with its WAL)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _event_ids(db: Path) -> set[str]:
    return {row[0] for row in _read(db, "SELECT event_id FROM events")}


def _import(tmp_path: Path, events: list[dict]) -> Path:
    source = tmp_path / "events.jsonl"
    source.write_text("".join(json.dumps(e) + "\n" for e in events))
    return source


@pytest.mark.timeout(600)  # its waits fail once the import stops moving, not at a time
def test_a_backup_taken_during_an_import_holds_every_acknowledged_event(daemon, tmp_path):
    events = [make_event("tool_use", f"src/module_{i}.py", session_id=f"s{i % 7}")
              for i in range(EVENTS)]
    source = _import(tmp_path, events)
    db = paths.Home(daemon).db_path
    importer = subprocess.Popen([*KL, "import", str(source)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd="/tmp")
    try:
        wait_for_count(lambda: _read(db, "SELECT count(*) FROM events")[0][0], EVENTS // 4,
                       interval=0.01, message="events stored")
        acknowledged = _event_ids(db)  # committed, so acknowledged to the importer
        assert importer.poll() is None  # the backup is taken while the import runs
        copy = tmp_path / "copy.db"
        taken = kl("backup", str(copy), check=True)
        out, err = importer.communicate(timeout=180)
    finally:  # a test that gave up leaves no import behind to trouble the next
        if importer.poll() is None:
            importer.kill()
            importer.communicate()  # its pipes closed, not left to a later test
    assert importer.returncode == 0, err
    assert out.strip() == f"stored {EVENTS}, duplicate 0, rejected 0"

    backed = _event_ids(copy)
    assert acknowledged <= backed
    records = _read(copy, "SELECT count(*) FROM memory_records")[0][0]  # extraction goes on
    assert taken.stdout.strip() == f"backed up {len(backed)} events and {records} records" \
        f" to {copy}"
    assert _read(copy, "PRAGMA integrity_check") == [("ok",)]
    assert not Path(f"{copy}-wal").exists()  # a standalone file, private
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600

    restored = kl("restore", str(copy), "--yes", check=True)
    assert f"restored {len(backed)} events and {records} records from {copy}" in restored.stdout
    assert all_up(status()["roles"])  # started again
    assert _event_ids(db) == backed
    assert _read(db, "PRAGMA integrity_check") == [("ok",)]
    kept = next(daemon.glob("kirolearn.db.before-restore-????????T??????Z"))
    assert f"kept as {kept}" in restored.stdout
    assert _event_ids(kept) == {e["event_id"] for e in events}  # nothing thrown away

    # The restored database takes the rest of the history, and knows what it holds.
    again = kl("import", str(source), check=True)
    assert again.stdout.strip() == (f"stored {EVENTS - len(backed)}, duplicate {len(backed)},"
                                    " rejected 0")


def test_the_default_backup_goes_to_the_homes_backups_folder_and_any_name_works(daemon, tmp_path):
    kl("import", str(_import(tmp_path, [make_event("prompt", "use WAL mode")])), check=True)
    taken = kl("backup", check=True)
    made = next((daemon / "backups").glob("kirolearn-*.db"))
    assert taken.stdout.strip() == f"backed up 1 events and 0 records to {made}"
    assert stat.S_IMODE((daemon / "backups").stat().st_mode) == 0o700

    odd = tmp_path / "my #1 backup?.db"  # characters a SQLite URI would misread
    assert kl("backup", str(odd), check=True).stdout.strip() == (
        f"backed up 1 events and 0 records to {odd}")
    assert "restored 1 events" in kl("restore", str(odd), "--yes", check=True).stdout


def test_bad_backups_and_restores_are_refused_and_change_nothing(daemon, tmp_path):
    kl("import", str(_import(tmp_path, [make_event("prompt", f"note {i}") for i in range(3)])),
       check=True)
    db = paths.Home(daemon).db_path
    before, pid = _event_ids(db), status()["pid"]
    good = tmp_path / "good.db"
    kl("backup", str(good), check=True)

    def refused(*args: str, says: str, answer: str | None = None) -> None:
        result = kl(*args, input=answer)
        assert result.returncode == 1, result.stdout
        assert says in result.stderr and "Traceback" not in result.stderr, result.stderr

    for live in (db, Path(f"{db}-wal")):
        refused("backup", str(live), says="is the live database itself")
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    refused("backup", str(a_file / "copy.db"), says="cannot write")
    existing = tmp_path / "existing.db"
    existing.write_text("keep me")
    refused("backup", str(existing), says="already exists; a backup never replaces a file")
    assert existing.read_text() == "keep me"

    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 100)
    refused("restore", str(text), "--yes", says="is not a SQLite database")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    refused("restore", str(other), "--yes", says="is a SQLite database, but not kirolearn's")
    newer = tmp_path / "newer.db"
    newer.write_bytes(good.read_bytes())
    conn = sqlite3.connect(newer)
    conn.execute("INSERT INTO _migrations VALUES (999, 'future', '', '')")
    conn.commit()
    conn.close()
    refused("restore", str(newer), "--yes", says="was written by a newer kirolearn")
    damaged = tmp_path / "damaged.db"
    data = bytearray(good.read_bytes())
    data[4096:8192] = b"\xff" * 4096  # the second page
    damaged.write_bytes(bytes(data))
    refused("restore", str(damaged), "--yes", says=str(damaged))
    refused("restore", str(good), says="Aborted", answer="n\n")  # asked, and said no

    assert _event_ids(db) == before
    assert status()["pid"] == pid  # never stopped
    assert not list(daemon.glob("kirolearn.db.before-restore-*"))


def test_scheduled_backups_are_taken_while_it_runs_and_the_oldest_removed(home, monkeypatch,
                                                                           tmp_path):
    monkeypatch.setenv("KIROLEARN_BACKUP_INTERVAL_H", str(1.5 / 3600))  # every 1.5 s
    monkeypatch.setenv("KIROLEARN_BACKUP_KEEP", "2")
    folder = home / "backups"
    folder.mkdir(mode=0o700)
    by_hand = folder / "kirolearn-by-hand.db"
    try:
        kl("start", check=True)
        kl("import", str(_import(tmp_path, [make_event("prompt", "use WAL mode")])), check=True)
        kl("backup", str(by_hand), check=True)
        log = home / "logs" / "storage.log"
        wait_for(lambda: log.read_text().count("scheduled backup:") >= 4, timeout=60,
                 message="four scheduled backups")
    finally:
        kl("stop", check=True)
    assert "older removed" in log.read_text()
    kept = sorted(folder.glob("scheduled-*.db"))
    assert len(kept) == 2 and by_hand.exists()  # the oldest scheduled ones only
    for copy in kept:
        assert _read(copy, "PRAGMA integrity_check") == [("ok",)]
    assert _event_ids(kept[-1]) == _event_ids(paths.Home(home).db_path)


def test_backup_of_a_postgresql_store_points_to_pg_dump(home, monkeypatch):
    monkeypatch.setenv("KIROLEARN_STORAGE_URL", "postgresql://kirolearn@127.0.0.1:9/kirolearn")
    refused = kl("backup")
    assert refused.returncode == 1 and "pg_dump" in refused.stderr
    assert "kirolearn.db" not in refused.stderr
