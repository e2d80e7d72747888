"""Turning a prompt into an FTS5 query: the seed's lexical path, made safe for size.

The query's words are whitespace tokens, deduped in order, each followed by its parts
when it holds several (``with_parts``); past 32 the 32 rarest by IDF are kept; each
is quoted as an FTS5 phrase and the lot joined with OR.

Two additions keep common words from making search slow; BM25 scores every row that
matches any term, so a prompt full of words found everywhere would score most of the
corpus. While the terms would match more rows between them than ``term_budget_for``
the corpus (4% of the records, 2,000 to 4,000), the most common is left out: it
weighs least in BM25. And a query left with one word that alone matches more is
ranked over the newest records holding about that many of its matches, widened until
the namespace has enough. Neither ever touches a rare term: the rarest term is never
left out, and a window is only ever put on a term more common than the budget, so a
record that alone holds a word of the query is always ranked. A corpus no bigger than
the budget gets exactly the seed's results. ``benchmarks/retrieval.py`` measures what
this changes against the seed's ranking.
"""

from __future__ import annotations

import functools
import math
import re

from kirolearn.words import STOP_WORDS

MAX_TERMS = 32
# BM25 scores every row that matches any term (~2 µs each on a small machine). The
# terms of one search may match 4% of the records between them, within these bounds:
TERM_BUDGET_MIN = 2000
TERM_BUDGET_MAX = 4000
RARE_MATCHES = 10  # a term in at most this many records, and a tenth of them, is rare
MAX_WORDS = 1000  # distinct words considered from one prompt (a pasted log can be huge)
LONG_PROMPT_WORDS = 40  # a prompt of more words than this is long ...
LONG_PROMPT_TERMS = 8  # ... and keeps at most this many terms that match something


def words(query: str) -> list[str]:
    """Whitespace-separated words, empties dropped, deduplicated in order of first appearance.

    NUL characters are removed: FTS5 reads one as the end of the expression.
    """
    seen: dict[str, None] = {}
    for token in query.split():
        token = token.replace("\x00", "")
        if token:
            seen.setdefault(token, None)
    return list(seen)


PART = re.compile(r"[^\W_]+")


def with_parts(tokens: list[str]) -> list[str]:
    """Each token, then, for one the tokenizer reads as a phrase of several words
    (``TokenRestrictions.abbreviated(datasette)``, ``--strict/--no-strict``,
    ``Caroline's``), its words on their own: a record holding some of them matches
    too. Deduplicated in order."""
    found: dict[str, None] = {}
    for token in tokens:
        found.setdefault(token, None)
        parts = PART.findall(token)
        if len(parts) > 1:
            for part in parts:
                found.setdefault(part, None)
    return list(found)


def is_stop_word(token: str) -> bool:
    """Whether every word of a token is a stop word (``What's``, ``the``, ``--is``): it
    is left out of the search. A token with one word of substance is kept whole
    (``is_valid``, ``what-if.py``)."""
    parts = PART.findall(token.lower())
    return all(part in STOP_WORDS for part in parts)


def quote(token: str) -> str:
    """A token as an FTS5 string: a phrase, with no operator meaning."""
    return '"' + token.replace('"', '""') + '"'


def fts_expression(terms: list[str]) -> str:
    return " OR ".join(quote(t) for t in terms)


SHORT_PROMPT_WORDS = 3
REFERRING = re.compile(r"(?i)^\W*(and|also|but|then|so|same|again|instead|ok|okay|now|what about|"
                       r"how about|it|its|it's|that|this|these|those|they|them|there|he|she|"
                       r"why not|the other|the rest|the same)\b|\b(the other ones?|that one|"
                       r"this one|those ones|the same (?:for|with)|as before|like before|"
                       r"do (?:it|that|the same))\b")


