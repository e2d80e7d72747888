"""One search under way (``Search``): its request, its deadline and what its steps
have found so far, beside what it uses of the engine that runs it (``Means``)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from kirolearn.db.store import Connection
from kirolearn.search import embeddings, postings, ranking, staleness, vectors
from kirolearn.search.request import Request
from kirolearn.search.result import Result
from kirolearn.search.vocabulary import Vocabulary

CANDIDATES = 4  # each side of a hybrid search brings limit × this many candidates
# A lift: rows of records, and what their scores are multiplied by in the words' ranking.
Lift = tuple[list[int], float]


class Means(Protocol):
    """What a search uses of the engine: what outlives it."""

    embedder: embeddings.Embedder | None
    vectors: vectors.VectorIndex
    vocabulary: Vocabulary
    postings: postings.Postings
    checkout: staleness.Checkout
    term_budget: int | None
    weights: ranking.Weights
    min_similarity: float
    rrf_k: int
    neighbour_weight: float

    def connection(self) -> Connection: ...

    def vectors_ready(self, namespaces: tuple[str, ...]) -> bool: ...

    def model_ready(self) -> bool: ...

    def embed_soon(self, text: str) -> Future: ...


@dataclass
class Search:
    """One search under way: the request, and what its steps have found so far."""

    engine: Means
    request: Request
    namespaces: tuple[str, ...]  # the request's, with those it may read (``Engine.shared``)
    deadline: float  # time.monotonic()
    span: tuple[datetime, datetime] | None = None  # the time the request names (``when``)
    lifts: list[Lift] = field(default_factory=list)  # for the words' ranking
    playing_newest: list[str] = field(default_factory=list)  # records of files in play
    play_rows: list[int] = field(default_factory=list)  # ... their rows
    in_play: list[str] = field(default_factory=list)  # ... as a ranking (``of_play``)
    changed: list[str] = field(default_factory=list)  # by their edits' lines (``changed``)
    lexical: Result | None = None  # the words' answer (a hybrid's: limit × CANDIDATES)
    embedding: Future | None = None  # the query's vector, while it is being made
    query_vector: Any = None
    rare: dict[str, dict] = field(default_factory=dict)  # records of a rare word, by id
    near: list[tuple[str, float, float]] = field(default_factory=list)  # (id, cosine, created)
    created: dict[str, float] = field(default_factory=dict)  # each candidate's time, in ms
    fused: list[tuple[str, float]] = field(default_factory=list)  # (id, score), best first
    ranked: bool = False  # whether ``fused`` is the ranking (both sides fused)
    cosine: dict[str, float] = field(default_factory=dict)  # closeness to the query
    around: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    pool: dict[str, float] = field(default_factory=dict)  # every candidate's fused score
    shown: dict[str, str] = field(default_factory=dict)  # a neighbour shown → its hit
    found: dict[str, dict] = field(default_factory=dict)  # the records read, by id
    named: list[tuple[int, str]] = field(default_factory=list)  # an opened file's (row, id)
    records: list[dict] = field(default_factory=list)  # the answer, in order
    answer: Result | None = None  # set by the step that ends the ranking

    @property
    def query(self) -> str:
        return self.request.query

    @property
    def limit(self) -> int:
        return self.request.limit

    @property
    def mode(self) -> str:
        return self.request.mode

    @property
    def wide(self) -> int:
        return self.limit * CANDIDATES
