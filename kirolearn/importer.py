"""Bulk import: JSON Lines of v1 events, and an export's records and tombstones, through
ingest, a few chunks in flight.

Ingest validates one chunk while storage commits another. A chunk is retried while
ingest or storage restarts: an event its own earlier attempt stored comes back as
a duplicate stored since the import began, and is counted as stored. A line that
cannot be an event is rejected here with its reason. Every
rejected line is kept, with its number and reason, in ``quarantine/import-<time>.jsonl``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import tenacity

from kirolearn import contract, control, db, paths, privacy, protocol, transport
from kirolearn.db import reads, schema

CHUNK_LINES = 500
CHUNK_BYTES = 1024 * 1024  # a chunk of lines stays well under the frame limit
IN_FLIGHT = 3
RETRY_FOR_S = 60


class Stalled(RuntimeError):
    """Ingest stopped answering; the message says how far the import got."""


@dataclass
class Report:
    counts: dict[str, int] = field(
        default_factory=lambda: {"stored": 0, "duplicate": 0, "rejected": 0})
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


def send_chunk(client: transport.Client, lines: list[str], kind: str = "events") -> list[dict]:
    """One chunk of lines of a kind, with retries while ingest or storage is
    restarting."""
    op, extra = REQUESTS[kind]
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(RETRY_FOR_S),
        wait=tenacity.wait_exponential_jitter(initial=0.1, max=2),
        retry=tenacity.retry_if_exception(_retryable), reraise=True)
    return retrying(client.call, op, {"lines": lines, **extra})["results"]


def import_lines(lines: Iterable[str | bytes], home: paths.Home) -> Report:
    """Send every non-blank line through ingest: events, and an export's records and
    tombstones. In a kirolearn export (its first line says so), the events it had
    already distilled are not extracted again. A line of bytes that is not UTF-8 text
    is rejected with that reason. Raises NotAnExport (before sending anything) or
    Stalled when ingest stops answering."""
    run = Import(home)
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

    def __init__(self, home: paths.Home):
        self.home = home
        self.report = Report()
        self.began = db.utc_now()
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
        if not line.strip():
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

    def _send(self, chunk: list[str], kind: str) -> list[dict]:
        if not hasattr(self.local, "client"):
            self.local.client = control.client("ingest", self.home, control.IMPORT_MS)
            self.clients.append(self.local.client)
        return send_chunk(self.local.client, chunk, kind)

    def _submit(self, kind: str) -> None:
        chunk = self.chunks[kind]
        if chunk.lines:
            self.in_flight.append((chunk.numbers, kind,
                                   self.pool.submit(self._send, chunk.lines, kind)))
            self.chunks[kind] = Chunk()
        if len(self.in_flight) >= IN_FLIGHT:
            self._collect_oldest()

    def _collect_oldest(self) -> None:
        numbers, kind, future = self.in_flight.popleft()
        try:
            results = future.result()
        except protocol.RemoteError as exc:  # the whole chunk was refused
            results = [{"status": "rejected", "reason": str(exc)}] * len(numbers)
        except transport.Timeout as exc:
            raise Stalled(f"ingest stopped answering ({exc}); the lines before"
                          f" line {numbers[0]} were sent") from exc
        for line_no, result in zip(numbers, results, strict=True):
            text = self.sent.pop(line_no)
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
