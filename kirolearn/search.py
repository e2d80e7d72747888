"""Lexical search over memory records, and the context block an agent reads.

The path is the seed's: a query from the prompt's body (``contract.body_text``);
whitespace tokens, deduped in order; past 32 tokens the 32 rarest by IDF (document
frequencies from the index itself); each token quoted and the lot joined with OR;
BM25 ranking inside one namespace; and if FTS5 refuses the expression, an escaped
``LIKE`` substring search, newest first. Search never raises: every failure is an
empty result with an outcome and the latency.

A token's document frequency is that of what the FTS5 tokenizer makes of it
(`Migrations` is the term `migrat`, `src/app.py` the phrase `src app py`): one-term
tokens are read from the fts5vocab table, phrases are counted (up to 32 new ones per
search; past that a phrase is taken to be as common as its rarest term). A token with
nothing indexable in it (`?`, `—`) can never match and is left out, as is a second
token that indexes the same (`Fix` after `fix`).

Two additions keep common words from making search slow; BM25 scores every row that
matches any term, so a prompt full of words found everywhere would score most of the
corpus. While the terms would match more rows between them than ``term_budget_for``
the corpus (4% of the records, 2,000 to 4,000), the most common is left out: it
weighs least in BM25. And a query of one or two common words, or a prompt left with
one very common word, is ranked over the newest records holding a bounded number of
its matches, widened until the namespace has enough. Below those sizes nothing
changes: a small corpus gets exactly the seed's results. ``benchmarks/retrieval.py``
measures what this changes against the seed's ranking.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kirolearn import db, embeddings, vectors

HEADER = "## Prior observations from kirolearn"
OUTCOMES = ("ok", "empty", "fallback", "timeout", "error")
MAX_TERMS = 32
# BM25 scores every row that matches any term (~2 µs each on a small machine). The
# terms of one search may match 4% of the records between them, within these bounds:
TERM_BUDGET_MIN = 2000
TERM_BUDGET_MAX = 4000
WINDOW_ROWS = 100  # rows a short query (one or two terms) may match
SHORT_QUERY_TERMS = 2
MAX_TOKENS = 1000  # distinct tokens considered from one prompt (a pasted log can be huge)
MAX_PHRASE_COUNTS = 32  # phrases counted per search; others are bounded by their rarest term
TOTAL_TTL_S = 5.0  # how often the record count is re-read
FREQ_TTL_S = 600.0  # document frequencies are kept this long, or until the count moves 1%
CACHE_MAX = 50_000
SCOPE_SLACK = 10  # extra candidates ranked when several namespaces are searched as one
MODES = ("lexical", "semantic", "hybrid")
CANDIDATES = 4  # each side of a hybrid search brings limit × this many candidates
RETURN_MARGIN_S = 0.005  # a late embedder is given up this long before the deadline
FALLBACK_RESERVE_S = 0.06  # ... or this long, when a lexical search must still be run
MIN_SIMILARITY = 0.25  # cosine below which a record is not a semantic match


def tokens(query: str) -> list[str]:
    """Whitespace tokens, empties dropped, deduplicated in order of first appearance.

    NUL characters are removed: FTS5 reads one as the end of the expression.
    """
    seen: dict[str, None] = {}
    for token in query.split():
        token = token.replace("\x00", "")
        if token:
            seen.setdefault(token, None)
    return list(seen)


def quote(token: str) -> str:
    """A token as an FTS5 string: a phrase, with no operator meaning."""
    return '"' + token.replace('"', '""') + '"'


def fts_expression(terms: list[str]) -> str:
    return " OR ".join(quote(t) for t in terms)


def term_budget_for(total: int) -> int:
    """Rows the terms of one search may match between them, for a corpus of `total`."""
    return min(max(total // 25, TERM_BUDGET_MIN), TERM_BUDGET_MAX)


def select_terms(terms: list[str], doc_freq: dict[str, int], total: int,
                 term_budget: int, window_rows: int = WINDOW_ROWS
                 ) -> tuple[list[str], int | None]:
    """Which terms to search for, and how many of the newest records to rank (None: all).

    ``doc_freq`` maps each term to the number of records containing it (0 when
    unseen); ``total`` is the number of records. Past MAX_TERMS, the terms with the
    highest IDF ``ln(N / max(df, 1))`` are kept, unseen ones counting as rare. Then,
    while the kept terms match more than ``term_budget`` rows between them, the most
    common is dropped, down to the rarest term that matches anything; if that one
    alone matches more, it is ranked over the newest records only: the share of them
    that holds about ``term_budget`` of its matches. A short query (one or two terms)
    gets such a window already past ``window_rows`` matches: two words carry little
    to rank by beyond their own counts, while three or more rank records by how many
    of them they share, which needs the whole history. Kept terms stay in query order.
    """
    def idf(term: str) -> float:
        return math.log(total / max(doc_freq.get(term, 0), 1)) if total else 0.0

    by_rarity = sorted(terms, key=idf, reverse=True)  # stable: ties keep query order
    kept = set(by_rarity[:MAX_TERMS] if total else terms[:MAX_TERMS])
    seen = [t for t in by_rarity if t in kept and doc_freq.get(t, 0)]
    rows = window_rows if len(seen) <= SHORT_QUERY_TERMS else term_budget
    touched = sum(doc_freq[t] for t in seen)
    if total > term_budget:
        while touched > term_budget and len(seen) > 1:  # unseen terms match nothing
            term = seen.pop()
            kept.discard(term)
            touched -= doc_freq[term]
    window = None
    if touched > rows and total > rows:
        window = math.ceil(total * rows / touched)
    return [t for t in terms if t in kept], window


def distinct(records: list[dict]) -> list[dict]:
    """Records in order, less any whose title and summary (whitespace aside) repeat an
    earlier one's: the same memory saved in two namespaces is shown once."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for record in records:
        key = (" ".join(record["title"].split()).casefold(),
               " ".join(record["summary"].split()).casefold())
        if key not in seen:
            seen.add(key)
            kept.append(record)
    return kept


