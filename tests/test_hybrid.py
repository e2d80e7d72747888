"""Semantic and hybrid search: the real embedding model, rank fusion, the back-fill."""

from __future__ import annotations

import hashlib
import json
import random
import re
import sqlite3
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import here, kl
from helpers.events import NAMESPACE, make_event, retrieval
from helpers.waits import wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kirolearn import contract, db, paths, protocol, transport
from kirolearn.db import fts, writes
from kirolearn.search import context as context_format
from kirolearn.search import embeddings, ranking, vectors
from kirolearn.search import lexical as lexical_side
from kirolearn.search import query as fts_query
from kirolearn.search.engine import Engine
from kirolearn.search.request import Request
from kirolearn.tooluse import cut as tooluse_cut


@pytest.fixture(scope="module")
def embedder() -> embeddings.Embedder:
    return embeddings.load()


def record(title: str, summary: str, namespace: str = NAMESPACE, **fields: object) -> dict:
    return {"record_id": contract.new_record_id(), "namespace": namespace, "title": title,
            "summary": summary, "facts": [], "concepts": [], "files_touched": [],
            "observation_type": "decision", "strategy": "mcp_observation",
            "source_event_ids": [contract.new_ulid()], "created_at": contract.now_iso(),
            **fields}


RECORDS = [
    record("How to run database migrations",
           "Run alembic upgrade head before deploying; the migrations live in db/versions."),
    record("Pagination of the invoices API", "The invoices endpoint pages with a cursor."),
    record("Resize uploaded images", "The upload handler resizes images to 512 pixels."),
    record("Fix KeyError in billing/invoice_service.py",
           "Legacy invoices have no currency; the lookup now defaults to EUR."),
]


def embedded_database(path: Path, embedder: embeddings.Embedder, records: list[dict]) -> None:
    """A database holding records and their vectors, as storage leaves it."""
    conn = db.connect_writer(path)
    for r in records:
        writes.insert_record(conn, r)
        text = embeddings.record_text(r)
        writes.save_embedding(conn, r["record_id"],
                              embeddings.text_hash(text, embedder.files.space),
                              embeddings.to_blob(embedder.embed([text])[0]), embeddings.made_from)
    conn.close()


# -- the model --------------------------------------------------------------------------------


def test_the_packaged_model_embeds_meaning(embedder):
    vectors_ = embedder.embed(["How do I run the database migrations?",
                               "Applying schema changes to the production database",
                               "The cat sat on the mat"])
    assert vectors_.shape == (3, embeddings.DIMENSIONS) and vectors_.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors_, axis=1), 1.0, atol=1e-5)
    similar, unrelated = vectors_[0] @ vectors_[1], vectors_[0] @ vectors_[2]
    assert similar > 0.35 and unrelated < 0.15


def test_a_missing_model_says_what_to_install(tmp_path):
    with pytest.raises(embeddings.Unavailable, match=r"lacks model\.onnx, tokenizer\.json"):
        embeddings.find_model(str(tmp_path))


def test_the_packaged_model_is_checked_and_names_its_vector_space():
    packaged = embeddings.find_model()
    assert packaged.source == "packaged, int8" and packaged.tokenizer == embeddings.TOKENIZER
    digest = hashlib.sha256(packaged.model.read_bytes()).hexdigest()
    assert digest == embeddings.PACKAGE_SHA256
    assert packaged.space == f"onnx-{digest[:16]}"
    # The tokenizer ships inside kirolearn, as its README there says.
    readme = (embeddings.TOKENIZER.parent / "README.md").read_text()
    assert hashlib.sha256(embeddings.TOKENIZER.read_bytes()).hexdigest() in readme


def test_a_packaged_model_that_is_not_the_pinned_file_is_refused(tmp_path, monkeypatch):
    """A package of that name holding another file (tampered, or another release) is not
    loaded: embeddings are off, and the reason says so."""
    package = tmp_path / "site" / embeddings.PACKAGE
    package.mkdir(parents=True)
    (package / "model.onnx").write_bytes(b"not the model")
    (package / "__init__.py").write_text(
        "from pathlib import Path\n\n\ndef model_path():\n"
        "    return Path(__file__).parent / 'model.onnx'\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, embeddings.PACKAGE, raising=False)
    with pytest.raises(embeddings.Unavailable, match="is not the file this version of"
                       " kirolearn was made for"):
        embeddings.load()


def test_the_hugging_face_cache_is_looked_in_last(tmp_path, monkeypatch):
    """Without the package, the float32 model in the cache is used: its vectors are of a
    space named after that file."""
    from huggingface_hub import constants

    packaged = embeddings.find_model()
    repo = tmp_path / "models--sentence-transformers--all-MiniLM-L6-v2"
    snapshot = repo / "snapshots" / "0123abcd"
    (snapshot / "onnx").mkdir(parents=True)
    other_model = tmp_path / "float32.onnx"  # another file: the same graph, one more byte
    other_model.write_bytes(packaged.model.read_bytes() + b"\0")
    (snapshot / "onnx" / "model.onnx").symlink_to(other_model)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert embeddings.find_model().model == packaged.model  # the package comes first
    monkeypatch.setattr(embeddings, "packaged_model", lambda: None)
    found = embeddings.find_model()
    assert found.model == snapshot / "onnx" / "model.onnx"
    assert found.source == "Hugging Face cache, float32"
    assert found.space == embeddings.space_name(
        hashlib.sha256(other_model.read_bytes()).hexdigest()) != packaged.space
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(embeddings.Unavailable, match="no embedding model"):
        embeddings.find_model()


@given(st.text(max_size=200), st.text(max_size=200), st.from_regex(r"onnx-[0-9a-f]{16}",
                                                                     fullmatch=True))
def test_a_vector_hash_holds_its_space_and_its_text(title, other, space):
    record_ = {"title": title, "summary": "s"}
    hash_ = embeddings.text_hash(embeddings.record_text(record_), space)
    assert embeddings.space_of(hash_) == space
    assert embeddings.made_from(record_, hash_)
    assert embeddings.made_from({**record_, "title": other}, hash_) == (other == title)
    assert not embeddings.made_from(record_, hash_.split(":", 1)[1])  # one naming no space


@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=64))
def test_a_vector_survives_the_blob_bit_exactly(values):
    vector = np.array(values, dtype=np.float32)
    assert embeddings.from_blob(embeddings.to_blob(vector)).tobytes() == vector.tobytes()


