"""Team benchmark: 20 developers' hooks against one daemon, over TCP with CURVE.

One daemon (a home of its own, ``--listen tcp://127.0.0.1:PORT``) holds a seeded project
memory; a second home is a developer's machine connected to it (``kirolearn connect``,
its key allowed with ``kirolearn keys add``). Each case runs 20 concurrent clients, every
one a turn at a time: a prompt with retrieval, then four tool uses.

- ``requests``: the clients are threads sending what a shim sends (``put_event``; a prompt
  waits at most the 500 ms budget, the shim's poll timeout): latency p50/p99 per kind,
  the share of prompts answered within the budget with context, and events/s. Over TCP
  through the gateway, and over ipc on the daemon's machine, in the same run.
- ``hooks``: the clients run the real Claude Code shim, one process per hook: the hook's
  wall time (Python's start included) p50/p99 per kind, over TCP and over ipc.

- ``search``: the store alone, on SQLite and on PostgreSQL at each size (100,000 and
  1,000,000 records): search p50/p99 over 200 prompts, and how long writing took.

The daemon stores in PostgreSQL (``--storage``): a server of its own, started in a
temporary folder by the tests' helper (Debian's binaries, tests/install-postgresql).
Embeddings are off (lexical retrieval), so no back-fill competes for the CPU. Prints one
JSON line per case, path and store (DESIGN.md §10); progress goes to stderr.

    python benchmarks/team.py            # 10,000 records, 20 clients x 20 turns; search sizes
    python benchmarks/team.py --cases search --search-sizes 100000
    python benchmarks/team.py --quick    # a smoke run in seconds
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import corpus
from harness import percentile, say, write_records

from kirolearn import contract, control, db, keys, paths, project, transport
from kirolearn.search.engine import Engine
from kirolearn.search.request import Request

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from postgres_server import PostgresServer

KL = [sys.executable, "-m", "kirolearn"]
SHIM = str(Path(sys.executable).parent / "kirolearn-claude-code")
BUDGET_MS = 500
ACTOR = "bench"
TOOLS_PER_TURN = 4


def free_port() -> int:
    """A port P with P, P+1 and P+2 free (the daemon listens on all three)."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        try:
            for offset in (1, 2):
                with socket.socket() as other:
                    other.bind(("127.0.0.1", port + offset))
            return port
        except OSError:
            continue


def latency_figures(prefix: str, values: list[float]) -> dict:
    if not values:
        return {f"{prefix}_p50_ms": None, f"{prefix}_p99_ms": None}
    return {f"{prefix}_p50_ms": round(statistics.median(values), 1),
            f"{prefix}_p99_ms": round(percentile(values, 99), 1)}


def run_clients(clients: int, turns: int, one_turn) -> tuple[dict, float]:
    """``clients`` threads, each calling ``one_turn(client, turn, found)`` ``turns``
    times; what they found, and the seconds it all took."""
    found: dict[str, list] = {"prompt": [], "tool_use": [], "missed": [], "context": []}
    lock = threading.Lock()

    def client(number: int) -> None:
        mine: dict[str, list] = {key: [] for key in found}
        for turn in range(turns):
            one_turn(number, turn, mine)
        with lock:
            for key, values in mine.items():
                found[key] += values

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return found, time.perf_counter() - started


