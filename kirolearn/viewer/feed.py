"""The live tail's wake-ups: storage's ``feed`` (relayed by the viewer role) bumps a
version, and each server-sent-events stream waits for it to move."""

from __future__ import annotations

import asyncio
import contextlib


class Feed:
    """Wakes the live streams when storage says something changed. ``notify`` may be
    called from any thread; ``wait`` runs on the server's event loop."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.version = 0  # bumped on every change; a stream waits for it to move
        self.waiters: set[asyncio.Future] = set()

    def notify(self) -> None:
        if self.loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self.loop.call_soon_threadsafe(self._bump)

    def _bump(self) -> None:
        self.version += 1
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    async def wait(self, seen: int, timeout_s: float) -> None:
        """Until the version moves past ``seen`` (read before the stream's last query, so
        a change during that query is never missed), or ``timeout_s``."""
        self.loop = asyncio.get_running_loop()
        if self.version != seen:
            return
        waiter = self.loop.create_future()
        self.waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            pass
        finally:
            self.waiters.discard(waiter)
