"""Viewer role: the web app (``kirolearn.viewer``) on 127.0.0.1, fed live by storage.

The supervisor starts it on demand: it holds the listening socket
(``viewer.listener``) and starts the viewer when a connection waits there, handing it
the socket. The viewer exits (``RET_IDLE``) once no connection has been open for
``viewer.idle_s``, and the supervisor waits for the next one: a viewer nobody opens
costs no memory. uvicorn serves the app on a thread of its own while the role's loop
relays storage's ``feed`` (a SUB socket) to the live streams. Run alone (from a
terminal), it binds the port itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time

import uvicorn
import zmq

from kirolearn import transport
from kirolearn.roles import base
from kirolearn.supervisor.states import RET_IDLE
from kirolearn.viewer.app import create_app
from kirolearn.viewer.feed import Feed
from kirolearn.viewer.listener import FD_ENV, close_listener, load_token, open_listener

CHECK_S = 1.0  # how often it looks whether anyone is connected


class QuietServer(uvicorn.Server):
    """uvicorn's server asleep until ``stop``: its own main loop wakes ten times a second
    to look for ``should_exit`` (and to date its answers, which these do not carry)."""

    loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self.stop_requested = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        if not self.should_exit:
            await self.stop_requested.wait()

    def stop(self) -> None:
        """From any thread."""
        self.should_exit = True
        if self.loop is not None:
            with contextlib.suppress(RuntimeError):  # its loop has closed
                self.loop.call_soon_threadsafe(self.stop_requested.set)


class Viewer(base.Role):
    role = "viewer"

    def setup(self) -> None:
        handed = os.environ.get(FD_ENV)
        self.own_listener = handed is None
        self.listener = (open_listener(self.home, self.settings["viewer"]["port"], self.log)
                         if handed is None else socket.socket(fileno=int(handed)))
        self.idle_s = self.settings["viewer"]["idle_s"]
        self.feed = Feed()
        app = create_app(self.home, load_token(self.home), self.feed)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2, date_header=False)
        self.server = QuietServer(config)
        self.thread = threading.Thread(target=self._serve_http, name="http", daemon=True)
        self.thread.start()
        sub = transport.make_socket(self.ctx, zmq.SUB, connect=self.home.endpoint("feed"))
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.add_socket(sub, self._on_feed)
        host, port = self.listener.getsockname()
        self.url = f"http://{host}:{port}/"
        self.used_at = self.next_check = time.monotonic()
        self.requests = 0

    def _on_feed(self, sock: zmq.Socket) -> None:
        while sock.poll(0, zmq.POLLIN):
            sock.recv()
        self.feed.notify()

    def counters(self) -> dict:
        return {"url": getattr(self, "url", None)}

    def _serve_http(self) -> None:
        try:
            self.server.run(sockets=[self.listener])
        finally:
            self.wake()  # the loop sees it stopped

    def wake_at(self) -> float | None:
        return time.monotonic() if not self.thread.is_alive() else self.next_check

    def tick(self) -> None:
        if not self.thread.is_alive():  # the server died: exit, and be restarted
            self.log.error("the web server stopped; exiting so the supervisor restarts it")
            self.stopping = True
            return
        now = time.monotonic()
        self.next_check = now + CHECK_S
        state = self.server.server_state
        if state.connections or state.total_requests != self.requests:
            self.requests = state.total_requests
            self.used_at = now
        elif not self.own_listener and now - self.used_at >= self.idle_s:
            self.log.info("no one used the viewer for %ds; exiting until the next visit",
                          round(now - self.used_at))
            self.exit_code = RET_IDLE
            self.stopping = True

    def teardown(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.stop()
            self.thread.join(5)
        if getattr(self, "listener", None) is not None:
            if self.own_listener:
                close_listener(self.home, self.listener)
            else:
                self.listener.close()  # the supervisor's: it listens on


if __name__ == "__main__":
    base.main(Viewer)
