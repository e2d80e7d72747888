"""What every daemon process shares: start-up, the op table, signals, the main loop.

A role process is started by the supervisor as ``python -m kirolearn.roles.<role>
--name <process>``. Its handlers are methods marked with ``@op(name)``; the class
collects them into its op table, one per socket (``service``: the role's own
socket; ``control``: ``<process>.ctl``, where the supervisor pings and stops it).
``dispatch`` answers every request exactly once: an unknown op, a malformed body
(``BadRequest``) and a handler's failure each get an error reply, so no request is
left waiting and no message can take the process down. A handler's docstring is
its entry in docs/protocol.md (a test checks that every op is documented there).

The loop sleeps in its poll until a message comes or the role's next deadline
(``wake_at``): an idle role costs nothing. Once nothing has come for ``QUIET_S``,
it gives back the memory its work took (``release_memory``, then the heap's free
pages): a daemon left running all day holds what it needs idle, not its peak. A
signal, or a thread of the role with news (``wake``), writes to a pipe the poll
watches, so they are acted on at once.

SIGINT is ignored (the supervisor owns Ctrl-C) unless the role was started by hand
from a terminal (``kirolearn worker``); the first SIGTERM asks for a graceful stop,
a second one exits at once. The signal handler only records the signal; the loop
acts on it. A role whose parent dies stops by itself rather than linger as an orphan
(Linux sends it SIGTERM; elsewhere it looks at least every ``IDLE_WAKE_S``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from kirolearn import config, heap, paths, privacy, protocol, transport
from kirolearn.supervisor.states import RET_CONFIG, RET_KILLED, RET_OK

Code = protocol.ErrorCode
REQUESTS_PER_PASS = 1000  # requests read from one socket before the others get a turn
IDLE_WAKE_S = 60.0  # the longest an idle loop sleeps (where the parent's death is not said)
QUIET_S = 10.0  # a role this long without a request gives back what memory it can
PR_SET_PDEATHSIG = 1


class BadRequest(ValueError):
    """The request's body has the wrong shape: answered ``BAD_REQUEST`` with the reason."""

    def __init__(self, reason: str, body: dict | None = None):
        super().__init__(reason)
        self.reason = reason
        self.body = body


class Unavailable(RuntimeError):
    """What the request needs is broken (a full disk, a read-only database): answered
    ``UNAVAILABLE`` with the reason, which says what to do."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _Later:
    def __repr__(self) -> str:
        return "LATER"


LATER: Any = _Later()  # a handler's result when it keeps the request and answers it later


@dataclass(slots=True)
class Request:
    """One request on a served socket; ``reply`` or ``fail`` answers it."""

    sock: zmq.Socket
    envelope: list[bytes]
    id: str
    op: str
    body: dict
    client: str | None = None  # the key's name, on a request from another machine
    storing: str | None = None  # ingest's search: the namespace of the prompt it stores
    size: int = 0  # bytes, as received

    def reply(self, body: dict | None = None) -> None:
        transport.send_reply(self.sock, self.envelope, protocol.reply_ok(self.id, body))

    def fail(self, code: int, reason: str, body: dict | None = None) -> None:
        transport.send_reply(self.sock, self.envelope,
                             protocol.reply_error(self.id, code, reason, body))

    def require(self, key: str, kind: type | tuple[type, ...], what: str) -> Any:
        """``body[key]`` if it is of ``kind`` (and not a bool, which Python counts as an
        int), else BadRequest saying ``'key' must be <what>``."""
        value = self.body.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise BadRequest(f"'{key}' must be {what}")
        return value


Handler = Callable[[Request], Any]


def send_now(sock: zmq.Socket, *frames: bytes) -> bool:
    """Send a message without waiting: False when the peer cannot take it now (no peer
    connected, or its queue full). A role's loop never blocks on another process."""
    try:
        sock.send_multipart(frames, flags=zmq.NOBLOCK)
    except zmq.Again:
        return False
    return True


