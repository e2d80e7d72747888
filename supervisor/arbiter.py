"""The arbiter: starts every role process, watches it, restarts it, stops it.

Process states and wording follow supervisord: STOPPED → STARTING → RUNNING;
a process that dies before it is RUNNING goes to BACKOFF and is retried with a
capped exponential delay, and after ``start_retries`` such failures to FATAL,
which is reported, never looped. A RUNNING process that dies is restarted at
once (EXITED → STARTING); one that keeps dying (more than ``FLAP_LIMIT`` times
in ``FLAP_WINDOW_S``) goes FATAL too. RUNNING means: answering ``ping`` on its
control socket; one that dies within ``start_secs`` of its start still failed to start.

A RUNNING process is pinged every ``HEALTH_S``: alive is not enough, as a role stuck in
a call (a read that never returns) answers nothing while its process stands. One that
has answered no ping for ``UNRESPONSIVE_AFTER_S`` is UNRESPONSIVE in ``status``; one
silent for ``supervisor.unresponsive_s`` (an extraction worker: at least its model's
three attempts, ``extraction.llm_timeout_s`` each) is killed and started again, as a
crash is.

The viewer is started on demand: the supervisor holds its listening socket
(``viewer.listener``), and the viewer is WAITING until a connection waits there; it
is then started with the socket, and is WAITING again when it exits unused
(``RET_IDLE``).

Stopping stops every role but storage at once, then storage, so that it commits what
ingest and the workers hand it on their way out; each process goes down the ladder: a
``shutdown`` message, then SIGTERM, then SIGKILL.

Before anything binds, the pidfile is locked (a second bind on an ipc path
would silently steal it from a live daemon); only then are stale socket files
removed.

One module, long as it is: a process's states, and every path between them (start,
health, exit, stop, and the control ops that move them), read as one machine.
"""

from __future__ import annotations

import fcntl
import logging
import logging.handlers
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from kirolearn import config, paths, privacy, protocol, transport
from kirolearn.control import read_pid, remove_socket_files
from kirolearn.roles import base
from kirolearn.supervisor.states import (
    BACKOFF,
    EXITED,
    FATAL,
    RET_CONFIG,
    RET_IDLE,
    RUNNING,
    START_ORDER,
    STARTING,
    STOPPED,
    STOPPING,
    UNRESPONSIVE,
    UP,
    WAITING,
)
from kirolearn.viewer.listener import FD_ENV, close_listener, open_listener

FLAP_LIMIT = 10
FLAP_WINDOW_S = 60.0
HEALTH_S = 5.0  # how often a RUNNING process is pinged
UNRESPONSIVE_AFTER_S = 2 * HEALTH_S  # silent this long: UNRESPONSIVE in status

log = logging.getLogger("kirolearn.supervisor")


class AlreadyRunning(RuntimeError):
    pass


