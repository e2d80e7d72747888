"""Extraction benchmark: batches/s and events/s through the daemon's extraction workers.

With a model: a scripted OpenAI-compatible endpoint on 127.0.0.1 answers every call
after a fixed latency (200 ms by default, like a small hosted model), and the daemon
runs 1, 2 and 4 workers; `scaling` is each rate over N × the one-worker rate (the
target is ≥ 0.85). Without one: the heuristic extractor on one worker, and on its own
in this process.

Each batch is one turn of one project (a prompt, three tool uses, a turn summary), so
every turn's end forms a batch. The events go in as `kirolearn import` sends them (100
to a `put_events`), a backlog to work through. Time runs from the first event sent until
every batch is committed. Prints one JSON line per configuration (DESIGN.md §10).

    python benchmarks/extraction.py            # 60 model batches per worker count
    python benchmarks/extraction.py --quick    # a smoke run in seconds
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from harness import say

from kirolearn import contract, paths, transport
from kirolearn.extract import heuristic

KL = [sys.executable, "-m", "kirolearn"]
ANSWER = json.dumps({"records": [{
    "title": "Export rows without a customer no longer crash",
    "summary": "The CSV export read row['customer_id'] directly; it now falls back to an empty"
               " column, and the export tests pass.",
    "observation_type": "error", "facts": ["ran `pytest -q` → exit 0"],
    "concepts": ["csv export"], "files_touched": ["src/billing/export.py"]}]})


def scripted_endpoint(latency_s: float) -> ThreadingHTTPServer:
    """Answers every chat-completions call with ANSWER after `latency_s`."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            time.sleep(latency_s)
            data = json.dumps({"choices": [{"message": {"content": ANSWER}}],
                               "usage": {"total_tokens": 500}}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def turn(project: int) -> list[dict]:
    """One turn of one project: prompt, read, failing test, edit, turn summary."""
    namespace = f"/actor/bench/project/{project:064d}/"
    root = f"/home/bench/p{project}"

    def event(kind: str, body: dict) -> dict:
        return contract.make_event(kind, body, namespace=namespace, actor_id="bench",
                                   session_id=f"s{project}", surface="kiro-cli",
                                   version="bench", client_id="bench", project_path=root)

    def tool(name: str, tool_input: dict, response: dict) -> dict:
        return {"type": "json", "data": {"tool_name": name, "tool_input": tool_input,
                                         "tool_response": response}}

    return [
        event("prompt", {"type": "text", "content": f"the export of project {project} crashes"
                         " on invoices without a customer; fix it"}),
        event("tool_use", tool("fs_read", {"operations": [
            {"mode": "Line", "path": f"{root}/src/billing/export.py"}]},
            {"success": True, "result": ["def export_invoices(rows):\n    ...\n" * 20]})),
        event("tool_use", tool("execute_bash", {"command": "pytest -q tests/test_export.py"},
                               {"success": False, "result": [{
                                   "exit_status": "1", "stderr": "",
                                   "stdout": "E   KeyError: 'customer_id'\n"
                                             "1 failed, 4 passed in 0.31s\n" * 5}]})),
        event("tool_use", tool("fs_write", {"command": "str_replace",
                                            "path": f"{root}/src/billing/export.py",
                                            "old_str": "row['customer_id']",
                                            "new_str": "row.get('customer_id') or ''"},
                               {"success": True, "result": ["ok"]})),
        event("session_summary", {"type": "text", "content": "Rows without a customer now"
                                  " export with an empty column; the tests pass."}),
    ]


def run(workers: int, turns: int, env: dict[str, str]) -> dict:
    home = Path(tempfile.mkdtemp(prefix="kl-bench-", dir="/tmp"))
    os.environ["KIROLEARN_HOME"] = str(home)
    os.environ["KIROLEARN_EMBEDDINGS_ENABLED"] = "0"  # no back-fill competing for the CPU
    os.environ.update(env)
    events = [e for project in range(turns) for e in turn(project)]
    subprocess.run([*KL, "start", "--extraction-workers", str(workers)], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        conn = sqlite3.connect(f"file:{paths.Home(home).db_path}?mode=ro", uri=True)
        client = transport.Client(paths.Home.current().endpoint("ingest"), timeout_ms=10_000)
        started = time.perf_counter()
        for start in range(0, len(events), 100):  # as an import sends them
            client.call("put_events", {"events": events[start:start + 100]})
        client.close()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            done = conn.execute("SELECT count(*) FROM extraction_batches"
                                " WHERE state = 'done'").fetchone()[0]
            if done >= turns:
                break
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        strategies = dict(conn.execute(
            "SELECT strategy, count(*) FROM memory_records GROUP BY strategy").fetchall())
        conn.close()
        return {"workers": workers, "batches": turns, "events": len(events),
                "batches_per_s": round(turns / elapsed, 2),
                "events_per_s": round(len(events) / elapsed, 1),
                "elapsed_s": round(elapsed, 2),
                "records_llm": strategies.get("llm-summary", 0),
                "records_heuristic": strategies.get("heuristic", 0)}
    finally:
        subprocess.run([*KL, "stop"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", str(home)], check=True)
        for name in env:
            os.environ.pop(name, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=60, help="model batches per run")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--heuristic-turns", type=int, default=2000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.turns, args.workers, args.heuristic_turns = 8, [1, 2], 40
    server = scripted_endpoint(args.latency_ms / 1000)
    model = {"KIROLEARN_EXTRACTION_STRATEGY": "openai", "KIROLEARN_EXTRACTION_LLM_MODEL": "x",
             "KIROLEARN_EXTRACTION_LLM_URL": f"http://127.0.0.1:{server.server_address[1]}/v1"}
    single = None
    try:
        for workers in args.workers:
            say(f"model at {args.latency_ms:.0f} ms, {workers} worker(s), {args.turns} batches")
            row = {"bench": "extraction", "strategy": "openai-scripted",
                   "llm_latency_ms": args.latency_ms, **run(workers, args.turns, model)}
            single = single or row["batches_per_s"] / workers
            row["ideal_batches_per_s"] = round(workers * 1000 / args.latency_ms, 2)
            row["scaling"] = round(row["batches_per_s"] / (workers * single), 3)
            print(json.dumps(row), flush=True)
    finally:
        server.shutdown()
        server.server_close()
    say(f"heuristic, 1 worker, {args.heuristic_turns} batches")
    row = {"bench": "extraction", "strategy": "heuristic", **run(1, args.heuristic_turns, {})}
    events = [e for project in range(50) for e in turn(project)]
    started = time.perf_counter()
    for start in range(0, len(events), 5):
        heuristic.extract(events[start]["namespace"], events[start:start + 5])
    row["in_process_events_per_s"] = round(len(events) / (time.perf_counter() - started))
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
