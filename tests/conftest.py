"""Fixtures: a private KIROLEARN_HOME per test, a real daemon, and leak checks.

A test fails loudly if it leaves a daemon process or a socket file behind, or
a ZeroMQ context that cannot terminate (an unclosed socket).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import zmq

from kirolearn import contract, paths, transport

KL = [sys.executable, "-m", "kirolearn"]
NAMESPACE = "/actor/tester/project/" + "a" * 64 + "/"


def processes_using(home: Path) -> list[int]:
    """Pids of live processes whose environment points at this home."""
    needle = f"KIROLEARN_HOME={home}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().split()[2]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture
def home(monkeypatch):
    """A short, private KIROLEARN_HOME; checked for leftovers afterwards."""
    base = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))
    monkeypatch.setenv("KIROLEARN_HOME", str(base))
    for name in list(os.environ):
        if name.startswith("KIROLEARN_") and name != "KIROLEARN_HOME":
            monkeypatch.delenv(name)
    monkeypatch.setenv("KIROLEARN_VIEWER_PORT", "0")  # daemons side by side: any free port
    yield base
    leftovers = processes_using(base)
    for pid in leftovers:
        os.kill(pid, 9)
    sockets = [p.name for p in paths.runtime_dir(base).glob("*") if p.is_socket()]
    shutil.rmtree(base, ignore_errors=True)
    assert not leftovers, f"test leaked processes: {leftovers}"
    assert not sockets, f"test leaked socket files: {sockets}"


def kl(*args: str, input: str | None = None, timeout: float = 60, check: bool = False,
       env: dict | None = None, cwd: str = "/tmp") -> subprocess.CompletedProcess:
    """Run the kirolearn CLI as a user would."""
    result = subprocess.run([*KL, *args], input=input, capture_output=True, text=True,
                            timeout=timeout, env=env, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"kirolearn {' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def status() -> dict:
    return json.loads(kl("status", "--json").stdout)


def wait_for(predicate, timeout: float = 15, interval: float = 0.05, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {message}")


@pytest.fixture
def daemon(home):
    """A running daemon in the test's home; stopped (and checked) afterwards."""
    kl("start", check=True)
    yield home
    kl("stop", check=True)


@pytest.fixture
def ctx():
    """A zmq context that must terminate promptly: a leaked socket fails the test."""
    context = zmq.Context()
    yield context
    done = threading.Event()

    def term() -> None:
        context.term()
        done.set()

    threading.Thread(target=term, daemon=True).start()
    if not done.wait(5):
        context.destroy(linger=0)
        pytest.fail("zmq context did not terminate: open sockets likely remain")


@pytest.fixture
def ingest(daemon, ctx):
    client = transport.Client(paths.endpoint("ingest"), ctx, timeout_ms=5000)
    yield client
    client.close()


def make_event(kind: str = "prompt", content: str = "hello", **overrides) -> dict:
    body = overrides.pop("body", None) or (
        {"type": "json", "data": {"tool_name": "fs_read", "tool_input": {"path": content}}}
        if kind == "tool_use" else {"type": "text", "content": content})
    event = contract.make_event(
        kind, body, namespace=overrides.pop("namespace", NAMESPACE), actor_id="tester",
        session_id=overrides.pop("session_id", "session-1"), surface="kiro-cli",
        version="0.1.0", client_id="testhost", project_path="/tmp/project")
    event.update(overrides)
    return event