class Outbox:
    """Requests to another role over a DEALER socket, sent without waiting: each is
    ``request(op, body)``, whose id the reply (read by the role's reader) comes back
    with; None when the role cannot take it now."""

    def __init__(self, sock: zmq.Socket):
        self.sock = sock

    def request(self, op: str, body: dict) -> str | None:
        message = protocol.request(op, body)
        return message["id"] if self.send(protocol.pack(message)) else None

    def send(self, frame: bytes) -> bool:
        """A request already packed (its id known to the caller)."""
        return send_now(self.sock, b"", frame)


def op(name: str, socket: str = "service") -> Callable[[Callable], Callable]:
    """Mark a method as the handler of ``name`` on ``socket`` (``service`` or ``control``).
    It returns the reply body (None: ``{}``), or LATER when it answers by itself."""
    def mark(method: Callable) -> Callable:
        method.__dict__.setdefault("ops", []).append((socket, name))
        return method
    return mark


def op_table(obj: object, socket: str) -> dict[str, Handler]:
    """``obj``'s handlers for ``socket``, by op name (subclasses override by name)."""
    table: dict[str, Handler] = {}
    for klass in reversed(type(obj).__mro__):
        for attr, value in vars(klass).items():
            for sock_name, name in getattr(value, "ops", ()):
                if sock_name == socket:
                    table[name] = getattr(obj, attr)
    return table


def dispatch(request: Request, table: dict[str, Handler], who: str,
             log: logging.Logger) -> None:
    """Run the request's handler and answer it, whatever happens."""
    handler = table.get(request.op)
    if handler is None:
        request.fail(Code.UNKNOWN_OP, f"{who} does not serve {request.op!r}")
        return
    try:
        result = handler(request)
    except BadRequest as exc:
        request.fail(Code.BAD_REQUEST, exc.reason, exc.body)
        return
    except Unavailable as exc:
        request.fail(Code.UNAVAILABLE, exc.reason)
        return
    except Exception as exc:  # a bug or a broken resource: say so, and carry on
        log.exception("%s failed", request.op)
        request.fail(Code.INTERNAL, f"{request.op} failed: {type(exc).__name__}: {exc}")
        return
    if result is not LATER:
        request.reply(result)


def serve(sock: zmq.Socket, table: dict[str, Handler], who: str, log: logging.Logger,
          limit: int = REQUESTS_PER_PASS) -> int:
    """Dispatch the requests already queued on a ROUTER socket (up to ``limit``);
    returns how many were read."""
    count = 0
    while count < limit:
        received = transport.recv_request(sock, log)
        count += 1
        if received is not None:
            envelope, message, size = received
            client, storing = message.get("client"), message.get("storing")
            dispatch(Request(sock, envelope, message["id"], message["op"], message["body"],
                             client if isinstance(client, str) else None,
                             storing if isinstance(storing, str) else None, size),
                     table, who, log)
        if not sock.poll(0, zmq.POLLIN):
            break
    return count


def signal_pipe() -> tuple[int, int]:
    """A non-blocking pipe that every signal with a handler writes to (its read end, its
    write end): a loop polling the read end wakes at once for a signal."""
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    return read_fd, write_fd


def empty_pipe(fd: int) -> None:
    """Read what a wake-up pipe holds, so that the next poll sleeps again."""
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass


def setup_logging(name: str, level: str = "INFO") -> logging.Logger:
    logging.basicConfig(
        stream=sys.stderr, level=level.upper(),
        format=f"%(asctime)s [%(process)d] [kirolearn.{name}] [%(levelname)s] %(message)s")
    return logging.getLogger(f"kirolearn.{name}")


