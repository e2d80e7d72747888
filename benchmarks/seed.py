"""Seed benchmark: how fast ``kirolearn seed --git`` gives a repository its past.

A fresh home and daemon (SQLite, heuristic extraction, embeddings as configured), then
``kirolearn seed --git`` over a repository's whole history (or its newest ``--limit``
commits), as a user runs it. Prints JSON Lines (DESIGN.md §10): the commits seeded and
left out, the seconds until the command returned (every event stored) and until every
record was made (and, ``--mode hybrid``, embedded), and the commits per second of
each. A second run, which finds nothing new, is timed too.

Then what an agent starting a session in the seeded repository is given, with the
project's brief (``retrieval.brief_tokens``, the default) and without it (0): the
context's size in tokens, the records and files it names, and the latency of the
session-start search (median of ``SESSION_STARTS``).

    python benchmarks/seed.py --repo /tmp/click            # a clone of shared/data/git
    python benchmarks/seed.py --repo /tmp/httpx --limit 300
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import figures, require_embeddings, say
from locomo import pipeline_done, wait_until

from kirolearn import control, paths, project

SESSION_STARTS = 30

KL = [sys.executable, "-m", "kirolearn"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--mode", choices=("lexical", "hybrid"), default="hybrid",
                        help="hybrid: every record embedded before it counts as made")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kls-", dir="/tmp") as scratch:
        base = Path(scratch)
        env = {**os.environ, "KIROLEARN_HOME": str(base), "KIROLEARN_AUTOSTART": "0",
               "KIROLEARN_EMBEDDINGS_ENABLED": str(args.mode != "lexical").lower()}
        os.environ["KIROLEARN_HOME"] = str(base)
        subprocess.run([*KL, "start"], env=env, check=True, capture_output=True, cwd="/tmp")
        embedded = args.mode != "lexical"
        try:
            require_embeddings(base, args.mode, "seed")
            command = [*KL, "seed", "--git", "--project", str(args.repo)]
            if args.limit:
                command += ["--limit", str(args.limit)]
            started = time.perf_counter()
            done = subprocess.run(command, env=env, check=True, capture_output=True,
                                  text=True).stdout
            stored_s = time.perf_counter() - started
            say(done.strip())
            wait_until("the records", lambda: pipeline_done(base, embedded))
            records_s = time.perf_counter() - started
            started = time.perf_counter()
            subprocess.run(command, env=env, check=True, capture_output=True)
            again_s = time.perf_counter() - started
            starts = [session_start(base, args.repo, True)]
            subprocess.run([*KL, "stop"], env=env, check=True, capture_output=True)
            subprocess.run([*KL, "start"], env={**env, "KIROLEARN_RETRIEVAL_BRIEF_TOKENS": "0"},
                           check=True, capture_output=True, cwd="/tmp")
            starts.append(session_start(base, args.repo, False))
        finally:
            subprocess.run([*KL, "stop"], env=env, capture_output=True)
    seeded = int(re.search(r"seeded (\d+) commit", done)[1])
    left = re.search(r"left out (\d+)", done)
    print(json.dumps({
        "bench": "seed", "repo": args.repo.name, "commits": seeded,
        "left_out": int(left[1]) if left else 0, "mode": args.mode,
        "stored_s": round(stored_s, 2), "stored_commits_per_s": round(seeded / stored_s, 1),
        "records_s": round(records_s, 2),
        "records_commits_per_s": round(seeded / records_s, 1),
        "second_run_s": round(again_s, 2)}))
    for line in starts:
        print(json.dumps({"bench": "session_start", "repo": args.repo.name, **line}))


def session_start(base: Path, repo: Path, brief: bool) -> dict:
    """What an agent (Claude Code) starting a session in the repository is given, and
    how long the daemon takes to make it."""
    namespace = project.resolve_project(repo).namespace(project.actor_id())
    home = paths.Home(base)
    latencies, reply = [], {}
    for _ in range(SESSION_STARTS):
        started = time.perf_counter()
        reply = control.call("retrieval", "session_context", {
            "namespace": namespace, "surface": "claude-code"}, timeout_ms=5000, home=home)
        latencies.append((time.perf_counter() - started) * 1000)
    context = reply["context"]
    return {"brief": brief, "context_tokens": len(context) // 4,
            "records": len(reply["record_ids"]),
            "files_named": len(set(re.findall(r"`([^`\s]+\.\w+)`", context))),
            **figures("session_start", latencies)}


if __name__ == "__main__":
    main()
