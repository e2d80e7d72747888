"""The benchmarks run from a checkout and print what DESIGN.md §10 promises."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import processes_with

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.timeout(600)  # embedding 2,000 records takes minutes on a loaded machine
def test_retrieval_benchmark_quick_run_prints_one_line_per_query_set(home):
    env = {k: v for k, v in os.environ.items() if k != "KIROLEARN_HOME"}
    result = subprocess.run([sys.executable, str(BENCHMARKS / "retrieval.py"), "--quick",
                             "--mode", "lexical", "hybrid"],
                            capture_output=True, text=True, timeout=600, env=env, cwd="/tmp")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    sets = ("prompts", "short", "prompts_files_in_play", "prompts_file_opened")
    assert [(r["records"], r["mode"], r["queries"]) for r in rows] == [
        (1000, mode, name) for mode in ("lexical", "hybrid") for name in sets]
    for row in rows:
        assert row["bench"] == "retrieval" and row["outcome_ok"] > 0
        assert row["outcome_error"] == row["outcome_fallback"] == row["outcome_timeout"] == 0
        seed = row["mode"] == "lexical" and row["queries"] in ("prompts", "short")
        for key in ("search", "roundtrip", "floor") + (("seed_search",) if seed else ()):
            assert 0 < row[f"{key}_p50_ms"] <= row[f"{key}_p99_ms"]
    hybrid = rows[len(sets)]
    assert 0 < rows[0]["known_item_recall_at_10"] <= 1
    assert hybrid["vectors"] == "titles"  # quick: no known-item figure for hybrid
    assert rows[0]["inline_timeouts"] == hybrid["inline_timeouts"] == 0


@pytest.mark.timeout(360)  # hundreds of hook processes: minutes on a loaded machine
def test_shim_benchmark_quick_run_compares_each_hook_with_the_floor(home):
    env = {k: v for k, v in os.environ.items() if k != "KIROLEARN_HOME"}
    result = subprocess.run([sys.executable, str(BENCHMARKS / "shim.py"), "--quick",
                             "--runs", "5"], capture_output=True, text=True, timeout=300,
                            env=env, cwd="/tmp")
    assert result.returncode == 0, result.stderr
    *rows, cold = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["bench"], r["hook"], r.get("path")) for r in rows] == [
        ("shim", "postToolUse", None), ("shim", "prompt", None),
        *[("shim", "tool_use", None)] * 6, ("shim", "pre_tool", None),
        ("shim", "postToolUse", "spool"),
        ("shim", "postToolUse", "spool_unsaved_rules")]
    assert (cold["hook"], cold["path"], cold["starts"]) == ("prompt", "first_after_start", 2)
    assert 0 < cold["wall_p50_ms"] <= cold["wall_max_ms"] and cold["budget_ms"] == 500
    assert [r["surface"] for r in rows[2:8]] == ["claude-code", "codex", "gemini", "copilot",
                                                 "cursor", "opencode"]
    for row in rows:
        assert 0 < row["floor_p50_ms"] <= row["floor_p99_ms"]
        assert 0 < row["wall_p50_ms"] <= row["wall_p99_ms"]
        assert abs(row["ratio_to_floor"] - row["wall_p50_ms"] / row["floor_p50_ms"]) < 0.01
    assert rows[0]["spooled"] == rows[1]["spooled"] == 0  # acknowledged in time
    assert rows[1]["prompts_with_context"] == 5
    for row in rows[-2:]:  # 5 runs, 3 warm-ups
        assert row["spooled"] == 8 and row["secrets_in_spool"] == 0


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


HISTORY = [  # (message, {path: text}) — each a commit of a small project
    ("Add the invoice exporter", {"billing/export.py": "def export_invoices(rows):\n"
                                  "    return [r['total'] for r in rows]\n"}),
    ("Add the user store", {"users/store.py": "def save_user(db, user):\n"
                            "    db[user.id] = user\n"}),
    ("Add the mailer", {"mail/send.py": "def send_mail(to, body):\n    smtp.send(to, body)\n"}),
    ("Invoices without a customer export an empty column",
     {"billing/export.py": "def export_invoices(rows):\n"
      "    return [(r.get('customer_id') or '', r['total']) for r in rows]\n"}),
    ("Cache users in the store", {"users/store.py": "def save_user(db, user):\n"
                                  "    db[user.id] = CACHE[user.id] = user\n"}),
    ("Retry sending mail three times", {"mail/send.py": "def send_mail(to, body):\n"
                                        "    retry(3, smtp.send, to, body)\n"}),
    ("Write the README", {"README.md": "A small billing project.\n"}),
    ("Export invoice totals with two decimals",
     {"billing/export.py": "def export_invoices(rows):\n"
      "    return [(r.get('customer_id') or '', f\"{r['total']:.2f}\") for r in rows]\n"}),
    ("The user store lowercases emails", {"users/store.py": "def save_user(db, user):\n"
                                          "    user.email = user.email.lower()\n"
                                          "    db[user.id] = CACHE[user.id] = user\n"}),
    ("Mail sending times out after ten seconds",
     {"mail/send.py": "def send_mail(to, body):\n"
      "    retry(3, smtp.send, to, body, timeout=10)\n"}),
]


def test_coderecall_quick_run_finds_the_earlier_work_on_the_same_code(home, tmp_path):
    """A small history whose last three commits each change a function an earlier
    commit changed: the memory finds those commits, and both baselines are printed."""
    repo = tmp_path / "project"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=Dev", "-c", "user.email=dev@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    for message, files in HISTORY:
        for name, text in files.items():
            (repo / name).parent.mkdir(exist_ok=True)
            (repo / name).write_text(text)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", message], check=True)
    env = {k: v for k, v in os.environ.items() if k != "KIROLEARN_HOME"}
    result = subprocess.run([sys.executable, str(BENCHMARKS / "coderecall.py"), "--quick",
                             "--repo", str(repo), "--mode", "lexical"], capture_output=True,
                            text=True, timeout=300, env=env, cwd="/tmp")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    *ranked, injected, opened, edit_time, stale = rows
    assert [(r["system"], r["k"]) for r in ranked] == [
        (system, k) for system in ("kirolearn", "bm25", "bm25-whole-commit", "newest")
        for k in (5, 10, 25)]
    assert injected["system"] == "kirolearn-injected" and injected["recall"] == 1.0
    assert injected["mrr"] >= 0.5
    assert injected["ontopic_given_share"] == 1.0 and injected["offtopic_prompts"] >= 40
    assert injected["offtopic_no_context_share"] >= 0.5  # none, before stop words
    # opening the first file it changes brings the earlier work on it back too
    assert opened["system"] == "kirolearn-file-opened" and opened["recall_with_prompt"] == 1.0
    # at edit time, the lines each change replaces were written by the earlier commits
    assert edit_time["system"] == "kirolearn-edit-time" and edit_time["recall"] == 1.0
    assert edit_time["context_chars_mean"] > 0 and edit_time["edits"] >= 3
    # every function the earlier work defined is still there: nothing stale, nothing lost
    assert stale["system"] == "kirolearn-stale" and stale["stale_injected_unchecked"] == 0
    assert stale["stale_injected_checked"] == 0 and stale["recall_checked"] == 1.0
    for row in ranked:
        assert row["bench"] == "coderecall" and row["questions"] == 3
        assert row["stored_commits"] == 7 and 0 <= row["mrr"] <= 1
        assert row["context_chars_mean"] > 0
    kirolearn = {r["k"]: r for r in rows if r["system"] == "kirolearn"}
    assert kirolearn[5]["recall"] == 1.0 and kirolearn[5]["mrr"] >= 0.5
    assert kirolearn[5]["context_chars_mean"] > 0 and kirolearn[5]["search_p50_ms"] > 0


@pytest.mark.timeout(300)  # twenty records embedded: a minute on a loaded machine
def test_idle_benchmark_quick_run_gives_each_process_its_share_of_a_core(home):
    env = {k: v for k, v in os.environ.items() if k != "KIROLEARN_HOME"}
    result = subprocess.run([sys.executable, str(BENCHMARKS / "idle.py"), "--quick"],
                            capture_output=True, text=True, timeout=300, env=env, cwd="/tmp")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["phase"] for row in rows] == [
        "idle", "live_page_open", "memory_idle", "after_idle", "memory_after_work",
        "memory_after_work_idle"]
    idle, live, memory, after, worked, left = rows
    # The viewer's process runs only while the live page is open (and a while after).
    names = {"supervisor", "storage", "retrieval", "ingest", "extraction-1"}
    model = "embed_worker"  # the embedding model's process, while it is there
    for row, running in ((idle, names), (live, names | {"viewer"})):
        assert row["bench"] == "idle" and row["target_pct"] == 0.5
        shares = {k: v for k, v in row.items() if k.startswith("cpu_") and k != "cpu_total_pct"}
        assert set(shares) - {f"cpu_{model}_pct"} == {f"cpu_{name}_pct" for name in running}
        assert row["cpu_total_pct"] == pytest.approx(sum(shares.values()), abs=0.01)
    assert live["viewer_first_page_ms"] > 0
    assert after["first_prompt_ms"] > 0 and after["next_prompts_p50_ms"] > 0
    assert worked["records"] == left["records"] == 20
    for row in (memory, worked, left):
        sizes = {k: v for k, v in row.items() if k.startswith("pss_") and k != "pss_total_mb"}
        wanted = {f"pss_{name}_mb" for name in names}
        # Idle, the model's process has left: the memory is the roles' alone.
        assert set(sizes) == wanted if row is not worked else set(sizes) - {
            f"pss_{model}_mb"} == wanted
        assert all(size > 1 for size in sizes.values())
        assert row["pss_total_mb"] == pytest.approx(sum(sizes.values()), abs=0.1)


def test_a_benchmark_stopped_by_its_time_limit_stops_its_daemon():
    """SIGTERM (what ``timeout`` sends) mid-run: the benchmark stops the daemon it
    started, and no process of it is left."""
    mark = f"KL_BENCH_RUN={os.getpid()}-{id(object())}"
    env = {k: v for k, v in os.environ.items() if k != "KIROLEARN_HOME"}
    env[mark.split("=")[0]] = mark.split("=")[1]
    bench = subprocess.Popen([sys.executable, str(BENCHMARKS / "idle.py"), "--seconds", "600"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=env, cwd="/tmp")
    try:
        for line in bench.stderr:  # said once the daemon is up and settled
            if line.startswith("idle for"):
                break
        assert len(processes_with(mark)) > 1  # the daemon's processes, beside the benchmark
        bench.terminate()
        assert bench.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        bench.kill()
        bench.wait()
        bench.stderr.close()
        left = processes_with(mark)
        for pid in left:  # killed here too: a failing run leaves nothing either
            os.kill(pid, signal.SIGKILL)
    assert left == []


@pytest.mark.timeout(300)
def test_ingest_benchmark_quick_run_times_prompts_during_an_import(home):
    env = {k: v for k, v in os.environ.items() if k != "KIROLEARN_HOME"}
    result = subprocess.run([sys.executable, str(BENCHMARKS / "ingest.py"), "--quick"],
                            capture_output=True, text=True, timeout=300, env=env, cwd="/tmp")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["path"] for row in rows] == ["live", "live", "live", "import",
                                             "prompt_beside_large", "prompts_alone",
                                             "prompts_during_import"]
    beside = rows[4]
    assert beside["rounds"] == 5 and beside["large_bytes"] == 512 * 1024
    assert beside["alone_p50_ms"] > 0 and 0 < beside["beside_p50_ms"] <= beside["beside_p99_ms"]
    assert beside["beside_to_alone_p50"] == pytest.approx(
        beside["beside_p50_ms"] / beside["alone_p50_ms"], rel=0.05)
    alone, during = rows[-2:]
    assert alone["prompts"] == 8 * 50 and during["import_events"] == 5_000
    for row in (alone, during):
        assert row["clients"] == 8 and 0 < row["within_budget_with_context"] <= row["prompts"]
        assert row["share_within_budget_with_context"] == round(
            row["within_budget_with_context"] / row["prompts"], 4)
    assert during["import_events_per_s"] > 0


def test_a_hybrid_run_without_the_embedding_model_stops_at_once_saying_why(home, tmp_path):
    env = {**{k: v for k, v in os.environ.items() if k != "KIROLEARN_HOME"},
           "KIROLEARN_EMBEDDINGS_ENABLED": "0"}
    conversations = tmp_path / "locomo.json"
    conversations.write_text("[]")
    result = subprocess.run([sys.executable, str(BENCHMARKS / "locomo.py"), str(conversations),
                             "--mode", "hybrid"], capture_output=True, text=True, timeout=60,
                            env=env, cwd="/tmp")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "locomo: --mode hybrid needs the embedding model, and embeddings are off"
        " (embeddings.enabled = false): search is lexical (`kirolearn embeddings download`,"
        " or --mode lexical)"]


def test_team_benchmark_quick_run_compares_tcp_with_ipc_and_the_stores(home):
    env = {k: v for k, v in os.environ.items() if k != "KIROLEARN_HOME"}
    result = subprocess.run([sys.executable, str(BENCHMARKS / "team.py"), "--quick"],
                            capture_output=True, text=True, timeout=300, env=env, cwd="/tmp")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    searches = [row for row in rows if row["case"] == "search"]
    assert [(row["storage"], row["records"], row["answered"]) for row in searches] == [
        ("sqlite", 2000, 150), ("postgresql", 2000, 150)]
    assert all(row["search_p99_ms"] > 0 for row in searches)
    rows = [row for row in rows if row["case"] != "search"]
    assert {row["storage"] for row in rows} == {"postgresql"}
    assert [(row["case"], row["path"]) for row in rows] == [
        ("requests", "tcp"), ("requests", "ipc"), ("hooks", "tcp"), ("hooks", "ipc")]
    for row in rows[:2]:  # a prompt may miss its budget on a loaded machine: counted
        assert row["clients"] == 4 and row["events"] + row["missed"] == 4 * 3 * 5
        assert row["prompts"] == 4 * 3 and row["share_prompts_within_budget_with_context"] > 0
        assert row["prompt_p99_ms"] is not None and row["events_per_s"] > 0
    for row in rows[2:]:
        assert row["hooks"] == 4 * 5 and 1 <= row["prompts_with_context"] <= 4
