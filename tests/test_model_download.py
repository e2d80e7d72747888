"""`kirolearn embeddings download`: the model fetched from a Hugging Face hub into its
cache. The hub is stood in by a real HTTP server on 127.0.0.1 that answers as the hub
does (HF_ENDPOINT points the library at it)."""

from __future__ import annotations

import hashlib
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from helpers.cli import kl

from kirolearn.search import embeddings

COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


class Hub(BaseHTTPRequestHandler):
    """HEAD and GET of /{repo}/resolve/main/{file}, with the hub's metadata headers."""

    files: ClassVar[dict[str, bytes]] = {}
    asked: ClassVar[list[str]] = []

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        self.asked.append(f"{self.command} {self.path}")
        prefix = f"/{embeddings.HUB_REPO}/resolve/main/"
        data = self.files.get(self.path[len(prefix):]) if self.path.startswith(prefix) else None
        if data is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub():
    Hub.files = {embeddings.HUB_MODEL: embeddings.find_model().model.read_bytes()}
    Hub.asked = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def hub_env(tmp_path: Path, endpoint: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf"),
            "HF_HUB_DISABLE_TELEMETRY": "1", **extra}


def cached(tmp_path: Path, filename: str) -> Path:
    return (tmp_path / "hf" / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2"
            / "snapshots" / COMMIT / filename)


def test_download_fills_the_cache_the_daemon_reads(home, hub, tmp_path, monkeypatch):
    result = kl("embeddings", "download", env=hub_env(tmp_path, hub))
    assert result.returncode == 0, result.stderr
    model = cached(tmp_path, embeddings.HUB_MODEL)
    assert f"model: {model}" in result.stdout
    assert model.read_bytes() == Hub.files[embeddings.HUB_MODEL]
    packaged = embeddings.find_model()
    assert (f"the daemon uses the model from: packaged, int8 (vector space {packaged.space})"
            in result.stdout)  # it comes first

    # Without the packaged copy, the cache is where the model is found, and it embeds.
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(embeddings, "packaged_model", lambda: None)
    found = embeddings.find_model()
    assert (found.model, found.tokenizer, found.source) == (model, embeddings.TOKENIZER,
                                                            "Hugging Face cache, float32")
    assert embeddings.Embedder(found).embed(["schema changes"]).shape == (
        1, embeddings.DIMENSIONS)

    # A second download checks the files and fetches nothing.
    Hub.asked.clear()
    again = kl("embeddings", "download", env=hub_env(tmp_path, hub))
    assert again.returncode == 0, again.stderr
    assert Hub.asked and not [a for a in Hub.asked if a.startswith("GET")]

    # A configured folder comes before the cache: a wrong one is said, not hidden.
    elsewhere = kl("embeddings", "download", env=hub_env(
        tmp_path, hub, KIROLEARN_EMBEDDINGS_MODEL_DIR=str(tmp_path / "nowhere")))
    assert elsewhere.returncode == 1
    assert "downloaded, but embeddings.model_dir" in elsewhere.stderr
    assert "lacks model.onnx, tokenizer.json" in elsewhere.stderr


def test_download_fails_clearly_and_leaves_no_file(home, hub, tmp_path):
    Hub.files.clear()
    missing = kl("embeddings", "download", env=hub_env(tmp_path, hub))
    assert missing.returncode == 1
    assert "Error: sentence-transformers/all-MiniLM-L6-v2/onnx/model.onnx could not be" \
           " fetched" in missing.stderr
    assert not cached(tmp_path, embeddings.HUB_MODEL).exists()

    assert "Traceback" not in missing.stderr

    offline = kl("embeddings", "download",
                 env=hub_env(tmp_path / "other", hub, HF_HUB_OFFLINE="1"))
    assert offline.returncode == 1 and "offline (HF_HUB_OFFLINE is set)" in offline.stderr
    assert not (tmp_path / "other" / "hf" / "hub").exists() or not any(
        (tmp_path / "other" / "hf" / "hub").rglob("*.onnx"))