class Role:
    """Base class: subclasses bind sockets in ``setup``, serve ops with ``@op`` and do
    timed work in ``tick``, when ``wake_at`` says it is due."""

    role = "role"
    refuse_while_stopping = False  # answer SHUTTING_DOWN to all but ping once stopping
    exit_code = RET_OK  # what ``run`` returns once stopped (RET_IDLE: unused, on demand)

    def __init__(self, name: str, home: paths.Home, settings: dict):
        self.name = name
        self.home = home
        self.settings = settings
        self.log = logging.getLogger(f"kirolearn.{name}")
        self.ctx = zmq.Context()
        self.ctx.linger = 0
        self.stopping = False
        self._signals: list[int] = []
        self._readers: dict[zmq.Socket | int, Callable[[Any], None]] = {}
        self._wake_w = -1  # the pipe's end that signals and ``wake`` write to
        self._poller = zmq.Poller()
        self._parent = os.getppid()
        self.started = time.monotonic()
        self._quiet_at: float | None = self.started + QUIET_S  # None: given back since
        self._control: zmq.Socket | None = None  # its pings are no work: not in _quiet_at
        self.memory_given_back = 0

    # -- for subclasses --------------------------------------------------------------------

    def setup(self) -> None:
        """Bind/connect the role's sockets (``serve_on``, ``add_socket``)."""

    def wake_at(self) -> float | None:
        """When ``tick`` is next due (``time.monotonic()``), None while nothing is. A
        time that moves on with each call (``now + delay``) never falls due: reckon from
        a fixed point, such as the last tick."""
        return None

    def tick(self) -> None:
        """Work that falls due in time (timeouts, timers), run once ``wake_at`` is past."""

    def after_requests(self) -> None:
        """Called after each pass over the service socket (e.g. to commit a group)."""

    def drain(self) -> None:
        """Finish in-flight work before exit."""

    def teardown(self) -> None:
        """Release resources (database, files)."""

    def release_memory(self) -> None:
        """Let go of caches a quiet role can fill again (a database's page cache)."""

    def counters(self) -> dict:
        """What ``ping`` adds about the role's work (``kirolearn status`` reads it)."""
        return {}

    # -- the ops every role serves -------------------------------------------------------

    @op("ping")
    @op("ping", "control")
    def ping(self, request: Request) -> dict:
        """``ping`` → ``{name, role, pid, uptime_s, memory_given_back, …counters,
        client?}``: alive and serving (``memory_given_back``: how many times a quiet
        spell let it give back memory; ``client``: the key a request from another
        machine came with)."""
        reply = {"name": self.name, "role": self.role, "pid": os.getpid(),
                 "uptime_s": round(time.monotonic() - self.started, 3),
                 "memory_given_back": self.memory_given_back, **self.counters()}
        if request.client is not None:
            reply["client"] = request.client
        return reply

    @op("shutdown", "control")
    def shutdown(self, request: Request) -> None:
        """``shutdown`` → ``{}``: finish in-flight work and exit."""
        self.log.info("shutdown requested")
        self.stopping = True

    # -- machinery ----------------------------------------------------------------------------

    def add_socket(self, sock: zmq.Socket, reader: Callable[[zmq.Socket], None]) -> zmq.Socket:
        """Poll ``sock`` in the loop and call ``reader(sock)`` when it has input."""
        self._readers[sock] = reader
        self._poller.register(sock, zmq.POLLIN)
        return sock

    def bind(self, kind: int, endpoint: str, **opts) -> zmq.Socket:
        old_umask = os.umask(0o077)  # socket files readable by the owner only
        try:
            return transport.make_socket(self.ctx, kind, bind=endpoint, **opts)
        finally:
            os.umask(old_umask)

    def answer_zap(self, allowed: Callable[[bytes], object]) -> None:
        """Answer this process's ZAP requests in the loop: which CURVE clients may connect
        to its TCP sockets (``allowed``: a client's Z85 public key → truthy). Called
        before any of them is bound: with no ZAP handler, libzmq lets every key in."""
        sock = transport.make_socket(self.ctx, zmq.REP, bind=transport.ZAP_ENDPOINT)
        self.add_socket(sock, lambda ready: transport.answer_zap(ready, allowed, self.log))

    def serve_on(self, endpoint: str, socket: str = "service") -> zmq.Socket:
        """Bind a ROUTER on ``endpoint`` and answer it from the op table of ``socket``."""
        table = op_table(self, socket)
        who = self.role if socket == "service" else f"{self.name} control"
        sock = self.bind(zmq.ROUTER, endpoint)

        def read(ready: zmq.Socket) -> None:
            if socket == "service" and self.stopping and self.refuse_while_stopping:
                serve(ready, {name: (handler if name == "ping" else self._refuse)
                              for name, handler in table.items()}, who, self.log)
                return
            serve(ready, table, who, self.log)
            if socket == "service":
                self.after_requests()

        return self.add_socket(sock, read)

    def wake(self) -> None:
        """From any thread: have the loop look at ``wake_at`` again now."""
        with contextlib.suppress(OSError):  # full: it wakes anyway
            os.write(self._wake_w, b"w")

    def _give_back_memory(self) -> None:
        self._quiet_at = None
        try:
            self.release_memory()
        except Exception:
            self.log.exception("error while giving back memory; carrying on")
        heap.release()
        self.memory_given_back += 1

    def _watch_signals_and_parent(self, standalone: bool) -> None:
        signal.signal(signal.SIGINT, self._on_signal if standalone else signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self._on_signal)
        wake_r, self._wake_w = signal_pipe()
        self._readers[wake_r] = empty_pipe
        self._poller.register(wake_r, zmq.POLLIN)
        with contextlib.suppress(OSError, AttributeError):  # Linux only
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    def _refuse(self, request: Request) -> object:
        request.fail(Code.SHUTTING_DOWN, f"{self.role} is stopping")
        return LATER

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self._signals:  # second SIGTERM: no more patience
            os._exit(RET_KILLED)
        self._signals.append(signum)

    def run(self, standalone: bool = False) -> int:
        """Serve until stopped. ``standalone``: started from a terminal, not by the
        supervisor, so Ctrl-C stops it like SIGTERM."""
        self._watch_signals_and_parent(standalone)
        self._control = self.serve_on(self.home.endpoint(f"{self.name}.ctl"), "control")
        # The privacy rules as ingest saved them (it builds them from detect-secrets,
        # whose import would cost each role 13 MB; ``privacy.save_rules``).
        privacy.use_saved_rules(self.home)
        try:
            try:
                self.setup()
            except config.ConfigError as exc:  # FATAL at once: a restart will not fix it
                self.log.error("configuration error: %s", exc)
                return RET_CONFIG
            self.log.info("started (pid %d)", os.getpid())
            if os.getppid() != self._parent:  # it died before it could say
                self.stopping = True
            while not self.stopping:
                due = min((t for t in (self.wake_at(), self._quiet_at) if t is not None),
                          default=None)
                wait_s = IDLE_WAKE_S if due is None else due - time.monotonic()
                timeout_ms = math.ceil(min(IDLE_WAKE_S, max(0.0, wait_s)) * 1000)
                for sock in dict(self._poller.poll(timeout_ms)):
                    if sock is not self._control:
                        self._quiet_at = time.monotonic() + QUIET_S
                    try:
                        self._readers[sock](sock)
                    except Exception:
                        self.log.exception("error while reading a socket; carrying on")
                due = self.wake_at()
                if due is not None and time.monotonic() >= due:
                    try:
                        self.tick()
                    except Exception:
                        self.log.exception("error in timed work; carrying on")
                if self._quiet_at is not None and time.monotonic() >= self._quiet_at:
                    self._give_back_memory()
                if self._signals:
                    self.log.info("received signal %d; stopping", self._signals[0])
                    self.stopping = True
                if os.getppid() != self._parent:
                    self.log.warning("supervisor went away; stopping")
                    self.stopping = True
            self.drain()
        finally:
            self.teardown()
            self.ctx.destroy(linger=0)  # socket files go with the supervisor's cleanup
            self.log.info("stopped")
        return self.exit_code


def main(role_class: type[Role], argv: list[str] | None = None) -> None:
    """Entry point for ``python -m kirolearn.roles.<role>``."""
    parser = argparse.ArgumentParser(prog=f"kirolearn.roles.{role_class.role}")
    parser.add_argument("--name", default=role_class.role, help="process name (for sockets, logs)")
    args = parser.parse_args(argv)
    home = paths.Home.current()
    try:
        settings = config.load(home)
    except config.ConfigError as exc:
        setup_logging(args.name).error("configuration error: %s", exc)
        sys.exit(RET_CONFIG)
    setup_logging(args.name, settings["logging"]["level"])
    home.ensure_layout()
    sys.exit(role_class(args.name, home, settings).run())
