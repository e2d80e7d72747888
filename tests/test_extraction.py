"""Extraction workers beyond the daemon's own: one started from a terminal."""

from __future__ import annotations

import json
import signal
import subprocess

from helpers import KL, NAMESPACE, kl, make_event, wait_for

from kirolearn import paths, transport


def test_a_worker_started_by_hand_takes_batches_and_stops_on_ctrl_c(home, ctx):
    kl("start", check=True)
    worker = subprocess.Popen([*KL, "worker", "extraction", "--connect", str(home)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              cwd="/tmp")
    try:
        ctl = paths.endpoint(f"worker-{worker.pid}.ctl")
        with transport.Client(ctl, ctx, timeout_ms=200) as control:
            def answers() -> bool:
                try:
                    return control.call("ping")["role"] == "extraction"
                except transport.Timeout:
                    return False
            wait_for(answers, message="the worker's control socket")
        with transport.Client(paths.endpoint("ingest"), ctx, timeout_ms=5000) as client:
            for project in range(8):  # eight projects' turns, eight batches for two workers
                namespace = NAMESPACE.replace("a" * 64, f"{project:064d}")
                for kind, text in (("prompt", f"question {project}"),
                                   ("session_summary", f"answer {project}")):
                    event = make_event(kind, text, namespace=namespace)
                    assert client.call("put_event", {"event": event})["status"] == "stored"
        wait_for(lambda: json.loads(kl("stats", "--json").stdout)["totals"]["records"] >= 8,
                 timeout=20, message="records from every turn")
        worker.send_signal(signal.SIGINT)
        _, log = worker.communicate(timeout=10)
        assert worker.returncode == 0
        batches = [line for line in log.splitlines() if "batch {" in line]
        assert batches, "the hand-started worker took no batch"
        assert json.loads(batches[0].split("batch ", 1)[1])["outcome"] == "ok"
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate()
        kl("stop", check=True)
    refused = kl("worker", "extraction", "--connect", str(home))
    assert refused.returncode == 1 and "no kirolearn daemon is running" in refused.stderr