def record_section(record: dict) -> str:
    """One record in the context: its title, summary and facts."""
    parts = ["### " + " ".join(record["title"].split())]
    if record["summary"].strip():
        parts.append(record["summary"].strip())
    facts = [" ".join(fact.split()) for fact in record["facts"]]
    if any(facts):
        parts.append("\n".join(f"- {fact}" for fact in facts if fact))
    return "\n\n".join(parts)


def context_block(records: list[dict]) -> str:
    """The fixed format: a header, then per record its title, summary and facts."""
    if not records:
        return ""
    return "\n\n".join([HEADER, *(record_section(record) for record in records)])


def within_tokens(records: list[dict], max_tokens: int | None) -> list[dict]:
    """The best-ranked records whose context block fits in max_tokens (None: all): the
    lowest-ranked go first. A first record too big on its own is kept, without its facts
    and its summary cut to fit, so the best match is never dropped for its size alone."""
    if max_tokens is None or not records:
        return records
    kept: list[dict] = []
    used = estimate_tokens(HEADER)
    for record in records:
        cost = estimate_tokens(record_section(record)) + 1
        if used + cost > max_tokens:
            break
        kept.append(record)
        used += cost
    if not kept:
        first = {**records[0], "facts": []}
        over = estimate_tokens(context_block([first])) - max_tokens
        while over > 0 and first["summary"]:
            first["summary"] = first["summary"][:max(0, len(first["summary"]) - 4 * over - 4)]
            over = estimate_tokens(context_block([first])) - max_tokens
        kept = [first]
    return kept


SESSION_HEADER = "## This project so far (from kirolearn)"
SESSION_RECENT = 5  # newest records listed as one line each
SESSION_TOP = 20  # candidates for the records given in full
SESSION_LOOKBACK = 500  # recent retrievals counted to find the records that matter most


def estimate_tokens(text: str) -> int:
    """About four characters per token: close enough for English and code."""
    return (len(text) + 3) // 4


