"""Bulk import: JSON Lines of v1 events, and an export's records and tombstones, through
ingest, a few chunks in flight.

Ingest validates one chunk while storage commits another. A chunk is retried while
ingest or storage is busy or restarts, for up to ``import.wait_s`` (the progress says
so): an event its own earlier attempt stored comes back as a duplicate stored since the
import began, and is counted as stored. A line that cannot be an event is rejected here
with its reason. Every rejected line is kept, with its number and reason, in
``quarantine/import-<time>.jsonl``.

An import of a file keeps, in the home (``imports.json``), the line up to which every
line was answered; run again on the same file after it stopped, it skips those lines
without sending them.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import tenacity

from kirolearn import config, contract, control, db, paths, privacy, protocol, transport
from kirolearn.db import reads, schema

CHUNK_LINES = 500
CHUNK_BYTES = 1024 * 1024  # a chunk of lines stays well under the frame limit
IN_FLIGHT = 3
PROGRESS_S = 1.0  # how often the progress is told while an answer is awaited


class Stalled(RuntimeError):
    """Ingest stopped answering; the message says how far the import got."""


@dataclass
class Progress:
    """How far an import is: the bytes of the lines answered (or skipped), and why it
    waits, if it does."""

    done_bytes: int = 0
    waiting: str | None = None


@dataclass
class Report:
    counts: dict[str, int] = field(
        default_factory=lambda: {"stored": 0, "duplicate": 0, "rejected": 0, "skipped": 0})
    rejected: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)
    quarantine: Path | None = None  # where the rejected lines were kept

    def add(self, line_no: int, status: str, reason: str = "") -> None:
        self.counts[status] += 1
        if status == "rejected":
            self.rejected.append((line_no, reason))


def keep_rejected(report: Report, texts: dict[int, str], home: paths.Home) -> None:
    """Write the rejected lines (scrubbed), with their number and reason, to the
    quarantine."""
    if not report.rejected:
        return
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = paths.ensure_private_dir(home.quarantine_dir) / f"import-{stamp}.jsonl"
    data = "".join(json.dumps({"line": line_no, "reason": reason,
                               "text": privacy.scrub_text(texts[line_no])},
                              ensure_ascii=False) + "\n"
                   for line_no, reason in sorted(report.rejected))
    report.quarantine = paths.write_private(path, data.encode("utf-8", "surrogatepass"))


# -- going on where an import of a file stopped ------------------------------------------

def file_key(file: object) -> str | None:
    """What names a file for going on with its import: its real path, size and time
    (a file changed since is imported afresh); None for a pipe or stdin."""
    try:
        info = os.fstat(file.fileno())  # type: ignore[attr-defined]
        name = file.name  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode) or not isinstance(name, str) or name == "<stdin>":
        return None
    return f"{os.path.realpath(name)}:{info.st_size}:{info.st_mtime_ns}"


def resume_point(home: paths.Home, key: str) -> int:
    """The line up to which an earlier import of the file was answered (0: none)."""
    found = paths.read_json_object(home.imports_file).get(key)
    return found if isinstance(found, int) and found > 0 else 0


def keep_resume_point(home: paths.Home, key: str, line_no: int | None) -> None:
    """Keep the line up to which the import of the file was answered (None: it is done,
    the file is forgotten)."""
    known = paths.read_json_object(home.imports_file)
    if line_no is None:
        if known.pop(key, None) is None:
            return
    else:
        known[key] = line_no
    paths.write_json(home.imports_file, known)


class NotAnExport(ValueError):
    """The file cannot be imported at all (a newer schema); nothing was sent."""


def _parsed(line: str) -> dict | None:
    try:
        item = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return None
    return item if isinstance(item, dict) else None


@dataclass
class Chunk:
    """Lines of one kind, sent together."""

    lines: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    size: int = 0

    def add(self, line_no: int, line: str, size: int) -> None:
        self.lines.append(line)
        self.numbers.append(line_no)
        self.size += size


def _kind(item: dict | None, export: bool, undistilled: set[str]) -> str:
    """How a line is sent (``REQUESTS``): an export's record or tombstone, an event the
    export had already distilled, or an event to extract (``item``: the line parsed,
    where it had to be)."""
    if item is not None and ("record_id" in item or set(item) == {"tombstone"}):
        return "records"
    if export and item is not None and item.get("event_id") not in undistilled:
        return "history"
    return "events"


def _check_header(header: dict) -> None:
    """An export's first line: its format and schema must be ones this version reads."""
    form, schema_version = header.get("kirolearn_export"), header.get("schema")
    if form != reads.EXPORT_FORMAT or not isinstance(schema_version, int):
        raise NotAnExport(f"line 1: not an export this kirolearn reads (format {form!r});"
                          " nothing was imported")
    if schema_version > schema.latest():
        raise NotAnExport(f"the export is from a newer kirolearn (schema {schema_version};"
                          f" this one knows up to {schema.latest()}); upgrade kirolearn to"
                          " import it. Nothing was imported")


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, transport.Timeout) or (
        isinstance(exc, protocol.RemoteError) and exc.code in (
            protocol.ErrorCode.UNAVAILABLE, protocol.ErrorCode.SHUTTING_DOWN,
            protocol.ErrorCode.INTERNAL))


