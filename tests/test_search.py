"""Search on a real SQLite file (and, where a fixture says so, a real PostgreSQL database):
the query builder, the seed's rules, isolation, budgets."""

from __future__ import annotations

import json
import math
import random
import sqlite3
import subprocess
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from helpers.events import make_db
from helpers.waits import wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kirolearn import contract, db, privacy, project
from kirolearn.db import fts, postgres, writes
from kirolearn.db.sqlite import schema as sqlite_schema
from kirolearn.search import checkpoint, when, worktree
from kirolearn.search import context as context_format
from kirolearn.search import query as fts_query
from kirolearn.search.engine import Engine
from kirolearn.search.request import Request
from kirolearn.search.steps import clearing

NS_A = "/actor/tester/project/" + "a" * 64 + "/"
NS_B = "/actor/tester/project/" + "b" * 64 + "/"
# Namespaces whose strings are prefixes of others: a LIKE 'ns%' filter would leak.
NS_SHORT = "/actor/tester/project/abc/"
NS_LONG = "/actor/tester/project/abcd/"
NS_NESTED = "/actor/tester/project/abc/x/"

OPERATORS = ['"', "'", "*", "(", ")", "NEAR", "NEAR(", "AND", "OR", "NOT", "^", ":", "-", "+",
             "{", "}", "title:", "\x00", "\x01", "\n", "\t", "\u200b", "é", "日本", "🙂", "\\",
             "%", "_", "NEAR/2", '""', '"a" OR "b"']
query_text = st.one_of(
    st.text(),
    st.lists(st.one_of(st.sampled_from(OPERATORS), st.text(max_size=8)), max_size=60)
    .map(" ".join),
)


def record(n: int, namespace: str = NS_A, title: str = "", summary: str = "",
           facts: list[str] | None = None, created_at: str | None = None) -> dict:
    return {"record_id": f"R{n:025d}", "namespace": namespace, "title": title or f"record {n}",
            "summary": summary, "facts": facts or [], "concepts": ["testing"],
            "files_touched": [], "observation_type": "discovery", "strategy": "heuristic",
            "source_event_ids": [f"E{n:025d}"],
            "created_at": created_at or f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}+00:00"}


@pytest.fixture(params=["sqlite", "postgresql"])
def store_at(request, tmp_path):
    """Where a test's corpus is made: a SQLite file, or a new PostgreSQL database."""
    if request.param == "postgresql":
        yield request.getfixturevalue("postgres_server").database()
        postgres.close_pools()
    else:
        yield tmp_path / "kirolearn.db"


@pytest.fixture
def corpus_db(store_at):
    records = [
        record(1, title="Switch user ids to UUID",
               summary="Migrated the users table from integer ids to UUIDs in two steps.",
               facts=["edited `migrations/0042_user_uuid.py` (+48 −3)",
                      "ran `alembic upgrade head` → exit 0"]),
        record(2, title="Fix flaky pagination test",
               summary="The cursor was reused between pages; each page now gets a new one.",
               facts=["edited `tests/test_pages.py` (+5 −2)"]),
        record(3, title="Decide on structured logging",
               summary="We log JSON lines with a request id on every line."),
        record(4, namespace=NS_B, title="Switch user ids to UUID in project B",
               summary="Same words, other project: must never leak into project A."),
    ]
    return make_db(store_at, records)


@pytest.fixture
def searcher(corpus_db):
    s = Engine(corpus_db)
    yield s
    s.close()


# -- the query builder ---------------------------------------------------------------------------

def test_query_comes_from_the_prompt_body():
    assert contract.body_text({"type": "text", "content": "why?"}) == "why?"
    assert contract.body_text({"type": "message", "turns": [
        {"role": "user", "content": "first"}, {"role": "assistant", "content": "last"}]}) == "last"
    assert contract.body_text({"type": "json", "data": {"path": "a.py"}}) == '{"path": "a.py"}'
    assert contract.body_text({"type": "text", "content": ""}) == ""
    assert contract.body_text("not a body") == ""


def test_tokens_split_on_whitespace_drop_empties_and_dedupe_in_order():
    assert fts_query.words("  migrate the user\ttable to\nthe  user uuid ") == [
        "migrate", "the", "user", "table", "to", "uuid"]
    assert fts_query.words("a\x00b \x00") == ["ab"]


def test_each_term_is_quoted_and_joined_with_or():
    assert fts_query.fts_expression(["what's", 'say "hi"', "NOT"]) == (
        '"what\'s" OR "say ""hi""" OR "NOT"')


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(query_text)
def test_the_expression_is_valid_fts5_for_any_text(text):
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5"
                 f" (a, tokenize = '{sqlite_schema.FTS_TOKENIZE}')")
    conn.execute("INSERT INTO t VALUES ('migrate the user table')")
    terms, _ = fts_query.select_terms(fts_query.words(text), {}, 0, fts_query.term_budget_for(0))
    assert len(terms) <= fts_query.MAX_TERMS and len(set(terms)) == len(terms)
    if terms:
        conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (fts_query.fts_expression(terms),))
    conn.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(query_text)
def test_search_never_falls_back_or_fails_on_any_text(searcher, text):
    result = searcher.search(Request(NS_A, text, 10, 5000))
    assert result.outcome in ("ok", "empty"), result.error
    assert len(result.terms) <= fts_query.MAX_TERMS
    assert len(set(result.terms)) == len(result.terms)
    assert all(r["record_id"] != "R0000000000000000000000004" for r in result.records)


freqs = st.dictionaries(st.text(min_size=1, max_size=4), st.integers(0, 500), max_size=60)


@given(freqs, st.integers(1, 500))
def test_past_32_terms_the_rarest_are_kept(doc_freq, total):
    terms = list(doc_freq)
    kept, window = fts_query.select_terms(terms, doc_freq, total, 10**9)
    assert kept == [t for t in terms if t in kept]  # query order
    assert len(kept) == min(len(terms), fts_query.MAX_TERMS) and window is None
    dropped = [t for t in terms if t not in kept]
    if dropped:  # IDF = ln(N / max(df, 1)): unseen terms (df 0) count as rare
        assert max(max(doc_freq[t], 1) for t in kept) <= min(max(doc_freq[t], 1) for t in dropped)