@settings(max_examples=30)
@given(st.integers(1, 300), st.integers(0, 2**32 - 1))
def test_vectors_fitted_to_their_rows_search_the_same_and_grow_again(count, seed):
    rng = np.random.default_rng(seed)
    index = vectors.VectorIndex("space")
    index.install("ns", {"ids": [], "where": {}, "created": [],
                         "matrix": np.zeros((0, embeddings.DIMENSIONS), dtype=np.float32)})
    rows = rng.standard_normal((count + 1, embeddings.DIMENSIONS)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    for n, row in enumerate(rows[:count]):
        index.upsert("ns", f"r{n}", row, float(n))
    query = rows[-1]
    before = index.top(["ns"], query, 10, -1.0)
    index.fit()
    assert len(index.spaces["ns"]["matrix"]) == count
    assert index.top(["ns"], query, 10, -1.0) == before
    index.upsert("ns", "the query", query, float(count))
    assert index.top(["ns"], query, 1, -1.0)[0][0] == "the query"


# -- fusion -----------------------------------------------------------------------------------

ids = st.lists(st.sampled_from([f"mr_{i:026d}" for i in range(12)]), unique=True, max_size=12)


@given(ids, ids, st.integers(1, 100))
def test_fusion_does_not_depend_on_the_order_of_the_rankings(lexical, semantic, k):
    created = {i: float(n) for n, i in enumerate(sorted(set(lexical) | set(semantic)))}
    assert ranking.fuse([lexical, semantic], created, 1e13, k) == ranking.fuse(
        [semantic, lexical], created, 1e13, k)


@given(ids.filter(lambda r: len(r) >= 2), ids, st.data())
def test_a_better_rank_never_lowers_a_record(lexical, semantic, data):
    at = data.draw(st.integers(1, len(lexical) - 1))
    moved = [*lexical[:at - 1], lexical[at], lexical[at - 1], *lexical[at + 1:]]
    created = dict.fromkeys(set(lexical) | set(semantic), 0.0)
    before = dict(ranking.fuse([lexical, semantic], created, 0.0))
    after = dict(ranking.fuse([moved, semantic], created, 0.0))
    assert after[lexical[at]] > before[lexical[at]]
    assert after[lexical[at - 1]] < before[lexical[at - 1]]


@given(ids, st.floats(0, 1e13), st.floats(0, 1e13))
def test_recency_adds_little_and_boundedly(order, when, now):
    fused = dict(ranking.fuse([order], {}, now))
    newer = dict(ranking.fuse([order], dict.fromkeys(order, when), now))
    for record_id in order:
        assert 0 <= newer[record_id] - fused[record_id] <= (ranking.Weights().recency
                                                            / (ranking.RRF_K + 1) + 1e-12)


def test_ties_go_to_the_newer_record():
    assert [i for i, _ in ranking.fuse([["mr_a"], ["mr_b"]], {"mr_a": 1.0, "mr_b": 2.0},
                                       0.0)] == ["mr_b", "mr_a"]


signals = st.builds(ranking.Signals, st.sampled_from(contract.OBSERVATION_TYPES),
                    st.integers(0, 1000), st.booleans())
weights = st.builds(ranking.Weights, useful=st.floats(0, 2), stale=st.floats(0.01, 2),
                    types=st.dictionaries(st.sampled_from(contract.OBSERVATION_TYPES),
                                          st.floats(0.01, 4)))


@given(ids.filter(bool), st.data(), weights)
def test_weighing_keeps_every_record_and_neutral_weights_change_no_place(order, data, w):
    fused = ranking.fuse([order], {}, 0.0)
    known = {i: data.draw(signals) for i in order}
    weighed = ranking.weigh(fused, known, w, {})
    assert {i for i, _ in weighed} == set(order) and len(weighed) == len(order)
    assert ranking.weigh(fused, known, ranking.Weights(), {}) == fused


@given(ids.filter(lambda r: len(r) >= 2), st.data(), weights)
def test_a_record_worth_more_is_never_ranked_lower(order, data, w):
    """More uses, a fresh file or a heavier type can only lift a record among the same
    others."""
    fused = ranking.fuse([order], {}, 0.0)
    known = {i: data.draw(signals) for i in order}
    chosen = data.draw(st.sampled_from(order))
    better = known[chosen]._replace(useful=known[chosen].useful + data.draw(st.integers(0, 9)))
    if w.stale <= 1:
        better = better._replace(stale=False)
    before = [i for i, _ in ranking.weigh(fused, known, w, {})].index(chosen)
    after = [i for i, _ in ranking.weigh(fused, {**known, chosen: better}, w, {})]
    assert after.index(chosen) <= before


# -- search -----------------------------------------------------------------------------------


class DeadEmbedder:
    files = embeddings.ModelFiles(Path("model.onnx"), Path("tokenizer.json"), "", "onnx-dead")

    def embed(self, texts: list[str]):
        raise RuntimeError("the model crashed")


class SlowEmbedder:
    def __init__(self, real: embeddings.Embedder):
        self.real = real
        self.files = real.files

    def embed(self, texts: list[str]):
        time.sleep(1.0)
        return self.real.embed(texts)


@pytest.fixture(scope="module")
def corpus_db(tmp_path_factory, embedder) -> Path:
    path = tmp_path_factory.mktemp("hybrid") / "kirolearn.db"
    embedded_database(path, embedder, RECORDS)
    return path


def test_semantic_search_finds_what_lexical_search_cannot(corpus_db, embedder):
    searcher = Engine(corpus_db, embedder=embedder)
    query = "Where are schema changes kept?"
    try:
        assert searcher.search(Request(NAMESPACE, query, 10, 5000)).records == []  # no words
        for mode in ("semantic", "hybrid"):
            found = searcher.search(Request(NAMESPACE, query, 10, 5000, mode=mode))
            assert found.outcome == "ok" and found.records[0]["title"] == RECORDS[0]["title"]
        # Exact words still win: a file name and an error.
        found = searcher.search(Request(NAMESPACE, "KeyError invoice_service.py", 10, 5000,
                                        mode="hybrid"))
        assert found.records[0]["title"] == RECORDS[3]["title"]
        # Common words in common are not a match: an unrelated prompt gets nothing.
        for mode in ("lexical", "hybrid"):
            assert searcher.search(Request(NAMESPACE, "what is the weather in paris", 10, 5000,
                                   mode=mode)).records == []
    finally:
        searcher.close()


class RecordingEmbedder:
    def __init__(self, real: embeddings.Embedder):
        self.real, self.texts, self.files = real, [], real.files

    def embed(self, texts: list[str]):
        self.texts += texts
        return self.real.embed(texts)


def test_a_long_prompt_is_embedded_by_its_start_and_rarest_words(corpus_db, embedder):
    recording = RecordingEmbedder(embedder)
    searcher = Engine(corpus_db, embedder=recording)
    log = "\n".join(f"2026-11-24 10:00:{i:02d} INFO worker-{i} heartbeat ok, depth 0"
                    for i in range(60))
    try:
        found = searcher.search(Request(
            NAMESPACE, f"Where are schema changes kept? The log:\n{log}", 10, 5000,
            mode="hybrid"))
    finally:
        searcher.close()
    assert found.records[0]["title"] == RECORDS[0]["title"]
    [text] = recording.texts
    assert text.startswith("Where are schema changes kept?")
    assert len(text) <= fts_query.EMBEDDED_MAX_CHARS


class SignallingEmbedder(RecordingEmbedder):
    def __init__(self, real: embeddings.Embedder):
        super().__init__(real)
        self.started = threading.Event()

    def embed(self, texts: list[str]):
        self.started.set()
        return super().embed(texts)


@pytest.mark.parametrize("long", [False, True])
def test_the_prompt_is_embedded_while_its_words_are_searched(corpus_db, embedder, long,
                                                             monkeypatch):
    """The full-text statement waits until the embedding has begun: were the prompt
    embedded after it, the wait would run out."""
    signalling = SignallingEmbedder(embedder)
    began = []

    ranked = lexical_side.rank

    def waiting(*args, **kwargs):
        began.append(signalling.started.wait(30))
        return ranked(*args, **kwargs)

    monkeypatch.setattr(lexical_side, "rank", waiting)
    searcher = Engine(corpus_db, embedder=signalling)
    try:
        found = searcher.search(Request(NAMESPACE, "Where are schema changes kept?"
                                + " The log: 2026-11-24 INFO heartbeat ok" * 20 * long,
                                10, 60_000, mode="hybrid"))
    finally:
        searcher.close()
    assert began == [True]
    [text] = signalling.texts
    assert text.startswith("Where are schema changes kept?")
    assert found.records[0]["title"] == RECORDS[0]["title"]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=80) | st.sampled_from(["database migrations", "the invoices", "images",
                                              "KeyError", "what is the weather"]))
