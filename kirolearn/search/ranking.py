"""How a search orders its candidates: rank fusion (hybrid), then what is known of each.

``fuse`` merges the lexical and the semantic ranking by reciprocal rank
(``Σ 1/(k + rank)``, k = ``retrieval.rrf_k``) and adds a bounded recency boost (at most
``ranking.recency`` of what first place on one list is worth, halving every
``ranking.recency_half_life_days``); ties go to the newer record, then the larger id.

``weigh`` then multiplies each score (fused, or a lexical search's BM25, negated: higher
is better here) by what the store knows of the record
(``Signals``): its type's weight (a decision or an error outranks an exploration note
that matches as well), how often it proved useful (it was given to a prompt and that
turn then touched one of its files), and whether it is stale (a file it names was
changed by a later turn). docs/configuration.md gives each weight's measured effect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from kirolearn.contract import OBSERVATION_TYPES

RRF_K = 10


class Signals(NamedTuple):
    """What the store knows of a record beyond its text."""

    observation_type: str
    useful: int  # turns that were given it and then touched one of its files
    stale: bool  # a file it names was changed by a later turn


@dataclass(frozen=True)
class Weights:
    """The ``[ranking]`` settings; as constructed, relevance and recency alone."""

    recency: float = 0.2  # the most recency adds, as a share of first place on one list
    recency_half_life_days: float = 30.0
    useful: float = 0.0  # × (1 + useful × log2(1 + times useful))
    stale: float = 1.0  # × this when stale
    types: Mapping[str, float] = field(default_factory=dict)  # × by type (absent: 1)

    @classmethod
    def from_settings(cls, ranking: Mapping[str, float]) -> Weights:
        return cls(recency=ranking["recency"],
                   recency_half_life_days=max(ranking["recency_half_life_days"], 1e-6),
                   useful=ranking["useful"], stale=ranking["stale"],
                   types={t: ranking[f"type_{t}"] for t in OBSERVATION_TYPES})

    def factor(self, signals: Signals) -> float:
        """What a record's fused score is multiplied by."""
        factor = self.types.get(signals.observation_type, 1.0)
        factor *= 1.0 + self.useful * math.log2(1 + max(0, signals.useful))
        return factor * (self.stale if signals.stale else 1.0)

    @property
    def neutral(self) -> bool:
        """Whether ``weigh`` would change nothing (and the signals need not be read)."""
        return self.useful == 0 and self.stale == 1 and all(
            w == 1 for w in self.types.values())


RELEVANCE_AND_RECENCY = Weights()


def fuse(rankings: Sequence[Sequence[str]], created: dict[str, float], now_ms: float,
         k: int = RRF_K, weights: Weights = RELEVANCE_AND_RECENCY
         ) -> list[tuple[str, float]]:
    """(id, score), best first: reciprocal-rank fusion of rankings plus a bounded recency
    boost; ties go to the newer record, then to the larger id."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, record_id in enumerate(ranking, start=1):
            scores[record_id] = scores.get(record_id, 0.0) + 1.0 / (k + rank)
    for record_id in scores:
        age_days = max(0.0, now_ms - created.get(record_id, 0.0)) / 86_400_000
        scores[record_id] += (weights.recency / (k + 1)) * 0.5 ** (
            age_days / weights.recency_half_life_days)
    return _ordered(scores, created)


def weigh(fused: list[tuple[str, float]], signals: Mapping[str, Signals], weights: Weights,
          created: dict[str, float]) -> list[tuple[str, float]]:
    """The fused scores multiplied by each record's ``Weights.factor``, best first (a
    record without signals keeps its score)."""
    scores = {i: score * (weights.factor(signals[i]) if i in signals else 1.0)
              for i, score in fused}
    return _ordered(scores, created)


def _ordered(scores: dict[str, float], created: dict[str, float]) -> list[tuple[str, float]]:
    ordered = sorted(sorted(scores, reverse=True),  # stable: the larger id first on a tie
                     key=lambda i: (-scores[i], -created.get(i, 0.0)))
    return [(record_id, scores[record_id]) for record_id in ordered]