@given(freqs, st.integers(1, 500), st.integers(1, 40))
def test_a_long_prompt_keeps_its_rarest_matched_terms(doc_freq, total, most):
    terms = list(doc_freq)
    kept, _ = fts_query.select_terms(terms, doc_freq, total, 10**9, most)
    whole, _ = fts_query.select_terms(terms, doc_freq, total, 10**9)
    matched = [t for t in kept if doc_freq[t]]
    assert len(matched) <= most and kept == [t for t in whole if t in kept]
    assert [t for t in kept if not doc_freq[t]] == [t for t in whole if not doc_freq[t]]
    dropped = [t for t in whole if t not in kept]
    if dropped:
        assert len(matched) == most
        assert max(doc_freq[t] for t in matched) <= min(doc_freq[t] for t in dropped)
    assert fts_query.most_matched_terms(fts_query.LONG_PROMPT_WORDS) is None
    assert fts_query.most_matched_terms(fts_query.LONG_PROMPT_WORDS + 1) == (
        fts_query.LONG_PROMPT_TERMS)


@given(freqs, st.integers(0, 2000), st.integers(1, 300))
def test_common_terms_are_dropped_first_and_never_the_rarest(doc_freq, total, term_budget):
    terms = list(doc_freq)
    kept, window = fts_query.select_terms(terms, doc_freq, total, term_budget)
    capped, _ = fts_query.select_terms(terms, doc_freq, total, 10**9)
    assert set(kept) <= set(capped) and kept == [t for t in terms if t in kept]
    seen = [t for t in kept if doc_freq[t]]
    touched = sum(doc_freq[t] for t in seen)
    if total <= term_budget:  # a small corpus gets the seed's terms exactly
        assert kept == capped
    else:
        assert touched <= term_budget or len(seen) == 1
    assert [t for t in capped if not doc_freq[t]] == [t for t in kept if not doc_freq[t]]
    for t in set(capped) - set(kept):  # only terms more common than every kept one go
        assert all(doc_freq[t] >= doc_freq[k] for k in seen)
    # A window is put only on one term left that alone matches more than the budget:
    # a term in fewer records than that is always ranked over the whole history.
    assert (window is not None) == (touched > term_budget and total > term_budget)
    if window is not None:
        assert len(seen) == 1 and window == math.ceil(total * term_budget / touched)


@given(st.text(st.characters(blacklist_characters="§"), max_size=1200),
       st.lists(st.text("§xyz", min_size=1, max_size=30), max_size=40))
def test_a_long_prompt_is_embedded_by_its_start_and_distinctive_words(query, distinctive):
    text = fts_query.embedded_query(query, distinctive)
    if len(query) <= fts_query.EMBEDDED_MAX_CHARS:
        assert text == query
        return
    assert len(text) <= fts_query.EMBEDDED_MAX_CHARS
    start = 0  # the words added come after the query's start (they hold §, it does not)
    while start < len(text) and text[start] == query[start]:
        start += 1
    assert 0 < start <= fts_query.EMBEDDED_HEAD_CHARS + 1  # (+1: a space after the start)
    added = text[start:].split(" ")
    assert all(word in distinctive for word in added if word)
    assert len(set(added)) == len(added)


# -- searching -------------------------------------------------------------------------------------

def test_a_prompt_finds_its_records_ranked_and_in_the_fixed_format(searcher):
    result = searcher.search(Request(NS_A, "migrate the user table to use uuid", 10, 5000))
    assert result.outcome == "ok"
    assert result.record_ids[0] == "R0000000000000000000000001"
    assert "R0000000000000000000000004" not in result.record_ids
    assert result.terms == ["migrate", "user", "table", "uuid"]  # no stop words
    scores = [r["score"] for r in result.records]
    assert scores == sorted(scores)
    one = searcher.search(Request(NS_A, "UUID", 1, 5000))
    assert one.context == context_format.fenced(
        "## Prior observations from kirolearn\n\n"
        "### Switch user ids to UUID · 2026-01-01\n\n"
        "Migrated the users table from integer ids to UUIDs in two steps.\n\n"
        "- edited `migrations/0042_user_uuid.py` (+48 −3)\n"
        "- ran `alembic upgrade head` → exit 0")


def test_a_search_scrubs_the_records_of_older_rules_and_storage_scrubs_them_again(store_at):
    """Each record keeps the version of the rules its text was scrubbed with: a search
    scrubs a record of another version as it leaves, ``rescrub_records`` scrubs it in
    place and marks it, and an edit of it keeps the mark only when it had today's."""
    secret = "AKIAQWERTYUIOPASDFGH"
    make_db(store_at, [record(1, title="Rotate the deploy key", summary="the old key"),
                       record(2, title="Rotate the deploy key again", summary=f"new {secret}")])
    conn = db.connect_writer(store_at)
    rows = conn.execute("SELECT summary, scrubbed_with FROM memory_records ORDER BY id")
    assert rows.fetchall() == [("the old key", privacy.version()),  # scrubbed as stored
                               ("new [REDACTED:aws-access-key]", privacy.version())]
    conn.execute("UPDATE memory_records SET summary = $1, scrubbed_with = 'older'"
                 " WHERE record_id = $2", (f"old key {secret}", "R0000000000000000000000001")
                 )  # as a version whose rules missed it stored it
    s = Engine(store_at)
    found = s.search(Request(NS_A, "rotate the deploy key", 10, 5000))
    assert len(found.records) == 2 and secret not in found.context
    assert "old key [REDACTED:aws-access-key]" in found.context
    assert all("scrubbed_with" not in r for r in found.as_dict(with_records=True)["records"])
    with conn.transaction():
        assert writes.rescrub_records(conn, 10) == (1, {"aws-access-key": 1})
    with conn.transaction():
        assert writes.rescrub_records(conn, 10) == (0, {})
    assert conn.execute("SELECT summary, scrubbed_with FROM memory_records WHERE record_id"
                        " = $1", ("R0000000000000000000000001",)).fetchone() == (
        "old key [REDACTED:aws-access-key]", privacy.version())
    conn.execute("UPDATE memory_records SET scrubbed_with = 'older' WHERE record_id = $1",
                 ("R0000000000000000000000002",))
    for n in (1, 2):
        writes.update_record(conn, f"R{n:025d}", [NS_A], {"summary": "edited"}, "an edit")
    assert dict(conn.execute("SELECT record_id, scrubbed_with FROM memory_records")) == {
        "R0000000000000000000000001": privacy.version(), "R0000000000000000000000002": None}
    s.close()
    conn.close()


