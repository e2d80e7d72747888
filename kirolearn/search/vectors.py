"""The semantic side of search: records' vectors in memory, and rank fusion.

At 100,000 records × 384 dimensions a brute-force dot product over a float32
matrix takes a few milliseconds (measured), so there is no approximate index: one
matrix per namespace, loaded from the database on first use and kept up to date
by the embedding back-fill that runs beside the searches (``Backfill``).

How the two rankings are fused is ``ranking``'s.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kirolearn import contract, db
from kirolearn.db import errors, reads
from kirolearn.db.store import Connection
from kirolearn.search import embeddings

BACKFILL_BATCH = 8  # records embedded at a time (about a tenth of a second of the model)
BACKFILL_YIELD_S = 0.5  # after a search, the back-fill waits this long: searches come first
BACKFILL_YIELD_MAX_S = 2.0  # ... but a batch runs at least this often
BACKFILL_IDLE_S = 30.0  # storage's word wakes it when records change; a missed one costs this
BACKFILL_RETRY_S = 1.0  # no database yet, or a busy one


def created_ms(created_at: str) -> float:
    try:
        return contract.parse_valid_time(created_at).timestamp() * 1000
    except ValueError:
        return 0.0


class VectorIndex:
    """Per namespace: record ids, their creation times and a unit-vector matrix of the
    vectors the model made (of its vector ``space``). A namespace is searched once its
    vectors are installed (``load`` + ``install``); vectors that arrive before that are
    kept and applied on install."""

    def __init__(self, space: str) -> None:
        import numpy as np

        self.np = np
        self.space = space
        self.spaces: dict[str, dict[str, Any]] = {}
        self.early: dict[str, list[tuple[str, Any, float]]] = {}
        self.requested: set[str] = set()  # loads asked for and not installed yet

    def load(self, conn: Connection, namespace: str) -> dict[str, Any]:
        """A namespace's vectors, read from the database (a second at 100,000 records)."""
        np = self.np
        # Filled row by row: a list of rows then a copy would need twice the memory.
        matrix = np.zeros((reads.count_vectors(conn, namespace, self.space),
                           embeddings.DIMENSIONS), dtype=np.float32)
        ids, times = [], []
        for record_id, created_at, blob in reads.vectors(conn, namespace, self.space):
            if len(blob) == embeddings.DIMENSIONS * 4 and len(ids) < len(matrix):
                matrix[len(ids)] = np.frombuffer(blob, dtype="<f4")
                ids.append(record_id)
                times.append(created_ms(created_at))
        # Rows past len(ids) are spare room: appending doubles it when it runs out.
        return {"ids": ids, "where": {i: n for n, i in enumerate(ids)}, "created": times,
                "matrix": matrix}

    def install(self, namespace: str, space: dict[str, Any]) -> None:
        self.spaces[namespace] = space
        self.requested.discard(namespace)
        for record_id, vector, created in self.early.pop(namespace, []):
            self.upsert(namespace, record_id, vector, created)

    def missing(self, namespaces: Sequence[str]) -> list[str]:
        return [n for n in namespaces if n not in self.spaces]

    def request(self, namespaces: Sequence[str], load: Callable[[str], None]) -> None:
        """Ask ``load`` for each namespace's space not asked for yet (vectors that come
        meanwhile are kept for it)."""
        for namespace in set(namespaces) - self.requested:
            self.requested.add(namespace)
            load(namespace)

    def clear(self) -> None:
        self.spaces.clear()
        self.early.clear()
        self.requested.clear()

    def upsert(self, namespace: str, record_id: str, vector: Any, created: float) -> None:
        space = self.spaces.get(namespace)
        if space is None:  # loaded later from the database, unless the load is under way
            if namespace in self.requested:
                self.early.setdefault(namespace, []).append((record_id, vector, created))
            return
        row = space["where"].get(record_id)
        if row is not None:
            space["matrix"][row] = vector
            space["created"][row] = created
            return
        row = len(space["ids"])
        if row == len(space["matrix"]):
            grown = self.np.zeros((max(64, 2 * row), embeddings.DIMENSIONS), dtype=self.np.float32)
            grown[:row] = space["matrix"]
            space["matrix"] = grown
        space["matrix"][row] = vector
        space["where"][record_id] = row
        space["ids"].append(record_id)
        space["created"].append(created)

    def fit(self) -> None:
        """Each matrix cut to the rows it holds: the room appending left (up to half of
        it, after a back-fill) given back; the next append grows it again."""
        for space in self.spaces.values():
            if len(space["matrix"]) > len(space["ids"]):
                space["matrix"] = space["matrix"][:len(space["ids"])].copy()

    def top(self, namespaces: Sequence[str], query: Any, limit: int,
            floor: float) -> list[tuple[str, float, float]]:
        """The most similar records at or above floor: (record_id, cosine, created_ms)."""
        found: list[tuple[str, float, float]] = []
        for namespace in namespaces:
            space = self.spaces[namespace]
            if not space["ids"]:
                continue
            sims = space["matrix"][:len(space["ids"])] @ query
            count = min(limit, len(sims))
            best = self.np.argpartition(-sims, count - 1)[:count]
            found += [(space["ids"][i], float(sims[i]), space["created"][i])
                      for i in best if sims[i] >= floor]
        found.sort(key=lambda item: (-item[1], -item[2]))
        return found[:limit]

    def similarities(self, namespaces: Sequence[str], record_ids: Sequence[str],
                     query: Any) -> dict[str, float]:
        """Cosine to the query of those records that have a vector."""
        found: dict[str, float] = {}
        for namespace in namespaces:
            space = self.spaces[namespace]
            rows = [(i, space["where"][i]) for i in record_ids if i in space["where"]]
            if rows:
                sims = space["matrix"][[row for _, row in rows]] @ query
                found.update((i, float(sim)) for (i, _), sim in zip(rows, sims, strict=True))
        return found

    def forget(self, record_ids: set[str]) -> None:
        """Drop records that are gone from the database (found missing when read)."""
        for space in self.spaces.values():
            for record_id in record_ids & set(space["where"]):
                row = space["where"][record_id]
                space["matrix"][row] = 0.0  # similarity 0: under any floor


