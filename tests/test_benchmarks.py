"""The benchmarks run from a checkout and print what DESIGN.md §10 promises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.timeout(600)  # embedding 2,000 records takes minutes on a loaded machine
def test_retrieval_benchmark_quick_run_prints_one_line_per_query_set(home):
    env = {k: v for k, v in os.environ.items() if k != "KIROLEARN_HOME"}
    result = subprocess.run([sys.executable, str(BENCHMARKS / "retrieval.py"), "--quick",
                             "--mode", "lexical", "hybrid"],
                            capture_output=True, text=True, timeout=600, env=env, cwd="/tmp")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["records"], r["mode"], r["queries"]) for r in rows] == [
        (1000, "lexical", "prompts"), (1000, "lexical", "short"),
        (1000, "hybrid", "prompts"), (1000, "hybrid", "short")]
    for row in rows:
        assert row["bench"] == "retrieval" and row["outcome_ok"] > 0
        assert row["outcome_error"] == row["outcome_fallback"] == row["outcome_timeout"] == 0
        keys = ("search", "roundtrip", "floor") + (("seed_search",) if row["mode"] == "lexical"
                                                   else ())
        for key in keys:
            assert 0 < row[f"{key}_p50_ms"] <= row[f"{key}_p99_ms"]
    assert 0 < rows[0]["known_item_recall_at_10"] <= 1
    assert rows[2]["vectors"] == "titles"  # quick: no known-item figure for hybrid
    assert rows[0]["inline_timeouts"] == rows[2]["inline_timeouts"] == 0


def test_shim_benchmark_quick_run_compares_each_hook_with_the_floor(home):
    env = {k: v for k, v in os.environ.items() if k != "KIROLEARN_HOME"}
    result = subprocess.run([sys.executable, str(BENCHMARKS / "shim.py"), "--quick",
                             "--runs", "5"], capture_output=True, text=True, timeout=300,
                            env=env, cwd="/tmp")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["bench"], r["hook"], r.get("path")) for r in rows] == [
        ("shim", "postToolUse", None), ("shim", "prompt", None),
        ("shim", "postToolUse", "spool")]
    for row in rows:
        assert 0 < row["floor_p50_ms"] <= row["floor_p99_ms"]
        assert 0 < row["wall_p50_ms"] <= row["wall_p99_ms"]
        assert abs(row["ratio_to_floor"] - row["wall_p50_ms"] / row["floor_p50_ms"]) < 0.01
    assert rows[0]["spooled"] == rows[1]["spooled"] == 0  # acknowledged in time
    assert rows[1]["prompts_with_context"] == 5
    assert rows[2]["spooled"] == 8 and rows[2]["secrets_in_spool"] == 0  # 5 runs, 3 warm-ups


def test_mcp_benchmark_quick_run_times_start_up_and_every_tool(home):
    env = {k: v for k, v in os.environ.items() if k != "KIROLEARN_HOME"}
    result = subprocess.run([sys.executable, str(BENCHMARKS / "mcp.py"), "--quick",
                             "--starts", "1", "--calls", "3"], capture_output=True, text=True,
                            timeout=300, env=env, cwd="/tmp")
    assert result.returncode == 0, result.stderr
    startup, *calls = [json.loads(line) for line in result.stdout.splitlines()]
    assert startup["bench"] == "mcp" and startup["measure"] == "startup"
    assert startup["startup_p50_ms"] > 0 and startup["floor_p50_ms"] > 0
    assert startup["server_rss_mb"] > 0
    assert {row["tool"] for row in calls} == {
        "save_observation", "search_memory", "recall", "timeline", "get_records", "forget"}
    for row in calls:
        assert row["errors"] == 0 and 0 < row["call_p50_ms"] <= row["call_p99_ms"]