def test_stemming_and_punctuation_still_match(searcher):
    found = searcher.search(Request(NS_A, "what's the migration status?", 10, 5000))
    assert found.record_ids[0] == "R0000000000000000000000001"
    assert searcher.search(Request(NS_A, "PAGINATION", 10, 5000)).record_ids == [
        "R0000000000000000000000002"]


def test_a_code_like_token_is_searched_as_a_phrase_and_as_its_words(tmp_path):
    db_path = make_db(tmp_path / "kirolearn.db", [
        record(1, title="Abbreviated token restrictions",
               summary="restrictions are now abbreviated for datasette instances"),
        record(2, title="The --no-strict flag", summary="insert --no-strict skips the check"),
        record(3, title="Unrelated", summary="logging setup")])
    s = Engine(db_path)
    try:
        assert s.search(Request(NS_A, "TokenRestrictions.abbreviated(datasette)", 10,
                        5000)).record_ids == ["R0000000000000000000000001"]
        assert s.search(Request(NS_A, "--strict/--no-strict", 10, 5000)).record_ids == [
            "R0000000000000000000000002"]
    finally:
        s.close()


@given(st.lists(st.text(max_size=20), max_size=10))
def test_parts_come_after_their_token_and_nothing_is_lost(tokens):
    searched = fts_query.with_parts(tokens)
    assert len(searched) == len(set(searched))
    assert set(tokens) <= set(searched)
    for token in tokens:
        parts = fts_query.PART.findall(token)
        if len(parts) > 1:
            assert set(parts) <= set(searched)
    assert searched[:1] == tokens[:1]


def test_a_search_keeps_to_the_types_asked_for(tmp_path):
    typed = [record(n, title=f"uuid ids {n}") for n in range(1, 5)]
    typed[1]["observation_type"] = typed[3]["observation_type"] = "error"
    s = Engine(make_db(tmp_path / "kirolearn.db", typed))
    try:
        assert s.search(Request(NS_A, "uuid ids", 10, 5000, types=("error",))).record_ids == [
            typed[3]["record_id"], typed[1]["record_id"]]
        assert len(s.search(Request(NS_A, "uuid ids", 10, 5000)).records) == 4
        assert s.search(Request(NS_A, "uuid ids", 10, 5000, types=("decision",))).records == []
        assert s.search(Request(NS_A, "uuid ids", 10, 5000, types=("error",))).outcome == "ok"
    finally:
        s.close()


@given(st.lists(st.tuples(st.sampled_from(sorted(fts_query.STOP_WORDS)),
                          st.sampled_from(["", "?", ",", "'s", "!", "--"]), st.booleans()),
                min_size=1, max_size=12))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_stop_words_alone_never_make_a_match(searcher, parts):
    prompt = " ".join((word.upper() if upper else word) + mark for word, mark, upper in parts)
    result = searcher.search(Request(NS_A, prompt, 10, 5000))
    assert (result.records, result.terms, result.context) == ([], [], "")


@given(st.dictionaries(st.text("abcdefghij", min_size=1, max_size=3),
                       st.floats(0.01, 20), max_size=20), st.data())
def test_coverage_is_the_share_of_the_telling_terms_a_record_holds(weights, data):
    held = data.draw(st.sets(st.sampled_from(sorted(weights)) if weights else st.nothing()))
    share = fts_query.coverage(weights, held)
    assert 0.0 <= share <= 1.0
    assert fts_query.coverage(weights, set(weights)) == (1.0 if weights else 0.0)
    assert fts_query.coverage(weights, set()) == 0.0
    more = held | set(sorted(weights)[:1])
    assert fts_query.coverage(weights, more) >= share  # holding more never holds less


def test_a_prompt_about_something_else_gets_nothing_for_one_shared_word(searcher):
    """One word in common with a record ("line"), the rest of the prompt about another
    subject: the best match holds too little of it, and nothing fits."""
    prompt = "Write a haiku about the line of winter rain falling on quiet mountains"
    result = searcher.search(Request(NS_A, prompt, 10, 5000))
    assert (result.records, result.outcome, result.context) == ([], "empty", "")
    assert 0 < result.coverage < fts_query.MIN_COVERAGE  # said, for `search --json`
    assert searcher.search(Request(NS_A, "every log line", 10, 5000)).record_ids == [
        "R0000000000000000000000003"]  # the same word, in a prompt about it
    assert fts_query.says_what("line") and not fts_query.says_what("(#2648)")


def test_a_word_inside_a_longer_words_stem_is_no_match(store_at):
    """The stemmer makes one term of "capital" and "capitalization": a general question
    still finds nothing in a record that only holds the longer word."""
    made = make_db(store_at, [
        record(1, title="Fix doc capitalization", summary="Headings in title case."),
        *(record(n, title=f"Tune the pool, step {n}") for n in range(2, 30))])
    searcher = Engine(made)
    try:
        result = searcher.search(Request(NS_A, "what is the capital of France", 10, 5000))
        assert (result.records, result.context) == ([], "")
        assert searcher.search(Request(NS_A, "fix the capitalization of the docs", 10,
                               5000)).record_ids == ["R0000000000000000000000001"]
    finally:
        searcher.close()


@given(st.text("abcdefghijklmnopqrstuvwxyz", min_size=4, max_size=12).filter(
    lambda word: not word.endswith(("s", "d", "ing", "er", "e"))))
def test_a_word_is_held_as_itself_or_an_inflection_not_inside_a_longer_word(word):
    form = fts_query.inflected(word)
    assert form.search(f"the {word} here") and form.search(f"({word}s)")
    assert form.search(f"{word}_key") and form.search(f"{word.capitalize()}Key")
    assert not form.search(f"{word}ization") and not form.search(f"x{word}")


@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_every_term_weighs_even_against_a_count_a_moment_old(doc_freq, total):
    assert fts_query.weight(doc_freq, total) > 0
    assert fts_query.weight(0, total) >= fts_query.weight(max(doc_freq, 1), total)


def test_nothing_to_search_is_empty_without_searching(searcher):
    for query in ("", "   ", "? — !"):
        result = searcher.search(Request(NS_A, query, 10, 5000))
        assert (result.outcome, result.records, result.terms) == ("empty", [], [])
        assert result.context == ""
    assert searcher.search(Request(NS_A, "kubernetes helm", 10, 5000)).outcome == "empty"


