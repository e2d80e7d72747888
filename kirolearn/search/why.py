"""Why a file's lines are as they are: the records of the commits that wrote them.

A range of a working tree's file (``tooluse.Lines``: the lines an agent reads, or the
text an edit is about to replace, found in the file) is blamed (``code.blame``), and
each commit that wrote some of it is looked up in the object index (``record_objects``):
a seeded record by its commit, a live one by the blob its turn left the file as, which
that commit holds. What comes back is each commit's records, the commits with the most
of the lines first: the request, what was concluded, and, where a later record undid the
work, that it was.

Blames are of whole files, made on a thread of their own and kept by the file's content
(``Blames``): a request waits for one at most its budget, and the next request about the
file, any of its lines, finds it made. The file is read as untrusted input
(``code.files``), bounded in time.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

from kirolearn import project
from kirolearn.code import blame, files
from kirolearn.code.blame import Blamed
from kirolearn.code.git import Git
from kirolearn.db import fts
from kirolearn.db.store import Connection
from kirolearn.search import context
from kirolearn.tooluse import Lines

HEADER = "## Why these lines are as they are (from kirolearn)"
MAX_FILE_BYTES = 4 << 20  # a larger file is not blamed
BLAME_S = 30.0  # the longest one file's blame may run
READ_S = 0.2  # the longest the file's read may take
MAX_FILES = 64  # whole-file blames kept
MAX_COMMITS = 20  # the commits of a range looked up, the most lines first
MAX_RECORDS = 3  # the records shown of one commit (its newest)


class Written(NamedTuple):
    """A commit that wrote some of the lines, and its records (newest first)."""

    commit: Blamed
    records: list[dict]


class Blames:
    """Whole-file blames by the file's content, made one at a time on a thread of their
    own (a slow one does not hold the role's thread: it is waited for at most a
    request's budget, and kept for the next)."""

    def __init__(self, most: int = MAX_FILES) -> None:
        self._most = most
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "blame")
        self._made: collections.OrderedDict[tuple[str, str, str], concurrent.futures.Future] = (
            collections.OrderedDict())
        self._gits: dict[str, Git] = {}
        self._lock = threading.Lock()

    def of(self, root: str, path: str, content: bytes, wait_s: float) -> list[Blamed] | None:
        """The file's blame, once made within ``wait_s``; None while it is not."""
        key = (root, path, project.blob_id(content))
        with self._lock:
            made = self._made.get(key)
            if made is None:
                git = self._gits.setdefault(root, Git(root))
                made = self._pool.submit(blame.blame, git, path, BLAME_S)
                self._made[key] = made
                while len(self._made) > self._most:
                    self._made.popitem(last=False)
                if len(self._gits) > self._most:
                    self._gits.clear()
            self._made.move_to_end(key)
        try:
            return made.result(timeout=max(0.0, wait_s))
        except concurrent.futures.TimeoutError:
            return None

    def blobs(self, root: str, commits: list[Blamed], timeout_s: float) -> dict[str, str]:
        """Commit → the blob id of its file (as it named it) there (``blame.blobs``)."""
        with self._lock:
            git = self._gits.setdefault(root, Git(root))
        return blame.blobs(git, commits, timeout_s)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def read(root: str, asked: Lines) -> tuple[bytes, Lines] | None:
    """The file's content (of the working tree at ``root``) and the lines asked about,
    found (``first`` to ``last``); None when the file cannot be read in time, or the
    text asked about is not in it."""
    try:
        content = files.bounded(READ_S, lambda: files.read_in(root, asked.path,
                                                             MAX_FILE_BYTES + 1))
    except files.Abandoned:
        return None
    if content is None or len(content) > MAX_FILE_BYTES:
        return None
    first, last = asked.first, asked.last or content.count(b"\n") + 1
    if asked.text:
        found = blame.lines_of(content.decode("utf-8", "replace"), asked.text)
        if found is None:
            return None
        first, last = found
    return (content, asked._replace(first=first, last=last)) if 1 <= first <= last else None


def written(conn: Connection, namespaces: Sequence[str], asked: Lines, blamed: list[Blamed],
            blobs: Callable[[list[Blamed]], dict[str, str]]) -> list[Written]:
    """The commits that wrote the lines (``blame.within``), each with its records: a
    seeded record by its commit, a live record by the blob (``blobs``: commit → the
    file's blob id there) its turn left the file as. Commits no record tells of are
    left out."""
    commits = blame.within(blamed, asked.first, asked.last)[:MAX_COMMITS]
    blob_of = blobs(commits)
    objects = [(b.commit, "") for b in commits] + [
        (blob_of[b.commit], b.path) for b in commits if b.commit in blob_of]
    rows = fts.records_of_objects(conn, namespaces, objects)
    found = []
    for commit in commits:
        ids = list(dict.fromkeys(rows.get((commit.commit, ""), [])
                                 + rows.get((blob_of.get(commit.commit, ""), commit.path), [])))
        ids = sorted(ids, reverse=True)[:MAX_RECORDS]
        if ids:
            by_row = fts.records_by_rowid(conn, ids)
            found.append(Written(commit, [by_row[i] for i in ids if i in by_row]))
    return [w for w in found if w.records]


def _span(lines: tuple[int, ...]) -> str:
    """``12–14, 20`` for lines 12, 13, 14 and 20."""
    runs: list[list[int]] = []
    for n in lines:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}–{b}" if b > a else str(a) for a, b in runs)


def block(asked: Lines, found: list[Written], max_tokens: int | None,
          given: set[str] | frozenset[str] = frozenset()) -> tuple[str, list[Written]]:
    """The context: a header, the lines asked about, then per commit its records (each a
    ``### `` section, the commit and its lines under the title; one ``given`` to the
    session already, those two lines alone), within ``max_tokens`` (the first always);
    fenced as recalled notes. "" when no commit has a record. With it, the commits and
    records it holds."""
    if not found:
        return "", []
    lines = [n for w in found for n in w.commit.lines]
    parts = [HEADER, f"Lines {min(lines)}–{max(lines)} of {asked.path} were written by"
                     " these commits:"]
    used = context.estimate_tokens("\n\n".join(parts)) + context.FENCE_TOKENS
    kept: list[Written] = []
    for w in found:
        many = "s" if len(w.commit.lines) > 1 else ""
        said = (f"*Commit {w.commit.commit[:10]}, line{many} {_span(w.commit.lines)}"
                f" of {w.commit.path}.*")
        for record in w.records:
            title, _, rest = context.record_section(record).partition("\n\n")
            if record["record_id"] in given:
                rest = "(Given earlier in this session.)"
            section = "\n\n".join(p for p in (title, said, rest) if p)
            cost = context.estimate_tokens(section) + 1
            if max_tokens is not None and used + cost > max_tokens and kept:
                return context.fenced("\n\n".join(parts)), kept
            parts.append(section)
            used += cost
            if kept and kept[-1].commit is w.commit:
                kept[-1].records.append(record)
            else:
                kept.append(Written(w.commit, [record]))
    return context.fenced("\n\n".join(parts)), kept
