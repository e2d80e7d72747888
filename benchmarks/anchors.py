"""Anchor check benchmark: what checking a prompt's records against its working tree
adds to the prompt's answer.

A git working tree of ``--files`` files (5,000) holds the code the project's records
are anchored in: every record names one file and a function defined there, and a
prompt's ten candidates are all anchored. Prompts go through ingest as a hook sends
them (``put_event`` with ``retrieve: true``), interleaved so both see the same machine
noise: from the working tree (``checked``: its records are checked) and from a
directory that is not there (``unchecked``: nothing to check against). The first
prompt from the tree reads its files (``cold``); the others find them unchanged by
their (mtime, size). Prints JSON Lines (DESIGN.md §10): p50/p99 of each, and
``added_p50_ms``.

    python benchmarks/anchors.py             # 5,000 files, 200 prompts each way
    python benchmarks/anchors.py --quick     # 1,000 files, 30 prompts
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import figures, say, write_records

from kirolearn import contract, paths, transport

KL = [sys.executable, "-m", "kirolearn"]
NAMESPACE = "/actor/bench/project/anchors/"
WORDS = ["invoice", "refund", "ledger", "upload", "session", "export", "cache", "retry"]


def tree(root: Path, files: int) -> None:
    """A committed git working tree of ``files`` Python modules, each defining one
    function."""
    for n in range(files):
        folder = root / f"pkg{n % 50}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{n}.py").write_text(f"def handle_{n}(request):\n    return {n}\n")
    git = ["git", "-C", str(root), "-c", "user.name=b", "-c", "user.email=b@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "tree"], check=True)


def record(n: int) -> dict:
    word = WORDS[n % len(WORDS)]
    return {"record_id": contract.new_record_id(), "namespace": NAMESPACE,
            "title": f"Fix the {word} handler {n}", "summary": f"handle_{n} retried the {word}.",
            "facts": [f"edited `pkg{n % 50}/mod{n}.py` (+1 −1): `handle_{n}`"],
            "concepts": [f"handle_{n}"], "files_touched": [f"pkg{n % 50}/mod{n}.py"],
            "anchors": {f"pkg{n % 50}/mod{n}.py": [f"handle_{n}"]},
            "observation_type": "tool_use", "strategy": "heuristic",
            "source_event_ids": [contract.new_ulid()], "created_at": contract.now_iso()}


def prompt(text: str, where: str) -> dict:
    return contract.make_event("prompt", {"type": "text", "content": text},
                               namespace=NAMESPACE, actor_id="bench", session_id="s-bench",
                               surface="kiro-cli", version="1", client_id="bench",
                               project_path=where)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    files, prompts = (1000, 30) if args.quick else (args.files, args.prompts)
    with tempfile.TemporaryDirectory(prefix="klb-", dir="/tmp") as scratch:
        base, root = Path(scratch) / "home", Path(scratch) / "tree"
        tree(root, files)
        write_records(base, (record(n) for n in range(min(files, 2000))))
        env = {**os.environ, "KIROLEARN_HOME": str(base), "KIROLEARN_AUTOSTART": "0"}
        # lexical: no vectors back-filled beside the prompts; the check is the same
        (base / "config.toml").write_text('[retrieval]\nmode = "lexical"\n')
        subprocess.run([*KL, "start"], env=env, check=True, capture_output=True, cwd="/tmp")
        times: dict[str, list[float]] = {"checked": [], "unchecked": []}
        shown = {"checked": 0, "unchecked": 0}
        try:
            with transport.Client(paths.Home(base).endpoint("ingest"),
                                  timeout_ms=30_000) as ingest:
                def ask(where: str, text: str) -> tuple[float, int]:
                    started = time.perf_counter()
                    reply = ingest.call("put_event", {"event": prompt(text, where),
                                                      "retrieve": True})
                    elapsed = (time.perf_counter() - started) * 1000
                    return elapsed, len(reply["retrieval"]["record_ids"])

                cold, _ = ask(str(root), "fix the invoice handler")
                for n in range(prompts):
                    text = f"fix the {WORDS[n % len(WORDS)]} handler"
                    for name, where in (("checked", str(root)),
                                        ("unchecked", str(root) + "-elsewhere")):
                        elapsed, found = ask(where, text)
                        times[name].append(elapsed)
                        shown[name] += found
        finally:
            subprocess.run([*KL, "stop"], env=env, capture_output=True, cwd="/tmp")
    say(f"records shown: {shown}")
    for name, values in times.items():
        print(json.dumps({"bench": "anchors", "case": name, "files": files,
                          "prompts": prompts, "candidates": 10, **figures("answer", values)}),
              flush=True)
    checked, unchecked = (figures("x", times[k]) for k in ("checked", "unchecked"))
    print(json.dumps({"bench": "anchors", "case": "added", "files": files,
                      "cold_first_prompt_ms": round(cold, 2),
                      "added_p50_ms": round(checked["x_p50_ms"] - unchecked["x_p50_ms"], 2),
                      "added_p99_ms": round(checked["x_p99_ms"] - unchecked["x_p99_ms"], 2),
                      "target_added_p50_ms": 5}), flush=True)


if __name__ == "__main__":
    main()