class Backfill(threading.Thread):
    """Embeds records that have no vector yet, oldest first, BACKFILL_BATCH at a time,
    in its own thread (onnxruntime releases the GIL, so searches go on meanwhile; and it
    waits while searches come, ``searched_at``: bulk work yields to live), and
    loads the vector spaces that searches ask for (``request_load``) so that no search
    waits for one. Both reach the role's own thread through a queue (``drain``).

    Vectors another model made (another space) are never searched; when it first finds
    none left to embed, and until it finds no such vector, it asks the role to have
    storage drop them (``("respace", count)``), so that they are embedded again."""

    def __init__(self, path: db.Location, embedder: embeddings.Embedder, index: VectorIndex,
                 log: logging.Logger, results_ready: Callable[[], None] = lambda: None):
        super().__init__(name="embedding-backfill", daemon=True)
        self.path = path
        self.index = index  # only read here (load); installed on the role's thread
        self.embedder = embedder
        self.log = log
        self.results: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.results_ready = results_ready  # wakes the role's loop to drain them
        self.loads: queue.Queue[str] = queue.Queue()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.pending = 0  # records without a vector at the last look
        self.embedded = 0
        self.searched_at = -math.inf  # the last search (time.monotonic), set by the role
        self.space = index.space
        self.respaced = False  # no vector of another space was left at the last look

    def request_load(self, namespace: str) -> None:
        self.loads.put(namespace)
        self.wake.set()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def run(self) -> None:
        conn: Connection | None = None
        after = 0
        due_at = 0.0  # a batch runs by then, searches or not
        while not self.stopping.is_set():
            try:
                if conn is None:
                    conn = db.connect_reader(self.path)
                while not self.loads.empty():
                    namespace = self.loads.get_nowait()
                    try:
                        space = self.index.load(conn, namespace)
                    except Exception:
                        self.loads.put(namespace)  # asked for once: tried until it loads
                        raise
                    self.results.put(("space", (namespace, space)))
                    self.results_ready()
                now = time.monotonic()
                quiet_at = min(self.searched_at + BACKFILL_YIELD_S, due_at)
                if now < quiet_at:  # prompts are being answered: their embeddings first
                    self.wake.wait(quiet_at - now)  # (a space asked for is loaded at once)
                    self.wake.clear()
                    continue
                due_at = now + BACKFILL_YIELD_MAX_S
                batch = reads.unembedded(conn, after, BACKFILL_BATCH)
                if not batch:
                    self.pending = reads.count_unembedded(conn)
                    self._respace(conn)
                    after = 0  # from the start again: merges un-embed older records
                    self.wake.wait(BACKFILL_IDLE_S)
                    self.wake.clear()
                    continue
                after = batch[-1][0]
                records = [record for _, record in batch]
                texts = [embeddings.record_text(r) for r in records]
                matrix = self.embedder.embed(texts)
                self.results.put(("vectors", [
                    {"record_id": r["record_id"], "namespace": r["namespace"],
                     "created": created_ms(r["created_at"]),
                     "text_hash": embeddings.text_hash(t, self.space), "vector": v}
                    for r, t, v in zip(records, texts, matrix, strict=True)]))
                self.results_ready()
                self.embedded += len(records)
            except errors.StoreError as exc:  # no database yet, or it is busy
                self.log.debug("backfill waits: %s", exc)
                if conn is not None:
                    conn.close()
                    conn = None
                self.wake.wait(BACKFILL_RETRY_S)
            except Exception:
                self.log.exception("embedding back-fill failed; retrying in a minute")
                self.wake.wait(60)
        if conn is not None:
            conn.close()

    def _respace(self, conn: Connection) -> None:
        if not self.respaced:
            others = reads.count_other_vectors(conn, self.space)
            self.respaced = others == 0
            if others:
                self.results.put(("respace", others))
                self.results_ready()

    def drain(self, vectors_done: Callable[[list[dict]], None],
              respace: Callable[[int], None]) -> None:
        """Install loaded spaces, hand new vectors to vectors_done, and the count of
        vectors of other spaces to respace."""
        while True:
            try:
                kind, value = self.results.get_nowait()
            except queue.Empty:
                return
            if kind == "space":
                self.index.install(*value)
            elif kind == "respace":
                respace(value)
            else:
                vectors_done(value)