def test_a_dead_embedder_gives_exactly_the_lexical_result(corpus_db, query):
    lexical = Engine(corpus_db)
    dead = Engine(corpus_db, embedder=DeadEmbedder())
    try:
        expected = lexical.search(Request(NAMESPACE, query, 10, 5000))
        for mode in ("hybrid", "semantic"):
            got = dead.search(Request(NAMESPACE, query, 10, 5000, mode=mode))
            assert got.records == expected.records and got.outcome == expected.outcome
    finally:
        lexical.close()
        dead.close()


def test_a_slow_embedder_gives_the_lexical_result_within_the_budget(corpus_db, embedder):
    lexical = Engine(corpus_db)
    slow = Engine(corpus_db, embedder=SlowEmbedder(embedder))
    try:
        slow.search(Request(NAMESPACE, "warm up", 1, 10_000, mode="hybrid"))  # its vectors loaded
        expected = lexical.search(Request(NAMESPACE, "database migrations", 10, 10_000))
        # a budget the embedder (1 s) misses, with room for the lexical side on a busy
        # machine: the answer is the lexical one, in time
        got = slow.search(Request(NAMESPACE, "database migrations", 10, 800, mode="hybrid"))
        assert got.records == expected.records and got.outcome == "ok", got.error
        assert got.latency_ms < 800
    finally:
        lexical.close()
        slow.close()


COMMON = ["fix", "test", "page", "error", "config", "build", "deploy", "cache", "query", "user",
          "api", "model", "route", "token", "schema", "index", "view", "form", "log", "job"]
RARE_WORD = "zanzibarquux"


@pytest.fixture(scope="module")
def sentences(embedder) -> dict[str, np.ndarray]:
    """Forty texts of five common words, and their vectors (made once)."""
    rng = random.Random(5)
    texts = [" ".join(rng.sample(COMMON, 5)) for _ in range(40)]
    return dict(zip(texts, embedder.embed(texts), strict=True))


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(10, 10_000), seed=st.integers(0, 2**16), data=st.data())
def test_hybrid_always_finds_a_record_alone_holding_a_term(tmp_path_factory, embedder,
                                                           sentences, size, seed, data):
    """Records of common words, all embedded; one also holds a rare word: whatever the
    meaning scores say, a search naming that word lists it."""
    position = data.draw(st.integers(0, size - 1), label="position")
    others = data.draw(st.lists(st.sampled_from(COMMON), max_size=2, unique=True), label="others")
    query = " ".join(data.draw(st.permutations([RARE_WORD, *others]), label="order"))
    rng = random.Random(seed)
    texts = list(sentences)
    records, vectors_of = [], {}
    for n in range(size):
        text = rng.choice(texts)
        if n == position:
            text = f"{text} {RARE_WORD}"
            vectors_of[text] = embedder.embed([f"note\n\n{text}"])[0]
        records.append(record("note", text, created_at=f"2026-01-01T00:00:{n % 60:02d}Z"))
    path = tmp_path_factory.mktemp("hybrid-rare") / "kirolearn.db"
    conn = db.connect_writer(path)
    conn.execute("BEGIN")
    for r in records:
        writes.insert_record(conn, r)
        vector = vectors_of.get(r["summary"], sentences.get(r["summary"]))
        conn.execute("UPDATE memory_records SET embedding = $1, embedding_hash = $2"
                     " WHERE record_id = $3", (embeddings.to_blob(vector), embeddings.text_hash(
                         embeddings.record_text(r), embedder.files.space), r["record_id"]))
    conn.execute("COMMIT")
    conn.close()
    searcher = Engine(path, embedder=embedder)
    try:
        found = searcher.search(Request(NAMESPACE, query, 10, 60_000, mode="hybrid"))
        assert records[position]["record_id"] in found.record_ids, found.error
    finally:
        searcher.close()


