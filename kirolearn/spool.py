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

When the home's disk is full (or fails), the event goes to a spool on another file
system instead (``fallbacks``: the user's runtime directory, then /dev/shm; memory,
lost only if the machine restarts before the disk has room again), private and made
as the runtime directory is (never through a link, never another user's); ``waiting``
lists both, so ingest drains both.
Standard library only (shims import this on their slow path).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from kirolearn import paths
from kirolearn.contract import sha256

SUFFIX = ".json"


def fallbacks(home: paths.Home) -> list[Path]:
    """The spools on other file systems, for when the home's cannot be written: one per
    home in the user's runtime directory and in /dev/shm."""
    name = f"kirolearn-{os.getuid()}-{sha256(str(home.root).encode()).hexdigest()[:12]}-spool"
    places = [os.environ.get("XDG_RUNTIME_DIR") or "", "/dev/shm"]
    return [Path(place) / name for place in places if place and os.path.isdir(place)]


def _private_dir(path: Path, make: bool = True) -> Path | None:
    """path as a private folder of ours (made if need be, with ``make``); None when it
    is anything else (a link, another user's, not private) or is not there."""
    if make:
        with contextlib.suppress(OSError):
            os.mkdir(path, 0o700)
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and stat.S_IMODE(info.st_mode) == 0o700):
        return path
    return None


def write(event: dict, home: paths.Home) -> Path:
    """Spool one event atomically; returns its file. Where the home's disk cannot take
    it, a fallback spool does (OSError when none can)."""
    data = json.dumps(event, ensure_ascii=False).encode("utf-8")
    name = f"{event['event_id']}{SUFFIX}"
    try:
        directory = paths.ensure_private_dir(home.spool_dir)
        return paths.write_private(directory / name, data, durable=True)
    except OSError as exc:
        failure = exc
    for place in fallbacks(home):
        directory = _private_dir(place)
        if directory is None:
            continue
        try:
            return paths.write_private(directory / name, data, durable=True)
        except OSError:
            continue
    raise failure


def waiting(home: paths.Home, limit: int | None = None) -> list[Path]:
    """Spooled event files, oldest first (ULIDs sort by time), the home's and the
    fallbacks'."""
    found: list[tuple[str, Path]] = []
    for directory in (home.spool_dir, *fallbacks(home)):
        if directory != home.spool_dir and _private_dir(directory, make=False) is None:
            continue
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        found += [(n, directory / n) for n in names
                  if n.endswith(SUFFIX) and not n.startswith(".")]
    return [path for _, path in sorted(found)[:limit]]


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
    import shutil  # (not on a hook's path)

    directory = paths.ensure_private_dir(home.quarantine_dir)
    shutil.move(path, directory / path.name)  # (a fallback spool is on another disk)
    paths.write_private(directory / f"{path.name}.reason", (reason + "\n").encode("utf-8"))

