"""The batches out with extraction workers: who holds which, when each was last heard
of, and what happens when a worker goes away. Socket-free (storage's ``Handout`` reads
the workers' messages and tells it): a test drives it with a writer on a file.

A batch handed out is leased in the store until ``lease_ms`` from then; a lease that
runs out makes it due again (``batches.due_batches``). Sooner than that, a batch goes out
again when the local worker process that claimed it is gone (or, for the batches sent
to this machine's workers and not yet claimed, which may have waited in its queue, when
the supervisor says a worker of this machine exited: ``worker_gone``), or the worker elsewhere
that took it has said nothing for ``REMOTE_SILENCE_S`` (it says ``working`` every few
seconds), or that worker's key is revoked, or its result could not be committed (the
store was away: it goes out again as soon as the store answers). A batch that keeps
failing is split in two; one event that keeps failing is marked failed with the reason.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable

from kirolearn.db import batches
from kirolearn.roles.storage.writer import Writer

MAX_BATCH_ATTEMPTS = 5
CLAIM_CHECK_S = 0.25  # how often a batch's worker is looked for while it extracts
STRANDED_CHECK_S = 1.0  # how often the store is tried for batches whose results were lost
REMOTE_SILENCE_S = 15.0  # a worker elsewhere unheard of this long has died with its batches
TAKE_TARGET_S = 0.1  # a take keeps a worker about this long, at its recent pace
TAKE_MAX_BATCHES = 32  # ... and holds at most this many batches


class Leases:
    def __init__(self, writer: Writer, lease_ms: int, log: logging.Logger):
        self.writer = writer
        self.lease_ms = lease_ms
        self.log = log
        self.claims: dict[str, int] = {}  # leased batch → the pid of the worker that took it
        self.heard: dict[str, float] = {}  # batch of a worker elsewhere → when it last spoke
        self.holders: dict[str, str] = {}  # batch of a worker elsewhere → the worker's name
        # batches sent elsewhere, not yet said taken → the token of their take: the worker
        # that got the take alone can say it took them (PUSH does not say who got it)
        self.unclaimed: dict[str, str] = {}
        self.sent_here: set[str] = set()  # batches sent to this machine's workers, unclaimed
        self.stranded: set[str] = set()  # batches whose results a fault kept uncommitted
        self.batch_s: float | None = None  # the workers' recent seconds per batch

    # -- handing out --------------------------------------------------------------------------

    def lease(self, batch_ids: list[str], now_ms: int, elsewhere: bool, token: str = ""
              ) -> None:
        """The batches were sent to a worker (``elsewhere``: one on another machine, which
        has yet to say it took them, with the take's ``token``): leased until now +
        lease_ms."""
        if elsewhere:
            self.unclaimed.update(dict.fromkeys(batch_ids, token))
        else:
            self.sent_here.update(batch_ids)
        with self.writer.writing() as conn:
            batches.lease_batches(conn, batch_ids, now_ms + self.lease_ms)

    def give_up(self, batch_id: str, why: str) -> None:
        """A batch that cannot be done whole is split in two; a single event that cannot
        be done is marked failed, with the reason, for ``kirolearn extraction retry``."""
        with self.writer.writing() as conn:
            other = batches.split_batch(conn, batch_id)
            if other is None:
                last = batches.batch_error(conn, batch_id)
                batches.fail_batch(conn, batch_id, why + (f"; last: {last}" if last else ""))
        if other is None:
            self.log.error("batch %s failed (%s); its event stays stored, and `kirolearn"
                           " extraction retry` hands it out again", batch_id, why)
        else:
            self.log.warning("batch %s split in two (%s); the second half is %s", batch_id,
                             why, other)

    def take_size(self) -> int:
        """How many due batches go to a worker in one message: as many as it does in about
        TAKE_TARGET_S at its recent pace, so that a backlog costs one message per take
        (and its results few commits), while a slow (model-backed) worker still takes one
        at a time and leaves the rest to the others."""
        if self.batch_s is None:
            return 1
        return max(1, min(TAKE_MAX_BATCHES, int(TAKE_TARGET_S / max(self.batch_s, 1e-4))))

    def note_pace(self, seconds: object, batches: int) -> None:
        """A take of ``batches`` took its worker ``seconds``."""
        if isinstance(seconds, int | float) and seconds >= 0 and batches:
            pace = seconds / batches
            self.batch_s = pace if self.batch_s is None else 0.7 * self.batch_s + 0.3 * pace

    # -- what the workers say -----------------------------------------------------------------

    def claimed(self, batch_ids: Iterable[object], pid: object) -> None:
        """This machine's worker ``pid`` took the batches."""
        if isinstance(pid, int):
            ids = [i for i in batch_ids if isinstance(i, str)]
            self.claims.update(dict.fromkeys(ids, pid))
            self.sent_here.difference_update(ids)

    def taken(self, batch_ids: Iterable[object], worker: str, token: object) -> None:
        """The worker elsewhere took batches sent there (``token``: its take's, which only
        the worker that got the take knows): heard from now on."""
        for batch_id in batch_ids:
            if (isinstance(batch_id, str) and batch_id in self.unclaimed
                    and isinstance(token, str) and token == self.unclaimed[batch_id]):
                del self.unclaimed[batch_id]
                self.heard[batch_id] = time.monotonic()
                self.holders[batch_id] = worker

    def working(self, batch_ids: Iterable[object], worker: str) -> None:
        """The worker elsewhere is still at these batches (those it holds)."""
        for batch_id in batch_ids:
            if isinstance(batch_id, str) and self.holders.get(batch_id) == worker:
                self.heard[batch_id] = time.monotonic()

    def settle(self, batch_id: str, worker: str | None) -> bool:
        """A result came for the batch: whether it is from whoever holds it (a worker
        elsewhere's for a batch it was not given is not); the batch is out no more."""
        if worker is not None and self.holders.get(batch_id) != worker:
            return False
        self.claims.pop(batch_id, None)
        self.sent_here.discard(batch_id)
        self.heard.pop(batch_id, None)
        self.holders.pop(batch_id, None)
        self.unclaimed.pop(batch_id, None)
        return True

    def strand(self, batch_ids: Iterable[str]) -> None:
        """The results of these batches could not be committed (the store is away): they
        go out again as soon as it answers (``reclaim``), not at their leases' end."""
        self.stranded.update(batch_ids)

    # -- a worker gone ------------------------------------------------------------------------

    def next_check(self, last_look: float) -> float | None:
        """When (``time.monotonic()``) to look for gone workers, or try the store for
        stranded batches, again; None: none to."""
        due = []
        if self.claims:
            due.append(last_look + CLAIM_CHECK_S)
        if self.stranded:
            due.append(last_look + STRANDED_CHECK_S)
        if self.heard:
            due.append(min(self.heard.values()) + REMOTE_SILENCE_S)
        return min(due, default=None)

    def reclaim(self) -> None:
        """A batch whose worker process is gone, or whose worker elsewhere has gone silent,
        or whose result a fault kept from the store, goes out again now, not at lease end.
        (Kept in memory: after a restart of storage, the lease does it.) While the store
        is away this raises ``Unavailable``, and the stranded batches wait."""
        if self.stranded:
            with self.writer.writing() as conn:
                for batch_id in sorted(self.stranded):
                    batches.batch_attempt_failed(
                        conn, batch_id, "its result could not be committed: the store was away")
            self.log.warning("handing out again %d batch(es) whose results could not be"
                             " committed while the store was away", len(self.stranded))
            self.stranded.clear()
        silent = time.monotonic() - REMOTE_SILENCE_S
        for batch_id, heard in list(self.heard.items()):
            if heard < silent:
                self.log.warning("batch %s: its worker elsewhere has said nothing for %.0f s;"
                                 " handing it out again", batch_id, REMOTE_SILENCE_S)
                del self.heard[batch_id]
                self.holders.pop(batch_id, None)
                self._again(batch_id, "the worker elsewhere went silent")
        for batch_id, pid in list(self.claims.items()):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                self.log.warning("batch %s: worker %d is gone; handing it out again",
                                 batch_id, pid)
                del self.claims[batch_id]
                self._again(batch_id, f"worker {pid} died while extracting it")
            except PermissionError:
                pass  # alive, as another user

    def worker_gone(self, pid: int) -> int:
        """A worker process of this machine exited (the supervisor says so at once): the
        batches it claimed, and those sent to this machine's workers that none has claimed
        yet (one may have waited in its queue, lost with it), go out again now; how many.
        One that another worker still holds in its queue is then done twice and committed
        once."""
        gone = {b for b, holder in self.claims.items() if holder == pid} | self.sent_here
        for batch_id in sorted(gone):
            self.claims.pop(batch_id, None)
            self._again(batch_id, f"worker {pid} exited before it was done")
        self.sent_here.clear()
        if gone:
            self.log.warning("worker %d exited: handing out again %d batch(es) it held or may"
                             " have had waiting", pid, len(gone))
        return len(gone)

    def revoke(self, allowed: set[str], revoked: bool) -> bool:
        """After a key was ``revoked``, or when a batch is held by a worker whose key is no
        longer ``allowed``: its batches, and those sent elsewhere and not yet said taken
        (who has them is not known), go out again now. Whether either was so (the
        workers' connections are to be cut then)."""
        gone = {b for b, name in self.holders.items() if name not in allowed}
        if not (revoked or gone):
            return False
        for batch_id in gone | set(self.unclaimed):
            name = self.holders.pop(batch_id, None)
            self.heard.pop(batch_id, None)
            self.log.warning("batch %s: %s; handing it out again", batch_id,
                             f"worker {name}'s key was revoked" if name else
                             "sent to the workers elsewhere as a key was revoked")
            self._again(batch_id, "the worker's key was revoked")
        self.unclaimed.clear()
        return True

    def _again(self, batch_id: str, why: str) -> None:
        with self.writer.writing() as conn:
            batches.batch_attempt_failed(conn, batch_id, why)
