"""``kirolearn export`` then ``kirolearn import`` into an empty home: every event, every
record of every strategy (with versions, validity and vectors) and every tombstone comes
back, nothing is extracted twice, and a second export is identical, line for line. Bad
input is a clear error that changes nothing."""

from __future__ import annotations

import json

import pytest
from conftest import private_home
from helpers.cli import here, kl
from helpers.events import make_event
from helpers.waits import wait_for
from test_heuristic import KIRO_CLI_SESSION
from test_llm import GOOD, ScriptedEndpoint

from kirolearn import contract, control, db, transport
from kirolearn.db import schema, writes
from kirolearn.roles.ingest.checks import prepare


def exported(*args: str) -> list[str]:
    return kl("export", *args, check=True).stdout.splitlines()


def records_of(lines: list[str]) -> dict[str, dict]:
    items = [json.loads(line) for line in lines]
    return {item["record_id"]: item for item in items if "record_id" in item}


def settled() -> bool:
    """Nothing waits for extraction or for a vector."""
    totals = json.loads(kl("stats", "--json", check=True).stdout)["totals"]
    waiting = (control.embeddings_state(here()) or {}).get("unembedded", 1)
    return totals["pending_events"] == 0 and totals["pending_batches"] == 0 and not waiting


def session(number: int) -> list[dict]:
    """The Kiro CLI turn, as a new session of its own (a batch of its own)."""
    return [{**{k: v for k, v in event.items() if k != "project_path"},
             "event_id": contract.new_ulid(), "session_id": f"s-{number}"}
            for event in KIRO_CLI_SESSION]


def marked(line: str, records: dict[str, dict], record_id: str, **marks) -> str:
    """An export's line, with marks added to the record ``record_id`` where the store
    puts them (before its versions)."""
    if record_id not in line or record_id not in records or '"record_id"' not in line:
        return line
    item = json.loads(line)
    if item.get("record_id") != record_id:
        return line
    fields = list(item.items())
    at = list(item).index("versions")
    return json.dumps(dict(fields[:at] + list(marks.items()) + fields[at:]),
                      ensure_ascii=False)


