"""What every daemon process shares: start-up, control socket, signals, main loop.

A role process is started by the supervisor as ``python -m kirolearn.<role>
--name <process>``. It binds a control socket (``<process>.ctl``) that answers
``ping`` (how the supervisor knows it is RUNNING) and ``shutdown`` (the first
rung of the stop ladder). SIGINT is ignored (the supervisor owns Ctrl-C) unless
the role was started by hand from a terminal (``kirolearn worker``); the first
SIGTERM asks for a graceful stop, a second one exits at once. The signal
handler only records the signal; the loop acts on it. A role whose parent dies
stops by itself rather than linger as an orphan.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import zmq

from kirolearn import config, paths, protocol, transport

RET_OK = 0
RET_KILLED = 2
RET_CONFIG = 78  # EX_CONFIG: the supervisor marks the role FATAL instead of retrying

log = logging.getLogger("kirolearn")

Handler = Callable[[zmq.Socket], None]


def setup_logging(name: str, level: str = "INFO") -> logging.Logger:
    logging.basicConfig(
        stream=sys.stderr, level=level.upper(),
        format=f"%(asctime)s [%(process)d] [kirolearn.{name}] [%(levelname)s] %(message)s",
    )
    return logging.getLogger(f"kirolearn.{name}")


class Role:
    """Base class: subclasses register sockets in ``setup`` and work in handlers/``tick``."""

    role = "role"
    tick_interval_s = 0.5

    def __init__(self, name: str, base: Path, settings: dict):
        self.name = name
        self.base = base
        self.settings = settings
        self.log = logging.getLogger(f"kirolearn.{name}")
        self.ctx = zmq.Context()
        self.ctx.linger = 0
        self.stopping = False
        self._signals: list[int] = []
        self._handlers: dict[zmq.Socket, Handler] = {}
        self._poller = zmq.Poller()
        self._parent = os.getppid()
        self.started = time.monotonic()

    # -- for subclasses --------------------------------------------------------------------

    def setup(self) -> None:
        """Bind/connect the role's sockets (register them with ``add_socket``)."""

    def tick(self) -> None:
        """Periodic work, called at least every ``tick_interval_s``."""

    def drain(self) -> None:
        """Finish in-flight work before exit."""

    def teardown(self) -> None:
        """Release resources (database, files)."""

    def control_status(self) -> dict:
        return {}

    # -- machinery ----------------------------------------------------------------------------

    def add_socket(self, sock: zmq.Socket, handler: Handler) -> zmq.Socket:
        self._handlers[sock] = handler
        self._poller.register(sock, zmq.POLLIN)
        return sock

    def bind(self, kind: int, endpoint: str, handler: Handler | None = None, **opts) -> zmq.Socket:
        old_umask = os.umask(0o077)  # socket files readable by the owner only
        try:
            sock = transport.make_socket(self.ctx, kind, bind=endpoint, **opts)
        finally:
            os.umask(old_umask)
        if handler:
            self.add_socket(sock, handler)
        return sock

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self._signals:  # second SIGTERM: no more patience
            os._exit(RET_KILLED)
        self._signals.append(signum)

    def _on_control(self, sock: zmq.Socket) -> None:
        received = transport.recv_request(sock, self.log)
        if received is None:
            return
        envelope, request = received
        op = request["op"]
        if op == "ping":
            body = {"name": self.name, "role": self.role, "pid": os.getpid(),
                    "uptime_s": round(time.monotonic() - self.started, 3)}
            body.update(self.control_status())
            reply = protocol.reply_ok(request["id"], body)
        elif op == "shutdown":
            self.log.info("shutdown requested")
            self.stopping = True
            reply = protocol.reply_ok(request["id"])
        else:
            reply = protocol.reply_error(request["id"], protocol.ErrorCode.UNKNOWN_OP,
                                         f"unknown control operation {op!r}")
        transport.send_reply(sock, envelope, reply)

    def run(self, standalone: bool = False) -> int:
        """Serve until stopped. ``standalone``: started from a terminal, not by the
        supervisor, so Ctrl-C stops it like SIGTERM."""
        signal.signal(signal.SIGINT, self._on_signal if standalone else signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self._on_signal)
        self.bind(zmq.ROUTER, paths.endpoint(f"{self.name}.ctl", self.base),
                            self._on_control)
        try:
            try:
                self.setup()
            except config.ConfigError as exc:  # FATAL at once: a restart will not fix it
                self.log.error("configuration error: %s", exc)
                return RET_CONFIG
            self.log.info("started (pid %d)", os.getpid())
            next_tick = time.monotonic()
            while not self.stopping:
                timeout = max(0.0, next_tick - time.monotonic())
                events = dict(self._poller.poll(int(timeout * 1000)))
                for sock in events:
                    try:
                        self._handlers[sock](sock)
                    except Exception:
                        self.log.exception("error while handling a message; carrying on")
                if time.monotonic() >= next_tick:
                    self.tick()
                    next_tick = time.monotonic() + self.tick_interval_s
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
        return RET_OK


def main(role_class: type[Role], argv: list[str] | None = None) -> None:
    """Entry point for ``python -m kirolearn.<role>``."""
    parser = argparse.ArgumentParser(prog=f"kirolearn.{role_class.role}")
    parser.add_argument("--name", default=role_class.role, help="process name (for sockets, logs)")
    args = parser.parse_args(argv)
    base = paths.home()
    try:
        settings = config.load(base)
    except config.ConfigError as exc:
        setup_logging(args.name).error("configuration error: %s", exc)
        sys.exit(RET_CONFIG)
    setup_logging(args.name, settings["logging"]["level"])
    paths.ensure_layout(base)
    sys.exit(role_class(args.name, base, settings).run())
