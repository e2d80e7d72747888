"""What searches have read of the words: each word's index terms and each term's
document frequency (reading them means reading doclists), kept for the engine's life.

A word's document frequency is that of what the FTS5 tokenizer makes of it
(`Migrations` is the term `migrat`, `src/app.py` the phrase `src app py`): one-term
words are read from the fts5vocab table, phrases are counted (up to 32 new ones per
search; past that a phrase is taken to be as common as its rarest term).
"""

from __future__ import annotations

import math
import time

from kirolearn.db.store import Connection
from kirolearn.search.query import quote

MAX_PHRASE_COUNTS = 32  # phrases counted per search; others are bounded by their rarest term
TOTAL_TTL_S = 5.0  # how often the record count is re-read
FREQ_TTL_S = 600.0  # document frequencies are kept this long, or until the count moves 1%
CACHE_MAX = 50_000


class Vocabulary:
    """Each word's index terms and each term's document frequency, as searches have read
    them."""

    def __init__(self) -> None:
        self._stems: dict[str, tuple[str, ...]] = {}
        self._doc_freq: dict[tuple[str, ...], int] = {}
        self._total = 0
        self._total_at = -math.inf
        self._freq_total = 0  # the record count when the frequencies were cached
        self._freq_at = -math.inf

    def index_terms(self, conn: Connection, raw: list[str]) -> dict[str, tuple]:
        """Each word's index terms, as the FTS5 tokenizer makes them."""
        missing = [t for t in raw if t not in self._stems]
        if missing:
            if len(self._stems) > CACHE_MAX:
                self._stems.clear()
            terms = conn.dialect.fts.index_terms(conn, missing)
            self._stems.update(zip(missing, terms, strict=True))
        return {t: self._stems[t] for t in raw}

    def frequencies(self, conn: Connection, phrases: dict[tuple[str, ...], str]
                    ) -> tuple[int, dict[tuple[str, ...], int]]:
        """The record count, and how many records each phrase (index terms → its token)
        matches: one-term phrases from the fts5vocab table, longer ones counted.

        The cache is dropped when the record count moves by 1% (any change, for a small
        corpus) or after FREQ_TTL_S. Past MAX_PHRASE_COUNTS new phrases in one search,
        a phrase's count is taken as its rarest term's (an upper bound).
        """
        now = time.monotonic()
        if now - self._total_at > TOTAL_TTL_S:
            self._total = conn.dialect.fts.record_count(conn)
            self._total_at = now
            moved = abs(self._total - self._freq_total) > self._freq_total // 100
            if moved or now - self._freq_at > FREQ_TTL_S or len(self._doc_freq) > CACHE_MAX:
                self._doc_freq.clear()
                self._freq_total, self._freq_at = self._total, now
        terms = {t for phrase in phrases for t in phrase if (t,) not in self._doc_freq}
        if terms:
            found = conn.dialect.fts.term_doc_counts(conn, list(terms))
            for term in terms:
                self._doc_freq[(term,)] = found.get(term, 0)
        counted = 0
        for phrase, token in phrases.items():
            if phrase in self._doc_freq:
                continue
            bound = min(self._doc_freq[(t,)] for t in phrase)
            if bound and counted < MAX_PHRASE_COUNTS:
                bound = conn.dialect.fts.match_count(conn, quote(token))
                counted += 1
            self._doc_freq[phrase] = bound
        return self._total, self._doc_freq
