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


def keep_rejected(report: Report, texts: dict[int, str], base: Path | None = None) -> None:
    """Write the rejected lines (scrubbed), with their number and reason, to the
    quarantine."""
    if not report.rejected:
        return
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = paths.ensure_private_dir(paths.quarantine_dir(base)) / f"import-{stamp}.jsonl"
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


def import_lines(lines: Iterable[str | bytes], base=None) -> Report:
    """Send every non-blank line through ingest: events, and an export's records and
    tombstones. In a kirolearn export (its first line says so), the events it had
    already distilled are not extracted again. A line of bytes that is not UTF-8 text
    is rejected with that reason. Raises NotAnExport (before sending anything) or
    Stalled when ingest stops answering."""
    report = Report()
    began = db.utc_now()
    seen: set[str] = set()  # event ids answered so far: a second one is a true duplicate
    local = threading.local()
    clients: list[transport.Client] = []
    endpoint = paths.endpoint("ingest", base)

    def send(chunk: list[str], kind: str) -> list[dict]:
        if not hasattr(local, "client"):
            local.client = transport.Client(endpoint, timeout_ms=control.IMPORT_MS)
            clients.append(local.client)
        return send_chunk(local.client, chunk, kind)

    in_flight: collections.deque = collections.deque()
    sent: dict[int, str] = {}  # each line in flight, until it is answered
    texts: dict[int, str] = {}  # each rejected line, for the quarantine

    def reject(line_no: int, text: str, reason: str) -> None:
        report.add(line_no, "rejected", reason)
        texts[line_no] = text.rstrip("\r\n")

    def collect_oldest() -> None:
        numbers, kind, future = in_flight.popleft()
        try:
            results = future.result()
        except protocol.RemoteError as exc:  # the whole chunk was refused
            results = [{"status": "rejected", "reason": str(exc)}] * len(numbers)
        except transport.Timeout as exc:
            raise Stalled(f"ingest stopped answering ({exc}); the lines before"
                          f" line {numbers[0]} were sent") from exc
        for line_no, result in zip(numbers, results, strict=True):
            text = sent.pop(line_no)
            status = result["status"]
            if status == "rejected":
                reject(line_no, text, result.get("reason", ""))
                continue
            if kind != "records" and (status == "duplicate" and result.get("stored_at", "")
                                      >= began and result["event_id"] not in seen):
                status = "stored"  # by this import's own attempt, before a retry
            if kind != "records":
                seen.add(result["event_id"])
            report.add(line_no, status)

    try:
        with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
            chunks = {kind: Chunk() for kind in REQUESTS}

            def submit(kind: str) -> None:
                chunk = chunks[kind]
                if chunk.lines:
                    in_flight.append((chunk.numbers, kind,
                                      pool.submit(send, chunk.lines, kind)))
                    chunks[kind] = Chunk()
                if len(in_flight) >= IN_FLIGHT:
                    collect_oldest()

            export = False  # the first line is an export's header
            undistilled: set[str] = set()
            first = True
            for line_no, line in enumerate(lines, start=1):
                if isinstance(line, bytes):
                    try:
                        line = line.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        reject(line_no, line.decode("utf-8", "replace"),
                               f"not UTF-8 text (byte {exc.start + 1}): not a JSON line")
                        first = False
                        continue
                if not line.strip():
                    continue
                size = len(line.encode("utf-8", "surrogatepass"))
                if size > protocol.MAX_FRAME_BYTES // 2:
                    reject(line_no, line, f"the line is {size} bytes; an event's"
                           f" body may be at most {contract.MAX_BODY_BYTES} bytes")
                    continue
                item = _parsed(line) if (export or first or '"record_id"' in line
                                         or '"tombstone"' in line) else None
                if first and item is not None and "kirolearn_export" in item:
                    _check_header(item)
                    export = True
                    first = False
                    continue
                first = False
                if item is not None and set(item) == {"undistilled"}:
                    found = item["undistilled"]
                    ids = found.get("event_ids") if isinstance(found, dict) else None
                    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                        reject(line_no, line, "undistilled: must be {namespace, event_ids}")
                    else:
                        undistilled.update(ids)
                    continue
                kind = _kind(item, export, undistilled)
                sent[line_no] = line
                if chunks[kind].size + size > CHUNK_BYTES:
                    submit(kind)  # a large line travels alone rather than overfill a chunk
                chunks[kind].add(line_no, line, size)
                if len(chunks[kind].lines) >= CHUNK_LINES:
                    submit(kind)
            for kind in REQUESTS:
                submit(kind)
            while in_flight:
                collect_oldest()
    finally:
        for client in clients:
            client.close()
        keep_rejected(report, texts, base)
    return report
