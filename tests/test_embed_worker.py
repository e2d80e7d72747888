"""The embedding model in a process of its own (``search.embed_worker``): the same vectors
as in process, gone when idle and back when asked, started again when killed, and a
broken model a clear reason; through the daemon, ``kirolearn status`` says whether it is
loaded, and a search after it left is answered, by meaning again once it is back."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
from helpers.cli import here, kl
from helpers.events import NAMESPACE
from helpers.waits import wait_for
from test_hybrid import RECORDS, embedded_database, save, unembedded

from kirolearn import transport
from kirolearn.search import embed_worker, embeddings
from kirolearn.search.engine import Engine
from kirolearn.search.request import Request

TEXTS = ["Where are schema changes kept?", "Run alembic upgrade head before deploying",
         "x" * 3000]


@pytest.fixture(scope="module")
def embedder() -> embeddings.Embedder:
    return embeddings.load()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, embedder):
    path = tmp_path_factory.mktemp("worker") / "kirolearn.db"
    embedded_database(path, embedder, RECORDS)
    return path


@pytest.fixture
def worker(embedder):
    made = embed_worker.Worker(embedder.files, idle_s=300)
    yield made
    made.close()
    assert made.pid is None


def test_the_worker_makes_the_vectors_the_model_makes_in_process(worker, embedder):
    assert worker.pid is None  # started when first asked
    assert np.array_equal(worker.embed(TEXTS), embedder.embed(TEXTS))
    assert worker.pid is not None and worker.starts == 1


def test_the_worker_leaves_when_idle_and_comes_back_when_asked(embedder):
    worker = embed_worker.Worker(embedder.files, idle_s=0.5)
    try:
        first = worker.embed(TEXTS[:1])
        child = worker._child
        wait_for(lambda: child.poll() is not None, timeout=30, message="the idle child to end")
        assert child.returncode == 0 and worker.pid is None
        assert np.array_equal(worker.embed(TEXTS[:1]), first)
        assert worker.starts == 2
    finally:
        worker.close()


def test_a_killed_worker_is_started_again(worker):
    first = worker.embed(TEXTS[:1])
    os.kill(worker.pid, signal.SIGKILL)
    assert np.array_equal(worker.embed(TEXTS[:1]), first)
    assert worker.starts == 2


def test_a_model_that_cannot_load_is_unavailable_with_its_reason(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"not a model")
    (tmp_path / "tokenizer.json").write_text(embeddings.TOKENIZER.read_text())
    with pytest.raises(embeddings.Unavailable, match="could not be loaded"):
        embed_worker.load({"model_dir": str(tmp_path), "idle_s": 300})


def test_warming_starts_the_worker_in_the_background(worker):
    worker.warm()
    wait_for(lambda: worker.pid, timeout=60, message="the warmed child")
    assert worker.starts == 1
    worker.embed(TEXTS[:1])
    assert worker.starts == 1  # the warmed child answered


def test_a_search_does_not_wait_for_the_model_to_load(corpus, embedder):
    """The model's process has left: the search is lexical at once and starts it; once
    it is loaded, searches are by meaning again."""
    worker = embed_worker.Worker(embedder.files, idle_s=300)
    searcher = Engine(corpus, embedder=worker)
    query = "Where are schema changes kept?"  # no word in common with any record
    try:
        found = searcher.search(Request(NAMESPACE, query, 10, 60_000, mode="hybrid"))
        assert found.records == [] and "the model is loading" in found.error
        wait_for(lambda: worker.ready, timeout=60, message="the model to load")
        found = searcher.search(Request(NAMESPACE, query, 10, 60_000, mode="hybrid"))
        assert not found.error and found.records[0]["title"] == RECORDS[0]["title"]
        assert worker.starts == 1
    finally:
        searcher.close()
        worker.close()


def model_state() -> str:
    return json.loads(kl("status", "--json", check=True).stdout)["embeddings"]["model"]


@pytest.fixture
def idle_daemon(monkeypatch, home):
    monkeypatch.setenv("KIROLEARN_EMBEDDINGS_IDLE_S", "5")  # > a search's start, loaded
    kl("start", check=True)
    yield home
    kl("stop", check=True)


def test_the_daemon_gives_the_models_memory_back_when_idle(idle_daemon, ctx):
    with transport.Client(here().endpoint("ingest"), ctx, timeout_ms=5000) as ingest:
        save(ingest, RECORDS)
    wait_for(lambda: unembedded(idle_daemon) == 0, timeout=60, message="the back-fill")
    wait_for(lambda: model_state().startswith("not loaded"), timeout=60,
             message="the model's process to leave")
    assert "model not loaded (idle" in kl("status", check=True).stdout
    query = "Where are schema changes kept?"  # no word in common: found by meaning alone
    found = wait_for(lambda: kl("search", query, "--namespace", NAMESPACE, check=True).stdout,
                     timeout=60, message="a search by meaning once the model is back")
    assert "### How to run database migrations" in found