def test_the_term_budget_grows_with_the_corpus_within_bounds():
    assert fts_query.term_budget_for(0) == fts_query.term_budget_for(50_000) == 2000
    assert fts_query.term_budget_for(75_000) == 3000
    assert fts_query.term_budget_for(100_000) == fts_query.term_budget_for(10**7) == 4000


def test_a_record_without_summary_or_facts_is_just_its_title():
    record = {"title": "Multi\nline  title", "summary": " ", "facts": []}
    assert context_format.context_block([record]) == (
        "## Prior observations from kirolearn\n\n### Multi line title")
    assert context_format.context_block([]) == ""


def test_when_fts5_rejects_the_expression_like_finds_the_literal_text(tmp_path, monkeypatch):
    path = make_db(tmp_path / "k.db", [
        record(1, title="progress 100%_done\\ok", summary="older"),
        record(2, title="progress 100xxdone ok", summary="not a literal match"),
        record(3, title="progress 100%_done\\ok again", summary="newest"),
    ])
    monkeypatch.setattr("kirolearn.search.lexical.fts_expression", lambda terms: '"unterminated')
    s = Engine(path)
    result = s.search(Request(NS_A, "100%_done\\ok", 10, 5000))
    s.close()
    assert result.outcome == "fallback"
    assert result.record_ids == ["R0000000000000000000000003", "R0000000000000000000000001"]
    assert all(r["score"] is None for r in result.records)


def test_past_32_terms_the_common_ones_are_dropped(tmp_path):
    # word wN is in N+1 of 50 records: the higher N, the lower its IDF
    records = [record(i, summary=" ".join(f"w{n}" for n in range(40) if i <= n))
               for i in range(50)]
    s = Engine(make_db(tmp_path / "k.db", records))
    query = " ".join(f"w{n}" for n in range(34)) + " unseen1 unseen2"
    result = s.search(Request(NS_A, query, 10, 5000))
    assert result.terms == [f"w{n}" for n in range(30)] + ["unseen1", "unseen2"]
    # a long prompt keeps its rarest matched terms
    long = s.search(Request(NS_A, " ".join(f"w{n}" for n in range(40)) + " unseen1 unseen2",
                            10, 5000))
    s.close()
    assert long.terms == [f"w{n}" for n in range(fts_query.LONG_PROMPT_TERMS)] + [
        "unseen1", "unseen2"]


def test_common_words_are_dropped_and_ranked_over_the_newest_records(tmp_path):
    # Project B's three records are the oldest; project A's hundred come after.
    records = [record(200 + i, namespace=NS_B, summary="common", created_at="2025-01-01T00:00:00Z")
               for i in range(3)]
    records += [record(i, summary="common words here" + (" rare" if i in (3, 7) else ""))
                for i in range(1, 101)]
    path = make_db(tmp_path / "k.db", records)
    s = Engine(path, term_budget=20)
    rare = s.search(Request(NS_A, "common rare words", 10, 5000))
    assert (rare.terms, rare.window) == (["rare"], None)
    assert sorted(rare.record_ids) == ["R0000000000000000000000003", "R0000000000000000000000007"]
    common = s.search(Request(NS_A, "common", 5, 5000))
    assert common.window == math.ceil(103 * 20 / 103)
    assert all(int(r[1:]) > 80 for r in common.record_ids)  # only the newest were ranked
    # None of project B's records is among the newest: the window widens until found.
    old = s.search(Request(NS_B, "common", 10, 5000))
    assert sorted(old.record_ids) == [f"R{200 + i:025d}" for i in range(3)]
    s.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["uuid", "user", "table", "logging", "abc", "x", "shared",
                                 "project", "tester", "actor", '"', "OR"]), max_size=6),
       st.sampled_from([1, 3, 1000]))
def test_a_namespace_never_sees_another_ones_records(tmp_path_factory, words, budget):
    namespaces = [NS_SHORT, NS_LONG, NS_NESTED, NS_A]
    path = tmp_path_factory.mktemp("iso") / "k.db"
    if not path.exists():
        make_db(path, [record(i, namespace=ns, title=f"shared uuid user table {ns}",
                              summary="shared logging abc x project tester actor")
                       for i, ns in enumerate(namespaces * 3)])
    s = Engine(path, term_budget=budget)
    for ns in namespaces:
        result = s.search(Request(ns, " ".join(words), 10, 5000))
        for r in result.records:
            assert r["record_id"] in {f"R{i:025d}" for i, n in enumerate(namespaces * 3)
                                      if n == ns}
    s.close()


# -- never throws ------------------------------------------------------------------------------

def test_a_missing_database_is_an_error_result_and_is_retried(tmp_path):
    s = Engine(tmp_path / "later.db")
    result = s.search(Request(NS_A, "uuid", 10, 5000))
    assert result.outcome == "error" and result.records == [] and result.latency_ms >= 0
    make_db(tmp_path / "later.db", [record(1, title="uuid")])
    assert s.search(Request(NS_A, "uuid", 10, 5000)).outcome == "ok"
    s.close()


def test_a_search_past_its_deadline_returns_nothing(searcher):
    assert searcher.search(Request(NS_A, "uuid", 10, 0)).outcome == "timeout"
    late = searcher.search(Request(NS_A, "uuid", 10, 5000, deadline=time.monotonic() - 1))
    assert (late.outcome, late.records) == ("timeout", [])


def test_a_search_past_its_deadline_leaves_the_other_reads_without_one(tmp_path):
    """The deadline a search set stops its own statements, never a later timeline's."""
    records = [record(i, title=f"uuid step {i}", summary="uuid " * 40) for i in range(400)]
    s = Engine(make_db(tmp_path / "k.db", records))
    assert s.search(Request(NS_A, "uuid", 10, 0)).outcome == "timeout"
    around = s.timeline(record(200)["record_id"], [NS_A], 50, 50)
    assert len(around) == 101
    assert len(s.get_records([r["record_id"] for r in records[:100]], [NS_A])) == 100
    s.close()


