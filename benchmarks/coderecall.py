"""coderecall: does the memory of earlier work on the same code come back?

A git repository's history is replayed as agent sessions through the daemon, as
``kirolearn seed --git`` replays it (``kirolearn.seed``): each commit is one session
whose prompt is the commit's message, where every changed file is read and then edited
hunk by hunk (``Read`` / ``Edit`` / ``Write`` tool uses, the commit's time as the
events' time) before the turn ends. So its figures are the "day one" ones: the memory
of a repository seeded from its history, with no session of its own. The older part
of the history (``--train``, default 70 %) is stored; each later commit is
then asked with its message, and its targets are the stored commits that last touched
the lines it changes (``git blame`` on its parent). A commit's recall at k is the
share of its targets among the sessions of what a search for k records returns; MRR is
the mean of 1 / the rank of the first hit from a target (at k = 25). Two baselines
answer the same questions in the same run: ``bm25`` (one document per stored commit:
message and paths), ``bm25-whole-commit`` (message, paths and the lines its hunks
changed) and ``newest`` (the newest k stored commits), each with the context its k
documents would take. Only the records a search ranked count (a neighbour shown with a
hit earns nothing), and a later commit that changes no code line (docs, changelogs,
settings) is no question. ``kirolearn-injected``
is what a hook would inject (``retrieval.limit`` records under ``context_tokens``): its
recall, the share of questions given any context, and the share of ``OFF_TOPIC``
prompts (general questions, other projects' requests) given none.
``kirolearn-file-opened`` is what the agent is then given when it opens the first file
the commit changes (``FILE_LIMIT`` records about it, none the prompt was given): its
recall alone, and with the prompt's. ``kirolearn-edit-time`` is what the change's edits
are told of the lines they replace (``why``, one per hunk, each within
``context_tokens``, asked of a checkout of the question's parent): the share of its
targets among the commits whose records it holds.
``kirolearn-stale`` counts the injected records
whose code is gone at the question's parent commit (every anchored file deleted, or
none of its names left: ``search.staleness``), as the working tree stands there (a
checkout of that commit, each question's its own, read by retrieval before it is
asked): injected unchecked, and checked against that checkout as a hook's prompt is,
with the recall of what is then injected.

Prints JSON Lines (DESIGN.md §10), one per system and k in 5, 10, 25.

    python benchmarks/coderecall.py                      # this repository, hybrid
    python benchmarks/coderecall.py --repo PATH --rev v1.2 --mode lexical --quick
    python benchmarks/coderecall.py --live   # each prompt given context as it is stored

The daemon's settings come from the environment, so one ranking signal's effect is a
second run with it turned off (``KIROLEARN_RANKING_STALE=1``, ``..._USEFUL=0``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from harness import require_embeddings, say
from locomo import pipeline_done, wait_until

from kirolearn import config, paths, project, seed, transport
from kirolearn.roles.hints import FILE_LIMIT
from kirolearn.search import context, staleness, worktree

KL = [sys.executable, "-m", "kirolearn"]
KS = (5, 10, 25)
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")
QUICK_COMMITS = 40
# where the replayed sessions say the repository lies, and its namespace's project id
PROJECT = project.Project("/src/project", "coderecall", False, "/src/project")
RENAMES_READ_S = 1.0  # time for retrieval to read a new checkout's state from git
WORD = re.compile(r"[a-z0-9]+")


@dataclass
class Commit:
    sha: str
    when: str
    message: str
    paths: list[str] = field(default_factory=list)
    diff: str = ""  # the lines its hunks changed, for the whole-commit baseline
    targets: set[str] = field(default_factory=set)  # commits that last touched its lines


# A file of code, by its suffix: a commit that changes none (docs, changelogs, settings)
# is no question of coding recall.
CODE_SUFFIXES = (".py", ".pyi", ".js", ".jsx", ".ts", ".tsx", ".go", ".rs", ".java", ".kt",
                 ".rb", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs", ".swift", ".php", ".scala",
                 ".sh", ".sql", ".lua", ".m", ".ex", ".exs", ".clj", ".hs", ".ml", ".vue")


# Prompts about nothing a code base's memory holds: general questions, and requests in
# other projects (other languages, stacks and products). Each should get no context.
OFF_TOPIC = (
    "What is the capital of France and Spain?",
    "Write a haiku about the first snow of winter",
    "How long should I boil an egg for a soft yolk?",
    "Who won the football world cup in 2010?",
    "Recommend three novels for a long train journey",
    "What is the difference between a crocodile and an alligator?",
    "Translate 'good morning, how are you' into Italian",
    "How many calories are in a banana?",
    "Explain the causes of the French revolution in two paragraphs",
    "Plan a three day trip to Kyoto in autumn",
    "What's a good name for a golden retriever puppy?",
    "Summarise the plot of Hamlet",
    "How do I get red wine out of a carpet?",
    "Why is the sky blue?",
    "Suggest a weekly workout routine for a beginner runner",
    "Draft a polite email declining a meeting invitation",
    "What time zone is Auckland in?",
    "How do tides work?",
    "Give me a recipe for vegetarian lasagna",
    "Is it going to rain in Lisbon this weekend?",
    "Set up React Navigation with a bottom tab bar in our Expo app",
    "Add a Kubernetes HorizontalPodAutoscaler for the payments deployment",
    "Write a Terraform module for an S3 bucket with versioning",
    "Migrate the Django models to use UUID primary keys",
    "Center the hero image with CSS grid on the landing page",
    "Fix the memory leak in the Rust tokio websocket server",
    "Add dark mode to the SwiftUI settings screen",
    "Configure nginx as a reverse proxy for the Rails app",
    "Write a SQL query for monthly active users from the events table",
    "Make the Android RecyclerView load images lazily with Glide",
    "Add a GraphQL resolver for the orders of a customer",
    "Port the Jenkins pipeline to GitHub Actions with a build matrix",
    "Tune the Postgres autovacuum settings for the ledger table",
    "Animate the shopping cart badge in the Vue storefront",
    "Add Stripe webhooks for failed invoice payments",
    "Train a random forest on the churn dataset and plot feature importances",
    "Write a Go gRPC health check for the inventory service",
    "Render the PDF invoice with a company logo in the Laravel app",
    "Debounce the search box in the Angular admin dashboard",
    "Shard the Elasticsearch index for the product catalog",
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True, errors="replace").stdout


def history(repo: Path, rev: str, quick: bool) -> list[Commit]:
    """The first-parent history up to rev, oldest first, without merges."""
    log = git(repo, "log", "--reverse", "--first-parent", "--no-merges",
              "--format=%H%x00%aI%x00%B%x01", rev, "--")
    commits = []
    for entry in log.split("\x01"):
        if entry.strip():
            sha, when, message = entry.strip("\n").split("\x00", 2)
            commits.append(Commit(sha, when, message.strip()))
    return commits[:QUICK_COMMITS] if quick else commits


def changed_lines(repo: Path, commit: Commit) -> dict[str, list[tuple[int, int]]]:
    """Per file that existed before, the parent's line ranges the commit changes (a pure
    insertion counts the line it follows)."""
    diff = git(repo, "show", "--format=", "-U0", "--no-renames", commit.sha)
    ranges: dict[str, list[tuple[int, int]]] = {}
    path = None
    for line in diff.splitlines():
        if line.startswith("--- "):
            path = line[6:] if line.startswith("--- a/") else None
        elif path and (m := HUNK.match(line)):
            start, count = int(m.group(1)), int(m.group(2) or 1)
            if start > 0:
                ranges.setdefault(path, []).append((start, start + max(count, 1) - 1))
    return ranges


def blame_targets(repo: Path, commit: Commit) -> set[str]:
    found: set[str] = set()
    for path, ranges in changed_lines(repo, commit).items():
        spans = [arg for start, end in ranges for arg in ("-L", f"{start},{end}")]
        try:
            out = git(repo, "blame", "-s", "-l", *spans, f"{commit.sha}^", "--", path)
        except subprocess.CalledProcessError:
            continue  # a range past the end of a file git cannot read as text
        found.update(line[:40].lstrip("^") for line in out.splitlines() if line)
    return found


def session_events(repo: Path, commit: Commit) -> list[dict]:
    """One commit as an agent's session, as ``kirolearn seed --git`` replays it (a
    read of each file, its hunks as edits, the turn's end)."""
    edits = seed.hunks(str(repo), commit.sha)
    commit.paths = list(dict.fromkeys(path for path, *_ in edits))
    commit.diff = "\n".join(f"{old}\n{new}" for _, old, new, _ in edits)
    return seed.session_events(str(repo), seed.Commit(commit.sha, commit.when, "bench", "",
                                                      commit.message), PROJECT, "bench", None)