# What a chunk of each kind of line is sent as.
REQUESTS = {"events": ("put_events", {}), "history": ("put_events", {"history": True}),
            "records": ("put_records", {})}


def send_chunk(client: transport.Client, lines: list[str], kind: str, wait_s: float,
               waiting: Callable[[str | None], None], chunk: str | None = None) -> list[dict]:
    """One chunk of lines of a kind, tried again for up to ``wait_s`` while ingest or
    storage is busy or restarting (``waiting`` is told why, then None once answered).
    ``chunk``: its name, the same in each try: ingest answers a try that finds an
    earlier one still at work with that one's answer, rather than do the work again."""
    op, extra = REQUESTS[kind]
    if chunk is not None and op == "put_events":
        extra = {**extra, "chunk": chunk}
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(wait_s),
        wait=tenacity.wait_random_exponential(multiplier=0.1, max=2),
        retry=tenacity.retry_if_exception(_retryable), reraise=True,
        before_sleep=lambda state: waiting(str(state.outcome.exception())))
    results = retrying(client.call, op, {"lines": lines, **extra})["results"]
    waiting(None)
    return results


def import_lines(lines: Iterable[str | bytes], home: paths.Home, skip: int = 0,
                 progress: Callable[[Progress], None] = lambda done: None,
                 answered: Callable[[int], None] = lambda line_no: None) -> Report:
    """Send every non-blank line through ingest: events, and an export's records and
    tombstones. In a kirolearn export (its first line says so), the events it had
    already distilled are not extracted again. A line of bytes that is not UTF-8 text
    is rejected with that reason. The first ``skip`` lines were sent by an earlier run:
    they are counted, not sent. ``progress`` is told how far it is (at least every
    PROGRESS_S while it waits), ``answered`` the line up to which every line was
    answered. Raises NotAnExport (before sending anything) or Stalled when ingest does
    not answer for ``import.wait_s``."""
    run = Import(home, skip, progress, answered)
    try:
        with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
            run.pool = pool
            for line_no, line in enumerate(lines, start=1):
                run.read(line_no, line)
            run.finish()
    finally:
        run.close()
    return run.report


