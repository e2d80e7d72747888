"""A search's answer: the records found, how the search ended, and the context block an
agent is given from them."""

from __future__ import annotations

from dataclasses import dataclass, field

from kirolearn import privacy
from kirolearn.search.context import context_block, fenced


@dataclass
class Result:
    records: list[dict]  # each with its ``score`` (BM25, lower is better; None from LIKE)
    outcome: str  # ok | empty | fallback | timeout | error
    latency_ms: float
    terms: list[str] = field(default_factory=list)
    window: int | None = None
    rare: list[str] = field(default_factory=list)  # the kept terms that are ``is_rare``
    # The kept terms found in some record, rarest first: what names the prompt's subject.
    distinctive: list[str] = field(default_factory=list)
    error: str | None = None
    block: str | None = None  # the context when it is not the search format (session start)
    # The records the block names besides ``records`` (a session start's brief): given
    # to the agent too, so logged and known as given.
    also_named: list[str] = field(default_factory=list)
    # How much of the query's weight each of the best lexical matches holds (``coverage``),
    # by record id; the most of them is the answer's ``coverage``.
    held: dict[str, float] = field(default_factory=dict)
    # Records whose code is gone from the working tree, or whose work is on a branch not
    # merged into it (``staleness``), left out of the answer: each with its id, title and
    # why.
    left_out: list[dict] = field(default_factory=list)
    # What the store is to be told of the records checked (``staleness``): record id →
    # why its code is gone from the branch (None: it is back).
    stale_marks: dict[str, str | None] = field(default_factory=dict)

    @property
    def coverage(self) -> float | None:
        """The most of the query one of the best lexical matches holds (None: no lexical
        match was weighed): a lexical answer below ``MIN_COVERAGE`` is no answer."""
        return max(self.held.values()) if self.held else None

    @property
    def context(self) -> str:
        """The context for the agent, fenced as recalled notes: of records whose stored
        text today's rules scrubbed, or scrubbed as it leaves (``privacy.scrub_stale``)."""
        if self.block is not None:
            return fenced(privacy.scrub_text(self.block))
        return fenced(context_block(privacy.scrub_stale(self.records)))

    @property
    def record_ids(self) -> list[str]:
        return list(dict.fromkeys([*(r["record_id"] for r in self.records), *self.also_named]))

    def as_dict(self, with_records: bool = False) -> dict:
        reply = {"context": self.context, "record_ids": self.record_ids,
                 "outcome": self.outcome, "latency_ms": round(self.latency_ms, 3),
                 "terms": self.terms, "window": self.window}
        if with_records:
            reply["records"] = privacy.scrub_stale(self.records)
        if self.coverage is not None:
            reply["coverage"] = round(self.coverage, 3)
        if self.left_out:
            reply["left_out"] = self.left_out
        if self.error:
            reply["error"] = self.error
        return reply