def requests_case(path: str, base: Path, namespace: str, clients: int, turns: int,
                  prompts: list[str]) -> dict:
    """What a shim sends, from threads: through the gateway (``base`` connected) or ipc."""
    away = control.remote(paths.Home(base))

    def one_turn(number: int, turn: int, found: dict) -> None:
        if away is not None:
            rpc = transport.Client(away.endpoint, timeout_ms=BUDGET_MS, curve=away.curve,
                                   to="ingest")
        else:
            rpc = transport.Client(paths.Home(base).endpoint("ingest"), timeout_ms=BUDGET_MS)
        session = f"{path}-{number}-{turn}"
        with rpc:
            for index in range(1 + TOOLS_PER_TURN):
                kind = "prompt" if index == 0 else "tool_use"
                body = ({"type": "text", "content": prompts[(number * turns + turn) % len(
                    prompts)]} if index == 0 else {"type": "json", "data": {
                        "tool_name": "Bash", "tool_input": {"command": f"pytest -k {index}"},
                        "tool_response": {"result": f"{index} passed"}}})
                event = contract.make_event(kind, body, namespace=namespace, actor_id=ACTOR,
                                            session_id=session, surface="claude-code",
                                            version="bench", client_id=f"dev-{number}")
                started = time.perf_counter()
                try:
                    reply = rpc.call("put_event", {"event": event, "retrieve": index == 0},
                                     timeout_ms=BUDGET_MS if index == 0 else control.EVENT_MS)
                except transport.Timeout:
                    found["missed"].append(kind)
                    continue
                found[kind].append((time.perf_counter() - started) * 1000)
                if index == 0:
                    found["context"].append(bool((reply.get("retrieval") or {}).get("context")))

    found, seconds = run_clients(clients, turns, one_turn)
    events = len(found["prompt"]) + len(found["tool_use"])
    within = sum(1 for latency, context in zip(found["prompt"], found["context"], strict=True)
                 if latency <= BUDGET_MS and context)
    prompts_sent = len(found["prompt"]) + found["missed"].count("prompt")
    return {"bench": "team", "case": "requests", "path": path, "clients": clients,
            "events": events, "events_per_s": round(events / seconds, 1),
            **latency_figures("prompt", found["prompt"]),
            **latency_figures("tool_use", found["tool_use"]),
            "prompts": prompts_sent, "missed": len(found["missed"]),
            "share_prompts_within_budget_with_context": round(within / max(1, prompts_sent), 4)}


def hooks_case(path: str, base: Path, proj: Path, env: dict, clients: int, turns: int,
               prompts: list[str]) -> dict:
    """The real shim, one process per hook, from ``clients`` threads."""
    env = {**env, "KIROLEARN_HOME": str(base), "KIROLEARN_AUTOSTART": "0"}

    def hook(payload: dict) -> tuple[float, str]:
        started = time.perf_counter()
        done = subprocess.run([SHIM], input=json.dumps(payload), capture_output=True,
                              text=True, cwd=proj, env=env, timeout=60)
        return (time.perf_counter() - started) * 1000, done.stdout

    def one_turn(number: int, turn: int, found: dict) -> None:
        session = f"hooks-{path}-{number}-{turn}"
        wall, out = hook({"hook_event_name": "UserPromptSubmit", "session_id": session,
                          "cwd": str(proj), "prompt": prompts[(number * turns + turn) % len(
                              prompts)]})
        found["prompt"].append(wall)
        found["context"].append(bool(out))
        for index in range(TOOLS_PER_TURN):
            wall, _ = hook({"hook_event_name": "PostToolUse", "session_id": session,
                            "cwd": str(proj), "tool_name": "Bash",
                            "tool_input": {"command": f"pytest -k {index}"},
                            "tool_response": f"{index} passed"})
            found["tool_use"].append(wall)

    found, seconds = run_clients(clients, turns, one_turn)
    hooks = len(found["prompt"]) + len(found["tool_use"])
    spooled = len(list(paths.Home(base).spool_dir.glob("*.json")))
    return {"bench": "team", "case": "hooks", "path": path, "clients": clients,
            "hooks": hooks, "hooks_per_s": round(hooks / seconds, 1),
            **latency_figures("prompt_wall", found["prompt"]),
            **latency_figures("tool_use_wall", found["tool_use"]),
            "prompts_with_context": sum(found["context"]), "spooled": spooled}


