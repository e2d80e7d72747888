"""The exact BM25 ranking by every word of a query, past the term budget: the common
words' scores kept in memory (``search.postings``) added up with the rare words' read
at each search, against the seed's ranking (every word read by FTS5, no budget)."""

from __future__ import annotations

import functools
import random
import sqlite3
import time

import pytest
from helpers.cli import kl
from helpers.events import make_db
from helpers.waits import wait_for
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kirolearn import paths, transport
from kirolearn.search import call, lexical, postings
from kirolearn.search.engine import Engine
from kirolearn.search.request import Request

NS_A = "/actor/alice/project/" + "a" * 64 + "/"
NS_B = "/actor/alice/project/" + "b" * 64 + "/"
COMMON = [f"common{n}" for n in range(8)]  # each in a third to a tenth of the records
MIDDLE = [f"middle{n}" for n in range(20)]  # each in about one in thirty
RARE = [f"rare{n}" for n in range(200)]
# Phrases: FTS5 reads each of their words' doclists to find them; kept in memory too.
PHRASES = ["common0-common1", "src/common2/middle3.py", "middle4_rare5", "rare6.common0"]
WORDS = COMMON + MIDDLE + RARE + PHRASES
BUDGET = 60  # rows the budget's terms may match: most queries here drop some
COMMON_MIN = 20  # a word in more records is scored from memory


def text(rng: random.Random, length: int) -> str:
    """Words of the three kinds, the common ones most often."""
    said = []
    for _ in range(length):
        kind = rng.random()
        pool = COMMON[:rng.randint(1, 8)] if kind < 0.4 else MIDDLE if kind < 0.7 else RARE
        said.append(rng.choice(pool))
    return " ".join(said)


def records(count: int, namespace: str, first: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"record_id": f"R{n:025d}", "namespace": namespace, "title": text(rng, 4),
             "summary": text(rng, rng.randint(4, 30)), "facts": [text(rng, 5)],
             "concepts": [], "files_touched": [], "observation_type": "discovery",
             "strategy": "heuristic", "source_event_ids": [f"E{n:025d}"],
             "created_at": f"2026-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"}
            for n in range(first, first + count)]