def test_the_context_is_capped_and_the_lowest_ranked_go_first():
    long = [record(f"Record {n}", "word " * 300) for n in range(5)]  # ~380 tokens each
    kept = context_format.within_tokens(long, 1000)
    assert [r["title"] for r in kept] == ["Record 0", "Record 1"]
    assert context_format.estimate_tokens(context_format.context_block(kept)) <= 1000
    assert context_format.within_tokens(long, None) == long
    [cut] = context_format.within_tokens([record("Huge", "x" * 20_000)], 500)
    assert context_format.estimate_tokens(context_format.context_block([cut])) <= 500


CONVERSATION = {  # session → its turns, in order
    "s-pottery": ["Mel: I signed up for a pottery class at the community centre last week.",
                  "Caroline: Oh nice! What did you make there?",
                  "Mel: A blue bowl with my own glaze; the pottery teacher loved it.",
                  "Caroline: Rex, my dog, chewed through another frisbee today."],
    "s-dog": ["Caroline: Rex learned to fetch the frisbee at the beach.",
              "Mel: Dogs at the beach are the best."],
}


def conversation_database(path: Path, embedder: embeddings.Embedder) -> dict[str, str]:
    """Each turn an event and a record made from it, as extraction leaves them; the
    record ids by text."""
    conn = db.connect_writer(path)
    ids = {}
    for session, turns in CONVERSATION.items():
        for text in turns:
            event = contract.make_event("prompt", {"type": "text", "content": text},
                                        namespace=NAMESPACE, actor_id="tester",
                                        session_id=session, surface="locomo", version="0",
                                        client_id="test")
            body_json = contract.canonical_json(event["body"])
            writes.insert_event(conn, contract.stored_form(event, body_json, 0,
                                                         event["content_hash"]), 0)
            turn = record(text, text, source_event_ids=[event["event_id"]])
            ids[text] = turn["record_id"]
            writes.insert_record(conn, turn)
            vector = embedder.embed([embeddings.record_text(turn)])[0]
            writes.save_embedding(conn, turn["record_id"], embeddings.text_hash(
                embeddings.record_text(turn), embedder.files.space), embeddings.to_blob(vector),
                embeddings.made_from)
    conn.close()
    return ids


def test_a_hit_comes_with_the_matching_turns_around_it(tmp_path, embedder):
    ids = conversation_database(tmp_path / "db.sqlite", embedder)
    order = {record_id: (session, n) for session, turns in CONVERSATION.items()
             for n, text in enumerate(turns) for record_id in [ids[text]]}
    searcher = Engine(tmp_path / "db.sqlite", embedder=embedder)
    try:
        result = searcher.search(Request(NAMESPACE, "What did Mel make in her pottery class?", 1,
                                 10_000, mode="hybrid"))
        hits = [r for r in result.records if "neighbour_of" not in r]
        assert len(hits) == 1 and order[hits[0]["record_id"]][0] == "s-pottery"
        shown = [r for r in result.records if "neighbour_of" in r]
        assert shown, "no neighbour shown"
        for r in shown:  # the turn just before or after, in the hit's own session
            (session, n), (hit_session, m) = order[r["record_id"]], order[r["neighbour_of"]]
            assert session == hit_session and abs(n - m) == 1
        assert "A blue bowl with my own glaze" in result.context
        assert result.records == sorted(result.records, key=lambda r: order[r["record_id"]])
        # a neighbour is shown only in what the hits leave of the context's budget
        capped = context_format.within_tokens(result.records, context_format.estimate_tokens(
            context_format.context_block(hits)))
        assert capped == hits
        searcher.neighbour_weight = 0
        alone = searcher.search(Request(NAMESPACE, "What did Mel make in her pottery class?", 1,
                                10_000, mode="hybrid"))
        assert len(alone.records) == 1 and "neighbour_of" not in alone.records[0]
    finally:
        searcher.close()


