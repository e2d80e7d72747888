"""Idle benchmark: what a daemon nobody talks to costs, and how fast it answers after.

Starts a daemon in a temporary home, lets it settle, then reads each process's CPU time
from ``/proc/PID/stat`` over a window with nothing to do, and over a window with the
viewer's live page open (its server-sent-events stream, as the browser holds it; the
viewer's process starts with that first page, ``viewer_first_page_ms``). Then
the first prompt (with retrieval) after the idle window is timed against the prompts
right after it.

Prints JSON Lines (DESIGN.md §10): one line per window with the share of one core each
process used (``cpu_<process>_pct``) and in total (target: 0.5), then one
``after_idle`` line; then the memory each process holds (proportional set size,
``pss_<process>_mb``, and ``pss_total_mb``), idle and after work: records saved and
embedded (the back-fill, on long texts), prompts answered, and once more when the
embedding model's process has left (``--model-idle-s``, ``embeddings.idle_s``, and the
viewer's after the same time, ``viewer.idle_s``) and each role, quiet, has given back its
memory (``memory_given_back``). ``--mode lexical``: the same with embeddings off.

    python benchmarks/idle.py            # 60 s windows
    python benchmarks/idle.py --seconds 10 --records 10000   # memory after a large back-fill
    python benchmarks/idle.py --quick    # 2 s windows, after 1 s to settle
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from harness import cpu_seconds, daemon_processes, figures, say

from kirolearn import contract, control, db, paths
from kirolearn.db import reads
from kirolearn.viewer.listener import load_token

KL = [sys.executable, "-m", "kirolearn"]
NAMESPACE = "/actor/bench/project/" + "c" * 64 + "/"
TARGET_PCT = 0.5
SETTLE_S = 3.0  # start-up work (the spool drained, the model loaded) is not idling

def cpu_window(seconds: float) -> dict:
    """Each process's share of one core over ``seconds`` of wall time, in percent."""
    pids = daemon_processes()
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    shares = {name: (after[name] - before[name]) / elapsed * 100
              for name in pids}
    return {"seconds": round(elapsed, 1),
            "cpu_total_pct": round(sum(shares.values()), 3), "target_pct": TARGET_PCT,
            **{f"cpu_{name}_pct": round(share, 3) for name, share in sorted(shares.items())}}


class LivePage:
    """The viewer's live page as a browser holds it: the page, then its event stream."""

    def __init__(self, base: Path):
        info = control.viewer_info(paths.Home(base)) or {}
        if "url" not in info:
            raise SystemExit("idle: the viewer is not listening")
        self.http = httpx.Client(base_url=info["url"], timeout=None, headers={
            "authorization": f"Bearer {load_token(paths.Home(base))}"})
        started = time.perf_counter()
        self.http.get("/live").raise_for_status()
        self.first_page_ms = (time.perf_counter() - started) * 1000  # the viewer starts
        self.opened = threading.Event()
        self.closing = False
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()
        if not self.opened.wait(10):
            raise SystemExit("idle: the viewer's live stream did not open")

    def _follow(self) -> None:
        with self.http.stream("GET", "/api/stream") as stream:
            stream.raise_for_status()
            self.opened.set()
            for _ in stream.iter_lines():
                if self.closing:
                    return

    def close(self) -> None:
        self.closing = True
        self.http.close()


def pss_mb() -> dict:
    """Each process's proportional set size (shared pages split between their users)."""
    found = {}
    for name, pid in daemon_processes().items():
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                found[f"pss_{name}_mb"] = round(int(line.split()[1]) / 1024, 1)
    return {**found, "pss_total_mb": round(sum(found.values()), 1)}


def work(records: int) -> None:
    """Records saved as by hand, long ones (about 250 tokens each), and each embedded
    (when embeddings are on)."""
    home = paths.Home.current()
    for n in range(records):
        record = {"record_id": contract.new_record_id(), "namespace": NAMESPACE,
                  "title": f"How the sync queue retries, part {n}",
                  "summary": " ".join(f"step {n}.{i}: the worker backs off and retries the"
                                      f" queue item {i} after a failure" for i in range(20)),
                  "facts": [], "concepts": [], "files_touched": [],
                  "observation_type": "decision", "strategy": "mcp_observation",
                  "source_event_ids": [contract.new_ulid()], "created_at": contract.now_iso()}
        control.call("ingest", "put_record", {"record": record}, timeout_ms=5000, home=home)
    state = control.call("retrieval", "embeddings", {"backfill": True}, timeout_ms=5000,
                         home=home)
    if "unembedded" not in state:  # embeddings off: nothing to wait for
        return
    conn = db.connect_reader(home.db_path)
    try:
        deadline = time.monotonic() + 600 + records
        while reads.count_unembedded(conn) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        conn.close()


def model_left(wait_s: float) -> bool:
    """Wait until the embedding model's process has left (``embeddings.idle_s``); False
    when there is none to wait for (embeddings off)."""
    deadline = time.monotonic() + wait_s
    while True:
        state = control.call("retrieval", "embeddings", {}, timeout_ms=5000,
                             home=paths.Home.current())
        if "model" not in state:
            return False
        if not state["model"].startswith("loaded") or time.monotonic() > deadline:
            return True
        time.sleep(0.2)


