"""Seed benchmark: how fast ``kirolearn seed --git`` gives a repository its past.

A fresh home and daemon (SQLite, heuristic extraction, embeddings as configured), then
``kirolearn seed --git`` over a repository's whole history (or its newest ``--limit``
commits), as a user runs it. Prints JSON Lines (DESIGN.md §10): the commits seeded and
left out, the seconds until the command returned (every event stored) and until every
record was made (and, ``--mode hybrid``, embedded), and the commits per second of
each. A second run, which finds nothing new, is timed too.

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

from harness import require_embeddings, say
from locomo import pipeline_done, wait_until

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


if __name__ == "__main__":
    main()
