"""The daemon as every client sees it: is it running, start it, call it, stop it.

The CLI, the MCP server, the viewer, the shims and the tests all reach the daemon
through this module, so there is one spawn recipe, one way to make a request and one
named timeout per kind of call. On a machine that ``kirolearn connect`` made the client
of a daemon elsewhere (``remote``), requests to ingest and retrieval go there, over TCP
and CURVE, through that daemon's gateway; nothing is started here. It is as light as
the shims need it to be: the standard library, pyzmq and msgpack at import
(subprocess, the keys and the database are imported by the functions that need them).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

from kirolearn import paths, protocol, spool, transport

# How long each kind of call waits for its answer (milliseconds).
PROBE_MS = 300  # a readiness poll while the daemon starts
BUSY_PROBE_MS = 150  # a worker's ping: one that does not answer at once is busy with a batch
CONTROL_MS = 2000  # the supervisor's and the roles' control sockets
LOOKUP_MS = 5000  # reads: records, timelines, the embeddings' state
WRITE_MS = 8000  # writes through ingest, which waits up to ingest.storage_timeout_ms (5 s)
EVENT_MS = 200  # a shim's event that is not a prompt: the ack is a group commit away
IMPORT_MS = 3000  # one chunk of an import (retried while ingest or storage restarts)
SEARCH_MARGIN_MS = 2000  # a search waits for its own budget plus this

READY_TIMEOUT_S = 30.0  # `kirolearn start` waits this long for every role to be RUNNING
STOP_TIMEOUT_S = 60.0  # then the supervisor is killed
AUTOSTART_EVERY_S = 10.0  # a background start at most this often (hooks come in bursts)
SPOOL_CHUNK = 200  # spooled events per request when draining to a daemon elsewhere

Timeout = transport.Timeout
RemoteError = protocol.RemoteError
Unanswered = (transport.Timeout, protocol.RemoteError)  # what a failed call raises


# The roles a client elsewhere may call, through the gateway; storage and the control
# sockets are the daemon host's alone (every write goes through ingest's checks and scrub).
REMOTE_TARGETS = ("ingest", "retrieval")


class StartFailed(RuntimeError):
    """The daemon did not come up; the message says where to look."""


class BadRemote(ValueError):
    """``kirolearn connect``'s setup is broken; the message says what to do."""


class Remote(NamedTuple):
    """The daemon elsewhere this machine is a client of."""

    endpoint: str  # tcp://HOST:PORT, where its gateway listens
    curve: transport.Curve  # this machine's pair and the daemon's public key


_remotes: dict[paths.Home, tuple[float, Remote | None]] = {}


def remote(home: paths.Home) -> Remote | None:
    """What ``kirolearn connect`` set up (``remote.json`` and this machine's client key
    pair), or None: the daemon is this machine's own. A broken setup is BadRemote,
    saying what to do."""
    from kirolearn import keys

    path = home.remote_file
    try:
        stamp = path.stat().st_mtime
    except FileNotFoundError:
        return None
    cached = _remotes.get(home)
    if cached and cached[0] == stamp:
        return cached[1]
    try:
        found = json.loads(path.read_text("utf-8"))
        server_key = keys.check_public_key(found["server_key"])
        endpoint = transport.tcp_endpoints(found["endpoint"])["requests"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadRemote(f"{path} is broken ({exc}); run `kirolearn connect` again") from exc
    try:
        pair = keys.client_pair(home)
    except keys.KeysError as exc:
        raise BadRemote(f"{exc}; run `kirolearn connect` again") from exc
    if pair is None:
        raise BadRemote(f"{path} names a daemon, but this machine has no client key pair;"
                         " run `kirolearn connect` again")
    result = Remote(endpoint, transport.Curve(pair.public, pair.secret, server_key))
    _remotes[home] = (stamp, result)
    return result


def running(home: paths.Home) -> bool:
    """Whether a supervisor holds the pidfile lock."""
    return home.daemon_running()


def served(home: paths.Home) -> bool:
    """Whether a daemon serves this machine: its own, running, or one elsewhere."""
    return remote(home) is not None or running(home)


def listening(target: str, home: paths.Home) -> bool:
    """Whether the socket file of ``target`` exists (a cheap check before a call); a
    daemon elsewhere is always worth a try (the call's timeout bounds it)."""
    if target in REMOTE_TARGETS and remote(home) is not None:
        return True
    return os.path.exists(home.endpoint(target)[len("ipc://"):])


def call(target: str, op: str, body: dict | None = None, *, timeout_ms: int = CONTROL_MS,
         home: paths.Home, ctx=None) -> dict:
    """One request to ``target`` (``ingest``, ``retrieval``, ``storage``, ``supervisor.ctl``
    or ``<process>.ctl``): the reply's body, or Timeout / RemoteError."""
    with client(target, home, timeout_ms, ctx) as found:
        return found.call(op, body)


def client(target: str, home: paths.Home, timeout_ms: int = CONTROL_MS,
           ctx=None) -> transport.Client:
    """A client of ``target``: this machine's daemon's, or, for a machine connected to a
    daemon elsewhere (``kirolearn connect``), that one's over CURVE."""
    away = remote(home) if target in REMOTE_TARGETS else None
    if away is not None:
        return transport.Client(away.endpoint, ctx, timeout_ms, curve=away.curve, to=target)
    return transport.Client(home.endpoint(target), ctx, timeout_ms)


# -- starting -----------------------------------------------------------------------------------

def spawn(home: paths.Home, workers: int | None = None):
    """Start the supervisor as a detached process (the one recipe): a new session, no
    terminal, output to ``logs/supervisor.out``, and the home as its cwd (a daemon must
    not pin the caller's directory, and ``python -m`` puts the cwd first on sys.path,
    where a source checkout would shadow the installed code)."""
    import subprocess

    home = home.ensure_layout()
    argv = [sys.executable, "-m", "kirolearn.supervisor"]
    if workers is not None:
        argv += ["--extraction-workers", str(workers)]
    fd = os.open(home.log_dir / "supervisor.out", os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                 0o600)
    os.fchmod(fd, 0o600)  # private, like the logs beside it (one made before was not)
    with open(fd, "ab") as out:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, cwd=home.root,
                                env={**os.environ, "KIROLEARN_HOME": str(home.root)})


