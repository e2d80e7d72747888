"""The files a project's git working tree has changed (files in play for its prompts),
and the files it has renamed (an anchored file followed: ``staleness``).

``git status`` (and ``git log`` for the renames of the last ``RENAME_COMMITS``
commits) runs on a thread of its own, at most once every ``REFRESH_S`` a project, so
no search waits for git: a search takes what the last reading found (nothing, the
first time). Hooks and fsmonitor commands of the repository's configuration are not
run.
"""

from __future__ import annotations

import math
import subprocess
import threading
import time

REFRESH_S = 10.0  # how old a reading may be before the next search starts another
GIT_TIMEOUT_S = 10.0
MAX_FILES = 50  # the changed files kept of a project (git's order)
MAX_PROJECTS = 256  # readings kept; past this they are all read again
RENAME_COMMITS = 200  # how far back renames are followed
GIT = ("git", "-c", "core.fsmonitor=false", "-C")


def parse_status(output: bytes) -> tuple[str, ...]:
    """The paths of ``git status --porcelain=v1 -z`` (a rename: its new path)."""
    entries = output.decode("utf-8", "surrogateescape").split("\0")
    found: list[str] = []
    skip = False
    for entry in entries:
        if skip:  # the old path of a rename or copy
            skip = False
            continue
        if len(entry) < 4:
            continue
        found.append(entry[3:])
        skip = entry[0] in "RC"
    return tuple(dict.fromkeys(found))[:MAX_FILES]


def parse_renames(status: bytes, log: bytes) -> dict[str, str]:
    """Old path → new path, from ``git status --porcelain=v1 -z`` (renames not yet
    committed) and ``git log --name-status -z --format=`` (committed ones, newest
    first); a file renamed twice leads to its last name."""
    moved: dict[str, str] = {}
    entries = log.decode("utf-8", "surrogateescape").split("\0")
    for at, entry in enumerate(entries[:-2]):
        if entry[:1] == "R" and entry[1:].isdigit():
            moved.setdefault(entries[at + 1], entries[at + 2])
    entries = status.decode("utf-8", "surrogateescape").split("\0")
    for at, entry in enumerate(entries[:-1]):
        if len(entry) > 3 and entry[0] == "R":
            moved[entries[at + 1]] = entry[3:]
    for old in list(moved):  # a → b → c: a → c
        seen = {old}
        while moved[old] in moved and moved[old] not in seen:
            seen.add(moved[old])
            moved[old] = moved[moved[old]]
    return moved


def _git(root: str, *args: str) -> bytes | None:
    try:
        done = subprocess.run([*GIT, root, *args], capture_output=True,
                              timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def read(root: str, renames: bool = False) -> tuple[tuple[str, ...], dict[str, str] | None]:
    """The files changed in root's working tree, as git says now, and (``renames``)
    those renamed there and in its last commits; none where git cannot say (not a
    repository, no git, too slow), and then renames None."""
    status = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=no")
    if status is None:
        return (), None
    log = _git(root, "log", "-M", "--diff-filter=R", "--name-status", "-z", "--format=",
               f"-n{RENAME_COMMITS}") if renames else None
    return parse_status(status), parse_renames(status, log or b"") if renames else {}


class Worktrees:
    """The last reading of each project's changed files, refreshed in the background."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[float, tuple[str, ...], dict[str, str] | None]] = {}
        self._reading: set[str] = set()
        self._lock = threading.Lock()

    def changed(self, root: str) -> tuple[str, ...]:
        """The files changed in root's working tree, as last read; a reading older than
        REFRESH_S starts another (for the searches after this one)."""
        return self._last(root)[1]

    def renamed(self, root: str) -> dict[str, str] | None:
        """The files renamed there (old path → new), as last read, likewise; None before
        the first reading, or where git cannot read a working tree."""
        return self._last(root)[2]

    def _last(self, root: str) -> tuple[float, tuple[str, ...], dict[str, str] | None]:
        with self._lock:
            last = self._known.get(root, (-math.inf, (), None))
            if time.monotonic() - last[0] >= REFRESH_S and root not in self._reading:
                self._reading.add(root)
                threading.Thread(target=self._read, args=(root,), name="worktree",
                                 daemon=True).start()
        return last

    def _read(self, root: str) -> None:
        files, moved = read(root, renames=True)
        with self._lock:
            if len(self._known) >= MAX_PROJECTS:
                self._known.clear()
            self._known[root] = (time.monotonic(), files, moved)
            self._reading.discard(root)
