"""Every event becomes memory, however it arrives: a large history imported at full speed
is cut into bounded batches and every turn becomes a record; failed batches are said,
listed and retried."""

from __future__ import annotations

import json

from helpers import kl, make_event, status, wait_for

TURNS = 2000
TOOLS_PER_TURN = 8  # with the prompt and the turn's end: 10 events a turn, 20,000 in all


def history(tmp_path) -> tuple[str, list[str]]:
    """One project's history as JSON Lines (over 5 MB of bodies), and each turn's request."""
    requests, lines = [], []
    for turn in range(TURNS):
        session = f"session-{turn // 50}"
        request = f"Refactor module number {turn} of the billing service"
        requests.append(request)
        lines.append(json.dumps(make_event("prompt", request, session_id=session)))
        for tool in range(TOOLS_PER_TURN):
            path = f"src/billing/module_{turn}/part_{tool}.py " + "x" * 300
            lines.append(json.dumps(make_event("tool_use", path, session_id=session)))
        lines.append(json.dumps(make_event("session_summary", f"Refactored module {turn}",
                                           session_id=session)))
    source = tmp_path / "history.jsonl"
    source.write_text("\n".join(lines) + "\n")
    return str(source), requests


def test_a_large_history_imported_at_full_speed_becomes_a_record_per_turn(daemon, tmp_path):
    source, requests = history(tmp_path)
    result = kl("import", source)
    assert result.stdout.strip() == f"stored {TURNS * 10}, duplicate 0, rejected 0", result.stderr

    def extracted() -> dict | None:
        pending = status()["pending"]
        return pending if pending["events"] == 0 and pending["batches"] == 0 else None

    pending = wait_for(extracted, timeout=300, interval=1, message="every batch extracted")
    assert pending["failed"] == []
    titles = {json.loads(line)["title"] for line in kl("export", check=True).stdout.splitlines()
              if '"record_id"' in line}
    missing = [r for r in requests if r not in titles]
    assert not missing, f"{len(missing)} turns have no record, e.g. {missing[:3]}"


def test_failed_batches_are_listed_and_retried(daemon):
    assert kl("extraction", "failed").stdout.strip() == "no failed batches"
    retried = kl("extraction", "retry")
    assert retried.returncode == 0
    assert retried.stdout.strip() == "0 failed batch(es) handed out again"