def refers_back(prompt: str) -> bool:
    """Whether a prompt leans on what came before ("and the other one?", "same for the
    tests", "why?"): a short one, or one that starts with or names something said
    earlier. Its search then includes the session's previous prompts."""
    return len(prompt.split()) <= SHORT_PROMPT_WORDS or bool(REFERRING.search(prompt))


COVERAGE_TERMS = 8  # a query's most telling terms, which a record's match is weighed against
# A lexical answer whose best match holds less of them is no answer: nothing fits. Low,
# for words alone cannot tell a new name from another subject (a hybrid search also
# weighs meaning: ``steps.fits``). On the development histories, 0.15 gives 45-55% of
# off-topic prompts nothing (0.1: 22%) for at most 0.01 of recall; 0.2 gives 65-72%,
# but costs click's prompts 0.025 of recall.
MIN_COVERAGE = 0.15


def weight(doc_freq: int, total: int) -> float:
    """How much a term tells (its IDF): a word no record holds tells most. The record
    count may be a moment old (``lexical.Vocabulary`` caches it), even 0 with records there: it
    is taken as at least 1, so every term still weighs."""
    return math.log(1 + max(total, doc_freq, 1) / max(doc_freq, 0.5))


LETTER = re.compile(r"[^\W\d_]")


def says_what(token: str) -> bool:
    """Whether a token says what a prompt is about: one with a letter. A number, a
    version or an issue's (``#2648``, ``22.3.0``) names no work a record could hold,
    so it is searched for but does not weigh in ``coverage``."""
    return LETTER.search(token) is not None


INFLECTIONS = ("ing", "ed", "es", "s", "er", "ers")  # a word's endings that keep its sense
# and the endings of a word made from another that keep its subject (``configure``,
# ``configuration``; ``option``, ``optional``), but not ``-ization`` and the like
KIN = "ing|ed|er|d|ation|ion|al|ally|ly|ment|able"


@functools.lru_cache(maxsize=4096)
def inflected(word: str) -> re.Pattern | None:
    """The word as itself or an inflection (``cache``, ``caches``, ``cached``,
    ``caching``), as a whole word or a part of a name (``cacheKey``, ``cache_key``),
    not inside a longer word the stemmer gives the same stem ("capital" in
    "capitalization", "organ" in "organization"). None: not a word of letters (a
    version, a name with digits), held by its index terms alone."""
    base = re.sub(r"[\W_]+", "", word.lower())  # the word, not its quotes or colon
    if not base.isascii() or not base.isalpha():
        return None
    for endings in (INFLECTIONS, KIN.split("|")):
        for ending in endings:
            if base.endswith(ending) and len(base) - len(ending) >= 3:
                base = base[:-len(ending)]
                break
    if len(base) > 3 and base.endswith("e"):
        base = base[:-1]
    bases = {base, base[:-1]} if len(base) > 3 and base[-1] == base[-2] else {base}
    alternatives = "|".join(sorted(map(re.escape, bases), key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z])(?i:(?:{alternatives})e?(?:{KIN})?(?:e?s)?)(?![a-z])")


def coverage(weights: dict, held: set) -> float:
    """The share of a query that a record holds: the weight of the query's terms it holds
    over that of the query's ``COVERAGE_TERMS`` heaviest (so a long prompt, a pasted log,
    is weighed by what names its subject), at most 1. A prompt about something else
    (another project, a general question) shares a word or two with the best record at
    most, and those the common ones."""
    top = math.fsum(sorted(weights.values(), reverse=True)[:COVERAGE_TERMS])
    found = math.fsum(w for term, w in weights.items() if term in held)
    return min(1.0, found / top) if top else 0.0


def is_rare(doc_freq: int, total: int) -> bool:
    """Whether a term found in ``doc_freq`` of ``total`` records names something: a file,
    an identifier (see ``steps.rare``)."""
    return 0 < doc_freq <= RARE_MATCHES and doc_freq * 10 <= total


