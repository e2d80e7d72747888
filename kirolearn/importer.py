"""Bulk import: JSON Lines of v1 events through ingest, a few chunks in flight.

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

from kirolearn import contract, control, db, paths, protocol, transport

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
    """Write the rejected lines, with their number and reason, to the quarantine."""
    if not report.rejected:
        return
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = paths.ensure_private_dir(paths.quarantine_dir(base)) / f"import-{stamp}.jsonl"
    data = "".join(json.dumps({"line": line_no, "reason": reason, "text": texts[line_no]},
                              ensure_ascii=False) + "\n"
                   for line_no, reason in sorted(report.rejected))
    report.quarantine = paths.write_private(path, data.encode("utf-8", "surrogatepass"))


def _is_record(line: str) -> bool:
    try:
        item = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return False
    return isinstance(item, dict) and "record_id" in item


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, transport.Timeout) or (
        isinstance(exc, protocol.RemoteError) and exc.code in (
            protocol.ErrorCode.UNAVAILABLE, protocol.ErrorCode.SHUTTING_DOWN,
            protocol.ErrorCode.INTERNAL))


def send_chunk(client: transport.Client, lines: list[str]) -> list[dict]:
    """put_events with retries while ingest or storage is restarting."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(RETRY_FOR_S),
        wait=tenacity.wait_exponential_jitter(initial=0.1, max=2),
        retry=tenacity.retry_if_exception(_retryable), reraise=True)
    return retrying(client.call, "put_events", {"lines": lines})["results"]


def import_lines(lines: Iterable[str], base=None) -> Report:
    """Send every non-blank line (a JSON event) through ingest; raises Stalled when
    ingest stops answering."""
    report = Report()
    began = db.utc_now()
    seen: set[str] = set()  # event ids answered so far: a second one is a true duplicate
    local = threading.local()
    clients: list[transport.Client] = []
    endpoint = paths.endpoint("ingest", base)

    def send(chunk: list[str]) -> list[dict]:
        if not hasattr(local, "client"):
            local.client = transport.Client(endpoint, timeout_ms=control.IMPORT_MS)
            clients.append(local.client)
        return send_chunk(local.client, chunk)

    in_flight: collections.deque = collections.deque()
    sent: dict[int, str] = {}  # each line in flight, until it is answered
    texts: dict[int, str] = {}  # each rejected line, for the quarantine

    def reject(line_no: int, text: str, reason: str) -> None:
        report.add(line_no, "rejected", reason)
        texts[line_no] = text.rstrip("\r\n")

    def collect_oldest() -> None:
        numbers, future = in_flight.popleft()
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
            if (status == "duplicate" and result.get("stored_at", "") >= began
                    and result["event_id"] not in seen):
                status = "stored"  # by this import's own attempt, before a retry
            seen.add(result["event_id"])
            report.add(line_no, status)

    try:
        with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
            chunk: list[str] = []
            numbers: list[int] = []
            chunk_bytes = 0

            def submit() -> None:
                nonlocal chunk, numbers, chunk_bytes
                if chunk:
                    in_flight.append((numbers, pool.submit(send, chunk)))
                    chunk, numbers, chunk_bytes = [], [], 0
                if len(in_flight) >= IN_FLIGHT:
                    collect_oldest()

            for line_no, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                size = len(line.encode("utf-8", "surrogatepass"))
                if size > protocol.MAX_FRAME_BYTES // 2:
                    reject(line_no, line, f"the line is {size} bytes; an event's"
                           f" body may be at most {contract.MAX_BODY_BYTES} bytes")
                    continue
                if '"record_id"' in line and _is_record(line):
                    reject(line_no, line, "a memory record, not an event (records"
                           " are rebuilt by extraction)")
                    continue
                sent[line_no] = line
                if chunk_bytes + size > CHUNK_BYTES:
                    submit()  # a large line travels alone rather than overfill a chunk
                chunk.append(line)
                numbers.append(line_no)
                chunk_bytes += size
                if len(chunk) >= CHUNK_LINES:
                    submit()
            submit()
            while in_flight:
                collect_oldest()
    finally:
        for client in clients:
            client.close()
        keep_rejected(report, texts, base)
    return report
