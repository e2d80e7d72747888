"""Fixtures: a private KIROLEARN_HOME per test, a real daemon (on either store), and
leak checks.

A test fails loudly if it leaves a daemon process or a socket file behind, or
a ZeroMQ context that cannot terminate (an unclosed socket). Helpers are in the
``helpers`` package, a module per kind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from helpers.agents import Sandbox
from helpers.cli import here, kl, processes_using
from helpers.model_apis import scripted_api
from hypothesis import settings
from ports import free_ports
from postgres_server import PostgresServer

from kirolearn import paths, transport
from kirolearn.db import postgres

# No time limit per example: on a loaded machine one that reads a database or starts a
# process may take a second, which is no failure (the suite's timeouts catch a hang).
settings.register_profile("loaded", deadline=None)
settings.load_profile("loaded")


@contextlib.contextmanager
def private_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short, private KIROLEARN_HOME; checked for leftovers afterwards."""
    base = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))
    monkeypatch.setenv("KIROLEARN_HOME", str(base))
    for name in list(os.environ):
        if name.startswith("KIROLEARN_") and name != "KIROLEARN_HOME":
            monkeypatch.delenv(name)
    monkeypatch.setenv("KIROLEARN_VIEWER_PORT", "0")  # daemons side by side: any free port
    # A role that dies within start_secs of its start failed to start, and waits out a
    # back-off (the default, 1 s, is a user's margin); tests kill roles soon after a start
    # and expect the crash's immediate restart.
    monkeypatch.setenv("KIROLEARN_SUPERVISOR_START_SECS", "0.3")
    yield base
    leftovers = processes_using(base)
    for pid in leftovers:
        os.kill(pid, 9)
    sockets = [p.name for p in paths.Home(base).runtime_dir().glob("*") if p.is_socket()]
    shutil.rmtree(base, ignore_errors=True)
    assert not leftovers, f"test leaked processes: {leftovers}"
    assert not sockets, f"test leaked socket files: {sockets}"


@pytest.fixture
def home(monkeypatch):
    with private_home(monkeypatch) as base:
        yield base


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server for this test process (stopped at its end)."""
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, home, monkeypatch):
    """The test runs on each store: the home's SQLite file, then a new database on a
    real PostgreSQL server (``storage.url``)."""
    if request.param == "postgresql":
        monkeypatch.setenv("KIROLEARN_STORAGE_URL",
                           request.getfixturevalue("postgres_server").database())
    yield request.param
    postgres.close_pools()  # the test's reads of its database


@pytest.fixture
def daemon(home, request):
    """A running daemon in the test's home (on the test's ``store`` when it asks for
    one); stopped (and checked) afterwards."""
    if "store" in request.fixturenames:
        request.getfixturevalue("store")
    kl("start", check=True)
    yield home
    kl("stop", check=True)


@pytest.fixture
def sandbox(request, home, tmp_path):
    """A real agent's sandbox (``helpers.agents.Sandbox``) for the ``E2EAgent`` the test
    is parametrized with (indirectly), against a daemon in the test's home."""
    agent = request.param
    if agent.daemon_config:
        (home / "config.toml").write_text(agent.daemon_config)
    request.getfixturevalue("daemon")
    with scripted_api(agent.api) as api:
        try:
            yield Sandbox(agent, home, tmp_path / "home", api)
        finally:
            agent.after(tmp_path / "home")


@pytest.fixture(scope="module")
def module_daemon():
    """A daemon shared by a module's tests, for a scenario played once and checked claim
    by claim (its home is the environment's only while the module runs)."""
    with pytest.MonkeyPatch.context() as monkeypatch, private_home(monkeypatch) as base:
        kl("start", check=True)
        yield base
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
    client = transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000)
    yield client
    client.close()


@pytest.fixture
def machines() -> Iterator[list[Path]]:
    """Homes for other machines (``helpers.team.new_machine``); none may keep a process after
    the test."""
    made: list[Path] = []
    yield made
    for base in made:
        leftovers = processes_using(base)
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)
        assert not leftovers, f"test leaked processes of {base}: {leftovers}"


@pytest.fixture
def server(home):
    """This home's daemon listening on TCP with CURVE: (its address, its public key)."""
    made = kl("keys", "init", check=True).stdout
    public = made.split("server public key: ", 1)[1].split()[0]
    address = f"tcp://127.0.0.1:{free_ports()}"
    kl("start", "--listen", address, check=True)
    yield address, public
    kl("stop", check=True)
