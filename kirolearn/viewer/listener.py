"""The viewer's listening socket: bound by the supervisor, which starts the viewer when
the first connection waits on it and again after the viewer exits unused (``viewer.idle_s``),
so a viewer nobody opens costs no memory. Kept apart from the web app: the supervisor
imports this module alone.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import socket

from kirolearn import control, paths

HOST = "127.0.0.1"  # never anything else: the viewer is for this machine's user only
FD_ENV = "KIROLEARN_VIEWER_FD"  # the listening socket a viewer is handed


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


def open_listener(home: paths.Home, wanted: int, log: logging.Logger) -> socket.socket:
    """Listen on ``wanted`` (``viewer.port``; another port when it is taken, said in the
    log) and say where in ``run/viewer.json`` (0600), which ``kirolearn open`` reads
    with the token (made now if there is none yet)."""
    load_token(home)
    sock = listen(wanted)
    port = sock.getsockname()[1]
    if wanted and port != wanted:
        log.warning("port %d is taken; the viewer listens on %d instead", wanted, port)
    url = f"http://{HOST}:{port}/"
    paths.write_private(home.viewer_info(), json.dumps(
        {"url": url, "port": port, "pid": os.getpid()}).encode())
    log.info("viewer at %s (kirolearn open)", url)
    return sock


def load_token(home: paths.Home) -> str:
    """The viewer's token (``auth``), made at first start: random, in a file only the
    user can read."""
    path = home.viewer_token
    with contextlib.suppress(FileNotFoundError):
        token = path.read_text("utf-8").strip()
        if len(token) >= 32:
            path.chmod(0o600)
            return token
    token = secrets.token_urlsafe(32)
    paths.write_private(path, (token + "\n").encode())
    return token


def close_listener(home: paths.Home, sock: socket.socket) -> None:
    """Stop listening, and take ``run/viewer.json`` away if this process wrote it."""
    sock.close()
    with contextlib.suppress(OSError):
        if (control.viewer_info(home) or {}).get("pid") == os.getpid():
            home.viewer_info().unlink()
