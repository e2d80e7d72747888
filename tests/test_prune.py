"""``kirolearn prune``: raw events past an age go once distilled (records and events still
waiting for extraction stay), the file shrinks, and bad input changes nothing."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from helpers.cli import here, kl
from helpers.events import make_event
from helpers.waits import wait_for

from kirolearn import control

OTHER = "/actor/tester/project/" + "b" * 64 + "/"


def totals(namespace: str | None = None) -> dict:
    args = ("--namespace", namespace) if namespace else ()
    return json.loads(kl("stats", *args, "--json", check=True).stdout)["totals"]


def test_prune_removes_old_distilled_events_only_and_gives_the_space_back(home, monkeypatch):
    monkeypatch.setenv("KIROLEARN_STORAGE_BATCH_IDLE_S", "3600")  # a lone prompt stays pending
    kl("start", check=True)
    try:
        old = (datetime.now(UTC) - timedelta(days=200)).isoformat(timespec="milliseconds")
        big = "x" * 200_000
        turn = [make_event("prompt", "rebuild the search index", valid_time=old),
                *(make_event("tool_use", f"{n}.log {big}", valid_time=old) for n in range(6)),
                make_event("session_summary", "rebuilt it", valid_time=old)]
        pending = make_event("prompt", "a later question", valid_time=old, session_id="s-2")
        recent = [make_event("prompt", "today's work", namespace=OTHER),
                  make_event("session_summary", "done today", namespace=OTHER)]
        for event in [*turn, *recent]:
            control.call("ingest", "put_event", {"event": event}, timeout_ms=control.WRITE_MS,
                         home=here())
        wait_for(lambda: (now := totals())["pending_batches"] == now["pending_events"] == 0,
                 message="every turn distilled")
        control.call("ingest", "put_event", {"event": pending}, timeout_ms=control.WRITE_MS,
                     home=here())
        records = totals()["records"]

        assert kl("prune", "--events-older-than", "90d", "--namespace", OTHER, "--yes",
                  check=True).stdout.startswith(f"removed 0 event(s) in {OTHER}")
        declined = kl("prune", "--events-older-than", "90d", input="n\n")
        assert declined.returncode == 1 and totals()["events"] == len(turn) + 3
        done = kl("prune", "--events-older-than", "90d", "--yes", check=True).stdout
        found = re.fullmatch(r"removed (\d+) event\(s\) in every project; the database went"
                             r" from ([\d.]+) MiB to ([\d.]+) MiB\n", done)
        assert found, done
        assert int(found[1]) == len(turn) and float(found[3]) < float(found[2]) - 0.5
        assert totals() == {"events": 3, "records": records, "stale": 0, "superseded": 0,
                            "pending_events": 1, "pending_batches": 0}
        for bad in ("soon", "-3d", "90", "0d"):
            refused = kl("prune", "--events-older-than", bad, "--yes")
            assert refused.returncode == 2 and "give days or hours" in refused.stderr
        assert totals()["events"] == 3
    finally:
        kl("stop", check=True)