def test_a_slow_query_is_interrupted_at_the_deadline(tmp_path):
    words = [f"word{n}" for n in range(32)]
    records = [record(i, summary=" ".join(words), facts=[" ".join(words)] * 4)
               for i in range(3000)]
    s = Engine(make_db(tmp_path / "big.db", records), term_budget=10**9)
    # The fastest of three whole runs (warm, and least held up by a busy machine): a
    # fifth of it is too short for any run, on any machine's speed.
    fulls = [s.search(Request(NS_A, " ".join(words), 10, 60_000)) for _ in range(3)]
    assert all(full.outcome == "ok" for full in fulls)
    fastest = min(full.latency_ms for full in fulls)
    assert fastest > 10, "the query must be slow for this test"
    cut = s.search(Request(NS_A, " ".join(words), 10, fastest / 5))
    s.close()
    assert (cut.outcome, cut.records) == ("timeout", [])


def test_the_schema_tokenizes_like_the_query_tokenizer(tmp_path):
    conn = sqlite3.connect(make_db(tmp_path / "kirolearn.db", [record(1)]))
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_records_fts'").fetchone()
    conn.close()
    assert f"tokenize = '{sqlite_schema.FTS_TOKENIZE}'" in sql[0]


# -- the session-start context ------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 200), st.integers(0, 4000)), max_size=12),
       budget=st.integers(0, 1500))
def test_the_session_context_stays_within_its_token_budget(sizes, budget):
    records = [record(i, title="t" * t, summary="word " * (s // 5)) for i, (t, s)
               in enumerate(sizes)]
    context, included = context_format.session_block(records[:5], records[5:], budget)
    assert context_format.estimate_tokens(context) <= budget
    assert bool(context) == bool(included)
    for r in included:
        assert " ".join(r["title"].split()) in context


def test_the_session_context_gives_recent_work_then_what_is_retrieved_most(corpus_db):
    conn = db.connect_writer(corpus_db)
    conn.execute("BEGIN")
    for n in range(10, 16):  # newer work pushes the first records out of "recent"
        writes.insert_record(conn, record(n, title=f"Later change {n}", summary=f"Change {n}.",
                                      created_at=f"2026-02-01T00:00:{n:02d}+00:00"))
    for _ in range(3):
        writes.log_retrieval(conn, None, NS_A, [f"R{2:025d}"], 1.0, "ok")
    conn.execute("COMMIT")
    conn.close()
    s = Engine(corpus_db)
    try:
        result = s.session_context(NS_A, 1000)
        assert result.outcome == "ok"
        recent = "\n".join(f"- 2026-02-01 Later change {n}: Change {n}." for n in range(15, 10, -1))
        assert result.context == context_format.fenced(
            "## This project so far (from kirolearn)\n\nRecent work:\n" + recent
            + "\n\n### Fix flaky pagination test · 2026-01-01\n\nThe cursor was reused between"
            " pages; each page now gets a new one.\n\n- edited `tests/test_pages.py` (+5 −2)")
        assert result.record_ids[-1] == f"R{2:025d}"  # the one retrieved most, in full
        assert s.session_context(NS_A, 0).as_dict()["context"] == ""
        assert s.session_context("/actor/x/project/none/", 1000).outcome == "empty"
    finally:
        s.close()


# -- the rare match -------------------------------------------------------------------------------

COMMON = ["fix", "test", "page", "error", "config", "build", "deploy", "cache", "query", "user",
          "api", "model", "route", "token", "schema", "index", "view", "form", "log", "job"]
RARE_WORD = "zanzibarquux"


def rare_match_corpus(path, size: int, seed: int, position: int) -> list[dict]:
    """``size`` records of five common words each; the one at ``position`` (0 the oldest)
    also holds RARE_WORD."""
    rng = random.Random(seed)
    records = []
    for n in range(size):
        words = rng.sample(COMMON, 5)
        if n == position:
            words[rng.randrange(5)] = RARE_WORD
        records.append(record(n, summary=" ".join(words)))
    make_db(path, records)
    return records


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(10, 10_000), seed=st.integers(0, 2**16), data=st.data())
def test_a_record_alone_holding_a_term_of_the_query_is_always_found(tmp_path_factory, size,
                                                                     seed, data):
    position = data.draw(st.integers(0, size - 1), label="position")
    others = data.draw(st.lists(st.sampled_from(COMMON), max_size=2, unique=True), label="others")
    query = data.draw(st.permutations([RARE_WORD, *others]), label="order")
    path = tmp_path_factory.mktemp("rare") / "k.db"
    wanted = rare_match_corpus(path, size, seed, position)[position]["record_id"]
    s = Engine(path)
    try:
        found = s.search(Request(NS_A, " ".join(query), 10, 60_000))
        assert found.outcome == "ok" and wanted in found.record_ids
    finally:
        s.close()


def test_pagination_cursor_finds_the_one_record_holding_cursor(tmp_path):
    """The case a user met: 250 records, many about pagination, one older one about the
    cursor; both short queries find it, and the ranking is exactly the seed's."""
    records = [record(1, title="Keyset pagination for the orders list",
                      summary="Pages are read after a cursor instead of with OFFSET.")]
    records += [record(n, title=f"Pagination of endpoint {n}",
                       summary="The list endpoint pages with limit and offset.")
                for n in range(2, 251)]
    path = make_db(tmp_path / "k.db", records)
    s, exact = Engine(path), Engine(path, term_budget=10**12)
    try:
        for query in ("pagination cursor", "keyset pagination", "cursor", "pagination"):
            found = s.search(Request(NS_A, query, 10, 60_000))
            assert found.record_ids == exact.search(Request(NS_A, query, 10, 60_000)).record_ids
            if query != "pagination":
                assert found.record_ids[0] == records[0]["record_id"]
    finally:
        s.close()
        exact.close()


def session_record(title: str, summary: str = "", facts: tuple[str, ...] = (),
                   files: tuple[str, ...] = (), kind: str = "tool_use",
                   created_at: str = "2026-03-01T10:00:00+00:00") -> dict:
    return {"record_id": contract.new_record_id(), "title": title, "summary": summary or title,
            "facts": list(facts), "files_touched": list(files), "observation_type": kind,
            "created_at": created_at}


def test_a_checkpoint_tells_the_task_progress_next_steps_and_files():
    records = [
        session_record("Add a CSV export", "Done: edited 1 file.", files=("src/export.py",)),
        session_record("`pytest -q` failed", kind="error", files=("tests/test_export.py",)),
        session_record("Round the totals", "Done: edited 2 files, ran 2 commands.\n\nRounded"
                       " them. The docs still need the new column. Tests pass.",
                       facts=("ran `pytest -q` → exit 1, 1 failed", "ran `pytest -q` → exit 0",
                              "ran `ruff check .` → exit 1"),
                       files=("src/export.py", "src/totals.py"),
                       created_at="2026-03-01T11:30:00+00:00")]
    last = checkpoint.of_session("s-1", records)
    assert last.task == "Add a CSV export"
    assert last.progress == ["Add a CSV export (edited 1 file)",
                             "Round the totals (edited 2 files, ran 2 commands)"]
    assert last.next_steps == ["The docs still need the new column.",
                               "`ruff check .` failed the last time it ran"]
    assert last.files == ["src/export.py", "src/totals.py", "tests/test_export.py"]
    assert last.block().endswith("(session s-1, last active 2026-03-01 11:30 UTC)")
    assert checkpoint.of_session("s-2", [records[1]]) is None  # errors alone: no task


@given(st.lists(st.tuples(st.text(min_size=1, max_size=60), st.text(max_size=300),
                          st.lists(st.text(max_size=40), max_size=5),
                          st.lists(st.text(min_size=1, max_size=20), max_size=30),
                          st.sampled_from(["tool_use", "error", "decision"])), max_size=30))
def test_any_session_gives_a_bounded_checkpoint(rows):
    records = [session_record(t, s, tuple(f), tuple(p), k) for t, s, f, p, k in rows]
    last = checkpoint.of_session("s", records)
    if not any(k != "error" for *_, k in rows):
        assert last is None
        return
    assert len(last.progress) <= checkpoint.MAX_PROGRESS
    assert len(last.files) == len(set(last.files)) <= checkpoint.MAX_FILES
    assert len(last.next_steps) <= checkpoint.MAX_NEXT + 1
    assert last.block().startswith(checkpoint.HEADING) and last.task in last.block()


@pytest.mark.parametrize(("prompt", "leans"), [
    ("and the other one?", True), ("why?", True), ("Same for the tests please", True),
    ("What about the migrations we discussed", True), ("do the same in the viewer", True),
    ("Fix the CSV export crash on invoices without a customer", False),
    ("Add retries with backoff to the zmq client", False)])
def test_a_prompt_that_leans_on_the_previous_one_is_told_apart(prompt, leans):
    assert fts_query.refers_back(prompt) is leans


@given(st.text(max_size=200))
def test_any_short_prompt_refers_back(prompt):
    assert fts_query.refers_back(prompt) or len(prompt.split()) > fts_query.SHORT_PROMPT_WORDS


@given(st.lists(st.tuples(st.sampled_from([NS_A, NS_B]),
                          st.none() | st.floats(0, 1), st.booleans()), max_size=20),
       st.floats(0, 1))
def test_other_namespaces_keep_only_what_clears_their_floor(rows, floor):
    records, last_hit = [], None
    for n, (namespace, relevance, neighbour) in enumerate(rows):
        record = {"record_id": f"r{n}", "namespace": namespace, "relevance": relevance}
        if neighbour and last_hit:
            record["neighbour_of"] = last_hit
        else:
            last_hit = record["record_id"]
        records.append(record)
    kept = clearing(records, NS_A, floor)
    hits = {r["record_id"] for r in kept if "neighbour_of" not in r}
    assert [r for r in kept] == [r for r in records if r in kept]  # order kept
    for r in records:
        if "neighbour_of" in r:
            assert (r in kept) == (r["neighbour_of"] in hits)
        else:
            assert (r in kept) == (r["namespace"] == NS_A or (r["relevance"] or 0) >= floor)


WORDS = ["retry", "backoff", "upload", "client", "timeout", "cursor", "src/app.py", "tests"]
PATHS = ["src/app.py", "src/client.py", "README.md", "tests/test_app.py"]


@pytest.fixture(scope="module")
def worded_searcher(tmp_path_factory):
    """60 records of a few words and files each, some in another namespace."""
    rng = random.Random(3)
    records = [{**record(n, NS_A if n % 4 else NS_B, title=" ".join(rng.sample(WORDS, 3)),
                         summary=" ".join(rng.choices(WORDS, k=rng.randint(0, 6)))),
                "files_touched": rng.sample(PATHS, rng.randint(0, 2))}
               for n in range(1, 61)]
    s = Engine(make_db(tmp_path_factory.mktemp("worded") / "kirolearn.db", records))
    yield s
    s.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4, unique=True),
       st.sets(st.integers(1, 70)), st.integers(1, 12))