def most_matched_terms(words_in_query: int) -> int | None:
    """How many terms that match something a query keeps (None: MAX_TERMS). A long
    prompt (a pasted traceback or log) keeps its LONG_PROMPT_TERMS rarest: each term is
    one more doclist the full-text statement reads whole, most of a long prompt's time,
    and past a few the rarest have found what its commoner words would."""
    return LONG_PROMPT_TERMS if words_in_query > LONG_PROMPT_WORDS else None


def term_budget_for(total: int) -> int:
    """Rows the terms of one search may match between them, for a corpus of `total`."""
    return min(max(total // 25, TERM_BUDGET_MIN), TERM_BUDGET_MAX)


def select_terms(terms: list[str], doc_freq: dict[str, int], total: int,
                 term_budget: int, most_matched: int | None = None
                 ) -> tuple[list[str], int | None]:
    """Which terms to search for, and how many of the newest records to rank (None: all).

    ``doc_freq`` maps each term to the number of records containing it (0 when
    unseen); ``total`` is the number of records. Past MAX_TERMS, the terms with the
    highest IDF ``ln(N / max(df, 1))`` are kept, unseen ones counting as rare; of
    those that match anything, at most ``most_matched`` (the rarest: see
    ``most_matched_terms``). Then,
    while the kept terms match more than ``term_budget`` rows between them, the most
    common is dropped, down to the rarest term that matches anything; if that one
    alone matches more, it is ranked over the newest records only: the share of them
    that holds about ``term_budget`` of its matches. Kept terms stay in query order.
    """
    def idf(term: str) -> float:
        return math.log(total / max(doc_freq.get(term, 0), 1)) if total else 0.0

    by_rarity = sorted(terms, key=idf, reverse=True)  # stable: ties keep query order
    kept = set(by_rarity[:MAX_TERMS] if total else terms[:MAX_TERMS])
    seen = [t for t in by_rarity if t in kept and doc_freq.get(t, 0)]
    if most_matched is not None:
        kept.difference_update(seen[most_matched:])
        seen = seen[:most_matched]
    touched = sum(doc_freq[t] for t in seen)
    if total > term_budget:
        while touched > term_budget and len(seen) > 1:  # unseen terms match nothing
            term = seen.pop()
            kept.discard(term)
            touched -= doc_freq[term]
    window = None
    if touched > term_budget and total > term_budget:  # one common term is left
        window = math.ceil(total * term_budget / touched)
    return [t for t in terms if t in kept], window


EMBEDDED_HEAD_CHARS = 240  # of a long prompt, the start is embedded (the ask is there) ...
EMBEDDED_MIN_HEAD_CHARS = 20  # ... to the end of its first line past this, if it ends sooner
EMBEDDED_MAX_CHARS = 400  # ... then its most distinctive words, up to this length in all


def embedded_query(query: str, distinctive: list[str]) -> str:
    """What of a prompt the semantic side embeds: a short prompt whole; of a long one (a
    pasted log, a traceback) its start, where the ask usually is (its first line, when
    that ends sooner), then its most ``distinctive`` words (the lexical side's terms
    that some record holds, rarest first) that the start does not already hold. About
    100 tokens at most instead of the model's 256 of log lines: the embedding takes a
    fraction of the time, and says what the prompt is about."""
    if len(query) <= EMBEDDED_MAX_CHARS:
        return query
    head = query[:EMBEDDED_HEAD_CHARS]
    line_end = head.find("\n", EMBEDDED_MIN_HEAD_CHARS)
    if line_end > 0:  # the ask, before what was pasted under it
        head = head[:line_end]
    elif not query[EMBEDDED_HEAD_CHARS].isspace():  # end on a whole word
        head = head.rsplit(None, 1)[0] if len(head.split()) > 1 else head
    text = head
    for word in dict.fromkeys(distinctive):
        if word in head:
            continue
        if len(text) + 1 + len(word) > EMBEDDED_MAX_CHARS:
            break
        text += " " + word
    return text

