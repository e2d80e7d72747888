"""What the benchmarks share: progress on stderr, latency figures, a seeded database.

A benchmark stopped by SIGTERM (``timeout``, a test's limit) exits as on Ctrl-C: its
``finally`` blocks run, so the daemon it started is stopped, not left running.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path

from kirolearn import control, db, paths
from kirolearn.db import writes


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, _exit)


def say(*args: object) -> None:
    """Progress for a human: stderr, so stdout stays JSON Lines."""
    print(*args, file=sys.stderr, flush=True)


def daemon_processes() -> dict[str, int]:
    """The running daemon's processes by name (the supervisor's too): their pids, and
    those of the processes a role runs (the embedding model's, by its module's name)."""
    status = control.status(paths.Home.current())
    if status is None:
        raise SystemExit("the daemon is not running")
    found = {"supervisor": status["pid"],
             **{r["name"]: r["pid"] for r in status["roles"] if r["pid"]}}
    for role in [r for r in status["roles"] if r["pid"]]:
        for child in _children(role["pid"]):
            found[_process_name(child, f"{role['name']}_child")] = child
    return found


TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system time of every thread of pid, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def _children(pid: int) -> list[int]:
    """The processes any thread of pid started."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # it ended meanwhile
            continue
    return found


def _process_name(pid: int, otherwise: str) -> str:
    """A Python child's module (``-m kirolearn.search.embed_worker``: embed_worker)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return otherwise
    if b"-m" in argv[:-1]:
        return argv[argv.index(b"-m") + 1].decode().rsplit(".", 1)[-1]
    return otherwise


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def figures(prefix: str, values: list[float]) -> dict:
    """``<prefix>_p50_ms`` and ``<prefix>_p99_ms`` of latencies in milliseconds."""
    return {f"{prefix}_p50_ms": round(statistics.median(values), 3),
            f"{prefix}_p99_ms": round(percentile(values, 99), 3)}


def write_records(base: Path, records: Iterable[dict], where: db.Location | None = None) -> None:
    """Put records straight into the database of the home at base, or the store at where
    (daemon stopped)."""
    paths.Home(base).ensure_layout()
    conn = db.connect_writer(where or paths.Home(base).db_path)
    conn.execute("BEGIN")
    writes.insert_records(conn, records)
    conn.execute("COMMIT")
    conn.close()


def require_embeddings(base: Path, mode: str, bench: str) -> None:
    """Exit at once, saying why, when a semantic or hybrid run's daemon (at base) has no
    embedding model: its records would never get the vectors the run waits for."""
    if mode == "lexical":
        return
    state = (control.embeddings_state(paths.Home(base)) or {}).get(
        "embeddings", "retrieval did not answer")
    if not state.startswith("on"):
        raise SystemExit(f"{bench}: --mode {mode} needs the embedding model, and embeddings are"
                         f" {state} (`kirolearn embeddings download`, or --mode lexical)")