def test_a_turn_among_matching_turns_ranks_higher(tmp_path, embedder):
    ids = conversation_database(tmp_path / "db.sqlite", embedder)
    searcher = Engine(tmp_path / "db.sqlite", embedder=embedder, neighbour_weight=0)
    query = "Caroline's dog Rex and the frisbee"
    try:
        plain = searcher.search(Request(NAMESPACE, query, 10, 10_000, mode="hybrid")).record_ids
        searcher.neighbour_weight = 0.3
        smoothed = [r["record_id"] for r in searcher.search(Request(
            NAMESPACE, query, 10, 10_000, mode="hybrid")).records if "neighbour_of" not in r]
    finally:
        searcher.close()
    lone = ids[CONVERSATION["s-pottery"][3]]  # the dog, amid talk of pottery
    beach = ids[CONVERSATION["s-dog"][0]]  # the dog, and the next turn is about dogs too
    assert plain[0] == lone and smoothed[0] == beach
    assert set(plain) == set(smoothed)


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_type_usefulness_and_staleness_order_records_that_match_alike(tmp_path, embedder,
                                                                      mode):
    """Two records that say the same: by relevance and recency the newer leads; a heavier
    type, a proven use, or the newer one's file changed since puts the older first, in
    either ranking (``steps.weigh``)."""
    path = tmp_path / "db.sqlite"
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="milliseconds")
    text = ("Cache the user lookups", "Lookups of users are cached for ten minutes.")
    older = record(*text, observation_type="discovery", files_touched=["app/users.py"],
                   created_at=hour_ago)
    newer = record(*text, observation_type="discovery", files_touched=["app/cache.py"])
    embedded_database(path, embedder, [older, newer])
    conn = db.connect_writer(path)
    weights = ranking.Weights(useful=0.1, stale=0.85, types={"decision": 1.2})
    searcher = Engine(path, embedder=embedder, weights=weights)

    def first() -> str:
        return searcher.search(Request(NAMESPACE, "how are user lookups cached", 2, 10_000,
                                       mode=mode)).record_ids[0]

    def change(sql: str, *args: object) -> None:
        with conn.transaction():
            conn.execute(sql, args)

    try:
        assert first() == newer["record_id"]
        change("UPDATE memory_records SET observation_type = 'decision' WHERE record_id = $1",
               older["record_id"])
        assert first() == older["record_id"]
        change("UPDATE memory_records SET observation_type = 'discovery'")
        change("UPDATE memory_records SET useful_count = 1 WHERE record_id = $1",
               older["record_id"])
        assert first() == older["record_id"]
        change("UPDATE memory_records SET useful_count = 0")
        assert first() == newer["record_id"]
        # turns 1 and 2 made them; turn 3 changed app/cache.py, which the newer names
        change("UPDATE memory_records SET turn_seq = CASE record_id WHEN $1 THEN 1 ELSE 2 END",
               older["record_id"])
        change("INSERT INTO file_changes VALUES ($1, $2, 3)", NAMESPACE,
               db.path_key("app/cache.py"))
        assert first() == older["record_id"]
        searcher.weights = ranking.Weights()  # relevance and recency alone
        assert first() == newer["record_id"]
    finally:
        searcher.close()
        conn.close()


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_the_files_in_play_and_the_time_named_lift_records_in_either_ranking(tmp_path,
                                                                             embedder, mode):
    """Records that say the same: the one naming a file in play (``steps.in_play``), and
    the one of the day the request names (``steps.in_time``), lead, whatever the mode."""
    path = tmp_path / "db.sqlite"
    now = datetime.now(UTC)

    def ago(days: float) -> str:
        return (now - timedelta(days=days)).isoformat(timespec="milliseconds")

    text = ("Cache the user lookups", "Lookups of users are cached for ten minutes.")
    newest = record(*text, files_touched=["app/cache.py"])
    in_play = record(*text, files_touched=["app/users.py"], created_at=ago(0.01))
    long_ago = record(*text, files_touched=["app/other.py"], created_at=ago(30))
    embedded_database(path, embedder, [long_ago, in_play, newest])
    searcher = Engine(path, embedder=embedder)

    def first(query: str, **asked: object) -> str:
        return searcher.search(Request(NAMESPACE, query, 3, 10_000, mode=mode,
                                       **asked)).record_ids[0]

    try:
        assert first("how are user lookups cached") == newest["record_id"]
        assert first("how are user lookups cached",
                     files=["app/users.py"]) == in_play["record_id"]
        day = (now - timedelta(days=30)).astimezone().strftime("%Y-%m-%d")
        assert first(f"how were user lookups cached on {day}") == long_ago["record_id"]
    finally:
        searcher.close()


def test_earlier_work_on_a_file_in_play_is_a_candidate_however_the_store_ranks_it(
        tmp_path, embedder):
    """Seventy newer records match the request better, in words and meaning, than the
    one older record of the file in play, which neither side's 60 candidates reach;
    ranked on a list of its own (``steps.of_play``), it comes back among 15."""
    path = tmp_path / "db.sqlite"
    old = (datetime.now(UTC) - timedelta(days=60)).isoformat(timespec="milliseconds")
    mine = record("Session store in front of the users table",
                  "Reads of users go through the session store first.",
                  files_touched=["app/users.py"], created_at=old)
    others = [record(f"Cache the user lookups of service {n}",
                     f"Lookups of users in service {n} are cached for ten minutes.",
                     files_touched=[f"services/s{n}.py"]) for n in range(70)]
    embedded_database(path, embedder, [mine, *others])
    searcher = Engine(path, embedder=embedder)

    def found(**asked: object) -> list[str]:
        return searcher.search(Request(NAMESPACE, "how are user lookups cached", 15,
                                       10_000, mode="hybrid", **asked)).record_ids

    try:
        assert mine["record_id"] not in found()
        assert mine["record_id"] in found(files=["app/users.py"])
        assert mine["record_id"] not in found(files=["app/unrelated.py"])
    finally:
        searcher.close()