def test_export_import_export_is_identical_with_every_strategy(home, monkeypatch, ctx):
    server = ScriptedEndpoint("openai")
    server.script = [(200, GOOD, 0), (400, {"error": "no more"}, 0)]  # then: heuristic
    monkeypatch.setenv("KIROLEARN_EXTRACTION_STRATEGY", "openai")
    monkeypatch.setenv("KIROLEARN_EXTRACTION_LLM_URL", server.url + "/v1")
    monkeypatch.setenv("KIROLEARN_EXTRACTION_LLM_MODEL", "scripted")
    kl("start", check=True)
    try:
        with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as client:
            for number in (1, 2):
                for event in session(number):
                    assert client.call("put_event", {"event": event})["status"] == "stored"
                wait_for(lambda n=number: len({r["strategy"] for r in records_of(
                    exported()).values()}) == n, message=f"the records of session {number}")
            saved = {"record_id": contract.new_record_id(), "namespace": KIRO_CLI_SESSION[0][
                "namespace"], "title": "Invoices export as UTF-8 CSV", "summary": "Decided:"
                " the CSV export is UTF-8 with a BOM, for Excel.", "facts": [], "concepts":
                ["csv"], "files_touched": [], "observation_type": "decision",
                "strategy": "mcp_observation", "source_event_ids": [contract.new_ulid()],
                "created_at": contract.now_iso()}
            assert client.call("put_record", {"record": saved})["status"] == "stored"
        records = records_of(exported())
        assert {r["strategy"] for r in records.values()} == {
            "llm-summary", "heuristic", "mcp_observation"}
        [edited] = [i for i, r in records.items() if r["strategy"] == "llm-summary"]
        # the turn's record (the lines its edit changed with it) marked invalid, its
        # failed command's forgotten
        invalid, forgotten = sorted((i for i, r in records.items()
                                     if r["strategy"] == "heuristic"),
                                    key=lambda i: "changes" not in records[i])[:2]
        kl("edit", edited, "--title", "The CSV export crash, fixed", "--reason", "clearer",
           check=True)
        kl("edit", invalid, "--invalid", "the exporter was rewritten", check=True)
        before_forget = exported()
        kl("forget", forgotten, "--yes", check=True)
        wait_for(settled, message="extraction and vectors done")
        first = exported("--vectors")
    finally:
        kl("stop", check=True)
        server.close()

    lines = records_of(first)
    assert forgotten not in lines
    # the lines a record's edits changed (searched, never shown) travel with it
    assert "customer = row.get('customer_id') or ''" in lines[invalid]["changes"]
    assert lines[edited]["title"] == "The CSV export crash, fixed"
    assert lines[edited]["versions"][0]["reason"] == "clearer"
    assert lines[invalid]["invalid_reason"] == "the exporter was rewritten"
    assert "embedding" not in lines[invalid]
    assert all("embedding" in r for i, r in lines.items() if i != invalid)
    forgotten_at = json.loads(first[-1])["tombstone"]["forgotten_at"]
    assert [json.loads(line) for line in first if "tombstone" in line] == [
        {"tombstone": {"record_id": forgotten, "namespace": saved["namespace"],
                       "forgotten_at": forgotten_at}}]
    # a record's marks travel with it: one found stale, one superseded by another
    first = [marked(line, lines, edited, stale={"why": "`export_csv` no longer in `app.py`",
                                                "at": "2026-11-27T10:00:00.000+00:00"})
             for line in first]
    first = [marked(line, lines, saved["record_id"], superseded_by=edited) for line in first]
    assert records_of(first)[edited]["stale"]["at"].startswith("2026-11-27")
    assert records_of(first)[saved["record_id"]]["superseded_by"] == edited
    export = home / "export.jsonl"
    export.write_text("\n".join(first) + "\n")

    with pytest.MonkeyPatch.context() as patch, private_home(patch):
        kl("start", check=True)
        try:
            done = kl("import", str(export), check=True)
            assert done.stdout.strip() == f"stored {len(first) - 1}, duplicate 0, rejected 0"
            wait_for(settled, message="the import settled")
            second = exported("--vectors")
            assert second == first  # nothing extracted again, nothing changed
            again = kl("import", str(export), check=True)
            assert again.stdout.strip() == f"stored 0, duplicate {len(first) - 1}, rejected 0"

            stale = home / "before-forget.jsonl"  # an export taken before the forget
            stale.write_text("\n".join(before_forget) + "\nnot json{\n")
            refused = kl("import", str(stale))
            assert refused.returncode == 1
            assert f"{forgotten} was forgotten on {forgotten_at}" in refused.stderr
            assert f"line {len(before_forget) + 1}: rejected: event: not JSON" in refused.stderr
            items = [json.loads(line) for line in before_forget]
            kept = [i for i in items if "event_id" in i or i.get("record_id") not in (
                None, forgotten)]
            assert f"stored 0, duplicate {len(kept)}, rejected 2" in refused.stdout

            newer = home / "newer.jsonl"
            newer.write_text(json.dumps({"kirolearn_export": 1, "schema": schema.latest() + 1})
                             + "\n" + "\n".join(first[1:]) + "\n")
            too_new = kl("import", str(newer))
            assert too_new.returncode == 1
            assert "from a newer kirolearn" in too_new.stderr
            assert exported("--vectors") == first  # nothing changed
        finally:
            kl("stop", check=True)


def test_export_leaves_out_a_damaged_event_and_says_so(home):
    good, bad = make_event(content="kept"), make_event(content="damaged")
    conn = db.connect_writer(here().db_path)
    for event in (good, bad):
        with conn.transaction():
            writes.insert_event(conn, prepare(event)[0], 0)
    with conn.transaction():  # as a damaged disk would leave it
        conn.execute("UPDATE events SET body_json = '{not json' WHERE event_id = $1",
                     (bad["event_id"],))
    conn.close()
    result = kl("export")
    assert result.returncode == 1
    assert f"event {bad['event_id']}: its stored body or source is not JSON" \
        in result.stderr
    events = [json.loads(line)["event_id"] for line in result.stdout.splitlines()
              if '"event_id"' in line]
    assert events == [good["event_id"]]