class BM25:
    """Okapi BM25 over one document per commit: the baseline a plain index gives."""

    def __init__(self, documents: dict[str, str], k1: float = 1.2, b: float = 0.75) -> None:
        self.terms = {key: Counter(WORD.findall(text.lower())) for key, text in documents.items()}
        self.length = {key: sum(terms.values()) for key, terms in self.terms.items()}
        self.average = statistics.mean(self.length.values())
        frequency = Counter(term for terms in self.terms.values() for term in terms)
        n = len(documents)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in frequency.items()}
        self.k1, self.b = k1, b

    def top(self, query: str, k: int) -> list[str]:
        words = set(WORD.findall(query.lower()))
        scores = {}
        for key, terms in self.terms.items():
            norm = self.k1 * (1 - self.b + self.b * self.length[key] / self.average)
            scores[key] = sum(self.idf[w] * terms[w] * (self.k1 + 1) / (terms[w] + norm)
                              for w in words if w in terms)
        return sorted((key for key in scores if scores[key] > 0), key=lambda key: -scores[key])[:k]


def questions_of(repo: Path, asked: list[Commit], stored: set[str]) -> list[Commit]:
    """The later commits that change a code line some stored commit last touched, each
    with those commits as its targets."""
    questions, skipped = [], 0
    for commit in asked:
        if not any(path.endswith(CODE_SUFFIXES) for path in changed_lines(repo, commit)):
            skipped += 1  # no code line changed: no question of coding recall
            continue
        commit.targets = blame_targets(repo, commit) & stored
        if commit.targets:
            questions.append(commit)
    say(f"{len(questions)} questions; {skipped} later commits change no code line")
    return questions


