"""What git says of a project's working tree, for its searches: the files it has
changed (files in play for its prompts), the files it has renamed (an anchored file
followed: ``staleness``), the branch checked out and the branches not merged into it,
with when each forked from it (a record made on one after that is not recalled here).

``git status`` (``git log`` for the renames of the last ``RENAME_COMMITS`` commits,
``git for-each-ref --no-merged`` and ``git merge-base`` for the branches) runs on a
thread of its own, at most once every ``REFRESH_S`` a project and at once when the
checkout moves to another commit, so searches do not wait for git: a search takes what
the last reading found. Only a project's first reading, and the one after a checkout
of another branch, are waited for, briefly (``Worktrees.reading``). git runs as a
reader (``code.git``): none of the repository's hooks, filters or other programs run.
A detached HEAD or a shallow clone reads as no branch: every record is visible there.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from typing import NamedTuple

from kirolearn import project
from kirolearn.code import files
from kirolearn.code.git import Git

REFRESH_S = 10.0  # how old a reading may be before the next search starts another
GIT_TIMEOUT_S = 10.0
MAX_FILES = 50  # the changed files kept of a project (git's order)
MAX_PROJECTS = 256  # readings kept; past this they are all read again
RENAME_COMMITS = 200  # how far back renames are followed
MAX_BRANCHES = 20  # the unmerged branches whose fork is read (the most recent first)
HEAD_READ_S = 0.2  # a search waits this long at most for its checkout's HEAD


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


class Reading(NamedTuple):
    """What git said of a working tree, when."""

    at: float  # time.monotonic()
    changed: tuple[str, ...]
    renamed: dict[str, str] | None  # None: git could not read it as a working tree
    branch: str | None = None  # None: detached, shallow, or no commit yet
    forked: Mapping[str, float] = {}  # an unmerged branch → when it forked (epoch s)
    head: tuple[str | None, str | None] = (None, None)  # ``project.git_head`` then


NOT_READ = Reading(-math.inf, (), None)


def read(root: str, renames: bool = False, git: Git | None = None
         ) -> tuple[tuple[str, ...], dict[str, str] | None]:
    """The files changed in root's working tree, as git says now, and (``renames``)
    those renamed there and in its last commits; none where git cannot say (not a
    repository, no git, too slow), and then renames None."""
    git = git or Git(root, GIT_TIMEOUT_S)
    status = git.output("status", "--porcelain=v1", "-z", "--untracked-files=no",
                        "--ignore-submodules=all")
    if status is None:
        return (), None
    # (no --diff-filter=R: with it, -n counts only commits with a rename, and git walks
    # the whole history to find them; a history of 100,000 commits took it past its cap)
    log = git.output("log", "-M", "--name-status", "-z", "--format=", "--no-textconv",
                     "--no-ext-diff", f"-n{RENAME_COMMITS}") if renames else None
    return parse_status(status), parse_renames(status, log or b"") if renames else {}


def branches(root: str, git: Git | None = None) -> tuple[str | None, dict[str, float]]:
    """The branch checked out at root and, of the local branches not merged into it
    (the ``MAX_BRANCHES`` most recently committed to), when each forked from it: the
    time of their merge base. (None, {}): detached, shallow, or not read."""
    git = git or Git(root, GIT_TIMEOUT_S)
    head = git.output("symbolic-ref", "-q", "--short", "HEAD")
    shallow = git.output("rev-parse", "--is-shallow-repository")
    if not head or shallow is None or shallow.strip() != b"false":
        return None, {}
    branch = head.decode("utf-8", "surrogateescape").strip()
    listed = git.output("for-each-ref", "--no-merged=HEAD", "--sort=-committerdate",
                  f"--count={MAX_BRANCHES}", "--format=%(refname:short)", "refs/heads")
    forked: dict[str, float] = {}
    for name in (listed or b"").decode("utf-8", "surrogateescape").split():
        base = git.output("merge-base", "HEAD", f"refs/heads/{name}")
        when = git.output("show", "-s", "--format=%ct", base.strip().decode()) if base else None
        forked[name] = float(when) if when and when.strip().isdigit() else -math.inf
    return branch, forked


class Worktrees:
    """The last reading of each project's working tree, refreshed in the background."""

    def __init__(self) -> None:
        self._known: dict[str, Reading] = {}
        self._reading: dict[str, threading.Event] = {}  # set when the reading is in
        self._lock = threading.Lock()
        self._heads = files.Reads()  # a checkout whose HEAD read is out is not read

    def head(self, root: str) -> tuple[str | None, str | None] | None:
        """The branch and commit checked out at root (``project.git_head``), read on a
        thread of its own and waited for ``HEAD_READ_S`` at most: a hung file system
        holds no search. None when it did not come in time; a checkout whose read is
        still out is not read again until it comes back."""
        try:
            return self._heads.bounded(root, HEAD_READ_S, lambda: project.git_head(root))
        except files.Abandoned:
            return None

    def changed(self, root: str) -> tuple[str, ...]:
        """The files changed in root's working tree, as last read; a reading older than
        REFRESH_S starts another (for the searches after this one)."""
        return self.reading(root).changed

    def renamed(self, root: str) -> dict[str, str] | None:
        """The files renamed there (old path → new), as last read, likewise; None before
        the first reading, or where git cannot read a working tree."""
        return self.reading(root).renamed

    def reading(self, root: str, head: tuple[str | None, str | None] | None = None,
                wait_s: float = 0.0) -> Reading:
        """The last reading of root (``NOT_READ`` before the first); one older than
        REFRESH_S starts another, and so does one of another commit than ``head`` (the
        one checked out now, when given). Where there is none yet, or it is of another
        branch than ``head``'s, the new one is waited for, ``wait_s`` at most: git
        is quick in most repositories, and a prompt just after a checkout of another
        branch must not be given that branch's work. One not in by then, of another
        branch, comes without its branches (every record visible until the next)."""
        with self._lock:
            last = self._known.get(root, NOT_READ)
            if ((head is not None and head != last.head)
                    or time.monotonic() - last.at >= REFRESH_S) and root not in self._reading:
                self._reading[root] = threading.Event()
                threading.Thread(target=self._read, args=(root,), name="worktree",
                                 daemon=True).start()
            pending = self._reading.get(root)
        if head is None or (last is not NOT_READ and head[0] == last.head[0]):
            return last
        if pending is not None and wait_s > 0 and pending.wait(wait_s):
            with self._lock:
                last = self._known.get(root, NOT_READ)
            if head[0] == last.head[0]:
                return last
        return last._replace(branch=None, forked={})

    def _read(self, root: str) -> None:
        head = project.git_head(root)
        git = Git(root, GIT_TIMEOUT_S)
        files, moved = read(root, renames=True, git=git)
        branch, forked = branches(root, git) if moved is not None else (None, {})
        with self._lock:
            if len(self._known) >= MAX_PROJECTS:
                self._known.clear()
            self._known[root] = Reading(time.monotonic(), files, moved, branch, forked, head)
            self._reading.pop(root).set()
