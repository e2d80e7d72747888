"""The embedding model in a process of its own, there only while it is used.

The model costs the process that runs it about 200 MB (its weights unfolded to float32,
onnxruntime, the buffers of its runs), which a daemon left running all day should not
hold between sessions. The retrieval role therefore asks a child process
(``python -m kirolearn.search.embed_worker``) for its vectors: ``Worker`` starts it
when first asked, and the child exits once ``idle_s`` pass without a request, handing
all of that back. The next request starts it again (a few tenths of a second: a
search that cannot wait is answered by its words alone meanwhile).

The two talk over the child's stdin and stdout, a frame at a time: four bytes of
length (big-endian), then the body. A request is the JSON list of one text; the answer
is ``v`` and the vector (DIMENSIONS little-endian float32), or ``e`` and what went
wrong. One text a request, so a search's query waits behind one text of a back-fill at
most. The child reads nothing else, so it ends with its parent: its stdin closes.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

from kirolearn.search import embeddings

LENGTH = struct.Struct(">I")
ANSWER_S = 60.0  # the most a start and one text may take before the child counts as stuck


class WorkerGone(RuntimeError):
    """The child ended (idle, killed) or never answered."""


def _write_frame(stream: IO[bytes], body: bytes) -> None:
    stream.write(LENGTH.pack(len(body)) + body)
    stream.flush()


def _read_exactly(stream: IO[bytes], size: int, timeout: float | None) -> bytes:
    """``size`` bytes of an unbuffered stream; EOFError when it ends, TimeoutError when
    nothing comes for ``timeout`` seconds (None: wait)."""
    data = b""
    while len(data) < size:
        if timeout is not None and not select.select([stream], [], [], timeout)[0]:
            raise TimeoutError(f"nothing for {timeout:.0f} s")
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("the stream ended")
        data += chunk
    return data


def _read_frame(stream: IO[bytes], timeout: float | None = None) -> bytes:
    (size,) = LENGTH.unpack(_read_exactly(stream, LENGTH.size, timeout))
    return _read_exactly(stream, size, timeout)


class Worker:
    """``Embedder``'s interface (``files``, ``embed``), the model run by a child process
    that ``Worker`` starts on demand and that exits after ``idle_s`` without work."""

    def __init__(self, files: embeddings.ModelFiles, idle_s: float, threads: int = 1):
        import numpy as np

        self.np = np
        self.files = files
        self.idle_s = idle_s
        self.threads = threads
        self.starts = 0  # how often a child was started (for status and tests)
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._answered = False  # the running child has answered: its model is loaded

    @property
    def pid(self) -> int | None:
        """The running child's pid (None: none is running)."""
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    @property
    def ready(self) -> bool:
        """Whether a child runs with its model loaded (a search need not wait for one)."""
        return self.pid is not None and self._answered

    def warm(self) -> None:
        """Start the child now, in the background, unless it runs or is starting (a
        session begins: its first prompt should find the model loaded)."""
        if self.pid is None and not self._lock.locked():
            threading.Thread(target=self._start_now, daemon=True, name="model-start").start()

    def _start_now(self) -> None:
        with contextlib.suppress(RuntimeError):  # the next search meets it, and says so
            self.embed(["kirolearn"])

    def embed(self, texts: list[str]) -> Any:
        """An (n, DIMENSIONS) float32 array of unit vectors, one per text (see
        ``Embedder.embed``); raises RuntimeError with the child's reason when the model
        fails, WorkerGone when no child could answer."""
        vectors = self.np.zeros((len(texts), embeddings.DIMENSIONS), dtype=self.np.float32)
        for row, text in enumerate(texts):
            vectors[row] = self._embed_one(text)
        return vectors

    def _embed_one(self, text: str) -> Any:
        request = json.dumps([text]).encode()
        with self._lock:
            for attempt in (1, 2):  # a child that left as it was asked: once more, anew
                child = self._running()
                try:
                    _write_frame(child.stdin, request)
                    answer = _read_frame(child.stdout, ANSWER_S)
                except (OSError, EOFError, ValueError) as exc:  # TimeoutError is an OSError
                    self._reap()
                    if attempt == 2:
                        raise WorkerGone(f"the embedding process ended: {exc}") from exc
                    continue
                if answer[:1] == b"v":
                    self._answered = True
                    return self.np.frombuffer(answer[1:], dtype="<f4")
                raise RuntimeError(answer[1:].decode("utf-8", "replace"))
        raise AssertionError("unreachable")

    def _running(self) -> subprocess.Popen:
        if self._child is not None and self._child.poll() is None:
            return self._child
        self._reap()
        self._answered = False
        self._child = subprocess.Popen(
            [sys.executable, "-m", "kirolearn.search.embed_worker", str(self.files.model),
             str(self.files.tokenizer), str(self.idle_s), str(self.threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, close_fds=True)
        self.starts += 1
        return self._child

    def _reap(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        for stream in (child.stdin, child.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        try:
            child.wait(5)  # its stdin closed: it ends once the text in hand is done
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    def close(self) -> None:
        """End the child, if one runs (waits for a text it is embedding)."""
        with self._lock:
            self._reap()


def load(cfg: dict) -> Worker:
    """A worker for the model ``embeddings.find_model`` finds, checked by embedding one
    text now (Unavailable says why not). Its child then exits after ``idle_s``."""
    files = embeddings.find_model(cfg["model_dir"])
    worker = Worker(files, float(cfg["idle_s"]), threads=min(2, os.cpu_count() or 1))
    try:
        worker.embed(["kirolearn"])
    except (RuntimeError, OSError) as exc:
        worker.close()
        raise embeddings.Unavailable(str(exc)) from exc
    return worker


def serve(model: Path, tokenizer: Path, idle_s: float, threads: int) -> int:
    """The child: load the model, answer each text, and end after ``idle_s`` without a
    request or when the parent closes our stdin."""
    stdin, stdout = sys.stdin.buffer.raw, sys.stdout.buffer  # unbuffered in: see select
    try:
        embedder = embeddings.Embedder(embeddings.ModelFiles(model, tokenizer, "", ""),
                                       threads=threads)
    except Exception as exc:
        reason = str(exc) if isinstance(exc, embeddings.Unavailable) else \
            f"the embedding model could not be loaded: {exc}"
        failure = b"e" + reason.encode()
        try:  # answer what is asked with the reason, then end
            _read_frame(stdin)
            _write_frame(stdout, failure)
        except (OSError, EOFError):
            pass
        return 1
    while True:
        ready, _, _ = select.select([stdin], [], [], idle_s)
        if not ready:
            return 0  # idle: the memory goes back with the process
        try:
            texts = json.loads(_read_frame(stdin))
        except EOFError:
            return 0  # the parent is gone, or done with us
        try:
            answer = b"v" + embeddings.to_blob(embedder.embed(texts)[0])
        except Exception as exc:
            answer = b"e" + f"{type(exc).__name__}: {exc}".encode()
        try:
            _write_frame(stdout, answer)
        except OSError:
            return 0  # the parent is gone


if __name__ == "__main__":
    _model, _tokenizer, _idle_s, _threads = sys.argv[1:5]
    sys.exit(serve(Path(_model), Path(_tokenizer), float(_idle_s), int(_threads)))
