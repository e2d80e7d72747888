"""The spool: events a shim could not hand to the daemon, one file per event.

A shim writes here when the daemon is down or does not acknowledge in time, so
a hook never waits and no event is lost; ingest drains the directory when it
starts and every few seconds after. On a client of a daemon elsewhere there is no
ingest here: a hook starts ``python -m kirolearn.control`` in the background instead
(``control.start_draining``), which sends the events there. Each file is
``<event_id>.json``, written to a temporary name, flushed to disk and renamed, so a
reader never sees half an event. A late acknowledgement can mean the event is both
stored and spooled: storage deduplicates by event id, so draining it again changes
nothing.
Standard library only (shims import this on their slow path).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kirolearn import paths

SUFFIX = ".json"


def write(event: dict, home: paths.Home) -> Path:
    """Spool one event atomically; returns its file."""
    directory = paths.ensure_private_dir(home.spool_dir)
    data = json.dumps(event, ensure_ascii=False).encode("utf-8")
    return paths.write_private(directory / f"{event['event_id']}{SUFFIX}", data, durable=True)


def waiting(home: paths.Home, limit: int | None = None) -> list[Path]:
    """Spooled event files, oldest first (ULIDs sort by time)."""
    try:
        names = sorted(n for n in os.listdir(home.spool_dir)
                       if n.endswith(SUFFIX) and not n.startswith("."))
    except FileNotFoundError:
        return []
    directory = home.spool_dir
    return [directory / n for n in names[:limit]]


def read(path: Path) -> object:
    """The event in a spool file, or a string saying why it cannot be read."""
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        return f"unreadable spool file {path.name}: {type(exc).__name__}: {exc}"


def discard(namespace: str, home: paths.Home) -> int:
    """Delete the spooled events of one namespace (its project is being forgotten); how
    many."""
    removed = 0
    for path in waiting(home):
        event = read(path)
        if isinstance(event, dict) and event.get("namespace") == namespace:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def reject(path: Path, reason: str, home: paths.Home) -> None:
    """Move a file ingest cannot accept to the quarantine, with the reason next to it."""
    directory = paths.ensure_private_dir(home.quarantine_dir)
    os.replace(path, directory / path.name)
    paths.write_private(directory / f"{path.name}.reason", (reason + "\n").encode("utf-8"))

