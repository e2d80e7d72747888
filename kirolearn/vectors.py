"""The semantic side of search: records' vectors in memory, and rank fusion.

At 100,000 records × 384 dimensions a brute-force dot product over a float32
matrix takes a few milliseconds (measured), so there is no approximate index: one
matrix per namespace, loaded from the database on first use and kept up to date
by the embedding back-fill that runs beside the searches (``Backfill``).

``fuse`` merges the lexical and the semantic ranking by reciprocal rank
(``Σ 1/(k + rank)``, k = 60 unless ``retrieval.rrf_k`` says otherwise), adds a small
recency boost (never more than a fifth
of what first place on one list is worth, halving every 30 days), and breaks ties
by recency, then by id.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kirolearn import contract, db, embeddings

RRF_K = 60
RECENCY_SHARE = 0.2  # the most recency can add, as a share of first place on one list
RECENCY_HALF_LIFE_DAYS = 30.0
BACKFILL_BATCH = 32
BACKFILL_IDLE_S = 1.0


def created_ms(created_at: str) -> float:
    try:
        return contract.parse_valid_time(created_at).timestamp() * 1000
    except ValueError:
        return 0.0


def fuse(rankings: Sequence[Sequence[str]], created: dict[str, float], now_ms: float,
         k: int = RRF_K) -> list[tuple[str, float]]:
    """(id, score), best first: reciprocal-rank fusion of rankings plus a bounded recency
    boost; ties go to the newer record, then to the larger id."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, record_id in enumerate(ranking, start=1):
            scores[record_id] = scores.get(record_id, 0.0) + 1.0 / (k + rank)
    for record_id in scores:
        age_days = max(0.0, now_ms - created.get(record_id, 0.0)) / 86_400_000
        scores[record_id] += (RECENCY_SHARE / (k + 1)) * 0.5 ** (age_days
                                                               / RECENCY_HALF_LIFE_DAYS)
    ordered = sorted(sorted(scores, reverse=True),  # stable: the larger id first on a tie
                     key=lambda i: (-scores[i], -created.get(i, 0.0)))
    return [(record_id, scores[record_id]) for record_id in ordered]


class VectorIndex:
    """Per namespace: record ids, their creation times and a unit-vector matrix."""

    def __init__(self) -> None:
        import numpy as np

        self.np = np
        self.spaces: dict[str, dict[str, Any]] = {}

    def _space(self, conn: sqlite3.Connection, namespace: str) -> dict[str, Any]:
        space = self.spaces.get(namespace)
        if space is None:
            np = self.np
            ids, times, rows = [], [], []
            for record_id, created_at, blob in db.vectors(conn, namespace):
                if len(blob) == embeddings.DIMENSIONS * 4:
                    ids.append(record_id)
                    times.append(created_ms(created_at))
                    rows.append(np.frombuffer(blob, dtype="<f4"))
            matrix = (np.vstack(rows) if rows
                      else np.zeros((0, embeddings.DIMENSIONS), dtype=np.float32))
            # Rows past len(ids) are spare room: appending doubles it when it runs out.
            space = {"ids": ids, "where": {i: n for n, i in enumerate(ids)},
                     "created": times, "matrix": matrix.astype(np.float32)}
            self.spaces[namespace] = space
        return space

    def upsert(self, conn: sqlite3.Connection, namespace: str, record_id: str, vector: Any,
               created: float) -> None:
        space = self._space(conn, namespace)
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

    def top(self, conn: sqlite3.Connection, namespaces: Sequence[str], query: Any, limit: int,
            floor: float) -> list[tuple[str, float, float]]:
        """The most similar records at or above floor: (record_id, cosine, created_ms)."""
        found: list[tuple[str, float, float]] = []
        for namespace in namespaces:
            space = self._space(conn, namespace)
            if not space["ids"]:
                continue
            sims = space["matrix"][:len(space["ids"])] @ query
            count = min(limit, len(sims))
            best = self.np.argpartition(-sims, count - 1)[:count]
            found += [(space["ids"][i], float(sims[i]), space["created"][i])
                      for i in best if sims[i] >= floor]
        found.sort(key=lambda item: (-item[1], -item[2]))
        return found[:limit]

    def similarities(self, conn: sqlite3.Connection, namespaces: Sequence[str],
                     record_ids: Sequence[str], query: Any) -> dict[str, float]:
        """Cosine to the query of those records that have a vector."""
        found: dict[str, float] = {}
        for namespace in namespaces:
            space = self._space(conn, namespace)
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
    in its own thread (onnxruntime releases the GIL, so searches go on meanwhile),
    and hands each batch to ``done`` on the role's own thread through a queue."""

    def __init__(self, path: Path, embedder: embeddings.Embedder, log: logging.Logger):
        super().__init__(name="embedding-backfill", daemon=True)
        self.path = path
        self.embedder = embedder
        self.log = log
        self.results: queue.Queue[list[dict]] = queue.Queue()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.pending = 0  # records without a vector at the last look
        self.embedded = 0

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def run(self) -> None:
        conn: sqlite3.Connection | None = None
        after = 0
        while not self.stopping.is_set():
            try:
                if conn is None:
                    conn = db.connect_reader(self.path)
                batch = db.unembedded(conn, after, BACKFILL_BATCH)
                if not batch:
                    self.pending = conn.execute(
                        "SELECT count(*) FROM memory_records INDEXED BY memory_records_unembedded"
                        " WHERE embedding_hash IS NULL").fetchone()[0]
                    after = 0  # from the start again: merges un-embed older records
                    self.wake.wait(BACKFILL_IDLE_S)
                    self.wake.clear()
                    continue
                after = batch[-1][0]
                records = [record for _, record in batch]
                texts = [embeddings.record_text(r) for r in records]
                matrix = self.embedder.embed(texts)
                self.results.put([
                    {"record_id": r["record_id"], "namespace": r["namespace"],
                     "created": created_ms(r["created_at"]), "text_hash": embeddings.text_hash(t),
                     "vector": v} for r, t, v in zip(records, texts, matrix, strict=True)])
                self.embedded += len(records)
            except sqlite3.OperationalError as exc:  # no database yet, or it is busy
                self.log.debug("backfill waits: %s", exc)
                if conn is not None:
                    conn.close()
                    conn = None
                self.wake.wait(BACKFILL_IDLE_S)
            except Exception:
                self.log.exception("embedding back-fill failed; retrying in a minute")
                self.wake.wait(60)
        if conn is not None:
            conn.close()

    def drain(self, done: Callable[[list[dict]], None]) -> None:
        while True:
            try:
                batch = self.results.get_nowait()
            except queue.Empty:
                return
            done(batch)

