"""The files a project's git working tree has changed: files in play for its prompts.

``git status`` runs on a thread of its own, at most once every ``REFRESH_S`` a
project, so no search waits for git: a search takes what the last reading found
(nothing, the first time). Hooks and fsmonitor commands of the repository's
configuration are not run.
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


def read(root: str) -> tuple[str, ...]:
    """The files changed in root's working tree, as git says now (none where git
    cannot say: not a repository, no git, too slow)."""
    try:
        done = subprocess.run(
            ["git", "-c", "core.fsmonitor=false", "-C", root, "status", "--porcelain=v1",
             "-z", "--untracked-files=no"],
            capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return ()
    return parse_status(done.stdout) if done.returncode == 0 else ()


class Worktrees:
    """The last reading of each project's changed files, refreshed in the background."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[float, tuple[str, ...]]] = {}
        self._reading: set[str] = set()
        self._lock = threading.Lock()

    def changed(self, root: str) -> tuple[str, ...]:
        """The files changed in root's working tree, as last read; a reading older than
        REFRESH_S starts another (for the searches after this one)."""
        with self._lock:
            read_at, files = self._known.get(root, (-math.inf, ()))
            if time.monotonic() - read_at >= REFRESH_S and root not in self._reading:
                self._reading.add(root)
                threading.Thread(target=self._read, args=(root,), name="worktree",
                                 daemon=True).start()
        return files

    def _read(self, root: str) -> None:
        files = read(root)
        with self._lock:
            if len(self._known) >= MAX_PROJECTS:
                self._known.clear()
            self._known[root] = (time.monotonic(), files)
            self._reading.discard(root)
