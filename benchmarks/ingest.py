"""Ingest benchmark: events/s and per-event ack latency through client → ingest → storage
commit, peak RSS of the daemon, the bulk path (``kirolearn import``), and live hooks
during an import.

Then a small prompt with retrieval on its own and just after another client's 512 KiB
event (``prompt_beside_large``: the ratio of the medians, target 2).

The last case is an agent's day: 8 clients send prompts with retrieval, as a shim does
(its 500 ms budget as the poll timeout; a prompt every 100 ms each), first on their own
(``prompts_alone``), then while ``kirolearn import`` loads 50,000 events
(``prompts_during_import``): how many were answered within the budget with their
context (target: 99%, with two busy loops beside it), and the import's own rate.

Prints one JSON line per configuration (see DESIGN.md §10); progress goes to stderr.

    python benchmarks/ingest.py            # 10,000 events per live config, 100,000 imported
    python benchmarks/ingest.py --quick    # a smoke run in seconds
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq
from harness import daemon_processes, percentile, say

from kirolearn import contract, paths, protocol, transport

KL = [sys.executable, "-m", "kirolearn"]
NAMESPACE = "/actor/bench/project/" + "b" * 64 + "/"


TURN = ("prompt", *["tool_use"] * 8, "session_summary")  # one agent turn


def make_events(count: int, tag: str) -> list[dict]:
    """Turns of a prompt, eight tool uses and a turn summary; every body distinct."""
    kinds = TURN
    events = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        if kind == "tool_use":
            body = {"type": "json", "data": {
                "tool_name": "fs_read", "tool_input": {"path": f"src/{tag}/module_{i}.py"},
                "tool_response": {"success": True, "result": f"def handler_{i}(request):\n"
                                  "    return render(request, 'index.html')\n" * 4}}}
        else:
            body = {"type": "text", "content": f"{tag} {i}: refactor the storage layer to use"
                    " SQLite WAL mode and keep the migrations forward-only"}
        events.append(contract.make_event(
            kind, body, namespace=NAMESPACE, actor_id="bench", session_id=f"s{i // 50}",
            surface="kiro-cli", version="bench", client_id="bench"))
    return events


def live_path(events: list[dict], concurrency: int) -> dict:
    """Keep `concurrency` put_event requests in flight (like that many shims at once)."""
    ctx = zmq.Context()
    sock = transport.make_socket(ctx, zmq.DEALER, connect=paths.Home.current().endpoint("ingest"))
    sent: dict[str, float] = {}
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    queue = iter(events)
    started = time.perf_counter()
    exhausted = False
    while True:
        while not exhausted and len(sent) < concurrency:
            event = next(queue, None)
            if event is None:
                exhausted = True
                break
            message = protocol.request("put_event", {"event": event})
            sent[message["id"]] = time.perf_counter()
            sock.send_multipart([b"", protocol.pack(message)])
        if exhausted and not sent:
            break
        if not sock.poll(10_000):
            raise RuntimeError("ingest stopped answering")
        reply = protocol.parse_reply(sock.recv_multipart()[-1])
        latencies.append((time.perf_counter() - sent.pop(reply["id"])) * 1000)
        key = reply["body"].get("status") if reply["ok"] else "error"
        statuses[key] = statuses.get(key, 0) + 1
    elapsed = time.perf_counter() - started
    sock.close(linger=0)
    ctx.term()
    if statuses != {"stored": len(events)}:
        raise RuntimeError(f"unexpected outcomes: {statuses}")
    return {
        "events": len(events), "turn_events": len(TURN), "concurrency": concurrency,
        "events_per_s": round(len(events) / elapsed, 1),
        "ack_p50_ms": round(statistics.median(latencies), 3),
        "ack_p99_ms": round(percentile(latencies, 99), 3),
    }


BUDGET_MS = 500  # the shim's poll timeout
PROMPT_EVERY_S = 0.1
PROMPT = "how did we refactor the storage layer to SQLite WAL mode with forward-only migrations"


def prompt_event(text: str, session: str) -> dict:
    return contract.make_event("prompt", {"type": "text", "content": text},
                               namespace=NAMESPACE, actor_id="bench", session_id=session,
                               surface="kiro-cli", version="bench", client_id="bench")


def prompt_clients(clients: int, stop: threading.Event, prompts_each: int | None = None
                   ) -> dict:
    """`clients` threads, each sending a prompt with retrieval every PROMPT_EVERY_S until
    `stop` is set (at least one each) or `prompts_each` are sent, each waiting at most
    the budget; what they got."""
    outcomes: list[tuple[float | None, str, bool]] = []  # latency (None: missed), outcome

    def client(number: int) -> None:
        sent = 0
        rpc = transport.Client(paths.Home.current().endpoint("ingest"), timeout_ms=BUDGET_MS)
        while (sent == 0 or not stop.is_set()) and (prompts_each is None or sent < prompts_each):
            started = time.perf_counter()
            event = prompt_event(f"{PROMPT} ({number}-{sent})", f"live-{number}")
            try:
                reply = rpc.call("put_event", {"event": event, "retrieve": True})
                latency = (time.perf_counter() - started) * 1000
                retrieval = reply["retrieval"]
                outcomes.append((latency, retrieval["outcome"], bool(retrieval["context"])))
            except transport.Timeout:
                outcomes.append((None, "missed", False))
            sent += 1
            time.sleep(max(0.0, PROMPT_EVERY_S - (time.perf_counter() - started)))
        rpc.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    answered = [latency for latency, _, _ in outcomes if latency is not None]
    with_context = sum(1 for latency, outcome, context in outcomes
                       if latency is not None and latency <= BUDGET_MS and context)
    return {"clients": clients, "prompts": len(outcomes),
            "within_budget_with_context": with_context,
            "share_within_budget_with_context": round(with_context / max(1, len(outcomes)), 4),
            "missed_budget": len(outcomes) - len(answered),
            "timeouts": sum(outcome == "timeout" for _, outcome, _ in outcomes),
            "prompt_p50_ms": round(statistics.median(answered), 1) if answered else None,
            "prompt_p99_ms": round(percentile(answered, 99), 1) if answered else None}


def large_tool_use(n: int) -> dict:
    """A tool's output as large as a shim sends (it cuts bodies to 512 KiB): a log."""
    log = "".join(f"2026-11-24 10:{i // 60 % 60:02d}:{i % 60:02d} worker-{i % 7} INFO"
                  f" handled job {n}-{i} in {i % 97} ms\n"
                  for i in range(contract.TRUNCATE_BYTES // 64))[:contract.TRUNCATE_BYTES - 512]
    return contract.make_event(
        "tool_use", {"type": "json", "data": {"tool_name": "execute_bash",
                                              "tool_input": {"command": "cat worker.log"},
                                              "tool_response": {"result": log}}},
        namespace=NAMESPACE, actor_id="bench", session_id=f"large-{n}", surface="kiro-cli",
        version="bench", client_id="bench")


def prompt_beside_large(rounds: int) -> dict:
    """A small prompt with retrieval on its own, then sent just after another client's
    512 KiB event: its time each way, and the ratio of the medians (target: 2)."""
    home = paths.Home.current()
    prompts = transport.Client(home.endpoint("ingest"), timeout_ms=10_000)
    ctx = zmq.Context()
    large = transport.make_socket(ctx, zmq.DEALER, connect=home.endpoint("ingest"))
    alone, beside = [], []
    try:
        for n in range(rounds):
            started = time.perf_counter()
            prompts.call("put_event", {"event": prompt_event(f"{PROMPT} ({n})", "small"),
                                       "retrieve": True})
            alone.append((time.perf_counter() - started) * 1000)
            large.send_multipart([b"", protocol.pack(protocol.request(
                "put_event", {"event": large_tool_use(n)}))])
            started = time.perf_counter()
            prompts.call("put_event", {"event": prompt_event(f"{PROMPT} [{n}]", "small"),
                                       "retrieve": True})
            beside.append((time.perf_counter() - started) * 1000)
            if not large.poll(10_000):
                raise RuntimeError("ingest did not acknowledge the large event")
            reply = protocol.parse_reply(large.recv_multipart()[-1])
            if not reply["ok"] or reply["body"].get("status") != "stored":
                raise RuntimeError(f"the large event was not stored: {reply}")
    finally:
        prompts.close()
        large.close(linger=0)
        ctx.term()
    return {"bench": "ingest", "path": "prompt_beside_large", "rounds": rounds,
            "large_bytes": contract.TRUNCATE_BYTES,
            "alone_p50_ms": round(statistics.median(alone), 1),
            "beside_p50_ms": round(statistics.median(beside), 1),
            "beside_p99_ms": round(percentile(beside, 99), 1),
            "beside_to_alone_p50": round(statistics.median(beside) / statistics.median(alone),
                                         2), "target_ratio": 2}


def import_file(path: Path, count: int, tag: str) -> float:
    """`kirolearn import` of `count` events written to path; its events/s."""
    with path.open("w") as handle:
        for event in make_events(count, tag):
            handle.write(json.dumps(event) + "\n")
    started = time.perf_counter()
    result = subprocess.run([*KL, "import", str(path)], capture_output=True, text=True,
                            check=True)
    elapsed = time.perf_counter() - started
    if not result.stdout.startswith(f"stored {count},"):
        raise RuntimeError(result.stdout + result.stderr)
    return count / elapsed


def live_during_import(home: Path, count: int, clients: int) -> list[dict]:
    """Prompts from `clients` on their own, then during an import of `count` events."""
    stop = threading.Event()
    say(f"prompts with retrieval from {clients} clients, on their own")
    alone = {"bench": "ingest", "path": "prompts_alone",
             **prompt_clients(clients, stop, prompts_each=50)}
    say(f"... and during an import of {count} events")
    rows = {}

    def load() -> None:
        try:
            rows["rate"] = import_file(home / "during.jsonl", count, "during")
        finally:
            stop.set()

    importer = threading.Thread(target=load)
    importer.start()
    during = {"bench": "ingest", "path": "prompts_during_import", "import_events": count,
              **prompt_clients(clients, stop)}
    importer.join()
    during["import_events_per_s"] = round(rows["rate"], 1)
    return [alone, during]


def wait_until_quiet(timeout_s: float = 120) -> None:
    """Let extraction of the live runs finish, so the import is measured on its own."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = json.loads(subprocess.run([*KL, "stats", "--json"], capture_output=True,
                                          text=True, check=True).stdout)
        if stats["totals"]["pending_batches"] == 0:
            return
        time.sleep(0.5)
    say("extraction still busy; measuring the import anyway")


def daemon_memory() -> dict:
    """Peak resident memory (VmHWM) of each daemon process, summed."""
    peak_kb = {}
    for pid in daemon_processes().values():
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak_kb[pid] = int(line.split()[1])
    return {"daemon_peak_rss_mb": round(sum(peak_kb.values()) / 1024, 1),
            "largest_process_peak_rss_mb": round(max(peak_kb.values()) / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--import-events", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--during-events", type=int, default=50_000,
                        help="events imported while the prompt clients run")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.events, args.import_events, args.during_events = 500, 2_000, 5_000
    home = Path(tempfile.mkdtemp(prefix="kl-bench-", dir="/tmp"))
    os.environ["KIROLEARN_HOME"] = str(home)
    os.environ["KIROLEARN_EMBEDDINGS_ENABLED"] = "0"  # no back-fill competing for the CPU
    # Extraction runs as in use: each turn's end forms a batch (deferred while events pour
    # in, at most 10 s), so the acks are measured with workers and their commits beside.
    subprocess.run([*KL, "start"], check=True, stdout=subprocess.DEVNULL)
    try:
        for concurrency in args.concurrency:
            say(f"live path: {args.events} events, {concurrency} in flight")
            row = {"bench": "ingest", "path": "live"}
            row.update(live_path(make_events(args.events, f"c{concurrency}"), concurrency))
            print(json.dumps(row), flush=True)
        wait_until_quiet()
        say(f"import path: {args.import_events} events")
        rate = import_file(home / "import.jsonl", args.import_events, "import")
        row = {"bench": "ingest", "path": "import", "events": args.import_events,
               "events_per_s": round(rate, 1), "elapsed_s": round(args.import_events / rate, 2)}
        row.update(daemon_memory())
        print(json.dumps(row), flush=True)
        wait_until_quiet()
        say("a small prompt beside a 512 KiB event")
        print(json.dumps(prompt_beside_large(5 if args.quick else 30)), flush=True)
        wait_until_quiet()
        for row in live_during_import(home, args.during_events, args.clients):
            print(json.dumps(row), flush=True)
    finally:
        subprocess.run([*KL, "stop"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", str(home)], check=True)


if __name__ == "__main__":
    main()
