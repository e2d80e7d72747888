"""LoCoMo benchmark: evidence recall of the real pipeline over long conversations.

Every dialog turn of a LoCoMo-format file goes through the daemon as an agent's
prompt would (ingest → storage → extraction → records; one project per
conversation, one session per LoCoMo session, the turn's time from the session's
date), and every question is asked through the real search (``--mode``). A
question's recall at k is the share of its evidence turns among the source events
of what a search for k records returns (the k best, and the neighbours shown with
them), counted within the question's own conversation; the mean is printed per
category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop; 5, adversarial, has no
evidence), for the questions that name a date ("on 8 May, 2023", "in June", "in 2022":
``DATED``) and overall, with the mean size of the context those records make.
Questions without usable evidence are skipped and counted. In semantic and hybrid
mode, questions are asked once retrieval has every conversation's vectors loaded.
See ``../shared/data/locomo/README.md`` in the source tree.

Prints JSON Lines (DESIGN.md §10), one per k in 5, 10, 25.

    python benchmarks/locomo.py PATH/locomo-dev.json --mode hybrid
    python benchmarks/locomo.py PATH/locomo-dev.json --mode lexical --quick
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from harness import require_embeddings, say

from kirolearn import config, contract, db, paths, transport
from kirolearn.db import errors, reads
from kirolearn.search import context

KL = [sys.executable, "-m", "kirolearn"]
KS = (5, 10, 25)
CATEGORIES = (1, 2, 3, 4)
CHUNK = 500
MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august",
               "september", "october", "november", "december")
DATED = re.compile(r"\b(?:(?:19|20)\d\d|" + "|".join(MONTH_NAMES) + r")\b", re.IGNORECASE)


def session_start(text: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023" as a local time."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").astimezone()


def turn_text(turn: dict) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def conversation_events(sample: dict, namespace: str) -> tuple[list[dict], dict[str, str]]:
    """A conversation's turns as prompt events, and each event's dialog id within its
    conversation (``sample/D1:3``: each conversation numbers its own)."""
    conversation = sample["conversation"]
    events, dialog_of = [], {}
    number = 1
    while f"session_{number}" in conversation:
        start = session_start(conversation[f"session_{number}_date_time"])
        session_id = f"{sample['sample_id']}-session-{number}"
        for index, turn in enumerate(conversation[f"session_{number}"]):
            when = start + timedelta(minutes=index)  # apart, past ingest's dedup window
            event = contract.make_event(
                "prompt", {"type": "text", "content": turn_text(turn)}, namespace=namespace,
                actor_id="locomo", session_id=session_id, surface="locomo", version="1",
                client_id="benchmark", valid_time=when.isoformat(timespec="seconds"))
            events.append(event)
            dialog_of[event["event_id"]] = f"{sample['sample_id']}/{turn['dia_id']}"
        number += 1
    return events, dialog_of


def wait_until(what: str, ready, timeout_s: float = 1800) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)


def pipeline_done(base: Path, embedded: bool) -> bool:
    conn = db.connect_reader(paths.Home(base).db_path)
    try:
        totals = reads.stats(conn)["totals"]
        left = reads.count_unembedded(conn) if embedded else 0
    except errors.StoreError:
        return False
    finally:
        conn.close()
    return totals["pending_events"] == 0 and totals["pending_batches"] == 0 and left == 0


def vectors_loaded(base: Path, namespaces) -> None:
    """Until retrieval has every conversation's vectors in memory: a search before that
    answers lexically (``semantic side skipped``), which is not the mode measured."""
    with transport.Client(paths.Home(base).endpoint("retrieval"), timeout_ms=60_000) as retrieval:
        for namespace in namespaces:
            wait_until(f"the vectors of {namespace}", lambda namespace=namespace: "skipped" not in (
                retrieval.call("search", {"query": "hello there", "namespace": namespace,
                                          "mode": "hybrid", "budget_ms": 10_000}
                               ).get("error") or ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--mode", choices=config.MODES, default="hybrid")
    parser.add_argument("--quick", action="store_true", help="the first conversation only")
    parser.add_argument("--min-similarity", type=float, default=None)
    args = parser.parse_args()
    samples = json.loads(args.path.read_text("utf-8"))[:1 if args.quick else None]

    with tempfile.TemporaryDirectory(prefix="klb-", dir="/tmp") as scratch:
        base = Path(scratch)
        env = {**os.environ, "KIROLEARN_HOME": str(base), "KIROLEARN_STORAGE_BATCH_IDLE_S": "1",
               "KIROLEARN_AUTOSTART": "0"}
        if args.min_similarity is not None:
            env["KIROLEARN_RETRIEVAL_MIN_SIMILARITY"] = str(args.min_similarity)
        os.environ["KIROLEARN_HOME"] = str(base)
        subprocess.run([*KL, "start"], env=env, check=True, capture_output=True, cwd="/tmp")
        try:
            require_embeddings(base, args.mode, "locomo")
            dialog_of: dict[str, str] = {}
            namespaces = {}
            started = time.perf_counter()
            with transport.Client(paths.Home(base).endpoint("ingest"), timeout_ms=60_000) as ingest:
                for sample in samples:
                    namespace = f"/actor/locomo/project/{sample['sample_id']}/"
                    namespaces[sample["sample_id"]] = namespace
                    events, dialogs = conversation_events(sample, namespace)
                    dialog_of.update(dialogs)
                    for at in range(0, len(events), CHUNK):
                        ingest.call("put_events", {"events": events[at:at + CHUNK]})
            say(f"{len(dialog_of)} turns sent in {time.perf_counter() - started:.1f} s;"
                " waiting for extraction" + (" and embeddings" if args.mode != "lexical" else ""))
            wait_until("the pipeline", lambda: pipeline_done(base, args.mode != "lexical"))
            say(f"records ready after {time.perf_counter() - started:.1f} s; asking questions")
            if args.mode != "lexical":
                vectors_loaded(base, namespaces.values())
            found: dict[int, dict[int, list[float]]] = {k: {c: [] for c in CATEGORIES} for k in KS}
            dated: dict[int, list[float]] = {k: [] for k in KS}
            context_chars: dict[int, list[int]] = {k: [] for k in KS}
            skipped = 0
            latencies = []
            known = set(dialog_of.values())
            with transport.Client(paths.Home(base).endpoint("retrieval"),
                                  timeout_ms=60_000) as retrieval:
                for sample in samples:
                    for qa in sample["qa"]:
                        category = qa.get("category")
                        evidence = {f"{sample['sample_id']}/{e.strip()}"
                                    for e in qa.get("evidence") or []}
                        if category not in CATEGORIES:
                            continue
                        if not evidence or not evidence <= known:
                            skipped += 1
                            continue
                        for k in KS:  # each k as the agent would get it: limit k
                            reply = retrieval.call("search", {
                                "query": qa["question"],
                                "namespace": namespaces[sample["sample_id"]], "limit": k,
                                "records": True, "mode": args.mode, "budget_ms": 10_000,
                                "tokens": 1_000_000})
                            latencies.append(reply["latency_ms"])
                            shown = reply["records"]
                            turns = {dialog_of.get(i) for r in shown
                                     for i in r["source_event_ids"]}
                            found[k][category].append(len(evidence & turns) / len(evidence))
                            if DATED.search(qa["question"]):
                                dated[k].append(found[k][category][-1])
                            context_chars[k].append(len(context.context_block(shown)))
        finally:
            subprocess.run([*KL, "stop"], env=env, capture_output=True, cwd="/tmp")
    questions = sum(len(v) for v in found[KS[0]].values())
    for k in KS:
        every = [x for values in found[k].values() for x in values]
        line = {"bench": "locomo", "mode": args.mode, "k": k,
                "recall_overall": round(statistics.mean(every), 4)}
        for category in CATEGORIES:
            values = found[k][category]
            line[f"recall_cat{category}"] = round(statistics.mean(values), 4) if values else None
        line.update(recall_dated=round(statistics.mean(dated[k]), 4) if dated[k] else None,
                    questions_dated=len(dated[k]),
                    context_chars_mean=round(statistics.mean(context_chars[k])),
                    questions=questions, skipped=skipped, turns=len(dialog_of),
                    search_p50_ms=round(statistics.median(latencies), 2))
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