def test_a_memory_given_to_a_turn_that_touched_its_files_proved_useful(ingest, daemon):
    """Through the daemon: a prompt is given the record of earlier work on app/cache.py,
    and its turn edits that file, so the record proved useful once and is stale now (a
    later turn changed its file); a turn that touched other files proves nothing, nor
    does a record given to an edit because it is about the file edited."""
    def turn(session: str, prompt: str, path: str, new: str) -> str:
        """The turn's context: its prompt's, and what its edit was given of its file."""
        asked = make_event("prompt", prompt, session_id=session)
        reply = ingest.call("put_event", {"event": asked, "retrieve": True})
        edit = make_event("tool_use", session_id=session, body={"type": "json", "data": {
            "tool_name": "Edit", "tool_input": {"file_path": f"/tmp/project/{path}",
                                                "old_string": "", "new_string": new},
            "tool_response": {"success": True}}})
        opened = ingest.call("put_event", {"event": edit, "retrieve": True, "opened": [path],
                                           "exclude": reply["retrieval"]["record_ids"]})
        end = make_event("session_summary", "", session_id=session)
        assert opened["status"] == "stored"
        assert ingest.call("put_event", {"event": end})["status"] == "stored"
        return reply["retrieval"]["context"] + opened["retrieval"]["context"]

    def records() -> dict[str, tuple]:
        with db.reading(paths.Home(daemon).db_path) as conn:
            return {title: (record_id, useful) for record_id, title, useful in conn.execute(
                "SELECT record_id, title, useful_count FROM memory_records")}

    def made(count: int) -> dict[str, tuple]:
        return wait_for(lambda: (lambda r: r if len(r) >= count else None)(records()),
                        message=f"{count} records")

    turn("s-1", "Cache the user lookups in app/cache.py", "app/cache.py", "user_cache = {}")
    first = made(1)["Cache the user lookups in app/cache.py"][0]
    given = turn("s-2", "Make the user lookups cache expire after ten minutes",
                 "app/cache.py", "USER_CACHE_TTL_S = 600")
    assert "Cache the user lookups" in given
    turn("s-3", "Update the user lookups notes", "docs/notes.md", "Lookups are cached.")
    now = made(3)
    assert now["Cache the user lookups in app/cache.py"] == (first, 1)
    assert now["Make the user lookups cache expire after ten minutes"][1] == 0
    with db.reading(paths.Home(daemon).db_path) as conn:
        known = fts.signals(conn, [first, now[
            "Make the user lookups cache expire after ten minutes"][0]])
    assert [stale for _, _, stale in known.values()] == [True, False]
    # what an edit is given of the file it opens is about that file by design: no proof
    assert "expire after ten minutes" in turn("s-4", "Rename the helpers", "app/cache.py",
                                              "def helper(): pass")
    later = made(4)
    assert later["Cache the user lookups in app/cache.py"] == (first, 1)
    assert later["Make the user lookups cache expire after ten minutes"][1] == 0


@given(st.lists(st.tuples(st.integers(0, 400), st.booleans()), min_size=1, max_size=12),
       st.integers(20, 800))
def test_neighbours_never_push_out_a_hit(sizes, budget):
    records, hit = [], None
    for n, (size, is_neighbour) in enumerate(sizes):
        r = record(f"Record {n}", "word " * size)
        if is_neighbour and hit is not None:
            r["neighbour_of"] = hit["record_id"]
        else:
            hit = r
        records.append(r)
    kept = context_format.within_tokens(records, budget)
    hits = [r for r in records if "neighbour_of" not in r]
    kept_hits = [r for r in kept if "neighbour_of" not in r]
    assert [r["record_id"] for r in kept_hits] == [r["record_id"] for r in hits[:len(kept_hits)]]
    alone = context_format.within_tokens(hits, budget)
    assert len(kept_hits) == len(alone)
    shown = {r["record_id"] for r in kept_hits}
    assert all(r["neighbour_of"] in shown for r in kept if "neighbour_of" in r)


def test_a_summary_that_repeats_the_title_is_not_shown_twice():
    day = "2026-05-14T10:00:00+00:00"  # the day of the work, shown by the title
    short = context_format.record_section(record("We deploy with pnpm.", "We deploy with pnpm.",
                                                 created_at=day))
    assert short == "### We deploy with pnpm. · 2026-05-14"
    text = " ".join(f"w{n}" for n in range(40)) + " and the rest, which the title lacks."
    long = record(tooluse_cut(text, 120), text + "\n\nDone: edited 1 file.", created_at=day)
    section = context_format.record_section(long)
    assert re.findall(r"\bw\d+\b", section) == [f"w{n}" for n in range(40)]
    assert section.endswith("w39 and the rest, which the title lacks.\n\nDone: edited 1 file.")
    assert "… · 2026-05-14\n\n…w" in section


# -- the daemon: back-fill, status, modes ----------------------------------------------------


def save(ingest: transport.Client, records: list[dict]) -> None:
    for r in records:
        assert ingest.call("put_record", {"record": r})["status"] == "stored"


def unembedded(home: Path) -> int:
    conn = db.connect_reader(paths.Home(home).db_path)
    try:
        return conn.execute("SELECT count(*) FROM memory_records WHERE embedding_hash IS NULL"
                            ).fetchone()[0]
    finally:
        conn.close()


def stored_hashes(home: Path) -> dict[str, str | None]:
    conn = db.connect_reader(paths.Home(home).db_path)
    try:
        return dict(conn.execute("SELECT record_id, embedding_hash FROM memory_records"))
    finally:
        conn.close()


def stored_vectors(home: Path) -> dict[str, bytes]:
    conn = db.connect_reader(paths.Home(home).db_path)
    try:
        return dict(conn.execute("SELECT record_id, embedding FROM memory_records"))
    finally:
        conn.close()


def test_records_are_embedded_as_they_come_and_searched_by_meaning(ingest, daemon, embedder):
    save(ingest, RECORDS)
    wait_for(lambda: unembedded(daemon) == 0, timeout=30, message="the back-fill")
    stored = stored_vectors(daemon)
    for r in RECORDS:
        expected = embedder.embed([embeddings.record_text(r)])[0]
        assert np.allclose(embeddings.from_blob(stored[r["record_id"]]), expected, atol=1e-4)
    status = json.loads(kl("status", "--json", check=True).stdout)["embeddings"]
    assert status["embeddings"] == (f"on: all-MiniLM-L6-v2 (packaged, int8; vector space"
                                    f" {embedder.files.space})")
    assert status["mode"] == "hybrid"
    query = "Where are schema changes kept?"
    lexical = kl("search", query, "--namespace", NAMESPACE, "--mode", "lexical", check=True)
    assert lexical.stdout == "" and "no memories matched" in lexical.stderr
    # The default mode. The project's first search has its vectors loaded, in the
    # background: until then, search is lexical.
    found = wait_for(lambda: kl("search", query, "--namespace", NAMESPACE, check=True).stdout,
                     timeout=15, message="a hybrid answer")
    assert "## Prior observations from kirolearn\n\n### How to run database migrations" in found
    again = kl("embeddings", "backfill", check=True)
    assert "every record has its vector" in again.stdout
    assert stored_vectors(daemon) == stored  # nothing embedded twice


