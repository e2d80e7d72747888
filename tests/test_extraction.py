"""Extraction workers: the take protocol, and workers beyond the daemon's own; turns of
parallel sessions kept whole."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import zmq
from helpers.cli import KL, here, kl
from helpers.events import NAMESPACE, make_event
from helpers.waits import wait_for, wait_for_count
from helpers.workspace import Workspace

from kirolearn import paths, protocol, transport


def test_a_worker_started_by_hand_takes_batches_and_stops_on_ctrl_c(home, ctx):
    kl("start", check=True)
    worker = subprocess.Popen([*KL, "worker", "extraction", "--connect", str(home)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              cwd="/tmp")
    try:
        ctl = here().endpoint(f"worker-{worker.pid}.ctl")
        with transport.Client(ctl, ctx, timeout_ms=200) as control:
            def answers() -> bool:
                try:
                    return control.call("ping")["role"] == "extraction"
                except transport.Timeout:
                    return False
            wait_for(answers, message="the worker's control socket")
        with (transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as client,
              transport.Client(ctl, ctx, timeout_ms=5000) as control):
            projects = iter(range(1000))

            def one_more_turn_then_taken_by_hand() -> bool:
                """A turn of a new project (a batch of its own) until the hand-started
                worker has done one: takes go round the free workers."""
                if control.call("ping")["batches_done"]:
                    return True
                project = next(projects)
                namespace = NAMESPACE.replace("a" * 64, f"{project:064d}")
                for kind, text in (("prompt", f"question {project}"),
                                   ("session_summary", f"answer {project}")):
                    event = make_event(kind, text, namespace=namespace)
                    assert client.call("put_event", {"event": event})["status"] == "stored"
                return False
            wait_for(one_more_turn_then_taken_by_hand, timeout=30, interval=0.2,
                     message="a batch done by the hand-started worker")
        worker.send_signal(signal.SIGINT)
        _, log = worker.communicate(timeout=10)
        assert worker.returncode == 0
        takes = [json.loads(line.split("take ", 1)[1]) for line in log.splitlines()
                 if "take {" in line]
        assert takes and all(set(take["strategies"]) == {"heuristic"} for take in takes)
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate()
        kl("stop", check=True)
    refused = kl("worker", "extraction", "--connect", str(home))
    assert refused.returncode == 1 and "no kirolearn daemon is running" in refused.stderr


def test_a_worker_answers_each_batch_of_a_take_and_survives_malformed_takes(home, ctx):
    """A worker on its own, storage's two sockets played by the test: malformed takes are
    dropped, a batch that cannot be extracted is answered with its error, and the good
    batch of the same take with its records."""
    paths.Home(home).ensure_layout()
    batches = transport.make_socket(ctx, zmq.PUSH, bind=paths.Home(home).endpoint("batches"))
    records = transport.make_socket(ctx, zmq.PULL, bind=paths.Home(home).endpoint("records"))
    worker = subprocess.Popen([sys.executable, "-m", "kirolearn.roles.extraction"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        event = make_event("prompt", "the export crashes on invoices without a customer")
        stored = {key: event.get(key) for key in ("event_id", "kind", "namespace", "session_id",
                                                  "valid_time", "parent_event_id",
                                                  "project_path")}
        stored["body_json"] = json.dumps(event["body"])
        for frame in (b"\xc1garbage", protocol.pack({"batches": 5}),
                      protocol.pack({"batches": [{"batch_id": "x"}]})):
            batches.send(frame)
        batches.send(protocol.pack({"batches": [
            {"batch_id": "poison", "namespace": NAMESPACE, "events": [{"kind": "prompt"}]},
            {"batch_id": "good", "namespace": NAMESPACE, "events": [stored]}],
            "take": "t-1"}))
        assert records.poll(20_000), "the worker answered nothing"
        assert protocol.unpack(records.recv()) == {"batch_ids": ["poison", "good"],
                                                   "take": "t-1", "worker_pid": worker.pid}
        assert records.poll(10_000)
        results = protocol.unpack(records.recv())["results"]
        assert [r["batch_id"] for r in results] == ["poison", "good"]
        assert "KeyError" in results[0]["error"] and "records" not in results[0]
        assert results[1]["records"][0]["source_event_ids"] == [event["event_id"]]
    finally:
        worker.send_signal(signal.SIGTERM)
        _, log = worker.communicate(timeout=10)
        batches.close()
        records.close()
        for leftover in paths.Home(home).runtime_dir().glob("*"):  # the supervisor's cleanup
            leftover.unlink()
    assert worker.returncode == 0, log
    assert log.count("dropped a malformed take") == 3


def test_parallel_sessions_in_worktrees_never_split_a_turn(home, tmp_path, monkeypatch):
    """Five agents in five worktrees of one repository (one project) work at once: their
    hooks interleave, and each turn's end comes while the others are mid-turn. Every
    record holds its own request, its own edit and its own conclusion, and nothing of
    another session's."""
    monkeypatch.setenv("KIROLEARN_STORAGE_BATCH_IDLE_S", "3600")  # turn ends form batches
    ws = Workspace(tmp_path)
    main = ws.home / "shop"
    git = ["git", "-c", "user.name=dev", "-c", "user.email=dev@example.com"]
    subprocess.run([*git, "init", "-q", str(main)], check=True)
    subprocess.run([*git, "-C", str(main), "commit", "-q", "--allow-empty", "-m", "start"],
                   check=True)
    trees = [main] + [ws.home / f"shop-{n}" for n in range(1, 5)]
    for tree in trees[1:]:
        subprocess.run([*git, "-C", str(main), "worktree", "add", "-q", str(tree)], check=True)
    words = ["alpha", "bravo", "charlie", "delta", "echo"]
    kl("start", check=True)
    try:
        def claude(n: int, event: str, **fields) -> None:
            payload = {"session_id": f"agent-{words[n]}", "cwd": str(trees[n]),
                       "transcript_path": f"/x/{n}.jsonl", "hook_event_name": event, **fields}
            result, _ = ws.hook("kirolearn-claude-code", payload, cwd=trees[n])
            assert result.returncode == 0 and result.stderr == "", result.stderr

        for turn in (1, 2):
            for n in range(5):
                claude(n, "UserPromptSubmit",
                       prompt=f"Rename the {words[n]} option, step {turn}")
            for n in (3, 0, 4, 1, 2):  # edits and ends interleaved: one ends, others work
                path = str(trees[n] / f"{words[n]}_{turn}.py")
                claude(n, "PostToolUse", tool_name="Edit",
                       tool_input={"file_path": path, "old_string": "old",
                                   "new_string": f"{words[n]}_value_{turn}"},
                       tool_response={"filePath": path})
                claude(n, "Stop", stop_hook_active=False,
                       last_assistant_message=f"Renamed {words[n]} in step {turn}.")

        def records() -> list[dict]:
            lines = [json.loads(line) for line in kl("export", check=True).stdout.splitlines()]
            return [line for line in lines if "record_id" in line]

        wait_for_count(lambda: len(records()), 10, interval=0.2, message="records made")
        made = records()
    finally:
        kl("stop", check=True)
    assert len(made) == 10 and len({r["namespace"] for r in made}) == 1
    for record in made:
        word, turn = next((w, t) for w in words for t in (1, 2)
                          if record["title"] == f"Rename the {w} option, step {t}")
        assert f"Renamed {word} in step {turn}." in record["summary"]
        assert record["files_touched"] == [f"{word}_{turn}.py"]
        others = [w for w in words if w != word]
        assert not any(w in json.dumps(record) for w in others), record