class Import:
    """One import under way: lines sorted into chunks by kind, up to IN_FLIGHT chunks
    sent at once (each on a thread with its own client), answers collected oldest
    first."""

    def __init__(self, home: paths.Home, skip: int = 0,
                 progress: Callable[[Progress], None] = lambda done: None,
                 answered: Callable[[int], None] = lambda line_no: None):
        self.home = home
        self.skip = skip
        self.progress = progress
        self.answered = answered
        self.done = Progress()
        self.read_through = 0  # the last line read
        try:
            self.wait_s = float(config.load(home)["import"]["wait_s"])
        except config.ConfigError:
            self.wait_s = float(config.defaults()["import"]["wait_s"])
        self.report = Report()
        self.began = db.utc_now()
        self.run = contract.new_ulid()  # names this run's chunks (``send_chunk``)
        self.seen: set[str] = set()  # event ids answered so far: a second is a true duplicate
        self.local = threading.local()
        self.clients: list[transport.Client] = []
        self.pool: concurrent.futures.Executor | None = None
        self.in_flight: collections.deque = collections.deque()
        self.sent: dict[int, str] = {}  # each line in flight, until it is answered
        self.texts: dict[int, str] = {}  # each rejected line, for the quarantine
        self.chunks = {kind: Chunk() for kind in REQUESTS}
        self.first = True  # no line read yet (the first may be an export's header)
        self.export = False
        self.undistilled: set[str] = set()

    # -- reading ----------------------------------------------------------------------------

    def read(self, line_no: int, line: str | bytes) -> None:
        """Sort one line: rejected, a header, the export's undistilled ids, or sent."""
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.reject(line_no, line.decode("utf-8", "replace"),
                            f"not UTF-8 text (byte {exc.start + 1}): not a JSON line")
                self.first = False
                return
        self.read_through = line_no
        if not line.strip():
            self.done.done_bytes += len(line.encode("utf-8", "surrogatepass"))
            return
        size = len(line.encode("utf-8", "surrogatepass"))
        if size > protocol.MAX_FRAME_BYTES // 2:
            self.reject(line_no, line, f"the line is {size} bytes; an event's body may be"
                        f" at most {contract.MAX_BODY_BYTES} bytes")
            return
        item = _parsed(line) if (self.export or self.first or '"record_id"' in line
                                 or '"tombstone"' in line) else None
        first, self.first = self.first, False
        if first and item is not None and "kirolearn_export" in item:
            _check_header(item)
            self.export = True
        elif item is not None and set(item) == {"undistilled"}:
            self._note_undistilled(line_no, line, item["undistilled"])
        elif line_no <= self.skip:  # sent by an earlier run
            self.report.add(line_no, "skipped")
            self.done.done_bytes += size
        else:
            self._add(line_no, line, size, _kind(item, self.export, self.undistilled))

    def _note_undistilled(self, line_no: int, line: str, found: object) -> None:
        ids = found.get("event_ids") if isinstance(found, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            self.reject(line_no, line, "undistilled: must be {namespace, event_ids}")
        else:
            self.undistilled.update(ids)

    def reject(self, line_no: int, text: str, reason: str) -> None:
        self.report.add(line_no, "rejected", reason)
        self.texts[line_no] = text.rstrip("\r\n")

    # -- sending ----------------------------------------------------------------------------

    def _add(self, line_no: int, line: str, size: int, kind: str) -> None:
        self.sent[line_no] = line
        if self.chunks[kind].size + size > CHUNK_BYTES:
            self._submit(kind)  # a large line travels alone rather than overfill a chunk
        self.chunks[kind].add(line_no, line, size)
        if len(self.chunks[kind].lines) >= CHUNK_LINES:
            self._submit(kind)

    def _send(self, chunk: list[str], kind: str, first: int) -> list[dict]:
        if not hasattr(self.local, "client"):
            self.local.client = control.client("ingest", self.home, control.IMPORT_MS)
            self.clients.append(self.local.client)
        return send_chunk(self.local.client, chunk, kind, self.wait_s, self._waiting,
                          f"{self.run}:{first}")

    def _waiting(self, why: str | None) -> None:
        self.done.waiting = why and f"waiting for ingest (busy or restarting: {why})"

    def _submit(self, kind: str) -> None:
        chunk = self.chunks[kind]
        if chunk.lines:
            self.in_flight.append((chunk.numbers, kind,
                                   self.pool.submit(self._send, chunk.lines, kind,
                                                    chunk.numbers[0])))
            self.chunks[kind] = Chunk()
        if len(self.in_flight) >= IN_FLIGHT:
            self._collect_oldest()

    def _collect_oldest(self) -> None:
        numbers, kind, future = self.in_flight.popleft()
        while not concurrent.futures.wait([future], timeout=PROGRESS_S).done:
            self.progress(self.done)
        try:
            results = future.result()
        except protocol.RemoteError as exc:  # the whole chunk was refused
            results = [{"status": "rejected", "reason": str(exc)}] * len(numbers)
        except transport.Timeout as exc:
            counts = self.report.counts
            raise Stalled(
                f"ingest did not answer for {self.wait_s:.0f} s ({exc}); stopped with"
                f" {counts['stored']} line(s) stored, {counts['duplicate']} duplicate,"
                f" {counts['rejected']} rejected; every line up to line"
                f" {min(numbers[0] - 1, self.through())} was answered") from exc
        for line_no, result in zip(numbers, results, strict=True):
            text = self.sent.pop(line_no)
            self.done.done_bytes += len(text.encode("utf-8", "surrogatepass"))
            status = result["status"]
            if status == "rejected":
                self.reject(line_no, text, result.get("reason", ""))
                continue
            if kind != "records":
                if (status == "duplicate" and result.get("stored_at", "") >= self.began
                        and result["event_id"] not in self.seen):
                    status = "stored"  # by this import's own attempt, before a retry
                self.seen.add(result["event_id"])
            self.report.add(line_no, status)
        self.answered(self.through())
        self.progress(self.done)

    def through(self) -> int:
        """The line up to which every line was answered (or skipped, or not sent)."""
        waiting = [numbers[0] for numbers, _, _ in self.in_flight]
        waiting += [chunk.numbers[0] for chunk in self.chunks.values() if chunk.numbers]
        return min(waiting) - 1 if waiting else self.read_through

    def finish(self) -> None:
        """Send what is left and wait for every answer."""
        for kind in REQUESTS:
            self._submit(kind)
        while self.in_flight:
            self._collect_oldest()

    def close(self) -> None:
        for client in self.clients:
            client.close()
        keep_rejected(self.report, self.texts, self.home)
