"""Shim benchmark: what one hook costs the agent, process start to exit.

Runs the installed ``kirolearn-kiro-cli`` shim as Kiro CLI does (payload on stdin)
against a running daemon whose project holds the corpus's records, interleaved
with the floor, ``python -c "import zmq, msgpack"`` (the interpreter and the two
libraries every shim needs), so both see the same machine noise:

- postToolUse: a tool use, acknowledged after storage commits it;
- prompt: userPromptSubmit with retrieval, the context printed to stdout;
- tool_use (``surface``: claude-code, codex, gemini, copilot, cursor, opencode): each
  other agent's tool-use hook, its payload in the agent's format, the same way;
- pre_tool (claude-code): a ``PreToolUse`` before an ``Edit`` of a committed file,
  asking why its lines are as they are (the file's blame, made once, then kept);
- postToolUse with the daemon away (``path: spool``): a tool use whose output holds
  secrets, scrubbed (with the rules ingest saved) and written to the spool; and again
  with no rules saved (``path: spool_unsaved_rules``), as on a machine connected to
  another's daemon, where no ingest runs (the rules kirolearn ships);
- the first prompt after ``kirolearn start`` (``path: first_after_start``), with the
  embedding model on and every record's vector stored, as a user's daemon starts in
  the morning: the model and the project's vectors load meanwhile (the budget is 500
  ms; a search whose vectors are not loaded yet answers lexically).

Bytecode is compiled first, as ``pip install`` does. Prints one JSON line per hook
(DESIGN.md §10) with wall_p50_ms/wall_p99_ms, the floor's, and ratio_to_floor
(median over the floor's median).

    python benchmarks/shim.py            # 10,000 records, 100 runs of each
    python benchmarks/shim.py --quick    # 1,000 records, 15 runs, 2 cold starts
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import corpus
from harness import percentile, say, write_records

import kirolearn
from kirolearn import control, paths, project

KL = [sys.executable, "-m", "kirolearn"]
BIN = Path(sys.executable).parent
TARGETS = {"postToolUse": 1.3, "prompt": 1.5}
SPOOL_TARGET = 1.5  # the daemon away: scrubbing and a durable write on top
SECRET, AWS_KEY = "hunter2-Wq8x-3000", "AKIAIOSFODNN7EXAMPLE"
EDITED = ("def parse_header(line):\n    name, _, value = line.partition(':')\n"
          "    return name, value\n")


def timed(command: list[str], stdin: str, cwd: Path, env: dict) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=30)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed: {done.stderr}")
    return elapsed, done.stdout


def tool_uses(proj: Path) -> dict[str, tuple[list[str], str]]:
    """Each other agent's shim and a tool-use payload in its own format."""
    cwd = str(proj)
    claude = {"session_id": "bench", "cwd": cwd, "tool_name": "Bash",
              "tool_input": {"command": "pytest -q"}, "tool_response": "12 passed in 0.8s"}
    payloads = {
        "claude-code": ([], {**claude, "hook_event_name": "PostToolUse"}),
        "codex": ([], {**claude, "hook_event_name": "PostToolUse", "turn_id": "t"}),
        "gemini": ([], {**claude, "hook_event_name": "AfterTool",
                        "tool_name": "run_shell_command", "tool_response": {
                            "llmContent": "12 passed\nExit Code: 0\n"}}),
        "copilot": (["postToolUse"], {"sessionId": "bench", "cwd": cwd, "toolName": "bash",
                                      "toolArgs": '{"command": "pytest -q"}', "toolResult": {
                                          "resultType": "success",
                                          "textResultForLlm": "12 passed"}}),
        "cursor": ([], {"hook_event_name": "afterShellExecution", "conversation_id": "bench",
                        "workspace_roots": [cwd], "command": "pytest -q",
                        "output": "12 passed"}),
        "opencode": ([], {"hook": "tool", "session_id": "bench", "cwd": cwd, "tool": {
            "name": "bash", "args": {"command": "pytest -q"}, "output": "12 passed",
            "metadata": {"exit": 0}}}),
    }
    return {surface: ([str(BIN / f"kirolearn-{surface}"), *args], json.dumps(payload))
            for surface, (args, payload) in payloads.items()}