def session_block(recent: list[dict], top: list[dict],
                  token_budget: int) -> tuple[str, list[dict]]:
    """The session-start context and the records in it: one line per recent record,
    then the top records in full (the context block's format), as many as fit in
    token_budget."""
    included: list[dict] = []
    if not recent and not top:
        return "", included
    parts = [SESSION_HEADER, "Recent work:"]
    used = estimate_tokens("\n\n".join(parts))
    lines: list[str] = []
    for record in recent:
        first = " ".join(record["summary"].split())
        line = f"- {record['created_at'][:10]} {' '.join(record['title'].split())}"
        if first and first != record["title"]:
            line += f": {first[:160]}" + ("…" if len(first) > 160 else "")
        if used + estimate_tokens(line) + 1 > token_budget:
            break
        lines.append(line)
        included.append(record)
        used += estimate_tokens(line) + 1
    if lines:
        parts[-1] += "\n" + "\n".join(lines)
    else:
        parts.pop()
    for record in top:
        section = context_block([record]).split("\n\n", 1)[1]
        if used + estimate_tokens(section) + 1 > token_budget:
            continue  # a shorter one further down may still fit
        parts.append(section)
        included.append(record)
        used += estimate_tokens(section) + 1
    return ("\n\n".join(parts), included) if included else ("", [])


@dataclass
class Result:
    records: list[dict]  # each with its ``score`` (BM25, lower is better; None from LIKE)
    outcome: str  # ok | empty | fallback | timeout | error
    latency_ms: float
    terms: list[str] = field(default_factory=list)
    window: int | None = None
    error: str | None = None
    block: str | None = None  # the context when it is not the search format (session start)

    @property
    def context(self) -> str:
        return context_block(self.records) if self.block is None else self.block

    @property
    def record_ids(self) -> list[str]:
        return [r["record_id"] for r in self.records]

    def as_dict(self, with_records: bool = False) -> dict:
        reply = {"context": self.context, "record_ids": self.record_ids,
                 "outcome": self.outcome, "latency_ms": round(self.latency_ms, 3),
                 "terms": self.terms, "window": self.window}
        if with_records:
            reply["records"] = self.records
        if self.error:
            reply["error"] = self.error
        return reply


class DeadlinePassed(Exception):
    pass