class PidLock:
    """An exclusive flock on the pidfile, held for the daemon's lifetime."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning(
                f"kirolearn is already running (pid {read_pid(self.path)})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)  # left in place: unlinking a lock file races
            os.close(self.fd)
            self.fd = None


@dataclass
class Process:
    name: str
    role: str
    state: str = STOPPED
    popen: subprocess.Popen | None = None
    started: float = 0.0
    restarts: int = 0
    fast_failures: int = 0
    next_start: float = 0.0
    crashes: list[float] = field(default_factory=list)
    stop_stage: int = 0
    stop_deadline: float = 0.0
    remove_when_stopped: bool = False
    client: transport.Client | None = None
    answered: float = 0.0  # when it last answered a ping (monotonic)
    next_ping: float = 0.0

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen and self.popen.poll() is None else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


class Arbiter:
    def __init__(self, home: paths.Home, settings: dict, extraction_workers: int):
        self.home = home
        self.settings = settings
        self.sup = settings["supervisor"]
        self.ctx = zmq.Context()
        self.ctx.linger = 0
        self.processes: dict[str, Process] = {}
        for role in START_ORDER[:-1]:
            if role != "gateway" or settings["network"]["listen"]:
                self.processes[role] = Process(role, role)
        self.workers = 0
        self._set_workers(extraction_workers)
        self.signals: list[int] = []
        self.shutting_down = False
        self.stop_queue: list[list[str]] = []
        self.role_loggers: dict[str, logging.Logger] = {}
        self.viewer_listener: socket.socket | None = None  # held while the viewer waits

    # -- logging of children --------------------------------------------------------------

    def _role_logger(self, role: str) -> logging.Logger:
        if role not in self.role_loggers:
            logger = logging.getLogger(f"kirolearn.children.{role}")
            logger.propagate = False
            logger.setLevel(logging.INFO)
            handler = logging.handlers.RotatingFileHandler(
                paths.not_a_link(self.home.log_dir / f"{role}.log"),
                maxBytes=self.settings["logging"]["max_bytes"],
                backupCount=self.settings["logging"]["backups"])
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
            self.role_loggers[role] = logger
        return self.role_loggers[role]

    def _pipe_output(self, proc: Process, stream) -> None:
        logger = self._role_logger(proc.role)
        for line in iter(stream.readline, b""):
            logger.info(privacy.scrub_text(line.decode("utf-8", "replace").rstrip("\n")))
        stream.close()

    # -- process lifecycle ----------------------------------------------------------------------

    def _set_workers(self, count: int) -> None:
        names = [n for n, p in self.processes.items()
                 if p.role == "extraction" and not p.remove_when_stopped]
        names.sort(key=lambda n: int(n.rsplit("-", 1)[1]))
        for name in names[count:]:
            self.processes[name].remove_when_stopped = True
            self._begin_stop(self.processes[name])
        index = 1
        while len(names) < count:
            name = f"extraction-{index}"
            if name not in self.processes:
                self.processes[name] = Process(name, "extraction")
                names.append(name)
            index += 1
        self.workers = count

    def _spawn(self, proc: Process) -> None:
        env = dict(os.environ, KIROLEARN_HOME=str(self.home.root), PYTHONUNBUFFERED="1")
        handed: tuple[int, ...] = ()
        if proc.role == "viewer" and self.viewer_listener is not None:
            handed = (self.viewer_listener.fileno(),)
            env[FD_ENV] = str(handed[0])
        proc.popen = subprocess.Popen(
            [sys.executable, "-m", f"kirolearn.roles.{proc.role}", "--name", proc.name],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
            cwd=self.home.root,  # not the caller's cwd: a source checkout there would shadow us
            pass_fds=handed)
        threading.Thread(target=self._pipe_output, args=(proc, proc.popen.stdout),
                         name=f"log-{proc.name}", daemon=True).start()
        proc.started = proc.answered = time.monotonic()
        proc.state = STARTING
        log.info("spawned: '%s' with pid %d", proc.name, proc.popen.pid)

    def _listening(self, proc: Process) -> bool:
        """Whether proc's control socket is there to ping (a ping before would only wait
        out its timeout, holding up the loop)."""
        return Path(self.home.endpoint(f"{proc.name}.ctl").removeprefix("ipc://")
                    ).exists()

    def _ping(self, proc: Process) -> bool:
        if proc.client is None:
            proc.client = transport.Client(self.home.endpoint(f"{proc.name}.ctl"),
                                           self.ctx, timeout_ms=100)
        try:
            return proc.client.call("ping").get("name") == proc.name
        except (transport.Timeout, protocol.RemoteError, protocol.DecodeError):
            return False

    def _tell_storage_worker_gone(self, proc: Process) -> None:
        """An extraction worker exited: storage hands out again at once what it held or
        may have had waiting, rather than at the leases' end (if storage cannot be told
        now, the leases do it)."""
        try:
            with transport.Client(self.home.endpoint("storage"), self.ctx,
                                  timeout_ms=500) as client:
                handed = client.call("worker_gone", {"pid": proc.popen.pid})["handed_out"]
            if handed:
                log.info("%s exited: storage hands out its %d batch(es) again", proc.name,
                         handed)
        except (transport.Timeout, protocol.RemoteError, protocol.DecodeError, KeyError) as exc:
            log.warning("could not tell storage that %s exited (%s); its batches go out"
                        " again when their leases end", proc.name, exc)

    def _on_exit(self, proc: Process, now: float) -> None:
        code = proc.popen.returncode
        uptime = now - proc.started
        if proc.client is not None:  # a fresh socket for the next incarnation's pings
            proc.client.close()
            proc.client = None
        if proc.role == "extraction" and not self.shutting_down:
            self._tell_storage_worker_gone(proc)
        if proc.state == STOPPING:
            log.info("stopped: %s (exit status %s)", proc.name, code)
            proc.state = STOPPED
            return
        if code == RET_IDLE and proc.role == "viewer":
            log.info("%s exited unused; WAITING for the next visit", proc.name)
            proc.state = WAITING
            return
        log.warning("exited: %s (exit status %s; not expected) after %.1fs", proc.name, code,
                    uptime)
        proc.crashes = [t for t in proc.crashes if now - t < FLAP_WINDOW_S] + [now]
        if code == RET_CONFIG:
            proc.state = FATAL
            log.error("gave up: %s entered FATAL state (configuration error; see its log)",
                      proc.name)
        elif proc.state == STARTING or uptime < self.sup["start_secs"]:
            proc.fast_failures += 1
            if proc.fast_failures > self.sup["start_retries"]:
                proc.state = FATAL
                log.error("gave up: %s entered FATAL state, too many start retries too quickly",
                          proc.name)
            else:
                delay = min(self.sup["backoff_max_s"],
                            self.sup["backoff_base_s"] * 2 ** (proc.fast_failures - 1))
                proc.next_start = now + delay * random.uniform(0.8, 1.2)
                proc.state = BACKOFF
                log.info("%s entered BACKOFF state; retry in %.1fs", proc.name, delay)
        elif len(proc.crashes) > FLAP_LIMIT:
            proc.state = FATAL
            log.error("gave up: %s entered FATAL state, crashed %d times in %ds", proc.name,
                      len(proc.crashes), FLAP_WINDOW_S)
        else:
            proc.state = EXITED
            proc.restarts += 1
            self._spawn(proc)

    def visit(self) -> None:
        """A connection waits on the viewer's socket: start the viewer."""
        proc = self.processes.get("viewer")
        if proc is not None and proc.state == WAITING and not self.shutting_down:
            self._spawn(proc)

    def _open_viewer_listener(self) -> None:
        """Listen for the viewer, which is WAITING from now on (FATAL if it cannot)."""
        proc = self.processes.get("viewer")
        if proc is None:
            return
        try:
            self.viewer_listener = open_listener(self.home, self.settings["viewer"]["port"],
                                                 log)
            proc.state = WAITING
        except OSError as exc:
            log.error("gave up: viewer entered FATAL state: cannot listen (%s)", exc)
            proc.state = FATAL

    def _begin_stop(self, proc: Process) -> None:
        if not proc.alive():
            proc.state = STOPPED
            return
        proc.state = STOPPING
        proc.stop_stage = 0
        proc.stop_deadline = time.monotonic() + self.sup["stop_timeout_s"]
        try:
            with transport.Client(self.home.endpoint(f"{proc.name}.ctl"), self.ctx,
                                  timeout_ms=200) as client:
                client.call("shutdown")
        except (transport.Timeout, protocol.RemoteError, protocol.DecodeError):
            pass  # the next rungs of the ladder take over

    def _advance_stop(self, proc: Process, now: float) -> None:
        if now < proc.stop_deadline:
            return
        if proc.stop_stage == 0:
            log.warning("killing '%s' (%d) with SIGTERM", proc.name, proc.popen.pid)
            proc.popen.send_signal(signal.SIGTERM)
            proc.stop_stage = 1
            proc.stop_deadline = now + self.sup["kill_timeout_s"]
        elif proc.stop_stage == 1:
            log.warning("killing '%s' (%d) with SIGKILL", proc.name, proc.popen.pid)
            proc.popen.kill()
            proc.stop_stage = 2
            proc.stop_deadline = now + 3600

    def step(self) -> None:
        """One pass of supervision: reap, restart, promote, and advance stops."""
        now = time.monotonic()
        for proc in list(self.processes.values()):
            if proc.popen is not None and proc.popen.poll() is not None and proc.state in (
                    STARTING, STOPPING, *UP):
                self._on_exit(proc, now)
            if proc.state == STOPPED and proc.remove_when_stopped:
                del self.processes[proc.name]
            elif proc.state == STOPPING:
                self._advance_stop(proc, now)
            elif not self.shutting_down:
                self._move_on(proc, now)
        if self.shutting_down and self.stop_queue:
            self._next_stop_group()

    def _move_on(self, proc: Process, now: float) -> None:
        """Start a stopped process (or one whose back-off is over), promote a started one
        that answers, check a running one's health when due."""
        if proc.state == STOPPED or (proc.state == BACKOFF and now >= proc.next_start):
            self._spawn(proc)
        elif proc.state == STARTING and self._listening(proc) and self._ping(proc):
            proc.state = RUNNING
            proc.fast_failures = 0
            proc.answered, proc.next_ping = now, now + HEALTH_S
            log.info("success: %s entered RUNNING state", proc.name)
        elif proc.state in UP and now >= proc.next_ping:
            self._check_health(proc, now)

    def _next_stop_group(self) -> None:
        """Once every process of the group stopping has stopped, stop the next group."""
        group = self.stop_queue[0]
        if all(self.processes[n].state in (STOPPED, FATAL, BACKOFF) for n in group
               if n in self.processes):
            self.stop_queue.pop(0)
            for name in self.stop_queue[0] if self.stop_queue else []:
                self._begin_stop(self.processes[name])

    def unresponsive_s(self, proc: Process) -> float:
        """How long a process may answer no ping before it is taken as stuck."""
        limit = float(self.sup["unresponsive_s"])
        if proc.role == "extraction":  # a model's call may take its attempts' time
            limit = max(limit, 3 * float(self.settings["extraction"]["llm_timeout_s"]) + 30)
        return limit

    def _check_health(self, proc: Process, now: float) -> None:
        """Ping a running process: one that answers is RUNNING; one silent for a while is
        UNRESPONSIVE; one silent past ``unresponsive_s`` is killed (and so restarted)."""
        proc.next_ping = now + HEALTH_S
        if self._ping(proc):
            if proc.state == UNRESPONSIVE:
                log.info("%s answers again after %.1fs; RUNNING", proc.name,
                         now - proc.answered)
            proc.state, proc.answered = RUNNING, time.monotonic()
            return
        silent = now - proc.answered
        if silent >= self.unresponsive_s(proc):
            log.error("killing '%s' (%d): it has answered no ping for %.0fs (stuck in a call)",
                      proc.name, proc.popen.pid, silent)
            proc.popen.kill()
        elif silent >= UNRESPONSIVE_AFTER_S and proc.state != UNRESPONSIVE:
            log.warning("%s has answered no ping for %.0fs: UNRESPONSIVE", proc.name, silent)
            proc.state = UNRESPONSIVE

    def begin_shutdown(self) -> None:
        if self.shutting_down:
            return
        self.shutting_down = True
        log.info("stopping all processes")
        feeders = [n for n, p in self.processes.items() if p.role != "storage"]
        self.stop_queue = [feeders, ["storage"]]
        for name in self.stop_queue[0]:
            self._begin_stop(self.processes[name])

    def _poll_ms(self) -> int:
        """How long the loop waits for a control message: briefly while the daemon or a
        process is starting or stopping (each step may move it on), else until a process
        in BACKOFF is due; a child's exit or a signal wakes it at once (``run``)."""
        if self.shutting_down or any(p.state in (STARTING, STOPPING)
                                     for p in self.processes.values()):
            return 10
        due = [p.next_start for p in self.processes.values() if p.state == BACKOFF]
        due += [p.next_ping for p in self.processes.values() if p.state in UP]
        wait_s = min(due, default=time.monotonic() + base.IDLE_WAKE_S) - time.monotonic()
        return math.ceil(min(base.IDLE_WAKE_S, max(0.0, wait_s)) * 1000)

    def stopped(self) -> bool:
        return self.shutting_down and not self.stop_queue and not any(
            p.alive() for p in self.processes.values())

    # -- control ----------------------------------------------------------------------------------

    def status(self) -> dict:
        now = time.monotonic()
        roles = []
        for role in START_ORDER:
            procs = [p for p in self.processes.values() if p.role == role]
            procs.sort(key=lambda p: p.name)
            for p in procs:
                roles.append({
                    "role": p.role, "name": p.name, "pid": p.pid, "state": p.state,
                    "uptime_s": round(now - p.started, 1) if p.alive() else 0.0,
                    "restarts": p.restarts,
                })
        return {"running": True, "pid": os.getpid(), "home": str(self.home.root),
                "extraction_workers": self.workers, "roles": roles}

    @base.op("ping", "control")
    def ping(self, request: base.Request) -> dict:
        """``ping`` → ``{name, pid}``."""
        return {"name": "supervisor", "pid": os.getpid()}

    @base.op("status", "control")
    def get_status(self, request: base.Request) -> dict:
        """``status`` → ``{running, pid, home, extraction_workers, roles: [{role, name,
        pid, state, uptime_s, restarts}…]}``."""
        return self.status()

    @base.op("stop", "control")
    def stop(self, request: base.Request) -> None:
        """``stop`` → ``{}``; the shutdown ladder starts."""
        self.begin_shutdown()

    @base.op("scale", "control")
    def scale(self, request: base.Request) -> dict:
        """``scale {role: "extraction", count: 0–64}`` → ``{extraction_workers}`` (0: only
        workers elsewhere extract)."""
        if request.body.get("role") != "extraction":
            raise base.BadRequest("only 'extraction' can be scaled")
        count = request.body.get("count")
        if (not isinstance(count, int) or isinstance(count, bool)
                or not 0 <= count <= config.MAX_WORKERS):
            raise base.BadRequest(f"count must be an integer from 0 to {config.MAX_WORKERS}")
        if self.shutting_down:
            request.fail(protocol.ErrorCode.SHUTTING_DOWN, "stopping")
            return base.LATER
        self._set_workers(count)
        log.info("scaled extraction to %d worker(s)", count)
        return {"extraction_workers": count}

    # -- main loop --------------------------------------------------------------------------------

    def _record_signal(self, signum: int, _frame: object) -> None:
        self.signals.append(signum)

    def run(self) -> int:
        run_dir = self.home.runtime_dir()
        lock = PidLock(self.home.pidfile())
        lock.acquire()  # before any bind: a second daemon must not steal live sockets
        try:
            stale = remove_socket_files(run_dir)
            if stale:
                log.info("removed stale socket files from a previous run: %s", ", ".join(stale))
            signal.signal(signal.SIGTERM, self._record_signal)
            signal.signal(signal.SIGINT, self._record_signal)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            # A signal (a child's exit too) writes to this pipe, which the poll watches.
            wake_r, _ = base.signal_pipe()
            signal.signal(signal.SIGCHLD, lambda *_: None)
            poller = zmq.Poller()
            old_umask = os.umask(0o077)
            control = transport.make_socket(self.ctx, zmq.ROUTER,
                                            bind=self.home.endpoint("supervisor.ctl"))
            os.umask(old_umask)
            log.info("supervisor started (pid %d, home %s)", os.getpid(), self.home.root)
            self._open_viewer_listener()
            table = base.op_table(self, "control")
            poller.register(control, zmq.POLLIN)
            poller.register(wake_r, zmq.POLLIN)
            watching = False  # the viewer's socket, while the viewer is WAITING
            self.step()  # spawn the roles now: the poll below sleeps while nothing moves
            while not self.stopped():
                viewer = self.processes.get("viewer")
                wanted = viewer is not None and viewer.state == WAITING
                if wanted != watching and self.viewer_listener is not None:
                    if wanted:
                        poller.register(self.viewer_listener, zmq.POLLIN)
                    else:
                        poller.unregister(self.viewer_listener)
                    watching = wanted
                ready = dict(poller.poll(self._poll_ms()))
                if wake_r in ready:
                    base.empty_pipe(wake_r)
                if watching and self.viewer_listener.fileno() in ready:
                    self.visit()
                if control in ready:
                    base.serve(control, table, "supervisor", log)
                if self.signals:
                    log.info("received signal %d", self.signals[0])
                    self.signals.clear()
                    self.begin_shutdown()
                self.step()
            log.info("all processes stopped")
            control.close(linger=0)
            return 0
        finally:
            for proc in self.processes.values():
                if proc.client is not None:
                    proc.client.close()
                if proc.alive():  # only reached on an unexpected error: leave no orphans
                    proc.popen.kill()
                    proc.popen.wait()
            self.ctx.destroy(linger=0)
            if self.viewer_listener is not None:
                close_listener(self.home, self.viewer_listener)
            remove_socket_files(run_dir)
            lock.release()