def first_prompts(shim: list[str], proj: Path, env: dict, prompts: list[str]) -> dict:
    """The first prompt after each of len(prompts) starts of the daemon, with the model
    on, once the back-fill has given every record its vector."""
    env = {**env, "KIROLEARN_EMBEDDINGS_ENABLED": "1"}
    subprocess.run([*KL, "start"], env=env, check=True, capture_output=True, cwd="/tmp")
    try:
        base = Path(env["KIROLEARN_HOME"])
        state = control.embeddings_state(paths.Home(base)) or {}
        if not state.get("embeddings", "").startswith("on"):
            raise SystemExit(f"shim: the first prompt after a start is timed with the embedding"
                             f" model, and embeddings are {state.get('embeddings')}"
                             " (`kirolearn embeddings download`)")
        say("embedding the records once, for the cold starts")
        deadline = time.monotonic() + 1800
        home = paths.Home(base)
        while (control.embeddings_state(home, backfill=True) or {}).get("unembedded", 1):
            if time.monotonic() > deadline:
                raise SystemExit("shim: the back-fill did not finish in 30 minutes")
            time.sleep(1)
    finally:
        subprocess.run([*KL, "stop"], env=env, capture_output=True, cwd="/tmp")
    walls, answered = [], 0
    for prompt in prompts:
        subprocess.run([*KL, "start"], env=env, check=True, capture_output=True, cwd="/tmp")
        try:
            wall, out = timed(shim, json.dumps({"hook_event_name": "userPromptSubmit",
                                                "cwd": str(proj), "prompt": prompt}), proj, env)
        finally:
            subprocess.run([*KL, "stop"], env=env, capture_output=True, cwd="/tmp")
        walls.append(wall)
        answered += bool(out)
    return {"bench": "shim", "hook": "prompt", "path": "first_after_start",
            "surface": "kiro-cli", "starts": len(prompts), "wall_p50_ms": round(
                statistics.median(walls), 2), "wall_max_ms": round(max(walls), 2),
            "prompts_with_context": answered, "budget_ms": 500}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--starts", type=int, default=None,
                        help="cold starts timed (default 5; --quick: 2)")
    args = parser.parse_args()
    count = args.records or (1000 if args.quick else 10_000)
    runs = args.runs or (15 if args.quick else 100)
    starts = args.starts or (2 if args.quick else 5)

    compileall.compile_dir(Path(kirolearn.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory(prefix="klb-", dir="/tmp") as scratch:
        base, user_home = Path(scratch) / "kl", Path(scratch) / "home"
        proj = user_home / "proj"
        (proj / "src").mkdir(parents=True)
        (proj / "src" / "http.py").write_text(EDITED)
        for command in (["init", "-q"], ["add", "."], ["-c", "user.name=bench", "-c",
                                                       "user.email=bench@example.com",
                                                       "commit", "-qm", "Parse headers"]):
            subprocess.run(["git", "-C", str(proj), *command], check=True, capture_output=True)
        env = {**os.environ, "KIROLEARN_HOME": str(base), "HOME": str(user_home),
               "USER": "bench", "LOGNAME": "bench", "KIROLEARN_AUTOSTART": "0",
               "KIROLEARN_EMBEDDINGS_ENABLED": "0"}  # lexical; no back-fill meanwhile
        namespace = project.resolve_project(proj, home=str(user_home), override="").namespace(
            "bench")
        write_records(base, corpus.records(count, [namespace]))
        say(f"{count} records written; starting the daemon")
        subprocess.run([*KL, "start"], env=env, check=True, capture_output=True, cwd="/tmp")
        try:
            prompts = corpus.prompts(runs)
            tool = {"hook_event_name": "postToolUse", "cwd": str(proj),
                    "tool_name": "execute_bash", "tool_input": {"command": "pytest -q"},
                    "tool_response": {"success": True, "result": [
                        {"exit_status": "0", "stdout": "12 passed in 0.8s\n", "stderr": ""}]}}
            shim = [str(BIN / "kirolearn-kiro-cli")]
            others = tool_uses(proj)
            before_edit = ([str(BIN / "kirolearn-claude-code")], json.dumps({
                "session_id": "bench", "cwd": str(proj), "hook_event_name": "PreToolUse",
                "tool_name": "Edit", "tool_input": {
                    "file_path": str(proj / "src" / "http.py"),
                    "old_string": "    return name, value\n", "new_string": "    return name\n"}}))
            floor = [sys.executable, "-c", "import zmq, msgpack"]
            times: dict[str, list[float]] = {"floor": [], "postToolUse": [], "prompt": []}
            with_context = 0
            for i in range(runs + 3):  # the first three warm the caches
                f, _ = timed(floor, "", proj, env)
                t, _ = timed(shim, json.dumps(tool), proj, env)
                p, out = timed(shim, json.dumps({"hook_event_name": "userPromptSubmit",
                                                 "cwd": str(proj), "prompt": prompts[i % runs]}),
                               proj, env)
                for surface, (command, payload) in others.items():
                    o, _ = timed(command, payload, proj, env)
                    if i >= 3:
                        times.setdefault(surface, []).append(o)
                b, _ = timed(*before_edit, proj, env)
                if i >= 3:
                    times.setdefault("pre_tool", []).append(b)
                if i >= 3:
                    times["floor"].append(f)
                    times["postToolUse"].append(t)
                    times["prompt"].append(p)
                    with_context += bool(out)
        finally:
            subprocess.run([*KL, "stop"], env=env, capture_output=True, cwd="/tmp")
        spooled = len(list((base / "spool").glob("*.json"))) if (base / "spool").exists() else 0
        # The daemon away: each tool use is scrubbed and spooled (fsync included).
        secret_tool = {**tool, "tool_response": {"success": True, "result": [{
            "exit_status": "0", "stdout": f"DB_PASSWORD={SECRET} key {AWS_KEY}\n"}]}}
        spool_files: dict[str, int] = {}
        for path in ("spool", "spool_unsaved_rules"):
            if path == "spool_unsaved_rules":
                (base / "secret-rules.json").unlink()
            before = len(list((base / "spool").glob("*.json")))
            times[path], times[f"{path}_floor"] = [], []
            for i in range(runs + 3):
                f, _ = timed(floor, "", proj, env)
                t, _ = timed(shim, json.dumps(secret_tool), proj, env)
                if i >= 3:
                    times[f"{path}_floor"].append(f)
                    times[path].append(t)
            spool_files[path] = len(list((base / "spool").glob("*.json"))) - before
        spool_text = b"".join(p.read_bytes() for p in (base / "spool").glob("*.json"))
        leaked = spool_text.count(SECRET.encode()) + spool_text.count(AWS_KEY.encode())
        cold = first_prompts(shim, proj, env, corpus.prompts(starts, seed=7))
    floor_p50 = statistics.median(times["floor"])
    for hook, target in TARGETS.items():
        p50 = statistics.median(times[hook])
        line = {"bench": "shim", "hook": hook, "surface": "kiro-cli", "records": count,
                "runs": runs, "wall_p50_ms": round(p50, 2),
                "wall_p99_ms": round(percentile(times[hook], 99), 2),
                "floor_p50_ms": round(floor_p50, 2),
                "floor_p99_ms": round(percentile(times["floor"], 99), 2),
                "ratio_to_floor": round(p50 / floor_p50, 3), "target_ratio": target,
                "spooled": spooled}
        if hook == "prompt":
            line["prompts_with_context"] = with_context
        print(json.dumps(line), flush=True)
    for surface in others:  # every other agent's tool-use hook, the same way
        p50 = statistics.median(times[surface])
        print(json.dumps({
            "bench": "shim", "hook": "tool_use", "surface": surface, "runs": runs,
            "wall_p50_ms": round(p50, 2), "wall_p99_ms": round(percentile(times[surface], 99), 2),
            "floor_p50_ms": round(floor_p50, 2),
            "floor_p99_ms": round(percentile(times["floor"], 99), 2),
            "ratio_to_floor": round(p50 / floor_p50, 3),
            "target_ratio": TARGETS["postToolUse"]}), flush=True)
    p50 = statistics.median(times["pre_tool"])
    print(json.dumps({
        "bench": "shim", "hook": "pre_tool", "surface": "claude-code", "runs": runs,
        "wall_p50_ms": round(p50, 2), "wall_p99_ms": round(percentile(times["pre_tool"], 99), 2),
        "floor_p50_ms": round(floor_p50, 2),
        "floor_p99_ms": round(percentile(times["floor"], 99), 2),
        "ratio_to_floor": round(p50 / floor_p50, 3), "target_ratio": TARGETS["prompt"]}),
        flush=True)
    for path in ("spool", "spool_unsaved_rules"):
        p50, floor_p50 = statistics.median(times[path]), statistics.median(
            times[f"{path}_floor"])
        print(json.dumps({
            "bench": "shim", "hook": "postToolUse", "path": path, "surface": "kiro-cli",
            "runs": runs, "wall_p50_ms": round(p50, 2),
            "wall_p99_ms": round(percentile(times[path], 99), 2),
            "floor_p50_ms": round(floor_p50, 2),
            "floor_p99_ms": round(percentile(times[f"{path}_floor"], 99), 2),
            "ratio_to_floor": round(p50 / floor_p50, 3), "target_ratio": SPOOL_TARGET,
            "spooled": spool_files[path], "secrets_in_spool": leaked}), flush=True)
    print(json.dumps(cold), flush=True)


if __name__ == "__main__":
    main()