def test_a_merge_re_embeds_the_new_text(ingest, daemon):
    first = record("Deploy checklist", "Run the migrations first.", strategy="heuristic")
    save(ingest, [first])
    wait_for(lambda: unembedded(daemon) == 0, timeout=30, message="the back-fill")
    before = stored_vectors(daemon)[first["record_id"]]
    conn = db.connect_writer(paths.Home(daemon).db_path)  # as a batch's merge does
    with conn.transaction():
        merged_into = writes.save_record(conn, record(
            "Deploy checklist", "Announce the release in the team channel.",
            strategy="heuristic"), merge_window_s=3600)
    conn.close()
    assert merged_into == first["record_id"]
    # Written behind storage's back, so nothing told retrieval: ask for the back-fill.
    retrieval("embeddings", {"backfill": True})
    wait_for(lambda: unembedded(daemon) == 0, timeout=30, message="the re-embedding")
    assert stored_vectors(daemon)[first["record_id"]] != before
    # The record as it was before the merge stays readable.
    [merged] = retrieval("get_records", {"ids": [first["record_id"]],
                                         "namespaces": [NAMESPACE]})["records"]
    assert merged["summary"] == ("Run the migrations first.\n\n"
                                 "Announce the release in the team channel.")
    assert [v["summary"] for v in merged["versions"]] == ["Run the migrations first."]


def decisions(count: int) -> list[dict]:
    return [record(f"Decision {n}", f"We chose option {n} for the {n % 7}th module.")
            for n in range(count)]


def test_the_back_fill_survives_a_stop_half_way(home, embedder):
    many = decisions(400)
    kl("start", check=True)
    try:
        with transport.Client(here().endpoint("ingest"), timeout_ms=5000) as ingest:
            save(ingest, many)
    finally:
        kl("stop", check=True)  # most likely mid-way through the back-fill
    kl("start", check=True)
    try:
        result = kl("embeddings", "backfill", "--timeout", "120", check=True)
        assert "every record has its vector" in result.stdout
    finally:
        kl("stop", check=True)
    stored = stored_vectors(home)
    assert len(stored) == 400 and all(len(v) == embeddings.DIMENSIONS * 4
                                      for v in stored.values())
    sample = many[::50]
    expected = embedder.embed([embeddings.record_text(r) for r in sample])
    for r, vector in zip(sample, expected, strict=True):
        assert np.allclose(embeddings.from_blob(stored[r["record_id"]]), vector, atol=1e-4)


def test_vectors_another_model_made_are_never_searched_and_are_made_again(home, embedder):
    """A store whose vectors another model made (here: hashes from before vector spaces
    had names, and vectors that are not the model's): the daemon searches none of them
    by meaning, has storage drop them, and embeds every record again."""
    kl("start", check=True)
    try:
        with transport.Client(here().endpoint("ingest"), timeout_ms=5000) as ingest:
            save(ingest, RECORDS)
        wait_for(lambda: unembedded(home) == 0, timeout=30, message="the back-fill")
    finally:
        kl("stop", check=True)
    other = embeddings.to_blob(-embedder.embed(["How to run database migrations"])[0])
    with sqlite3.connect(paths.Home(home).db_path) as conn:
        conn.execute("UPDATE memory_records SET embedding = ?, embedding_hash ="
                     " hex(randomblob(32))", (other,))
    kl("start", check=True)
    try:
        wait_for(lambda: all((h or "").startswith(f"{embedder.files.space}:")  # None: dropped
                             for h in stored_hashes(home).values()),
                 timeout=60, message="every record embedded again")
        assert "vector(s) are of another model" in kl("logs", "retrieval", check=True).stdout
        found = wait_for(lambda: kl("search", "Where are schema changes kept?", "--namespace",
                                    NAMESPACE, check=True).stdout,
                         timeout=15, message="a hybrid answer")
        assert "### How to run database migrations" in found
    finally:
        kl("stop", check=True)
    stored = stored_vectors(home)
    for r in RECORDS:
        expected = embedder.embed([embeddings.record_text(r)])[0]
        assert np.allclose(embeddings.from_blob(stored[r["record_id"]]), expected, atol=1e-4)


def test_the_back_fill_yields_to_searches_but_is_never_starved(home):
    """Searches keep coming (each one holds the back-fill back a moment): every record
    still gets its vector."""
    many = decisions(40)
    kl("start", check=True)
    try:
        with transport.Client(here().endpoint("ingest"), timeout_ms=5000) as ingest:
            save(ingest, many)
        with transport.Client(here().endpoint("retrieval"), timeout_ms=5000) as retrieval:
            def embedded_while_searched() -> bool:
                retrieval.call("search", {"query": "which option", "namespace": NAMESPACE})
                return retrieval.call("embeddings")["embedded"] >= len(many)
            wait_for(embedded_while_searched, timeout=120, interval=0.1,
                     message="every vector, with a search every 0.1 s")
    finally:
        kl("stop", check=True)


def test_without_the_model_search_is_lexical_and_status_says_so(home, monkeypatch, tmp_path):
    monkeypatch.setenv("KIROLEARN_EMBEDDINGS_MODEL_DIR", str(tmp_path))
    kl("start", check=True)
    try:
        with transport.Client(here().endpoint("ingest"), timeout_ms=5000) as ingest:
            save(ingest, RECORDS[:1])
        status = kl("status", check=True).stdout
        assert (f"embeddings off: embeddings.model_dir {tmp_path} lacks model.onnx,"
                " tokenizer.json; search is lexical; search mode lexical") in status
        found = kl("search", "database migrations", "--namespace", NAMESPACE, "--mode",
                   "hybrid", check=True)
        assert "### How to run database migrations" in found.stdout
    finally:
        kl("stop", check=True)
    with sqlite3.connect(paths.Home(home).db_path) as conn:
        assert conn.execute("SELECT count(*) FROM memory_records WHERE embedding IS NULL"
                            ).fetchone()[0] == 1