def search_case(storage: str, where: db.Location, count: int) -> dict:
    """``search``: ``count`` records written to the store, then 200 prompts searched
    (lexical, as the daemon's retrieval role searches, on a connection of its own)
    after 50 to warm it: latency p50/p99."""
    base = Path(tempfile.mkdtemp(prefix="kl-bench-", dir="/tmp"))
    try:
        namespaces = [f"/actor/{ACTOR}/project/{n}/" for n in ("main", "docs", "infra")]
        records = corpus.records(count, namespaces)
        started = time.monotonic()
        write_records(base, records, where)
        written_s = time.monotonic() - started
        prompts = [f"{r['title']} again: what did we conclude?"
                   for r in records[-1:-2500:-10]][:250]
        found = Engine(where)
        try:
            for prompt in prompts[:50]:
                found.search(Request(namespaces[0], prompt, 10, 600_000))
            timed = [found.search(Request(namespaces[0], prompt, 10, 600_000))
                     for prompt in prompts[50:]]
        finally:
            found.close()
        return {"bench": "team", "case": "search", "storage": storage, "records": count,
                "write_s": round(written_s, 1),
                "answered": sum(r.outcome in ("ok", "empty") for r in timed),
                **latency_figures("search", [r.latency_ms for r in timed])}
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--turns", type=int, default=20, help="turns per client (requests)")
    parser.add_argument("--hook-turns", type=int, default=3, help="turns per client (hooks)")
    parser.add_argument("--search-sizes", default="100000,1000000",
                        help="record counts of the search case, on each store")
    parser.add_argument("--storage", choices=("postgresql", "sqlite"), default="postgresql",
                        help="the daemon's store in the requests and hooks cases")
    parser.add_argument("--cases", default="requests,hooks,search")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.records, args.clients, args.turns, args.hook_turns = 500, 4, 3, 1
        args.search_sizes = "2000"
    cases = set(args.cases.split(","))
    server = PostgresServer().start()
    try:
        if cases & {"requests", "hooks"}:
            team_cases(args, cases, server.database() if args.storage == "postgresql" else None)
        for count in (int(n) for n in args.search_sizes.split(",") if "search" in cases):
            for storage in ("sqlite", "postgresql"):
                where = (server.database() if storage == "postgresql"
                         else Path(tempfile.mkdtemp(prefix="kl-bench-", dir="/tmp")) / "k.db")
                say(f"search on {storage} at {count} records")
                print(json.dumps(search_case(storage, where, count)), flush=True)
                if storage == "sqlite":
                    subprocess.run(["rm", "-rf", str(where.parent)], check=True)
    finally:
        server.stop()


def team_cases(args: argparse.Namespace, cases: set[str], url: str | None) -> None:
    """The requests and hooks cases, the daemon's store at url (None: its SQLite file)."""
    daemon_home = Path(tempfile.mkdtemp(prefix="kl-bench-", dir="/tmp"))
    laptop = Path(tempfile.mkdtemp(prefix="kl-bench-", dir="/tmp"))
    work = Path(tempfile.mkdtemp(prefix="kl-bench-", dir="/tmp"))
    proj = work / "proj"
    (proj / ".git").mkdir(parents=True)
    env = {**os.environ, "HOME": str(work), "USER": ACTOR, "LOGNAME": ACTOR,
           "KIROLEARN_EMBEDDINGS_ENABLED": "0"}
    namespace = project.resolve_project(proj, home=str(work), override="").namespace(ACTOR)
    records = corpus.records(args.records, [namespace])
    prompts = [f"{r['title']} again: what did we conclude?" for r in records[:200]]
    say(f"seeding {args.records} records; the daemon listens on TCP with CURVE and stores"
        f" in {'PostgreSQL' if url else 'SQLite'}")
    write_records(daemon_home, records, url)
    server_env = {**env, "KIROLEARN_HOME": str(daemon_home)}
    if url:
        server_env["KIROLEARN_STORAGE_URL"] = url
    subprocess.run([*KL, "keys", "init"], env=server_env, check=True, capture_output=True)
    address = f"tcp://127.0.0.1:{free_port()}"
    subprocess.run([*KL, "start", "--listen", address], env=server_env, check=True,
                   capture_output=True, cwd="/tmp")
    try:
        server_key = keys.server_pair(paths.Home(daemon_home)).public.decode()
        subprocess.run([*KL, "connect", address, "--server-key", server_key],
                       env={**env, "KIROLEARN_HOME": str(laptop)}, check=True,
                       capture_output=True)
        keys.allow(ACTOR, keys.client_pair(paths.Home(laptop)).public.decode(),
                   paths.Home(daemon_home))
        storage = {"storage": "postgresql" if url else "sqlite"}
        for path, base in (("tcp", laptop), ("ipc", daemon_home)):
            if "requests" in cases:
                say(f"requests over {path}: {args.clients} clients x {args.turns} turns")
                print(json.dumps({**requests_case(path, base, namespace, args.clients,
                                                  args.turns, prompts), **storage}), flush=True)
        for path, base in (("tcp", laptop), ("ipc", daemon_home)):
            if "hooks" in cases:
                say(f"hooks over {path}: {args.clients} clients x {args.hook_turns} turns")
                print(json.dumps({**hooks_case(path, base, proj, env, args.clients,
                                               args.hook_turns, prompts), **storage}),
                      flush=True)
    finally:
        subprocess.run([*KL, "stop"], env=server_env, capture_output=True, cwd="/tmp")
        for directory in (daemon_home, laptop, work):
            subprocess.run(["rm", "-rf", str(directory)], check=True)


if __name__ == "__main__":
    main()
