"""The steps of a search that are functions of its state alone, each tested by itself
(the others are tested through the engine, in test_search and test_hybrid)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from kirolearn.search import call, ranking, steps
from kirolearn.search.request import Request
from kirolearn.search.result import Result

NAMESPACE = "/actor/tester/project/" + "a" * 64 + "/"
ENGINE = SimpleNamespace(rrf_k=ranking.RRF_K, weights=ranking.RELEVANCE_AND_RECENCY)


def search(limit: int = 3, engine: object = ENGINE, **state) -> call.Search:
    found = call.Search(engine, Request(NAMESPACE, "why", limit, mode="hybrid"),
                         (NAMESPACE,), math.inf)
    for name, value in state.items():
        setattr(found, name, value)
    return found


@given(st.lists(st.tuples(st.text("abcdefgh", min_size=1, max_size=3), st.booleans()),
                unique_by=lambda item: item[0], max_size=12), st.integers(1, 6))
def test_rare_matches_keep_their_places_and_the_rest_keep_their_order(ranked, limit):
    fused = [(record_id, float(-n)) for n, (record_id, _) in enumerate(ranked)]
    rare = {record_id: {} for record_id, is_rare in ranked if is_rare}
    state = search(limit, fused=list(fused), rare=rare)
    steps.rare_places(state)
    kept = [record_id for record_id, _ in state.fused]
    assert len(kept) == min(limit, len(fused)) and set(kept) <= {i for i, _ in fused}
    if len(rare) <= limit:
        assert set(rare) <= set(kept)  # a rare match is never pushed out by others
    others = [i for i in kept if i not in rare]
    assert others == [i for i, _ in fused if i in others]  # in their fused order


def test_a_hit_is_shown_between_its_neighbours_with_its_relevance():
    record = {"record_id": "b", "namespace": NAMESPACE, "title": "hit", "summary": "s"}
    before = {**record, "record_id": "a", "title": "before"}
    state = search(fused=[("b", 0.9)], pool={"a": 0.5, "b": 0.9},
                   around={"b": ("a", None)}, shown={"a": "b"},
                   found={"a": before, "b": record}, cosine={"b": 0.734, "a": -0.2})
    steps.assemble(state)
    assert [(r["record_id"], r.get("neighbour_of")) for r in state.records] == [
        ("a", "b"), ("b", None)]
    assert [r["relevance"] for r in state.records] == [0.0, 0.73]
    assert [r["score"] for r in state.records] == [-0.5, -0.9]


def test_a_record_repeating_a_better_ones_words_is_left_out_across_namespaces():
    one = {"record_id": "x", "namespace": NAMESPACE, "title": "Same", "summary": "words"}
    two = {**one, "record_id": "y", "namespace": NAMESPACE.replace("a" * 64, "b" * 64)}
    state = search(records=[one, two])
    steps.diverse(state)
    assert state.records == [one, two]  # one namespace: both kept
    state = search(records=[one, two])
    state.namespaces = (one["namespace"], two["namespace"])
    steps.diverse(state)
    assert state.records == [one]


def test_the_fusion_ranks_what_both_sides_found_first():
    lexical = SimpleNamespace(records=[
        {"record_id": "both", "created_at": "2026-11-01T00:00:00+00:00"},
        {"record_id": "words", "created_at": "2026-11-01T00:00:00+00:00"}])
    state = search(lexical=lexical, near=[("meaning", 0.9, 0.0), ("both", 0.8, 0.0)])
    steps.fuse(state)
    assert state.fused[0][0] == "both" and {i for i, _ in state.fused} == {
        "both", "words", "meaning"}



def lexical(held: dict[str, float]) -> Result:
    """A lexical answer whose matches hold these shares of the prompt's words."""
    return Result([{"record_id": i} for i in held], "ok", 0.0, held=held)