def told_at_edits(retrieval: transport.Client, repo: Path, commit: Commit, checkout: Path,
                  namespace: str, tokens: int) -> tuple[set[str], list[int]]:
    """What the change's edits are told of the lines they replace (``why``, one per
    hunk, asked of ``checkout``, the parent's): the commits whose records the contexts
    hold, and each context's size."""
    told: set[str] = set()
    sizes = []
    for path, ranges in changed_lines(repo, commit).items():
        for first, last in ranges:
            reply = retrieval.call("why", {
                "namespaces": [namespace], "checkout": str(checkout), "path": path,
                "first": first, "last": last, "budget_ms": 30_000, "tokens": tokens})
            sizes.append(len(reply["context"]))
            told |= {c["commit"] for c in reply["commits"]}
    return told, sizes


def rank_of_first(ranked: list[set[str]], targets: set[str]) -> float:
    return next((1 / rank for rank, found in enumerate(ranked, 1) if found & targets), 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--rev", default="HEAD", help="the history up to this commit")
    parser.add_argument("--mode", choices=config.MODES, default="hybrid")
    parser.add_argument("--train", type=float, default=0.7, help="share of history stored")
    parser.add_argument("--live", action="store_true",
                        help="each stored commit's prompt is given context, as a hook's is,"
                             " once the commits before it are remembered (usefulness and"
                             " staleness then build up as in use)")
    parser.add_argument("--quick", action="store_true",
                        help=f"the first {QUICK_COMMITS} commits only")
    args = parser.parse_args()
    commits = history(args.repo, args.rev, args.quick)
    split = int(len(commits) * args.train)
    stored, asked = commits[:split], commits[split:]
    if not stored or not asked:
        raise SystemExit(f"{args.repo}: {len(commits)} commits; too few to replay")
    by_sha = {c.sha: c for c in stored}

    with tempfile.TemporaryDirectory(prefix="klb-", dir="/tmp") as scratch:
        base = Path(scratch)
        env = {**os.environ, "KIROLEARN_HOME": str(base), "KIROLEARN_STORAGE_BATCH_IDLE_S": "1",
               "KIROLEARN_AUTOSTART": "0"}
        os.environ["KIROLEARN_HOME"] = str(base)
        namespace = PROJECT.namespace("bench")
        subprocess.run([*KL, "start"], env=env, check=True, capture_output=True, cwd="/tmp")
        try:
            require_embeddings(base, args.mode, "coderecall")
            started = time.perf_counter()
            commit_of: dict[str, str] = {}
            given = 0
            with transport.Client(paths.Home(base).endpoint("ingest"), timeout_ms=60_000) as ingest:
                for commit in stored:
                    events = session_events(args.repo, commit)
                    commit_of.update((e["event_id"], commit.sha) for e in events)
                    if args.live:  # the prompt asks for context as a hook's does
                        reply = ingest.call("put_event", {"event": events[0], "retrieve": True})
                        given += bool(reply["retrieval"]["record_ids"])
                        events = events[1:]
                    ingest.call("put_events", {"events": events})
                    if args.live:  # the next session comes once this one is remembered
                        wait_until("the pipeline", lambda: pipeline_done(
                            base, args.mode != "lexical"))
            say(f"{len(stored)} commits ({len(commit_of)} events) sent in "
                f"{time.perf_counter() - started:.1f} s"
                + (f", {given} prompts given context" if args.live else "")
                + "; waiting for the pipeline")
            wait_until("the pipeline", lambda: pipeline_done(base, args.mode != "lexical"))
            say(f"records ready after {time.perf_counter() - started:.1f} s; asking")
            questions = questions_of(args.repo, asked, by_sha.keys())
            documents = {"bm25": {c.sha: c.message + "\n" + " ".join(c.paths) for c in stored},
                         "bm25-whole-commit": {c.sha: f"{c.message}\n{' '.join(c.paths)}\n"
                                               f"{c.diff}" for c in stored}}
            baselines = {system: BM25(texts) for system, texts in documents.items()}
            newest = [c.sha for c in reversed(stored)]
            recall: dict[tuple[str, int], list[float]] = {}
            mrr: dict[str, list[float]] = {s: [] for s in ("kirolearn", *baselines, "newest")}
            baseline_chars: dict[tuple[str, int], list[int]] = {}
            chars: dict[int, list[int]] = {k: [] for k in KS}
            latencies = []
            loaded = config.load(paths.Home(base))["retrieval"]
            injected = {"limit": loaded["limit"], "tokens": loaded["context_tokens"],
                        "mode": args.mode, "budget_ms": 10_000, "records": True,
                        "namespace": namespace}
            hook: dict[str, list[float]] = {"recall": [], "given": [], "chars": [], "mrr": []}
            opened: dict[str, list[float]] = {"recall": [], "with_prompt": [], "chars": []}
            edit_time: dict[str, list[float]] = {"recall": [], "chars": []}
            off_topic_given = []
            # What the injection holds that names code gone at the question's parent
            # commit: unchecked (no working tree), then checked against that checkout.
            stale: dict[str, list[int]] = {"unchecked": [], "checked": [], "checked_recall": []}
            checkouts = base / "checkouts"
            covered: dict[str, list[float]] = {"on-topic": [], "off-topic": []}
            with transport.Client(paths.Home(base).endpoint("retrieval"),
                                  timeout_ms=60_000) as retrieval:
                for prompt in OFF_TOPIC:  # what a hook would inject for it
                    reply = retrieval.call("search", {**injected, "query": prompt})
                    off_topic_given.append(bool(reply["records"]))
                    covered["off-topic"].append(reply.get("coverage") or 0.0)
                    if reply["records"]:  # what made it fit, to see where the floor fails
                        say(f"off-topic given context: {prompt!r} (coverage "
                            f"{reply.get('coverage') or 0.0:.2f}): "
                            f"{reply['records'][0]['title']!r}")
                for commit in questions:
                    reply = retrieval.call("search", {**injected, "query": commit.message})
                    hook_records = reply["records"]
                    hits = [{commit_of.get(i) for i in r["source_event_ids"]}
                            for r in reply["records"] if not r.get("neighbour_of")]
                    found = set().union(*hits)
                    hook["recall"].append(len(commit.targets & found) / len(commit.targets))
                    hook["mrr"].append(rank_of_first(hits, commit.targets))
                    hook["given"].append(bool(reply["records"]))
                    hook["chars"].append(len(reply["context"]))
                    covered["on-topic"].append(reply.get("coverage") or 0.0)
                    # what the agent is given when it then opens the first file it changes
                    first = next(iter(changed_lines(args.repo, commit)))
                    reply = retrieval.call("search", {
                        **injected, "limit": FILE_LIMIT, "query": commit.message,
                        "opened": [first], "exclude": [r["record_id"] for r in reply["records"]]})
                    from_file = {commit_of.get(i) for r in reply["records"]
                                 if not r.get("neighbour_of") for i in r["source_event_ids"]}
                    opened["recall"].append(len(commit.targets & from_file) / len(commit.targets))
                    opened["with_prompt"].append(
                        len(commit.targets & (found | from_file)) / len(commit.targets))
                    opened["chars"].append(len(reply["context"]))
                    checkout = checkouts / commit.sha
                    subprocess.run(["git", "-C", str(args.repo), "worktree", "add", "-q",
                                    "--detach", str(checkout), f"{commit.sha}^"], check=True,
                                   capture_output=True)
                    renamed = worktree.read(str(checkout), renames=True)[1] or {}
                    judge = staleness.Checkout()
                    ask = {**injected, "query": commit.message, "checkout": str(checkout)}
                    retrieval.call("search", ask)  # retrieval reads the new tree with git...
                    time.sleep(RENAMES_READ_S)  # ... in the background: checked once read
                    checked = retrieval.call("search", ask)
                    for name, shown in (("unchecked", hook_records), ("checked",
                                                                      checked["records"])):
                        stale[name].append(sum(bool(judge.gone(str(checkout), r, renamed))
                                               for r in shown))
                    # at edit time: what each edit of the change is told of the lines
                    # it replaces (``why``), asked of the parent's checkout
                    told, sizes = told_at_edits(retrieval, args.repo, commit, checkout,
                                                namespace, injected["tokens"])
                    edit_time["chars"] += sizes
                    edit_time["recall"].append(len(commit.targets & told) / len(commit.targets))
                    subprocess.run(["git", "-C", str(args.repo), "worktree", "remove",
                                    "--force", str(checkout)], capture_output=True)
                    found_checked = {commit_of.get(i) for r in checked["records"]
                                     if not r.get("neighbour_of") for i in r["source_event_ids"]}
                    stale["checked_recall"].append(
                        len(commit.targets & found_checked) / len(commit.targets))
                    for k in KS:
                        reply = retrieval.call("search", {
                            "query": commit.message, "namespace": namespace, "limit": k,
                            "records": True, "mode": args.mode, "budget_ms": 10_000,
                            "tokens": 1_000_000})
                        latencies.append(reply["latency_ms"])
                        shown = reply["records"]
                        ranked = [{commit_of[i] for i in r["source_event_ids"] if i in commit_of}
                                  for r in shown if not r.get("neighbour_of")]
                        found = set().union(*ranked)  # no credit for neighbours shown
                        chars[k].append(len(context.context_block(shown)))
                        baseline = {system: index.top(commit.message, k)
                                    for system, index in baselines.items()}
                        baseline["newest"] = newest[:k]
                        for system, hits in baseline.items():
                            texts = documents.get(system, documents["bm25"])
                            baseline_chars.setdefault((system, k), []).append(
                                sum(len(texts[h]) for h in hits))
                        for system, hits in (("kirolearn", found), *baseline.items()):
                            recall.setdefault((system, k), []).append(
                                len(commit.targets & set(hits)) / len(commit.targets))
                        if k == KS[-1]:
                            mrr["kirolearn"].append(rank_of_first(ranked, commit.targets))
                            for system, hits in baseline.items():
                                mrr[system].append(rank_of_first([{h} for h in hits],
                                                                 commit.targets))
        finally:
            subprocess.run([*KL, "stop"], env=env, capture_output=True, cwd="/tmp")
            subprocess.run(["git", "-C", str(args.repo), "worktree", "prune"],
                           capture_output=True)
    if not questions:
        raise SystemExit("no later commit changes lines of a stored one")
    for prompts, values in covered.items():  # where the floor of a lexical match falls
        if values:
            cuts = statistics.quantiles(values, n=10) if len(values) > 1 else values * 9
            say(f"{prompts}: the best lexical match's coverage, deciles"
                f" {' '.join(f'{c:.2f}' for c in cuts)}")
    for system in ("kirolearn", *baselines, "newest"):
        for k in KS:
            line = {"bench": "coderecall", "system": system, "k": k,
                    "mode": args.mode if system == "kirolearn" else None,
                    "recall": round(statistics.mean(recall[(system, k)]), 4),
                    "mrr": round(statistics.mean(mrr[system]), 4),
                    "questions": len(questions), "stored_commits": len(stored),
                    "repo": args.repo.name, "live": args.live,
                    "rev": git(args.repo, "rev-parse", "--short", args.rev).strip()}
            if system == "kirolearn":
                line.update(context_chars_mean=round(statistics.mean(chars[k])),
                            search_p50_ms=round(statistics.median(latencies), 2))
            else:  # what its k documents would cost as context
                line.update(context_chars_mean=round(statistics.mean(
                    baseline_chars[(system, k)])))
            print(json.dumps(line), flush=True)
    print(json.dumps({
        "bench": "coderecall", "system": "kirolearn-injected", "mode": args.mode,
        "k": loaded["limit"], "tokens": loaded["context_tokens"],
        "recall": round(statistics.mean(hook["recall"]), 4),
        "mrr": round(statistics.mean(hook["mrr"]), 4),
        "ontopic_given_share": round(statistics.mean(hook["given"]), 4),
        "offtopic_prompts": len(OFF_TOPIC),
        "offtopic_no_context_share": round(1 - statistics.mean(off_topic_given), 4),
        "context_chars_mean": round(statistics.mean(hook["chars"])),
        "questions": len(questions), "repo": args.repo.name}), flush=True)
    print(json.dumps({
        "bench": "coderecall", "system": "kirolearn-file-opened", "mode": args.mode,
        "k": FILE_LIMIT, "recall": round(statistics.mean(opened["recall"]), 4),
        "recall_with_prompt": round(statistics.mean(opened["with_prompt"]), 4),
        "context_chars_mean": round(statistics.mean(opened["chars"])),
        "questions": len(questions), "repo": args.repo.name}), flush=True)
    print(json.dumps({
        "bench": "coderecall", "system": "kirolearn-edit-time", "mode": args.mode,
        "recall": round(statistics.mean(edit_time["recall"]), 4),
        "context_chars_mean": round(statistics.mean(edit_time["chars"] or [0])),
        "edits": len(edit_time["chars"]),
        "questions": len(questions), "repo": args.repo.name}), flush=True)
    before, after = sum(stale["unchecked"]), sum(stale["checked"])
    print(json.dumps({
        "bench": "coderecall", "system": "kirolearn-stale", "mode": args.mode,
        "stale_injected_unchecked": before, "stale_injected_checked": after,
        "fewer_share": round(1 - after / before, 4) if before else None,
        "questions_with_stale_unchecked": sum(1 for n in stale["unchecked"] if n),
        "recall_checked": round(statistics.mean(stale["checked_recall"]), 4),
        "questions": len(questions), "repo": args.repo.name}), flush=True)


if __name__ == "__main__":
    main()