def wait_until(done: Callable[[], bool], wait_s: float, every_s: float, late: str) -> None:
    """Ask ``done`` every ``every_s`` until it is true; after ``wait_s``, say ``late``."""
    deadline = time.monotonic() + wait_s
    while not done():
        if time.monotonic() > deadline:
            say(f"  {late}")
            return
        time.sleep(every_s)


def viewer_left() -> bool:
    """Whether the viewer's process has left, unused (``viewer.idle_s``): asked of the
    supervisor alone (``kirolearn status`` asks the roles too, which is work to them)."""
    roles = control.call("supervisor.ctl", "status", timeout_ms=5000,
                         home=paths.Home.current())["roles"]
    return all(role["state"] == "WAITING" for role in roles if role["name"] == "viewer")


def memory_given_back(names: list[str]) -> dict[str, int]:
    """How many times each of these roles has given back its memory after a quiet spell
    (asked on its control socket: a request to the role itself, ``kirolearn status``'s
    too, is work that starts the spell again)."""
    return {name: control.call(f"{name}.ctl", "ping", timeout_ms=5000,
                               home=paths.Home.current())["memory_given_back"]
            for name in names}


def roles_gave_back(since: dict[str, int]) -> bool:
    """Whether every role has given back its memory once more than ``since`` (each does
    after ``base.QUIET_S`` without work)."""
    return all(count > since[name] for name, count in memory_given_back(list(since)).items())


def prompt_ms(index: int) -> float:
    """One prompt with retrieval, through ingest, as a shim sends it."""
    event = contract.make_event(
        "prompt", {"type": "text", "content": f"how do we retry the sync queue ({index})?"},
        namespace=NAMESPACE, actor_id="bench", session_id="idle", surface="kiro-cli",
        version="bench", client_id="bench")
    started = time.perf_counter()
    control.call("ingest", "put_event", {"event": event, "retrieve": True}, timeout_ms=5000,
                 home=paths.Home.current())
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each window")
    parser.add_argument("--model-idle-s", type=int, default=30,
                        help="embeddings.idle_s: the model's process leaves after this long")
    parser.add_argument("--records", type=int, default=200,
                        help="records saved and embedded before the memory is read again")
    parser.add_argument("--mode", choices=["hybrid", "lexical"], default="hybrid",
                        help="lexical: embeddings off (no model, no vectors)")
    parser.add_argument("--quick", action="store_true", help="2 s windows (a smoke run)")
    args = parser.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    settle_s = 1.0 if args.quick else SETTLE_S
    model_idle_s = 2 if args.quick else args.model_idle_s

    home = Path(tempfile.mkdtemp(prefix="kl-bench-", dir="/tmp"))
    os.environ["KIROLEARN_HOME"] = str(home)
    os.environ["KIROLEARN_VIEWER_PORT"] = "0"
    os.environ["KIROLEARN_EMBEDDINGS_IDLE_S"] = str(model_idle_s)
    os.environ["KIROLEARN_VIEWER_IDLE_S"] = str(model_idle_s)
    os.environ["KIROLEARN_EMBEDDINGS_ENABLED"] = "1" if args.mode == "hybrid" else "0"
    subprocess.run([*KL, "start"], check=True, stdout=subprocess.DEVNULL)
    try:
        time.sleep(settle_s)
        say(f"idle for {seconds:.0f} s")
        print(json.dumps({"bench": "idle", "phase": "idle", **cpu_window(seconds)}), flush=True)
        page = LivePage(home)
        try:
            time.sleep(settle_s)
            say(f"idle with the live page open for {seconds:.0f} s")
            print(json.dumps({"bench": "idle", "phase": "live_page_open",
                              "viewer_first_page_ms": round(page.first_page_ms, 1),
                              **cpu_window(seconds)}), flush=True)
        finally:
            page.close()
        model_left(model_idle_s + 60)
        wait_until(viewer_left, model_idle_s + 60, 0.2, "the viewer's process has not left yet")
        print(json.dumps({"bench": "idle", "phase": "memory_idle", "mode": args.mode,
                          **pss_mb()}), flush=True)
        first = prompt_ms(0)  # with the model's process to start again, if it left
        warm = [prompt_ms(i) for i in range(1, 21)]
        print(json.dumps({"bench": "idle", "phase": "after_idle", "idle_s": round(seconds),
                          "first_prompt_ms": round(first, 3), **figures("next_prompts", warm),
                          "first_to_next_p50": round(first / statistics.median(warm), 2)}),
              flush=True)
        records = 20 if args.quick else args.records
        say(f"{records} records saved" + (" and embedded" if args.mode == "hybrid" else ""))
        roles = control.status(paths.Home.current())["roles"]
        before = memory_given_back([role["name"] for role in roles if role["pid"]])
        work(records)
        print(json.dumps({"bench": "idle", "phase": "memory_after_work", "mode": args.mode,
                          "records": records, **pss_mb()}), flush=True)
        if model_left(model_idle_s + 60):
            say(f"the model's process left after {model_idle_s} s without work")
        wait_until(lambda: roles_gave_back(before), 60, 1.0,
                   "not every role has given back its memory yet")
        print(json.dumps({"bench": "idle", "phase": "memory_after_work_idle", "mode": args.mode,
                          "records": records, **pss_mb()}), flush=True)
    finally:
        subprocess.run([*KL, "stop"], check=True, stdout=subprocess.DEVNULL)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