def test_nothing_fits_a_prompt_whose_best_candidate_is_far_in_meaning_and_weak_in_words():
    engine = SimpleNamespace(min_similarity=0.25)
    far = {"a": steps.FIT_SIMILARITY - 0.01, "b": 0.0}  # above the floor of one record
    weak = {"a": steps.STRONG_COVERAGE - 0.01}
    state = search(fused=[("a", 0.9), ("b", 0.5)], cosine=far, lexical=lexical(weak),
                   rare={"b": {}}, engine=engine)
    steps.fits(state)  # a rare word alone, in a prompt about something else
    assert state.fused == []
    close = search(fused=[("a", 0.9), ("b", 0.5)], engine=engine,
                   cosine={**far, "b": steps.FIT_SIMILARITY}, lexical=lexical(weak))
    steps.fits(close)  # one close enough in meaning: the answer stands, whole
    assert [i for i, _ in close.fused] == ["a", "b"]
    worded = search(fused=[("a", 0.9)], cosine=far, engine=engine,
                    lexical=lexical({"a": steps.STRONG_COVERAGE}))
    steps.fits(worded)  # one holding enough of the prompt's words
    assert [i for i, _ in worded.fused] == ["a"]
    strict = search(fused=[("a", 0.9)], cosine={"a": steps.FIT_SIMILARITY + 0.05},
                    lexical=lexical(weak),
                    engine=SimpleNamespace(min_similarity=steps.FIT_SIMILARITY + 0.1))
    steps.fits(strict)
    assert strict.fused == []  # a floor of meaning set higher is the test's floor
    paraphrase = search(fused=[("a", 0.9)], cosine={"a": 0.26}, engine=engine,
                        lexical=Result([], "empty", 0.0))
    steps.fits(paraphrase)  # no word in common: judged by its meaning alone
    assert [i for i, _ in paraphrase.fused] == ["a"]


def test_a_strong_lexical_match_is_kept_below_the_floor_of_meaning():
    class Vectors:
        def similarities(self, namespaces, ids, vector):
            return {i: 0.0 for i in ids}  # every candidate far in meaning

    state = search(fused=[("strong", 0.9), ("weak", 0.8)],
                   lexical=lexical({"strong": steps.STRONG_COVERAGE, "weak": 0.2}),
                   engine=SimpleNamespace(vectors=Vectors(), min_similarity=0.25))
    steps.similar_enough(state)
    assert [i for i, _ in state.fused] == ["strong"]


@given(st.lists(st.tuples(st.floats(0.01, 1), st.integers(0, 30)), max_size=12))
def test_work_of_the_time_the_request_names_ranks_higher(candidates):
    """``in_time`` on a fused ranking: a candidate of the span is lifted by
    IN_TIME_BOOST, the others keep their scores and their order among themselves."""
    day = 86_400_000.0
    now = datetime(2026, 11, 27, 12, tzinfo=UTC)
    span = (now - timedelta(days=10), now - timedelta(days=5))
    fused = sorted(((f"r{n}", score) for n, (score, _) in enumerate(candidates)),
                   key=lambda item: -item[1])
    created = {f"r{n}": now.timestamp() * 1000 - age * day
               for n, (_, age) in enumerate(candidates)}
    state = search(fused=list(fused), created=created, span=span, ranked=True)
    steps.in_time(state)
    inside = {i for i, when in created.items()
              if span[0].timestamp() * 1000 <= when < span[1].timestamp() * 1000}
    lifted = dict(state.fused)
    assert lifted == {i: score * (steps.IN_TIME_BOOST if i in inside else 1.0)
                      for i, score in fused}
    assert [s for _, s in state.fused] == sorted(lifted.values(), reverse=True)
    others = [i for i, _ in state.fused if i not in inside]
    assert others == [i for i, _ in fused if i not in inside]
    state = search(fused=list(fused), created=created, ranked=True)
    steps.in_time(state)
    assert state.fused == fused  # no time named: nothing moves