def start_in_background(home: paths.Home) -> bool:
    """Start the daemon unless it runs or was started in the last AUTOSTART_EVERY_S (a
    burst of hooks starts it once); whether a start was made. On a client of a daemon
    elsewhere nothing is started here but the spool's drain (``start_draining``)."""
    if remote(home) is not None:
        return start_draining(home)
    if running(home):
        return False
    marker = home.spool_dir / ".autostart"
    try:
        if time.time() - marker.stat().st_mtime < AUTOSTART_EVERY_S:
            return False
    except FileNotFoundError:
        home.ensure_layout()
        paths.ensure_private_dir(marker.parent)
    marker.touch()
    spawn(home)
    return True


def start_draining(home: paths.Home) -> bool:
    """On a client of a daemon elsewhere: start ``drain_spool`` in the background, at most
    every AUTOSTART_EVERY_S and only while events wait; whether it was started."""
    import subprocess

    marker = home.spool_dir / ".drain"
    try:
        if time.time() - marker.stat().st_mtime < AUTOSTART_EVERY_S:
            return False
    except FileNotFoundError:
        pass
    if not spool.waiting(home, 1):
        return False
    marker.touch()
    subprocess.Popen([sys.executable, "-m", "kirolearn.control"], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, cwd=home.root, env={**os.environ,
                                                             "KIROLEARN_HOME": str(home.root)})
    return True