class Searcher:
    """Searches one database on its own read-only connection (opened on first use and
    reopened after a failure), so it reads while the storage role writes."""

    def __init__(self, path: Path, term_budget: int | None = None,
                 window_rows: int = WINDOW_ROWS, embedder: embeddings.Embedder | None = None,
                 min_similarity: float = MIN_SIMILARITY, rrf_k: int = vectors.RRF_K):
        """``term_budget`` None: ``term_budget_for`` the corpus at hand. With an
        ``embedder``, searches may be ``semantic`` or ``hybrid`` (see ``_hybrid``)."""
        self.path = path
        self.embedder = embedder
        self.vectors = vectors.VectorIndex() if embedder is not None else None
        self.min_similarity = min_similarity
        self.rrf_k = rrf_k
        self._embedding = (concurrent.futures.ThreadPoolExecutor(1, "query-embedding")
                           if embedder is not None else None)
        # Where a namespace's vectors are loaded from: None, here, when first searched
        # (in-process use); the retrieval role passes its back-fill's request_load, so no
        # search waits for a load (they are lexical until it is done).
        self.request_load: Callable[[str], None] | None = None
        self.term_budget = term_budget
        self.window_rows = window_rows
        self.conn: sqlite3.Connection | None = None
        self.deadline = math.inf
        self._stems: dict[str, tuple[str, ...]] = {}
        self._doc_freq: dict[tuple[str, ...], int] = {}
        self._total = 0
        self._total_at = -math.inf
        self._freq_total = 0  # the record count when the frequencies were cached
        self._freq_at = -math.inf

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
            if self.vectors is not None:
                self.vectors.clear()  # reloaded with the connection

    def search(self, namespace: str | Sequence[str], query: str, limit: int, budget_ms: float,
               deadline: float | None = None, mode: str = "lexical",
               max_tokens: int | None = None) -> Result:
        """Never raises. ``namespace`` may be several, searched as one (a record whose title
        and summary repeat a better-ranked one's is left out). ``deadline``
        (time.monotonic()) may cut the budget shorter. ``mode`` is one of MODES; without
        an embedder every mode is lexical. The records are cut to what fits in
        ``max_tokens`` of context (``within_tokens``)."""
        started = time.monotonic()
        self.deadline = started + budget_ms / 1000
        if deadline is not None:
            self.deadline = min(self.deadline, deadline)
        result = Result([], "empty", 0.0)
        try:
            if time.monotonic() >= self.deadline:
                raise DeadlinePassed
            namespaces = (namespace,) if isinstance(namespace, str) else tuple(namespace)
            if mode == "lexical" or self.embedder is None:
                result = self._search(namespaces, query, limit)
            else:
                result = self._hybrid(namespaces, query, limit, mode)
            result.records = within_tokens(result.records, max_tokens)
            if time.monotonic() >= self.deadline:
                raise DeadlinePassed
        except DeadlinePassed:
            result = Result([], "timeout", 0.0, result.terms, result.window,
                            error="the search ran past its budget")
        except Exception as exc:  # retrieval never breaks a turn
            timed_out = time.monotonic() >= self.deadline
            result = Result([], "timeout" if timed_out else "error", 0.0, result.terms,
                            error=f"{type(exc).__name__}: {exc}")
            if not timed_out:
                self.close()  # a broken connection is reopened next time
        result.latency_ms = (time.monotonic() - started) * 1000
        return result

    def session_context(self, namespace: str, token_budget: int) -> Result:
        """What an agent starting a session should know: the newest records, then the
        records retrieved most often lately (decisions and patterns next, newest first),
        within token_budget. Never raises."""
        started = time.monotonic()
        try:
            conn = self._connection()
            rows = conn.execute(
                f"SELECT {db.RECORD_COLUMNS} FROM memory_records WHERE namespace = ?"
                " ORDER BY created_at DESC, id DESC LIMIT ?", (namespace, SESSION_RECENT))
            recent = [db.record_from_row(row) for row in rows]
            counts: dict[str, int] = {}
            for (ids_json,) in conn.execute(
                    "SELECT record_ids_json FROM retrievals WHERE namespace = ?"
                    " ORDER BY id DESC LIMIT ?", (namespace, SESSION_LOOKBACK)):
                for record_id in json.loads(ids_json):
                    counts[record_id] = counts.get(record_id, 0) + 1
            shown = {r["record_id"] for r in recent}
            wanted = [i for i, _ in sorted(counts.items(), key=lambda kv: -kv[1])
                      if i not in shown][:SESSION_TOP]
            marks = ",".join("?" * len(wanted))
            by_id = {} if not wanted else {
                row[0]: db.record_from_row(row) for row in conn.execute(
                    f"SELECT {db.RECORD_COLUMNS} FROM memory_records"
                    f" WHERE namespace = ? AND record_id IN ({marks})", (namespace, *wanted))}
            top = [by_id[i] for i in wanted if i in by_id]
            if len(top) < SESSION_TOP:
                shown |= set(by_id)
                top += [r for r in (db.record_from_row(row) for row in conn.execute(
                    f"SELECT {db.RECORD_COLUMNS} FROM memory_records WHERE namespace = ?"
                    " AND observation_type IN ('decision', 'pattern')"
                    " ORDER BY created_at DESC, id DESC LIMIT ?", (namespace, SESSION_TOP)))
                    if r["record_id"] not in shown][:SESSION_TOP - len(top)]
            context, included = session_block(recent, top, token_budget)
            result = Result(included, "ok" if included else "empty", 0.0, block=context)
        except Exception as exc:  # a session starts with or without its context
            self.close()
            result = Result([], "error", 0.0, error=f"{type(exc).__name__}: {exc}", block="")
        result.latency_ms = (time.monotonic() - started) * 1000
        return result

    # -- the steps --------------------------------------------------------------------------

    def _search(self, namespaces: tuple[str, ...], query: str, limit: int) -> Result:
        raw = tokens(query)[:MAX_TOKENS]
        if not raw or limit <= 0:
            return Result([], "empty", 0.0)
        conn = self._connection()
        stems = self._token_stems(conn, raw)
        unique: dict[tuple[str, ...], str] = {}
        for token in raw:  # a token with nothing to index can never match
            if stems[token]:
                unique.setdefault(stems[token], token)
        candidates = list(unique.values())
        if not candidates:
            return Result([], "empty", 0.0)
        total, doc_freq = self._frequencies(conn, unique)
        token_freq = {t: doc_freq[stems[t]] for t in candidates}
        budget = self.term_budget or term_budget_for(total)
        terms, window = select_terms(candidates, token_freq, total, budget, self.window_rows)
        try:
            # Room for the duplicates `distinct` leaves out when namespaces are merged.
            wanted = limit if len(namespaces) == 1 else limit + SCOPE_SLACK
            ids = self._rank(conn, namespaces, fts_expression(terms), wanted, window)
        except sqlite3.Error:
            if time.monotonic() >= self.deadline:
                raise DeadlinePassed from None
            ids = self._like(conn, namespaces, query, limit)
            return Result(self._records(conn, ids), "fallback", 0.0, terms, window)
        records = self._records(conn, ids)
        if len(namespaces) > 1:
            records = distinct(records)[:limit]
        return Result(records, "ok" if records else "empty", 0.0, terms, window)

    def _hybrid(self, namespaces: tuple[str, ...], query: str, limit: int, mode: str) -> Result:
        """Lexical and semantic candidates (limit × 4 each) fused by reciprocal rank with a
        small recency boost (``vectors.fuse``); ``semantic`` ranks by the vectors alone.
        A candidate whose vector is less similar to the query than ``min_similarity`` is
        left out (one not embedded yet stays on its lexical merit), so an unrelated
        prompt gets nothing. The lexical side runs first, then the query is embedded on a
        thread (overlapping the two saved nothing, measured); if the embedder fails or
        has not answered in time, or the namespace's vectors are still loading, the answer
        is exactly the lexical search's (``_lexical_instead``)."""
        if not query.strip() or limit <= 0:
            return Result([], "empty", 0.0)
        wide = limit * CANDIDATES
        if not self._vectors_ready(namespaces):
            return self._lexical_instead(namespaces, query, limit, None, "vectors still loading")
        lexical = self._search(namespaces, query, wide)
        pending = self._embedding.submit(self.embedder.embed, [query[:embeddings.MAX_CHARS]])
        try:
            reserve = RETURN_MARGIN_S if lexical.window is None else FALLBACK_RESERVE_S
            wait_s = self.deadline - time.monotonic() - reserve
            query_vector = pending.result(timeout=max(0.0, wait_s))[0]
        except Exception as exc:  # too slow (TimeoutError) or broken: lexical it is
            pending.cancel()
            return self._lexical_instead(namespaces, query, limit, lexical,
                                         f"{type(exc).__name__}: {exc}")
        if mode == "semantic":
            lexical = None
        conn = self._connection()
        near = self.vectors.top(namespaces, query_vector, wide, self.min_similarity)
        created = {record_id: when for record_id, _, when in near}
        rankings = [[record_id for record_id, _, _ in near]]
        if lexical is not None:
            for record in lexical.records:
                created[record["record_id"]] = vectors.created_ms(record["created_at"])
            rankings.append([r["record_id"] for r in lexical.records])
        fused = vectors.fuse(rankings, created, time.time() * 1000, self.rrf_k)
        # A lexical match on common words only is no match: whatever has a vector must be
        # close enough in meaning, so an unrelated prompt brings nothing.
        cosine = self.vectors.similarities(namespaces, [i for i, _ in fused], query_vector)
        fused = [(i, score) for i, score in fused
                 if cosine.get(i, self.min_similarity) >= self.min_similarity][:limit]
        found = {r["record_id"]: r for r in db.records_by_id(conn, [i for i, _ in fused],
                                                             namespaces)}
        missing = {i for i, _ in fused if i not in found}
        if missing:
            self.vectors.forget(missing)  # deleted since the vectors were loaded
        records = [{**found[i], "score": -score} for i, score in fused if i in found]
        if len(namespaces) > 1:
            records = distinct(records)
        terms = lexical.terms if lexical else []
        return Result(records, "ok" if records else "empty", 0.0, terms,
                      lexical.window if lexical else None)

    def _lexical_instead(self, namespaces: tuple[str, ...], query: str, limit: int,
                         wide: Result | None, why: str) -> Result:
        """Exactly the lexical search's answer: the wide one's first records when no window
        cut it (the same ranking, a longer list), else a search of its own."""
        if wide is not None and wide.window is None:
            result = wide
            result.records = result.records[:limit]
        else:
            result = self._search(namespaces, query, limit)
        result.error = f"semantic side skipped ({why})"
        return result

    def _vectors_ready(self, namespaces: tuple[str, ...]) -> bool:
        """Whether every namespace's vectors are loaded; asks for the missing ones."""
        missing = self.vectors.missing(namespaces)
        if not missing:
            return True
        if self.request_load is not None:
            for namespace in set(missing) - self.vectors.requested:
                self.vectors.requested.add(namespace)
                self.request_load(namespace)
            return False
        deadline, self.deadline = self.deadline, math.inf  # a load is not a search
        try:
            for namespace in missing:
                self.vectors.install(namespace, self.vectors.load(self._connection(), namespace))
        finally:
            self.deadline = deadline
        return True

    def add_vectors(self, batch: list[dict]) -> None:
        """Vectors the back-fill made: searched from now on."""
        for item in batch:
            self.vectors.upsert(item["namespace"], item["record_id"], item["vector"],
                                item["created"])

    def get_records(self, record_ids: list[str], namespaces: Sequence[str]) -> list[dict]:
        """Records by id, in these namespaces (raises sqlite3.Error)."""
        return db.records_by_id(self._connection(), record_ids, namespaces)

    def timeline(self, record_id: str, namespaces: Sequence[str], before: int,
                 after: int) -> list[dict]:
        """The records around one, oldest first; empty if it is not in these namespaces
        (raises sqlite3.Error)."""
        conn = self._connection()
        found = db.records_by_id(conn, [record_id], namespaces)
        return db.records_around(conn, found[0], namespaces, before, after) if found else []

    def _connection(self) -> sqlite3.Connection:
        if self.conn is None:
            conn = db.connect_reader(self.path)
            conn.execute("PRAGMA cache_size=-65536")  # the index pages searches touch stay hot
            conn.execute(f"CREATE VIRTUAL TABLE temp.query_tokens USING fts5"
                         f" (token, tokenize = '{db.FTS_TOKENIZE}')")
            conn.execute("CREATE VIRTUAL TABLE temp.query_tokens_vocab USING fts5vocab"
                         " (temp, query_tokens, 'instance')")
            # The budget reaches inside SQLite: a query past the deadline is interrupted.
            conn.set_progress_handler(lambda: time.monotonic() >= self.deadline, 1000)
            self.conn = conn
        return self.conn

    def _token_stems(self, conn: sqlite3.Connection, raw: list[str]) -> dict[str, tuple]:
        """Each token's index terms, as the FTS5 tokenizer makes them (so `Migrations`
        → `migrat`, `src/app.py` → `src app py`), by tokenizing it in a temp table."""
        missing = [t for t in raw if t not in self._stems]
        if missing:
            if len(self._stems) > CACHE_MAX:
                self._stems.clear()
            conn.execute("DELETE FROM temp.query_tokens")  # in case a search was cut short
            conn.executemany("INSERT INTO temp.query_tokens (rowid, token) VALUES (?, ?)",
                             enumerate(missing))
            found: dict[int, list[tuple[int, str]]] = {}
            for term, doc, offset in conn.execute(
                    "SELECT term, doc, offset FROM temp.query_tokens_vocab"):
                found.setdefault(doc, []).append((offset, term))
            for index, token in enumerate(missing):
                self._stems[token] = tuple(term for _, term in sorted(found.get(index, [])))
        return {t: self._stems[t] for t in raw}

    def _frequencies(self, conn: sqlite3.Connection, phrases: dict[tuple[str, ...], str]
                     ) -> tuple[int, dict[tuple[str, ...], int]]:
        """The record count, and how many records each phrase (index terms → its token)
        matches: one-term phrases from the fts5vocab table, longer ones counted.

        Both mean reading doclists, so they are cached; the cache is dropped when the
        record count moves by 1% (any change, for a small corpus) or after FREQ_TTL_S.
        Past MAX_PHRASE_COUNTS new phrases in one search, a phrase's count is taken as
        its rarest term's (an upper bound).
        """
        now = time.monotonic()
        if now - self._total_at > TOTAL_TTL_S:
            self._total = conn.execute("SELECT count(*) FROM memory_records").fetchone()[0]
            self._total_at = now
            moved = abs(self._total - self._freq_total) > self._freq_total // 100
            if moved or now - self._freq_at > FREQ_TTL_S or len(self._doc_freq) > CACHE_MAX:
                self._doc_freq.clear()
                self._freq_total, self._freq_at = self._total, now
        terms = {t for phrase in phrases for t in phrase if (t,) not in self._doc_freq}
        if terms:
            marks = ",".join("?" * len(terms))
            found = dict(conn.execute(
                f"SELECT term, doc FROM memory_records_fts_vocab WHERE term IN ({marks})",
                list(terms)))
            for term in terms:
                self._doc_freq[(term,)] = found.get(term, 0)
        counted = 0
        for phrase, token in phrases.items():
            if phrase in self._doc_freq:
                continue
            bound = min(self._doc_freq[(t,)] for t in phrase)
            if bound and counted < MAX_PHRASE_COUNTS:
                bound = conn.execute(
                    "SELECT count(*) FROM memory_records_fts WHERE memory_records_fts MATCH ?",
                    (quote(token),)).fetchone()[0]
                counted += 1
            self._doc_freq[phrase] = bound
        return self._total, self._doc_freq

    def _rank(self, conn: sqlite3.Connection, namespaces: tuple[str, ...], expression: str,
              limit: int, window: int | None) -> list[tuple[int, float]]:
        """BM25 order within the namespace. With a window, only the newest `window` ids
        are ranked, widened (x4) while the namespace has too few matches in it."""
        newest = 0
        if window is not None:
            newest = conn.execute("SELECT max(id) FROM memory_records").fetchone()[0] or 0
        while True:
            since = newest - window if window is not None else 0
            rows = conn.execute(
                "SELECT mr.id, bm25(memory_records_fts) FROM memory_records_fts"
                " JOIN memory_records mr INDEXED BY memory_records_id_namespace"
                " ON mr.id = memory_records_fts.rowid"
                " WHERE memory_records_fts MATCH ? AND memory_records_fts.rowid > ?"
                f" AND mr.namespace IN ({','.join('?' * len(namespaces))})"
                " ORDER BY bm25(memory_records_fts), mr.id DESC LIMIT ?",
                (expression, since, *namespaces, limit)).fetchall()
            if len(rows) >= limit or since <= 0:
                return rows
            window *= 4

    def _like(self, conn: sqlite3.Connection, namespaces: tuple[str, ...], query: str,
              limit: int) -> list[tuple[int, None]]:
        """The query as a literal substring (``%``, ``_`` and ``\\`` escaped), newest first."""
        escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = f"%{escaped}%"
        rows = conn.execute(
            "SELECT id, NULL FROM memory_records WHERE"
            " (title LIKE ?1 ESCAPE '\\' OR summary LIKE ?1 ESCAPE '\\'"
            " OR facts_text LIKE ?1 ESCAPE '\\')"
            f" AND namespace IN ({','.join('?' * len(namespaces))})"
            " ORDER BY created_at DESC, id DESC LIMIT ?",
            (pattern, *namespaces, limit))
        return rows.fetchall()

    def _records(self, conn: sqlite3.Connection, ranked: list[tuple]) -> list[dict]:
        """Full records for the ranked ids (read after ranking: only `limit` rows)."""
        if not ranked:
            return []
        marks = ",".join("?" * len(ranked))
        rows = {row[0]: row[1:] for row in conn.execute(
            f"SELECT id, {db.RECORD_COLUMNS} FROM memory_records WHERE id IN ({marks})",
            [i for i, _ in ranked])}
        return [{**db.record_from_row(rows[i]), "score": score}
                for i, score in ranked if i in rows]