@pytest.fixture(scope="module", autouse=True)
def common_min():
    """Words in more than COMMON_MIN records are common here (a small corpus)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(postings, "COMMON_MIN", COMMON_MIN)
        yield


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_db(tmp_path_factory.mktemp("postings") / "kirolearn.db",
                   records(500, NS_A, 1, 1) + records(150, NS_B, 1000, 2))


def ranked(engine: Engine, query: str, limit: int = 10,
           lifts: list[call.Lift] | None = None) -> list[tuple[str, float]]:
    """The words' side's ranking of the query in project A (and B): (record id, score)."""
    request = Request(NS_A, query, limit, 60_000)
    s = call.Search(engine, request, (NS_A, NS_B), time.monotonic() + 60)
    s.lifts = lifts or []
    return [(r["record_id"], r["score"]) for r in lexical.matches(s, limit).records]


def same_ranking(found: list[tuple[str, float]], seed: list[tuple[str, float]],
                 rel: float = 1e-5, limit: int = 10) -> None:
    """The same scores in the same order; the same records but where two scores are too
    close to tell apart (single precision; ``rel``), also past the cut at ``limit``
    (``seed`` may go on: a record just past it may tie with the last one)."""
    assert len(found) == min(limit, len(seed))
    assert [score for _, score in found] == pytest.approx(
        [score for _, score in seed[:len(found)]], rel=rel)
    scores = [score for _, score in seed]
    for i, (record_id, score) in enumerate(seed[:len(found)]):
        near = [s for j, s in enumerate(scores) if j != i and s == pytest.approx(score, rel=rel)]
        if not near:
            assert found[i][0] == record_id


@functools.cache
def in_fewer_than_half(path, word: str) -> bool:
    conn = sqlite3.connect(path)
    total = conn.execute("SELECT count(*) FROM memory_records").fetchone()[0]
    holding = conn.execute("SELECT count(*) FROM memory_records_fts WHERE memory_records_fts"
                           " MATCH ?", (f'"{word}"',)).fetchone()[0]
    conn.close()
    return 0 < holding * 2 < total


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=14),
       st.sampled_from([1, 5, 10]),
       st.lists(st.tuples(st.sets(st.integers(1, 520), max_size=40),
                          st.sampled_from([1.5, 3.0])), max_size=2))
def test_past_the_budget_the_ranking_is_the_seeds_by_every_word(corpus, words, limit, lifts):
    # A query whose every word is in half the records or more (each weighs nothing in
    # BM25) is ranked over the newest records, as before.
    assume(any(in_fewer_than_half(corpus, word) for word in words))
    budgeted, seed = Engine(corpus, term_budget=BUDGET), Engine(corpus, term_budget=10**12)
    lifted = [(sorted(rows), factor) for rows, factor in lifts]
    try:
        query = " ".join(words)
        same_ranking(ranked(budgeted, query, limit, lifted),
                     ranked(seed, query, limit + 10, lifted), limit=limit)
    finally:
        budgeted.close()
        seed.close()


def test_the_budget_alone_misses_what_every_word_finds(corpus, monkeypatch):
    """What the kept scores change: with them the ranking is the seed's; without them
    (a store whose scores do not add up, as PostgreSQL's) the budget's, which differs."""
    query = " ".join(COMMON[:3] + MIDDLE[:6] + RARE[:2])
    budgeted, seed = Engine(corpus, term_budget=BUDGET), Engine(corpus, term_budget=10**12)
    try:
        exact = ranked(seed, query)
        same_ranking(ranked(budgeted, query), exact)
        assert budgeted.postings.status()["words"] > 0
        conn = budgeted.connection()
        monkeypatch.setattr(conn.dialect.fts, "SCORES_ADD_UP", False)
        assert [r for r, _ in ranked(budgeted, query)] != [r for r, _ in exact]
    finally:
        budgeted.close()
        seed.close()


def test_a_record_written_or_invalidated_after_a_words_read_is_ranked_as_it_is_now(tmp_path):
    path = make_db(tmp_path / "kirolearn.db", records(300, NS_A, 1, 3))
    query = " ".join(COMMON[:4] + MIDDLE[:4])
    budgeted, seed = Engine(path, term_budget=BUDGET), Engine(path, term_budget=10**12)
    try:
        first = ranked(budgeted, query)
        same_ranking(first, ranked(seed, query))
        # A new record holding every word of the query: the best match, by its common
        # words' scores too.
        make_db(path, [newest_record(query)])
        newest = ranked(budgeted, query)
        assert newest[0][0] == NEWEST
        same_ranking(newest, ranked(seed, query))
        # The best match before is marked invalid: never returned.
        invalidate(path, NEWEST)
        after = ranked(budgeted, query)
        assert NEWEST not in [r for r, _ in after]
        same_ranking(after, ranked(seed, query), rel=0.02)  # its words' weights moved
        # The best match now is moved to another project: not found in this one.
        move(path, after[0][0], "/actor/alice/project/" + "c" * 64 + "/")
        assert after[0][0] not in [r for r, _ in ranked(budgeted, query)]
        same_ranking(ranked(budgeted, query), ranked(seed, query), rel=0.02)
    finally:
        budgeted.close()
        seed.close()


NEWEST = f"R{5000:025d}"


def newest_record(query: str) -> dict:
    return {**records(1, NS_A, 5000, 4)[0], "title": query, "summary": query}


def move(path, record_id: str, namespace: str) -> None:
    writer = sqlite3.connect(path)
    writer.execute("UPDATE memory_records SET namespace = ? WHERE record_id = ?",
                   (namespace, record_id))
    writer.commit()
    writer.close()


def invalidate(path, record_id: str) -> None:
    writer = sqlite3.connect(path)
    writer.execute("UPDATE memory_records SET invalid_reason = 'test' WHERE record_id = ?",
                   (record_id,))
    writer.commit()
    writer.close()


def test_in_the_background_a_search_is_the_budgets_until_its_words_are_read(
        tmp_path, monkeypatch):
    monkeypatch.setattr(postings, "TOPUP_S", 0.0)
    path = make_db(tmp_path / "kirolearn.db", records(500, NS_A, 1, 1))
    query = " ".join(COMMON[:3] + MIDDLE[:6] + RARE[:2])
    budgeted, seed = Engine(path, term_budget=BUDGET), Engine(path, term_budget=10**12)
    with monkeypatch.context() as scores_apart:  # the budget's ranking alone
        scores_apart.setattr(seed.connection().dialect.fts, "SCORES_ADD_UP", False)
        budget_alone = ranked(budgeted, query)
    budgeted.postings.start()
    try:
        exact = ranked(seed, query)
        # Nothing read yet: the words the budget keeps are read as the search runs.
        same_ranking(ranked(budgeted, query), budget_alone)
        assert [r for r, _ in budget_alone] != [r for r, _ in exact]
        wait_for(lambda: budgeted.postings.status()["reading"] == 0)
        assert budgeted.postings.status()["words"] > 0
        same_ranking(ranked(budgeted, query), exact)
        # A newer record is read at the next top-up, its common words' scores added.
        make_db(path, [newest_record(query)])
        ranked(budgeted, query)  # asks for the top-up
        wait_for(lambda: budgeted.postings.status()["reading"] == 0)
        same_ranking(ranked(budgeted, query), ranked(seed, query), rel=0.02)
        assert ranked(budgeted, query)[0][0] == NEWEST
    finally:
        budgeted.postings.stop()
        budgeted.close()
        seed.close()


def test_the_least_recently_used_words_go_first_past_the_most_kept(corpus):
    engine = Engine(corpus)
    conn = engine.connection()
    newest = conn.execute("SELECT max(id) FROM memory_records").fetchone()[0]
    total = conn.execute("SELECT count(*) FROM memory_records").fetchone()[0]

    def pairs(word: str) -> int:
        return len(conn.execute("SELECT id FROM memory_records_fts JOIN memory_records"
                                " ON id = memory_records_fts.rowid WHERE memory_records_fts"
                                " MATCH $1 AND namespace = $2", (word, NS_A)).fetchall())

    kept = postings.Postings(corpus, most=pairs(COMMON[0]) + pairs(COMMON[1]))
    for word in COMMON[:2]:
        read = kept.scores(conn, [NS_A], [f'"{word}"'], newest, total)
        assert len(read[f'"{word}"'][0].rows) == pairs(word)
    assert kept.status() == {"words": 2, "pairs": kept.most, "reading": 0}
    kept.scores(conn, [NS_A], [f'"{COMMON[0]}"'], newest, total)  # used: the newest
    kept.scores(conn, [NS_A], [f'"{COMMON[2]}"'], newest, total)
    assert kept.status()["words"] == 2  # common1, the least recently used, went
    assert kept.status()["pairs"] == pairs(COMMON[0]) + pairs(COMMON[2])
    engine.close()


def test_the_daemon_ranks_by_every_word_once_it_has_read_them(home):
    """Through the retrieval role: 3,000 records (the budget is 2,000 rows), the first
    search asks for the common words, the role reads them on its thread (``ping`` says
    when), and the next search is the seed's ranking."""
    path = make_db(paths.Home(home).db_path, records(3000, NS_A, 1, 5))
    query = " ".join(COMMON[:5] + MIDDLE[:3] + RARE[:3])
    seed = Engine(path, term_budget=10**12)
    exact = seed.search(Request(NS_A, query, 10, 60_000, mode="lexical")).record_ids
    seed.close()
    kl("start", check=True)
    client = transport.Client(paths.Home(home).endpoint("retrieval"), timeout_ms=30_000)
    try:
        body = {"query": query, "namespace": NS_A, "mode": "lexical", "limit": 10,
                "budget_ms": 20_000}  # a loaded machine is no failure
        first = client.call("search", body)
        assert first["outcome"] == "ok"
        wait_for(lambda: client.call("ping", {})["postings"]["reading"] == 0
                 and client.call("ping", {})["postings"]["words"] > 0)
        assert client.call("search", body)["record_ids"] == exact
    finally:
        client.close()
        kl("stop", check=True)
