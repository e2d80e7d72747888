"""The common words' scores, kept in memory, so that a search ranks by every word of
the query (the exact BM25 ranking) without reading the common words' doclists.

Reading a word found in a third of 100,000 records costs tens of milliseconds a search,
which is why the words' side leaves the most common out past its budget
(``query.select_terms``); what it leaves out changes the best ten. But BM25 is a sum
over the query's words (``fts.SCORES_ADD_UP``): each common word's score for each record
of a namespace can be read once (``term_scores``) and kept, and a search adds them up
in numpy with the rare words' scores, read as usual, for every record they hold.

A phrase (``src/app.py``: the words ``src app py`` in a row) is kept too, whatever its
frequency: FTS5 finds one by reading each of its words' doclists, common ones among them.
A word is read in the background (the retrieval role's ``start``); until it is, a search
reads it as it runs when it is rare, or where the budget keeps it, and leaves it out
otherwise, as the budget does. Records newer than a word's read gain its
scores at the next top-up (TOPUP_S after a search finds them); a word is read whole
again once the records have moved by a hundredth (its weight, and the records' mean
length, have changed). In process, without ``start``, words are read when asked for,
and read again whole once a record is newer: the ranking is always the seed's.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kirolearn import db
from kirolearn.db import fts
from kirolearn.db.store import Connection

COMMON_MIN = 250  # a word in more records than this is scored from memory (and a phrase)
MAX_POSTINGS = 5_000_000  # (record, score) pairs kept, 40 MB: the least recently used go
TOPUP_S = 5.0  # the longest records newer than a word's read wait for its scores
MOVED = 100  # a word is read whole again once the record count moves by 1/MOVED
READER_NICENESS = 10  # of the thread that reads words


def _nice() -> None:
    with contextlib.suppress(OSError, AttributeError):  # Linux: a thread's own niceness
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), READER_NICENESS)


class Scores(NamedTuple):
    """One word's scores in one namespace: every record holding it, up to ``newest``."""

    rows: np.ndarray  # row ids (int32), ascending
    scores: np.ndarray  # BM25 (float32), higher is better
    newest: int  # the newest row id when read: newer rows are not in it
    total: int  # the record count when first read
    read_at: float  # time.monotonic() of the last read


Key = tuple[str, str]  # (namespace, the word's one-phrase expression)


class Postings:
    """Common words' scores by namespace, the least recently used dropped past
    MAX_POSTINGS pairs."""

    def __init__(self, path: db.Location, most: int = MAX_POSTINGS) -> None:
        self.path = path
        self.most = most
        self.size = 0  # pairs kept
        self._kept: collections.OrderedDict[Key, Scores] = collections.OrderedDict()
        self._asked: set[Key] = set()  # being read in the background
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._conn: Connection | None = None  # the background thread's

    def start(self) -> None:
        """Read words on a thread of their own from now on: no search waits for one. The
        thread is niced and the interpreter's lock handed over every millisecond: the
        CPU goes to the searches first."""
        sys.setswitchinterval(0.001)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "postings", initializer=_nice)

    def stop(self) -> None:
        """Stop reading (the read under way ends first) and close the thread's connection."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._close()

    def status(self) -> dict:
        with self._lock:
            return {"words": len(self._kept), "pairs": self.size, "reading": len(self._asked)}

    def scores(self, conn: Connection, namespaces: Sequence[str], expressions: Sequence[str],
               newest: int, total: int) -> dict[str, list[Scores]]:
        """The scores of each word read in every namespace (``newest``, ``total``: the
        store's now), by its expression; the others are asked for (in the background),
        or read now (in process)."""
        found: dict[Key, Scores | None] = {}
        wanted: list[tuple[Key, Scores | None]] = []  # (to read, what is kept of it)
        now = time.monotonic()
        with self._lock:
            for key in ((n, e) for n in namespaces for e in expressions):
                kept = found[key] = self._kept.get(key)
                if kept is None or abs(total - kept.total) * MOVED > kept.total:
                    wanted.append((key, None))  # read whole (again)
                    continue
                self._kept.move_to_end(key)
                if newest > kept.newest and self._pool is None:
                    wanted.append((key, None))  # in process: every weight as it is now
                elif newest > kept.newest and now - kept.read_at > TOPUP_S:
                    wanted.append((key, kept))
        if self._pool is None:  # in process: read now
            found.update((key, self._read(conn, key, kept)) for key, kept in wanted)
        else:
            self._ask(wanted)
        read: dict[str, list[Scores]] = {}
        for (_, expression), kept in found.items():
            if kept is not None:
                read.setdefault(expression, []).append(kept)
        return {e: kept for e, kept in read.items() if len(kept) == len(namespaces)}

    def _ask(self, wanted: list[tuple[Key, Scores | None]]) -> None:
        with self._lock:
            wanted = [(key, kept) for key, kept in wanted if key not in self._asked]
            self._asked.update(key for key, _ in wanted)
        for key, kept in wanted:
            assert self._pool is not None
            self._pool.submit(self._read_in_background, key, kept)

    def _read_in_background(self, key: Key, kept: Scores | None) -> None:
        try:
            if self._conn is None:
                self._conn = db.connect_reader(self.path)
            self._read(self._conn, key, kept)
        except Exception:  # the store is busy or gone: asked again by the next search
            self._close()
        finally:
            with self._lock:
                self._asked.discard(key)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _read(self, conn: Connection, key: Key, kept: Scores | None) -> Scores:
        """Read the word's scores whole, or (``kept``) those of the records past it."""
        namespace, expression = key
        newest = fts.newest_id(conn)  # first: every row up to it is there to be read
        since = kept.newest if kept is not None else 0
        rows = conn.dialect.fts.term_scores(conn, namespace, expression, since, newest)
        ids = np.fromiter((row for row, _ in rows), np.int32, len(rows))
        scores = np.fromiter((score for _, score in rows), np.float32, len(rows))
        if kept is not None:
            ids, scores = np.concatenate([kept.rows, ids]), np.concatenate([kept.scores, scores])
            read = Scores(ids, scores, newest, kept.total, time.monotonic())
        else:
            total = conn.dialect.fts.record_count(conn)
            read = Scores(ids, scores, newest, total, time.monotonic())
        with self._lock:
            old = self._kept.pop(key, None)
            self.size += len(ids) - (len(old.rows) if old is not None else 0)
            self._kept[key] = read
            while self.size > self.most and len(self._kept) > 1:
                _, dropped = self._kept.popitem(last=False)
                self.size -= len(dropped.rows)
        return read
