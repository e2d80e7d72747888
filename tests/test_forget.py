"""``kirolearn forget`` through the real daemon: by id or by what a search finds, shown
and asked first; a forgotten record leaves search and export; a wrong id forgets
nothing."""

from __future__ import annotations

import json

from helpers import kl

from kirolearn import contract, project


def record(namespace: str, title: str, summary: str) -> dict:
    return {"record_id": contract.new_record_id(), "namespace": namespace, "title": title,
            "summary": summary, "facts": [], "concepts": [], "files_touched": [],
            "observation_type": "decision", "strategy": "mcp_observation",
            "source_event_ids": [contract.new_ulid()], "created_at": contract.now_iso()}


def exported_ids() -> set[str]:
    lines = kl("export", check=True).stdout.splitlines()
    return {json.loads(line).get("record_id") for line in lines} - {None}


def test_forget_by_id_and_by_query_shows_asks_and_removes(daemon, ingest, tmp_path):
    namespace = project.resolve_project(tmp_path).namespace(project.actor_id())
    wal = record(namespace, "Use WAL mode", "SQLite runs in WAL mode so readers never block.")
    old = record(namespace, "Deploy with the legacy script", "deploy.sh pushes by rsync.")
    new = record(namespace, "Deploy through the pipeline", "CI deploys every tagged commit.")
    for r in (wal, old, new):
        assert ingest.call("put_record", {"record": r})["status"] == "stored"

    declined = kl("forget", wal["record_id"], input="n\n")
    assert declined.returncode == 1 and "Aborted" in declined.stderr
    assert f"{wal['record_id']}  Use WAL mode" in declined.stdout
    assert wal["record_id"] in exported_ids()

    done = kl("forget", wal["record_id"], "--yes", check=True)
    assert f"forgot {wal['record_id']}" in done.stdout
    assert wal["record_id"] not in exported_ids()
    found = kl("search", "WAL readers", "--project", str(tmp_path), "--json", check=True)
    assert wal["record_id"] not in json.loads(found.stdout)["record_ids"]

    searched = kl("forget", "--query", "legacy deploy script", "--yes", cwd=str(tmp_path),
                  check=True)
    assert f"{old['record_id']}  Deploy with the legacy script" in searched.stdout
    assert f"forgot {old['record_id']}" in searched.stdout
    listed = {r["record_id"] for r in (old, new) if r["record_id"] in searched.stdout}
    assert old["record_id"] in listed  # and, maybe, the other "deploy": what it showed goes
    assert exported_ids() == {old["record_id"], new["record_id"]} - listed

    nothing = kl("forget", "--query", "kubernetes helm chart", "--project", str(tmp_path),
                 "--yes", check=True)
    assert nothing.stdout.strip() == "no memories matched; nothing was forgotten"


def test_a_wrong_id_forgets_nothing(daemon, ingest, tmp_path):
    namespace = project.resolve_project(tmp_path).namespace(project.actor_id())
    kept = record(namespace, "Use WAL mode", "SQLite runs in WAL mode.")
    assert ingest.call("put_record", {"record": kept})["status"] == "stored"
    unknown = contract.new_record_id()

    mixed = kl("forget", kept["record_id"], unknown, "--yes")
    assert mixed.returncode == 1
    assert f"no record {unknown}; nothing was forgotten" in mixed.stderr
    malformed = kl("forget", "mr_nonsense", "--yes")
    assert malformed.returncode == 2 and "not a record id" in malformed.stderr
    for args in ((), (kept["record_id"], "--query", "wal"),
                 (kept["record_id"], "--project", str(tmp_path))):
        assert kl("forget", *args, "--yes").returncode == 2
    assert kept["record_id"] in exported_ids()