def drain_spool(home: paths.Home) -> dict:
    """Hand the spooled events to the daemon elsewhere, 200 at a time, until none is left
    or it does not answer: ``{stored, rejected, left}``. A rejected event goes to the
    quarantine with the reason, as the daemon's own ingest does with its spool. One
    drain at a time (a lock); a second returns at once."""
    import fcntl

    counts = {"stored": 0, "rejected": 0, "left": 0}
    lock = os.open(paths.ensure_private_dir(home.spool_dir) / ".drain.lock",
                   os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            counts["left"] = len(spool.waiting(home))
            return counts
        chunk = SPOOL_CHUNK
        while files := spool.waiting(home, chunk):
            lines = []
            for path in files:
                event = spool.read(path)
                lines.append(json.dumps(event) if isinstance(event, dict) else "")
            try:
                results = call("ingest", "put_events", {"lines": lines},
                               timeout_ms=IMPORT_MS, home=home)["results"]
            except RemoteError as exc:
                if exc.code != protocol.ErrorCode.FORBIDDEN:
                    break
                if len(files) > 1:  # one event is not this key's: find which, one by one
                    chunk = 1
                    continue
                results = [{"status": "rejected", "reason": exc.reason}]
            except Unanswered:
                break
            for path, result in zip(files, results, strict=True):
                if result["status"] == "rejected":
                    spool.reject(path, result.get("reason") or "rejected", home)
                    counts["rejected"] += 1
                else:
                    counts["stored"] += result["status"] == "stored"
                    path.unlink(missing_ok=True)
        counts["left"] = len(spool.waiting(home))
        return counts
    finally:
        os.close(lock)


def wait_ready(home: paths.Home, daemon=None, timeout_s: float = READY_TIMEOUT_S) -> dict:
    """The supervisor's status once every role is ready (RUNNING, or WAITING to be
    started on demand) or one is FATAL (or the last
    status seen when ``timeout_s`` runs out). ``daemon``: the supervisor just spawned,
    whose early exit is a StartFailed."""
    from kirolearn.supervisor.states import FATAL, READY, RET_PIDFILE

    deadline = time.monotonic() + timeout_s
    status: dict = {}
    while time.monotonic() < deadline:
        code = daemon.poll() if daemon is not None else None
        if code == RET_PIDFILE:
            raise StartFailed("kirolearn is already running")
        if code is not None:
            raise StartFailed(f"the supervisor exited with status {code}; see"
                              f" {home.log_dir}/supervisor.log")
        try:
            status = call("supervisor.ctl", "status", timeout_ms=PROBE_MS, home=home)
        except Unanswered:
            time.sleep(0.05)
            continue
        states = {r["state"] for r in status["roles"]}
        if states <= set(READY) or FATAL in states:
            return status
        time.sleep(0.05)
    return status


def wait_answering(target: str, timeout_s: float, home: paths.Home) -> bool:
    """Whether ``target`` answers a ping within ``timeout_s`` (for a daemon just started)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if running(home):
            try:
                call(target, "ping", timeout_ms=PROBE_MS, home=home)
                return True
            except Unanswered:
                pass
        time.sleep(0.1)
    return False


# -- stopping -----------------------------------------------------------------------------------

def _exited(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a zombie has exited: only its parent's wait is missing
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except (OSError, IndexError):
        return False


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def remove_socket_files(run_dir: Path) -> list[str]:
    removed = []
    for pattern in ("*.sock", "*.ctl"):
        for path in run_dir.glob(pattern):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def stop(home: paths.Home) -> bool:
    """Stop the daemon if it runs, down the whole ladder (a stop request, SIGTERM to a
    wedged supervisor, SIGKILL after STOP_TIMEOUT_S); whether it was running. When this
    returns, no process of it is left."""
    import signal

    pidfile = home.pidfile()
    if not running(home):
        remove_socket_files(home.runtime_dir())
        return False
    supervisor_pid = read_pid(pidfile)
    try:
        call("supervisor.ctl", "stop", home=home)
    except Unanswered:
        pid = read_pid(pidfile)
        if pid:  # the supervisor is wedged; its roles stop when it goes
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while running(home):
        if time.monotonic() > deadline:
            pid = read_pid(pidfile)
            if pid:
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
        time.sleep(0.05)
    # The lock goes just before the process does; "stopped" means nothing is left.
    deadline = time.monotonic() + 5
    while supervisor_pid and not _exited(supervisor_pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    remove_socket_files(home.runtime_dir())
    return True


# -- what it is doing ---------------------------------------------------------------------------

def status(home: paths.Home, strategy: str = "unknown") -> dict | None:
    """Everything ``kirolearn status`` shows, or None when the daemon is not running: the
    supervisor's view of each process, each extraction worker's counters (``strategy``
    names the configured extractor), why the database cannot be written (``fault``,
    None when it can), what waits for extraction, the embeddings' state and the
    viewer's URL."""
    from kirolearn.db import batches
    from kirolearn.supervisor.states import RUNNING

    if not running(home):
        return None
    try:
        result = call("supervisor.ctl", "status", home=home)
    except Unanswered:
        return None
    workers = []
    for r in result["roles"]:
        if r["role"] != "extraction" or r["state"] != RUNNING:
            continue
        try:  # a worker answers between batches
            info = call(f"{r['name']}.ctl", "ping", timeout_ms=BUSY_PROBE_MS, home=home)
        except Unanswered:
            workers.append({"name": r["name"], "busy": True})
            continue
        keep = ("batches_done", "llm_budget_left", "breakers_open")
        workers.append({"name": r["name"], "busy": False,
                        **{k: info[k] for k in keep if k in info}})
    result["extraction"] = {"strategy": strategy, "workers": workers}
    try:
        result["fault"] = storage_fault(home, BUSY_PROBE_MS)
    except Unanswered:  # the roles' states say why
        result["fault"] = None
    result["pending"] = batches.pending_work(home)
    result["embeddings"] = embeddings_state(home)
    result["viewer"] = (viewer_info(home) or {}).get("url")
    return result


def storage_fault(home: paths.Home, timeout_ms: int = CONTROL_MS) -> dict | None:
    """Why storage cannot write to the database (``{reason, since}``), or None when it
    can; Timeout or RemoteError when storage does not answer."""
    found = call("storage", "ping", timeout_ms=timeout_ms, home=home)
    return {"reason": found["fault"], "since": found["fault_since"]} if "fault" in found else None


def embeddings_state(home: paths.Home, backfill: bool = False) -> dict | None:
    """What retrieval says of its embeddings (on and which model, or off and why; the
    default search mode; the back-fill's progress), or None when it does not answer.
    ``backfill``: start the back-fill at once."""
    try:
        return call("retrieval", "embeddings", {"backfill": True} if backfill else None,
                    timeout_ms=CONTROL_MS, home=home)
    except Unanswered:
        return None


def viewer_info(home: paths.Home) -> dict | None:
    """Where the running viewer listens (``url``, ``port``, ``pid``), or None."""
    try:
        return json.loads(home.viewer_info().read_text("utf-8"))
    except (OSError, ValueError):
        return None


def viewer_url(home: paths.Home) -> str | None:
    """The viewer's URL with its token (what `kirolearn open` opens), or None when the
    viewer is not up."""
    info = viewer_info(home)
    try:
        token = home.viewer_token.read_text("utf-8").strip()
    except OSError:
        return None
    return f"{info['url']}?token={token}" if info and token else None


if __name__ == "__main__":  # the background drain that start_draining starts
    drain_spool(paths.Home.current())
