"""Ports for the tests' servers on 127.0.0.1.

They are taken below the kernel's ephemeral range (32768-60999 on Linux), which it never
hands out for a bind to port 0 or a connect: a port checked free stays free until the
server binds it, whatever other processes (another test's viewer, on port 0) do
meanwhile. Each xdist worker has a band of its own.
"""

from __future__ import annotations

import itertools
import os
import socket

PORTS_FROM = 16000
PORTS_PER_WORKER = 1000
_turns = itertools.count()


def free_ports() -> int:
    """A port P with P, P+1 and P+2 free on 127.0.0.1 (the daemon listens on all three)."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    band = PORTS_FROM + worker * PORTS_PER_WORKER
    for _ in range(PORTS_PER_WORKER // 3):
        port = band + next(_turns) * 3 % (PORTS_PER_WORKER - 2)
        try:
            for offset in (0, 1, 2):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port + offset))
            return port
        except OSError:
            continue
    raise AssertionError("no three free ports in a row")
