"""Retrieval benchmark: search latency over a realistic memory corpus, through the daemon.

For each corpus size it writes the records (see corpus.py) into a fresh home, starts
the daemon, warms it with other prompts (as a running daemon is), then sends each query
to the retrieval role and reports, per query set (``prompts``, ``short`` queries, and
the prompts again with the files of a record of the project: in play,
``prompts_files_in_play``, and just opened by a tool, ``prompts_file_opened``):

- search_*: the search as the retrieval role timed it (server side);
- retrieval_cpu_ms_per_search: the CPU time the retrieval role (and its model process)
  spent per search of the set;
- roundtrip_*: client → daemon → client for that search (what `kirolearn search`, the
  MCP server and the shims wait for), and floor_* the same round trip for a ping;
- inline_* (prompts): a prompt event sent to ingest with retrieve=true, answered after
  it is stored (fsync) and searched: the agent's whole wait;
- seed_search_* (in this process, after the daemon's run): the exact seed ranking, every
  term scored over every record, and seed_ratio_p99 how much slower its p99 is;
- seed_overlap_at_10: the share of the seed ranking's top 10 that the budgeted search
  returns, to show what the budget changes;
- postings_words, postings_pairs: the common words the role keeps the scores of
  (``search.postings``), read after the warm-up, and their (record, score) pairs;
- known_item_recall_at_10 (prompts): for prompts written about one record (its title
  and a fact amid ordinary words), how often that record is in the top 10, for the
  budgeted search and (seed_known_item_recall_at_10) for the exact seed ranking.

In ``hybrid`` mode (with the embedding model installed) the records' vectors are
made first, in this process, and kept in ``~/.cache/kirolearn-bench/`` for the next
run (the corpus is seeded, so they do not change); the daemon's searches then include
the query's embedding and the fusion, and retrieval_peak_rss_mb its memory with the
model and the vectors loaded (the role's and its model process's). Lexical runs
switch embeddings off.

Prints one JSON line per records × mode × query set (DESIGN.md §10).

    python benchmarks/retrieval.py            # 10,000 and 100,000 records, 200 queries each
    python benchmarks/retrieval.py --mode hybrid --records 100000
    python benchmarks/retrieval.py --quick    # a smoke run in seconds (title vectors)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import corpus
from harness import cpu_seconds, daemon_processes, figures, say, write_records

from kirolearn import contract, db, paths, search, transport
from kirolearn.search import embeddings
from kirolearn.search.engine import Engine
from kirolearn.search.request import Request

KL = [sys.executable, "-m", "kirolearn"]
NAMESPACES = ["/actor/bench/project/" + c * 64 + "/" for c in "abcd"]
SEARCHED = NAMESPACES[0]  # the big project: most records, the slowest searches


def build(home: Path, count: int) -> list[dict]:
    started = time.perf_counter()
    records = corpus.records(count, NAMESPACES)
    write_records(home, records)
    say(f"  {count} records written in {time.perf_counter() - started:.1f} s")
    return records


def embed_records(home: Path, records: list[dict], embedder: embeddings.Embedder,
                  titles_only: bool) -> None:
    """Store every record's vector, as the daemon's back-fill would, from a cache file
    when an earlier run made them. ``titles_only``: vectors of the titles, ten times
    quicker to make on a small machine; a search costs the same, but finds less."""
    import numpy as np

    texts = [embeddings.record_text(r) for r in records]
    sources = [r["title"] for r in records] if titles_only else texts
    digest = contract.sha256("\n".join(sources).encode()).hexdigest()[:16]
    cache = Path.home() / ".cache" / "kirolearn-bench" / f"vectors-{len(records)}-{digest}.npy"
    if cache.exists():
        matrix = np.load(cache)
    else:
        started = time.perf_counter()
        matrix = np.vstack([embedder.embed(sources[at:at + 32])
                            for at in range(0, len(sources), 32)])
        say(f"  {len(sources)} records embedded in {time.perf_counter() - started:.0f} s")
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, matrix)
    conn = db.connect_writer(paths.Home(home).db_path)
    conn.execute("BEGIN")
    conn.executemany(
        "UPDATE memory_records SET embedding = $1, embedding_hash = $2 WHERE record_id = $3",
        [(embeddings.to_blob(v), embeddings.text_hash(t, embedder.files.space), r["record_id"])
         for r, t, v in zip(records, texts, matrix, strict=True)])
    conn.execute("COMMIT")
    conn.close()


def known_item_recall(engine: Engine, items: list[tuple[str, str]],
                      mode: str = "lexical") -> float:
    found = sum(record_id in engine.search(Request(SEARCHED, prompt, 10, 600_000,
                                                   mode=mode)).record_ids
                for prompt, record_id in items)
    return round(found / len(items), 3)


def words_read(retrieval: transport.Client, most_s: float = 300) -> None:
    """Wait until the retrieval role has read the common words the warm-up asked for
    (``search.postings``), as a running daemon has."""
    started = time.monotonic()
    while retrieval.call("ping", {})["postings"]["reading"]:
        if time.monotonic() - started > most_s:
            raise SystemExit(f"the common words were not read within {most_s:.0f} s")
        time.sleep(0.5)
    say(f"  common words read in {time.monotonic() - started:.1f} s:"
        f" {retrieval.call('ping', {})['postings']}")


def timed_calls(client: transport.Client, op: str, bodies: list[dict]) -> tuple[list, list]:
    """Round trip (ms) and reply of each call, one at a time."""
    times, replies = [], []
    for body in bodies:
        started = time.perf_counter()
        replies.append(client.call(op, body))
        times.append((time.perf_counter() - started) * 1000)
    return times, replies


def prompt_event(text: str) -> dict:
    return contract.make_event("prompt", {"type": "text", "content": text}, namespace=SEARCHED,
                               actor_id="bench", session_id="bench", surface="kiro-cli",
                               version="bench", client_id="bench")


def peak_rss_mb() -> float:
    """The retrieval role's peak resident memory, and its model process's (the model
    runs in a child of it: ``search.embed_worker``)."""
    processes = daemon_processes()
    total_kb = 0
    for name in ("retrieval", "embed_worker"):
        if name not in processes:
            continue
        for line in Path(f"/proc/{processes[name]}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total_kb += int(line.split()[1])
    return round(total_kb / 1024, 1)


def retrieval_cpu_s() -> float:
    """CPU time so far of the retrieval role and of its model process (which, leaving
    when idle, may be a new one: only compare figures taken while it stays)."""
    processes = daemon_processes()
    return sum(cpu_seconds(processes[name]) for name in ("retrieval", "embed_worker")
               if name in processes)


def with_files(prompts: list[str], records: list[dict], seed: int = 23) -> dict[str, list]:
    """The prompts again, each with the files of a record of the searched project: as
    the files in play (``files``: the session touched them), and as a tool use's file
    just opened (``opened``: what is known of it, ranked by the prompt)."""
    rng = random.Random(seed)
    named = [r["files_touched"] for r in records if r["files_touched"]]
    files = [rng.choice(named)[:2] for _ in prompts]
    return {"prompts_files_in_play": [{"query": q, "files": f}
                                      for q, f in zip(prompts, files, strict=True)],
            "prompts_file_opened": [{"query": q, "opened": f[:1]}
                                    for q, f in zip(prompts, files, strict=True)]}


def run(count: int, query_sets: dict[str, list], warmup: list[str], overlap: bool,
        mode: str, titles_only: bool = False) -> None:
    home = Path(tempfile.mkdtemp(prefix="kl-bench-", dir="/tmp"))
    os.environ["KIROLEARN_HOME"] = str(home)
    os.environ["KIROLEARN_STORAGE_BATCH_IDLE_S"] = "3600"  # no extraction mid-run
    os.environ["KIROLEARN_EMBEDDINGS_ENABLED"] = "1" if mode == "hybrid" else "0"
    say(f"{count} records, {mode}")
    records = build(home, count)
    embedder = embeddings.load() if mode == "hybrid" else None
    if embedder is not None:
        embed_records(home, records, embedder, titles_only)
    searched = [r for r in records if r["namespace"] == SEARCHED]
    known = corpus.known_item_prompts(searched, len(query_sets["prompts"]))
    query_sets = {**query_sets, **with_files(query_sets["prompts"], searched)}
    subprocess.run([*KL, "start"], check=True, stdout=subprocess.DEVNULL)
    try:
        retrieval = transport.Client(paths.Home.current().endpoint("retrieval"), timeout_ms=10_000)
        ingest = transport.Client(paths.Home.current().endpoint("ingest"), timeout_ms=10_000)
        timed_calls(retrieval, "search", [{"query": q, "namespace": SEARCHED, "mode": mode}
                                          for q in warmup])
        words_read(retrieval)
        floor, _ = timed_calls(retrieval, "ping", [{}] * 200)
        exact = None  # the seed's ranking: every term scored over every record
        if overlap and mode == "lexical":
            exact = Engine(paths.Home(home).db_path, term_budget=10**12)
        for name, queries in query_sets.items():
            say(f"  {len(queries)} {name} queries")
            bodies = [{"namespace": SEARCHED, "mode": mode,
                       **({"query": q} if isinstance(q, str) else q)} for q in queries]
            cpu_before = retrieval_cpu_s()
            roundtrip, replies = timed_calls(retrieval, "search", bodies)
            cpu_ms = (retrieval_cpu_s() - cpu_before) * 1000 / len(queries)
            row = {"bench": "retrieval", "records": count, "mode": mode, "queries": name,
                   "count": len(queries)}
            if embedder is not None:
                row["vectors"] = "titles" if titles_only else "records"
            row.update(figures("search", [r["latency_ms"] for r in replies]))
            row.update(figures("roundtrip", roundtrip))
            row.update(figures("floor", floor))
            row["retrieval_cpu_ms_per_search"] = round(cpu_ms, 2)
            row["ratio_to_floor"] = round(row["roundtrip_p50_ms"] / row["floor_p50_ms"], 1)
            if name == "prompts":
                inline, answers = timed_calls(ingest, "put_event", [
                    {"event": prompt_event(q), "retrieve": True} for q in queries])
                row.update(figures("inline", inline))
                row["inline_timeouts"] = sum(a["retrieval"]["outcome"] == "timeout"
                                             for a in answers)
            for outcome in search.OUTCOMES:
                row[f"outcome_{outcome}"] = sum(r["outcome"] == outcome for r in replies)
            row["windowed"] = sum(r["window"] is not None for r in replies)
            if embedder is not None and name == "prompts" and not titles_only:
                hybrid = Engine(paths.Home(home).db_path, embedder=embedder)
                row["known_item_recall_at_10"] = known_item_recall(hybrid, known, mode)
                hybrid.close()
            if exact is not None and name in ("prompts", "short"):
                say("  exact seed ranking, for the overlap")
                shares, seed_times = [], []
                for query, reply in zip(queries, replies, strict=True):
                    seed = exact.search(Request(SEARCHED, query, 10, 600_000))
                    seed_times.append(seed.latency_ms)
                    if seed.records:
                        best = set(seed.record_ids)
                        shares.append(len(best & set(reply["record_ids"])) / len(best))
                row.update(figures("seed_search", seed_times))
                row["seed_ratio_p99"] = round(row["seed_search_p99_ms"] / row["search_p99_ms"], 1)
                row["seed_overlap_at_10"] = round(statistics.mean(shares), 3) if shares else None
                if name == "prompts":
                    budgeted = Engine(paths.Home(home).db_path)
                    row["known_item_recall_at_10"] = known_item_recall(budgeted, known)
                    row["seed_known_item_recall_at_10"] = known_item_recall(exact, known)
                    budgeted.close()
            kept = retrieval.call("ping", {})["postings"]
            row["postings_words"], row["postings_pairs"] = kept["words"], kept["pairs"]
            row["retrieval_peak_rss_mb"] = peak_rss_mb()
            print(json.dumps(row), flush=True)
        if exact is not None:
            exact.close()
        retrieval.close()
        ingest.close()
    finally:
        subprocess.run([*KL, "stop"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", str(home)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--no-overlap", dest="overlap", action="store_false",
                        help="skip the exact seed ranking (slow at 100,000 records)")
    parser.add_argument("--mode", nargs="+", choices=["lexical", "hybrid"], default=None,
                        help="default: both when the embedding model is installed")
    parser.add_argument("--title-vectors", action="store_true",
                        help="hybrid: embed the titles only (a much quicker set-up; the same"
                             " search cost, a lower recall; no known-item figure)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.records, args.queries, args.title_vectors = [1_000], 30, True
    try:
        embeddings.find_model()
        args.mode = args.mode or ["lexical", "hybrid"]
    except embeddings.Unavailable as exc:
        if args.mode and "hybrid" in args.mode:
            raise SystemExit(f"retrieval: --mode hybrid needs the embedding model ({exc};"
                             " `kirolearn embeddings download`)") from exc
        args.mode = ["lexical"]
    query_sets = {"prompts": corpus.prompts(args.queries),
                  "short": corpus.short_queries(args.queries)}
    warmup = corpus.prompts(args.queries, seed=99) + corpus.short_queries(args.queries, seed=98)
    for count in args.records:
        for mode in args.mode:
            run(count, query_sets, warmup, args.overlap, mode, args.title_vectors)


if __name__ == "__main__":
    main()
