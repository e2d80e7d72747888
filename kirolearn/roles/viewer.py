"""Viewer role: the web app (``kirolearn.viewer``) on 127.0.0.1, fed live by storage.

The supervisor starts it like any other role (control socket, signals, parent
watch). uvicorn serves the app on a thread of its own while the role's loop relays
storage's ``feed`` (a SUB socket) to the live streams. The port is ``viewer.port``
(0: any free port); when that port is taken, a free one is used and the log says so.
Where the viewer listens goes in ``run/viewer.json`` (0600), which ``kirolearn open``
reads with the token.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import socket
import threading
import time

import uvicorn
import zmq

from kirolearn import control, paths, transport
from kirolearn.roles import base
from kirolearn.viewer.app import create_app
from kirolearn.viewer.auth import load_token
from kirolearn.viewer.feed import Feed

HOST = "127.0.0.1"  # never anything else: the viewer is for this machine's user only


def listen(port: int) -> socket.socket:
    """A listening socket on HOST: ``port``, or any free port if that one is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE or port == 0:
            sock.close()
            raise
        sock.bind((HOST, 0))
    sock.listen(128)
    return sock


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
        wanted = self.settings["viewer"]["port"]
        self.listener = listen(wanted)
        port = self.listener.getsockname()[1]
        if wanted and port != wanted:
            self.log.warning("port %d is taken; the viewer listens on %d instead", wanted, port)
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
        self.url = f"http://{HOST}:{port}/"
        paths.write_private(self.home.viewer_info(), json.dumps(
            {"url": self.url, "port": port, "pid": os.getpid()}).encode())
        self.log.info("viewer at %s (kirolearn open)", self.url)

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
        return None if self.thread.is_alive() else time.monotonic()

    def tick(self) -> None:
        if not self.thread.is_alive():  # the server died: exit, and be restarted
            self.log.error("the web server stopped; exiting so the supervisor restarts it")
            self.stopping = True

    def teardown(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.stop()
            self.thread.join(5)
        if getattr(self, "listener", None) is not None:
            self.listener.close()
        with contextlib.suppress(OSError):
            if (control.viewer_info(self.home) or {}).get("pid") == os.getpid():
                self.home.viewer_info().unlink()


if __name__ == "__main__":
    base.main(Viewer)