def test_a_ranking_among_some_rows_is_the_whole_ranking_kept_to_them(
        worded_searcher, terms, rows, limit):
    conn = worded_searcher.connection()
    expression = fts_query.fts_expression(terms)
    whole = conn.dialect.fts.rank(conn, (NS_A,), expression, 100)
    among = conn.dialect.fts.rank(conn, (NS_A,), expression, limit, 0, (), sorted(rows))
    assert among == [row for row in whole if row[0] in rows][:limit]


@settings(max_examples=200, deadline=None)
@given(st.sets(st.sampled_from([*PATHS, "docs/none.md"])), st.sets(st.sampled_from([NS_A, NS_B]),
                                                                   min_size=1),
       st.integers(1, 70))
def test_the_records_of_files_are_the_newest_naming_one(worded_searcher, files, namespaces,
                                                        limit):
    conn = worded_searcher.connection()
    naming = [(row, record_id) for row, record_id, named, namespace in conn.execute(
        "SELECT id, record_id, files_touched_json, namespace FROM memory_records"
        " ORDER BY id DESC") if set(json.loads(named)) & files and namespace in namespaces]
    assert fts.records_of_files(conn, sorted(namespaces), sorted(files), limit) == (
        naming[:limit])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4, unique=True),
       st.lists(st.tuples(st.sets(st.integers(1, 70)), st.sampled_from([1.5, 2.0, 0.5])),
                max_size=2), st.integers(1, 12))
def test_a_lifted_ranking_is_the_whole_ranking_with_the_lifted_scores_multiplied(
        worded_searcher, terms, lifts, limit):
    conn = worded_searcher.connection()
    expression = fts_query.fts_expression(terms)
    lifted = conn.dialect.fts.rank(conn, (NS_A,), expression, limit,
                                   lifts=[(sorted(rows), factor) for rows, factor in lifts])
    scores = {}
    for row, score in conn.dialect.fts.rank(conn, (NS_A,), expression, 100):
        for rows, factor in lifts:
            score *= factor if row in rows else 1
        scores[row] = score
    best = sorted(scores, key=lambda row: (scores[row], -row))[:limit]
    assert lifted == [(row, pytest.approx(scores[row])) for row in best]