def test_storage_keeps_only_vectors_made_from_the_current_text(ingest, daemon, ctx):
    current = record("Cache the invoice totals", "Totals are cached for an hour.")
    save(ingest, [current])
    good = embeddings.text_hash(embeddings.record_text(current), "onnx-0123456789abcdef")
    vector = embeddings.to_blob(np.ones(embeddings.DIMENSIONS, dtype=np.float32) / 20)
    with transport.Client(here().endpoint("storage"), ctx) as storage:
        with pytest.raises(protocol.RemoteError, match="'items' must be a list"):
            storage.call("put_embeddings", {"items": "nope"})
        stale = {"record_id": current["record_id"], "text_hash": "0" * 64, "vector": vector}
        short = {"record_id": current["record_id"], "text_hash": good, "vector": vector[:8]}
        unknown = {"record_id": contract.new_record_id(), "text_hash": good, "vector": vector}
        assert storage.call("put_embeddings", {"items": [stale, short, unknown, 42]}) == {
            "written": 0, "merged": 0}
        assert storage.call("put_embeddings", {"items": [
            {"record_id": current["record_id"], "text_hash": good, "vector": vector}]}) == {
            "written": 1, "merged": 0}
        # Vectors of any other space are dropped on retrieval's word (test_db); a bad
        # name is refused.
        for bad in ("", "a:b", "x" * 65, 7):
            with pytest.raises(protocol.RemoteError, match="'keep_space' must be"):
                storage.call("drop_vectors", {"keep_space": bad})


def test_a_turn_that_says_the_same_in_other_words_is_merged_into_the_earlier(ingest, daemon):
    """Through the daemon: two sessions ask about the spool in other words, read the same
    file and answer alike; once embedded, the second record is merged into the first,
    which then holds both and the second session's turn. A different question about the
    same file stays a record of its own, and nothing is recalled twice."""
    def turn(session: str, prompt: str, answer: str, *paths_read: str) -> None:
        events = [make_event("prompt", prompt, session_id=session)]
        events += [make_event("tool_use", session_id=session, body={"type": "json", "data": {
            "tool_name": "Read", "tool_input": {"file_path": f"/tmp/project/{path}"},
            "tool_response": {"type": "text", "file": {"filePath": f"/tmp/project/{path}",
                                                       "content": "def replay(): ..."}}}})
            for path in paths_read]
        events.append(make_event("session_summary", answer, session_id=session))
        assert ingest.call("put_events", {"events": events})["results"][-1]["status"] == "stored"

    def records() -> dict[str, dict]:
        with db.reading(paths.Home(daemon).db_path) as conn:
            return {r[1]: {"id": r[0], "invalid": r[2], "session": r[3], "sources": r[4]}
                    for r in conn.execute(
                        "SELECT record_id, title, invalid_reason, session_id,"
                        " source_event_ids_json FROM memory_records")}

    turn("s-1", "How does the spool replay work?", "The shim appends each event to a spool"
         " file when the daemon is away; the next hook replays it oldest first and deletes"
         " what was taken.", "kirolearn/spool.py")
    wait_for(lambda: unembedded(daemon) == 0 and records(), message="the first record")
    turn("s-2", "how is the spool replayed", "Events wait in the spool file while the daemon"
         " is down; the next hook sends them, oldest first, and removes the ones stored.",
         "kirolearn/spool.py")
    turn("s-3", "What is the spool's file format?", "One JSON line per event, in a file per"
         " day, readable by its owner only.", "kirolearn/spool.py")
    now = wait_for(lambda: (lambda r: r if len(r) == 3 and unembedded(daemon) == 0
                            and r["how is the spool replayed"]["invalid"] else None)(records()),
                   message="the repeat merged")
    first, again = now["How does the spool replay work?"], now["how is the spool replayed"]
    assert re.fullmatch(rf"merged into {first['id']}, which says the same \(the same files,"
                        r" similarity 0\.9\d\)", again["invalid"])
    assert first["invalid"] is None and first["session"] == "s-2"
    assert set(json.loads(again["sources"])) < set(json.loads(first["sources"]))
    assert now["What is the spool's file format?"]["invalid"] is None
    [merged] = retrieval("get_records", {"ids": [first["id"]], "namespaces": [NAMESPACE]})[
        "records"]
    assert "Events wait in the spool file" in merged["summary"] and len(merged["versions"]) == 1
    found = wait_for(lambda: kl("search", "spool replay oldest first", "--namespace",
                                NAMESPACE, "--json", check=True).stdout, message="a search")
    ids = [r["record_id"] for r in json.loads(found)["records"]]
    assert first["id"] in ids and again["id"] not in ids


def test_work_whose_changed_lines_say_what_the_request_says_is_a_candidate(tmp_path, embedder):
    """Seventy newer records match the request better, in words and meaning, than one
    older record worded otherwise; the lines its edit changed hold the request's words
    (``changes``, never shown), and ranked on a list of their own (``steps.changed``)
    they bring it back among 15, whose context shows no line of them."""
    path = tmp_path / "db.sqlite"
    old = (datetime.now(UTC) - timedelta(days=60)).isoformat(timespec="milliseconds")
    mine = {**record("Speed up the signup page", "The page renders in half the time.",
                     created_at=old),
            "changes": "ttl = lookup_cache_minutes(user)\nreturn cached_user_lookup(ttl)"}
    others = [record(f"Cache the user lookups of service {n}",
                     f"Lookups of users in service {n} are cached for ten minutes.")
              for n in range(70)]
    embedded_database(path, embedder, [mine, *others])
    searcher = Engine(path, embedder=embedder)
    try:
        found = searcher.search(Request(NAMESPACE, "how are user lookups cached", 15, 10_000,
                                        mode="hybrid"))
        assert mine["record_id"] in found.record_ids
        assert "lookup_cache_minutes" not in found.context
        without = searcher.search(Request(NAMESPACE, "how is the signup page rendered", 15,
                                          10_000, mode="hybrid"))
        assert without.record_ids[0] == mine["record_id"]
    finally:
        searcher.close()