def test_a_file_brings_back_its_records_best_matching_the_request_first(store_at):
    """A search about the files opened (``steps.ABOUT_FILES``): only the records naming
    the file, those matching the request before newer ones that do not, the newer first
    among equals, none excluded; with no request, the newest."""
    def about(n: int, title: str, path: str = "src/client.py") -> dict:
        return {**record(n, title=title), "files_touched": [path, "README.md"]}

    records = [about(1, "Retry the webhook with exponential backoff"),
               about(2, "Rename the client's logger"),
               about(3, "Close idle connections in the pool"),
               about(4, "Exponential backoff for the uploader", "src/upload.py"),
               {**record(5, title="Exponential backoff everywhere")}]
    searcher = Engine(make_db(store_at, records))
    try:
        def ids(query: str, *files: str, exclude: tuple[str, ...] = ()) -> list[int]:
            result = searcher.search(Request(NS_A, query, 5, 5000, opened=files,
                                             exclude=exclude))
            assert result.outcome in ("ok", "empty"), result.error
            return [int(r["record_id"][1:]) for r in result.records]

        assert ids("exponential backoff for the webhook", "src/client.py") == [1, 3, 2]
        assert ids("", "src/client.py") == [3, 2, 1]
        assert ids("exponential backoff", "src/client.py", "src/upload.py") == [4, 1, 3, 2]
        assert ids("exponential backoff", "src/client.py",
                   exclude=("R" + "1".zfill(25),)) == [3, 2]
        assert ids("exponential backoff", "docs/none.md") == []
        assert searcher.search(Request(NS_B, "backoff", 5, 5000,
                                       opened=["src/client.py"])).records == []
    finally:
        searcher.close()


def test_a_match_naming_a_file_in_play_ranks_higher(store_at):
    """Two records as good a match for the prompt: the one about a file the session
    touched comes first, and one about it that the words alone left out joins."""
    records = [{**record(n, title=f"Handle the timeout {word}"), "files_touched": [path]}
               for n, word, path in ((1, "in the uploader", "src/upload.py"),
                                     (2, "in the client", "src/client.py"))]
    records += [record(n, title="Handle the timeout here") for n in range(3, 20)]
    searcher = Engine(make_db(store_at, records))
    try:
        def ids(*files: str) -> list[int]:
            result = searcher.search(Request(NS_A, "handle the timeout", 3, 5000, files=files))
            return [int(r["record_id"][1:]) for r in result.records]

        plain = ids()
        assert 1 not in plain[:1] and 2 not in plain[:1]
        assert ids("src/upload.py")[0] == 1
        assert ids("src/client.py")[0] == 2
    finally:
        searcher.close()


STATUS_PATHS = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                       min_size=1, max_size=12)


@given(entries=st.lists(st.tuples(st.sampled_from([" M", "M ", "MM", "A ", "D ", "R ", "C "]),
                                  STATUS_PATHS, STATUS_PATHS), max_size=8))
def test_the_changed_files_are_read_from_git_status_whatever_their_names(entries):
    """``git status --porcelain=v1 -z``: each entry's path (a rename's or copy's new
    one, its old one skipped), in order, once."""
    output = "".join(f"{xy} {path}\0" + (f"{old}\0" if xy[0] in "RC" else "")
                     for xy, path, old in entries).encode()
    assert worktree.parse_status(output) == tuple(dict.fromkeys(
        path for _, path, _ in entries))[:worktree.MAX_FILES]


def test_a_projects_changed_files_are_read_in_the_background(tmp_path):
    """The first search of a project finds none (no search waits for git); a later one
    finds the files its working tree changed."""
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "src").mkdir()
    for name in ("a.py", "b.py"):
        (tmp_path / "src" / name).write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "first")
    (tmp_path / "src" / "b.py").write_text("x = 2\n")
    trees = worktree.Worktrees()
    assert trees.changed(str(tmp_path)) == ()
    assert wait_for(lambda: trees.changed(str(tmp_path))) == ("src/b.py",)
    assert worktree.read(str(tmp_path)) == (("src/b.py",), {})
    assert worktree.read(str(tmp_path / "src" / "none")) == ((), None)  # not a work tree
    git("mv", "src/a.py", "src/c.py")  # renamed, not yet committed
    assert worktree.read(str(tmp_path), renames=True)[1] == {"src/a.py": "src/c.py"}
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "moved")
    git("mv", "src/c.py", "src/d.py")  # then renamed again
    assert worktree.read(str(tmp_path), renames=True)[1] == {"src/a.py": "src/d.py",
                                                             "src/c.py": "src/d.py"}
    later = worktree.Worktrees()
    later.renamed(str(tmp_path))
    assert wait_for(lambda: later.renamed(str(tmp_path))) == {"src/a.py": "src/d.py",
                                                              "src/c.py": "src/d.py"}


def test_a_search_after_a_checkout_of_another_branch_waits_for_its_reading(tmp_path):
    """The branches a record's visibility is judged by are the checkout's: the first
    reading, and one after a checkout of another branch, are waited for (a while);
    one not waited for, of another branch, comes without branches."""
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c",
                        "user.email=t@example.com", *args], check=True, capture_output=True)

    root = str(tmp_path)
    git("init", "-q", "-b", "main")
    git("commit", "-q", "--allow-empty", "-m", "first")
    git("checkout", "-qb", "feature")
    git("commit", "-q", "--allow-empty", "-m", "second")
    trees = worktree.Worktrees()
    assert trees.reading(root, project.git_head(root), 30).branch == "feature"
    git("checkout", "-q", "main")
    found = trees.reading(root, project.git_head(root), 30)
    assert found.branch == "main" and set(found.forked) == {"feature"}
    assert trees.reading(root, ("elsewhere", None)).branch is None
    assert trees.reading(root).branch == "main"


def test_a_record_is_found_by_its_concepts_which_are_never_shown(store_at):
    """The names an edit touched are searched as the record's words are, though its
    context shows only its title, summary and facts."""
    found = {**record(1, title="Split the dispatcher"),
             "concepts": ["handle_refund_case", "cases"]}
    searcher = Engine(make_db(store_at, [found, record(2, title="Split the invoices")]))
    try:
        result = searcher.search(Request(NS_A, "where is handle_refund_case", 5, 5000))
        assert [r["record_id"] for r in result.records] == [found["record_id"]]
        assert "handle_refund_case" not in result.context
    finally:
        searcher.close()


NOW = datetime(2026, 11, 27, 16, 30, tzinfo=timezone(timedelta(hours=1)))  # a Friday


@pytest.mark.parametrize("text, start, end", [
    ("what did we fix yesterday?", "2026-11-26", "2026-11-27"),
    ("Today's build", "2026-11-27", "2026-11-28"),
    ("the change last week", "2026-11-16", "2026-11-23"),
    ("what broke in May", "2026-05-01", "2026-06-01"),
    ("the December release", None, None),  # a month alone names no time: "in December"
    ("in December", "2025-12-01", "2026-01-01"),
    ("Sept 2025 outage", "2025-09-01", "2025-10-01"),
    ("3 days ago", "2026-11-24", "2026-11-25"),
    ("two weeks ago", "2026-11-10", "2026-11-17"),
    ("the fix on 2026-05-14", "2026-05-14", "2026-05-15"),
    ("last Tuesday", "2026-11-24", "2026-11-25"),
    ("on Friday", "2026-11-20", "2026-11-21"),  # the latest before today
    ("last month", "2026-10-01", "2026-11-01"),
    ("last year", "2025-01-01", "2026-01-01"),
    ("fix the retry loop", None, None),
    # a date spelled out, or a part of a month; a day or month without a year: its latest
    ("what broke on October 13, 2023?", "2023-10-13", "2023-10-14"),
    ("the fix of 1 February, 2023", "2023-02-01", "2023-02-02"),
    ("reading on 8th December, 2023", "2023-12-08", "2023-12-09"),
    ("shared on December 1,2023", "2023-12-01", "2023-12-02"),
    ("the outage on Nov. 30", "2025-11-30", "2025-12-01"),  # not yet this year
    ("the last week of August 2023", "2023-08-25", "2023-09-01"),
    ("in the second week of November", "2026-11-08", "2026-11-15"),
    ("in the beginning of November 2022", "2022-11-01", "2022-11-11"),
    ("the first half of September 2022", "2022-09-01", "2022-09-16"),
    ("late May", "2026-05-22", "2026-06-01"),
    ("in summer 2021", "2021-06-01", "2021-09-01"),
    ("the releases in 2023", "2023-01-01", "2024-01-01"),
    ("between August 11 and August 15 2023", "2023-08-11", "2023-08-16"),
    ("between August 11 and 15 2023", "2023-08-11", "2023-08-16"),
    ("between December 28 and January 3", "2025-12-28", "2026-01-04"),
    # a time before a date runs to the date: what was done then may be told of on the day
    ("the week before August 3, 2023", "2023-07-27", "2023-08-04"),
    ("last weekend before April 10, 2023", "2023-04-03", "2023-04-11"),
    ("the Sunday before October 25, 2022", "2022-10-23", "2022-10-26"),
    ("two weeks before August 11, 2023", "2023-07-25", "2023-08-12"),
    # a relative phrase beside a date is read from it
    ("the issue last week, as mentioned on November 6, 2023", "2023-10-30", "2023-11-07"),
    ("what she finished last Friday on 23 January, 2022", "2022-01-21", "2022-01-24"),
    ("step 2 may fail", None, None),  # a month that is a verb, lower case, no year
    ("retry may 3 times", None, None),
])
def test_a_request_names_a_time(text, start, end):
    found = when.span(text, NOW)
    if start is None:
        assert found is None
    else:
        assert [t.date().isoformat() for t in found] == [start, end]
        assert all(t.tzinfo == NOW.tzinfo for t in found)


TIME_WORDS = ["yesterday", "today", "last", "past", "this", "week", "weeks", "month", "year",
              "days", "ago", "in", "on", "May", "sept", "December", "Monday", "sunday", "two",
              "a", "3", "999", "2025", "2026-02-30", "2026-05-14", "fix", "the", ".",
              "February", "29", "30", "31st", "of", ",", "before", "between", "and", "first",
              "last", "half", "mid", "late", "beginning", "summer", "weekend", "during"]


@given(st.one_of(st.text(max_size=60), st.lists(st.sampled_from(TIME_WORDS), max_size=6)
                 .map(" ".join)),
       st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1), timezones=st.just(UTC)))
def test_any_text_names_no_time_or_a_span_that_has_begun(text, now):
    """Never raises; a span named is non-empty, and, but for a date or year the text
    spells out, begins no later than now (the past is what memories are of)."""
    found = when.span(text, now)
    if found is not None:
        start, end = found
        assert start < end
        assert start <= now or any((word.isdigit() and len(word) == 4) or "-" in word
                                   for word in text.split())


def test_work_of_the_day_a_request_names_ranks_first(store_at):
    """Two records as good a match: the one of the day the request names comes first,
    though the other is newer."""
    today = datetime.now().astimezone().replace(hour=12, minute=0, second=0, microsecond=0)
    records = [{**record(1, title="Fix the retry loop in the client"),
                "created_at": (today - timedelta(days=1)).isoformat()},
               {**record(2, title="Fix the retry loop in the server"),
                "created_at": (today - timedelta(days=9)).isoformat()}]
    searcher = Engine(make_db(store_at, records))
    try:
        def first(query: str) -> int:
            return int(searcher.search(Request(NS_A, query, 2, 5000)).records[0]["record_id"][1:])

        assert first("fix the retry loop") == 2  # the newer id first on a tie
        assert first("what did we do to fix the retry loop yesterday") == 1
        assert first("fix the retry loop 9 days ago") == 2
    finally:
        searcher.close()


def test_a_record_stored_with_trailers_is_given_without_them():
    """A record made before trailers were kept out of records: what is injected of it
    has none, nor an address."""
    made = record(1, title="Expose FunctionAuth (#3699) Co-authored-by: Kar Petrosyan…",
                  summary="Exposed it.\n\nSigned-off-by: Tom <tom@example.com>")
    shown = context_format.record_section(made)
    assert "FunctionAuth (#3699)" in shown and "Exposed it." in shown
    assert "-by" not in shown and "@" not in shown
