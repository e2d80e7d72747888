"""Memories checked against the code as it is: before a record goes into a prompt's
context, the code it is about (its files, and the names its work defined in them:
``extract.anchors``) is looked for in the working tree the prompt comes from, and the
branch it was made on is asked whether it is merged there.

A record whose anchors are all gone (each file deleted, or none of the names its work
defined in it there any more) may mislead: it is left out, or shown marked, by
``retrieval.stale_records``. One whose file changed a lot since (fewer than half of
the names its work defined there still are) ranks below the others; a file that is
still the git blob its work left is not searched at all. A file renamed
(``worktree``: the working tree and its last commits) is followed. A record made on a
branch not merged into the one checked out, after that branch forked from it, is left
out (``Tree.hides``).

The check reads only the candidates' files, keeps their text and blob id by (mtime,
size), never walks the tree, and stops at its budget: what it could not check in time
stands, as a slow filesystem must not cost the context. The tree is untrusted: a file
is read only when it is a regular file inside it (``code.files``: a FIFO, a device or a
link out of the tree is not read, and the record stands), and the check runs on a
thread of its own that the search stops waiting for at its budget, so a filesystem that
hangs holds neither the search nor the next ones (a tree whose check is still stuck is
not checked again until it comes back). Only the
retrieval role of the machine holding the working tree checks (a client elsewhere's
project is not there), for a prompt of this machine, in a git working tree git has
read (where a moved file can be followed; elsewhere, and before the project's first
reading, the records are shown as they are).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from kirolearn.code import files as tree_files
from kirolearn.contract import MAX_ANCHORED_BYTES
from kirolearn.project import blob_id, parts
from kirolearn.search.result import Result

CHECK_S = 0.02  # the most one search spends checking; past it the rest are not checked
MAX_TEXTS = 512  # files whose text is kept
# What became of a file's anchors (``Checkout._anchors_in``)
STANDS, MOVED_ON, GONE = "stands", "moved on", "gone"


class Tree(NamedTuple):
    """The working tree a prompt comes from, as a search checks its records against it
    (``worktree.Worktrees.reading``)."""

    root: str  # the checkout (``project.Project.checkout``)
    renamed: Mapping[str, str]  # old path → new
    mark: bool = False  # show a stale record, marked, instead of leaving it out
    branch: str | None = None  # the branch checked out (None: detached, shallow)
    # Each branch not merged here, and when (epoch seconds) it forked from this one:
    # its work after that is not here.
    forked: Mapping[str, float] = {}
    changed: tuple[str, ...] = ()  # the files changed and not yet committed

    def hides(self, record: dict) -> str | None:
        """Why the record's work is not in this tree (None: it is, or cannot be told):
        it was made on a branch not merged here, after that branch forked from this
        one."""
        branch = (record.get("code") or {}).get("branch")
        fork = self.forked.get(branch) if self.branch is not None else None
        if fork is None or branch == self.branch:
            return None
        try:
            made = datetime.fromisoformat(record["created_at"]).timestamp()
        except (KeyError, TypeError, ValueError):
            return None
        if made <= fork:
            return None
        return f"made on branch `{branch}`, not merged into `{self.branch}`"


class Finding(NamedTuple):
    """What the check found of one record's code."""

    stale: str | None = None  # why its anchors are all gone
    changed: bool = False  # its files changed a lot since its work: it ranks below
    committed: bool = False  # stale in what the branch has committed, not only here


def holds(text: str, name: str) -> bool:
    """Whether ``name`` is in ``text`` as a word of code (not part of a longer name): a
    substring search, each place it is found then looked around, which is many times
    quicker than a regular expression over a long file."""
    at = text.find(name)
    while at != -1:
        end = at + len(name)
        if not (at and (text[at - 1].isalnum() or text[at - 1] in "_$")) and not (
                end < len(text) and (text[end].isalnum() or text[end] in "_$")):
            return True
        at = text.find(name, at + 1)
    return False


class Checkout:
    """Reads working trees for the check, keeping what it read by (mtime, size)."""

    def __init__(self) -> None:
        self._texts: OrderedDict[str, tuple[int, int, str, bytes]] = OrderedDict()
        self._blobs: dict[tuple[str, int, int, int], str] = {}
        self._lock = threading.Lock()
        self._reads = tree_files.Reads()  # a tree whose check is out is not checked

    def _read(self, path: str, fd: int, stat: os.stat_result) -> tuple[str, bytes] | None:
        """A file's text and the bytes it is, from the cache while they match the stat."""
        key = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            known = self._texts.get(path)
            if known is not None and known[:2] == key:
                self._texts.move_to_end(path)
                return known[2], known[3]
        try:
            data = tree_files.read_fd(fd, MAX_ANCHORED_BYTES + 1)
        except OSError:
            return None
        text = data.decode("utf-8", errors="replace")
        with self._lock:
            self._texts[path] = (*key, text, data)
            while len(self._texts) > MAX_TEXTS:
                self._texts.popitem(last=False)
        return text, data

    def _blob(self, path: str, stat: os.stat_result, data: bytes, length: int) -> str:
        """A file's git blob id, kept while the file's stat stays the same."""
        key = (path, stat.st_mtime_ns, stat.st_size, length)
        with self._lock:
            known = self._blobs.get(key)
        if known is None:
            known = blob_id(data, length)
            with self._lock:
                if len(self._blobs) >= MAX_TEXTS:
                    self._blobs.clear()
                self._blobs[key] = known
        return known

    def find(self, root: str, record: dict, renamed: Mapping[str, str],
             changed: Sequence[str] = ()) -> Finding:
        """What became of the record's code in the working tree at ``root``: all of its
        anchors gone (stale, and why; ``committed`` when none of its files has changes
        not yet committed), or its files changed a lot since its work. Nothing found
        when one anchor stands as it was, or there is nothing to check."""
        anchors: dict[str, list[str]] = record.get("anchors") or {}
        blobs: dict[str, str] = (record.get("code") or {}).get("blobs") or {}
        files = [f for f in dict.fromkeys([*record.get("files_touched", []), *anchors])
                 if not os.path.isabs(f)]
        why, moved_on = [], False
        for name in files:
            now = renamed.get(name, name)
            path = os.path.normpath(os.path.join(root, now))
            if not path.startswith(root.rstrip(os.sep) + os.sep):
                return Finding()  # not within the project: not ours to judge
            if not os.path.lexists(path):
                why.append(f"`{name}` no longer exists")
                continue
            names = anchors.get(name, [])
            found = self._anchors_in(root, now, path, names, blobs.get(name)) if names else STANDS
            if found == STANDS:
                return Finding()
            if found == MOVED_ON:
                moved_on = True
                continue
            shown = ", ".join(f"`{n}`" for n in names[:3]) + (" …" if len(names) > 3 else "")
            why.append(f"{shown} no longer in `{now}`")
        if len(why) < len(files):
            return Finding(changed=moved_on)
        if not why:
            return Finding()
        committed = not {renamed.get(f, f) for f in files} & set(changed)
        return Finding("; ".join(why[:3]), committed=committed)

    def _anchors_in(self, root: str, now: str, path: str, names: list[str],
                    blob: str | None) -> str:
        """What became of a file's anchors: ``STANDS`` (the file as the work left it,
        most of its names there, or a file that cannot be read: nothing to judge),
        ``MOVED_ON`` (fewer than half of them there) or ``GONE``."""
        fd = tree_files.open_in(root, now)  # a regular file inside the tree, or nothing
        if fd is None:
            return STANDS
        try:
            stat = os.fstat(fd)
            read = self._read(path, fd, stat) if stat.st_size <= MAX_ANCHORED_BYTES else None
        except OSError:
            read = None
        finally:
            os.close(fd)
        if read is None:
            return STANDS
        text, data = read
        if blob is not None and self._blob(path, stat, data, len(blob)) == blob:
            return STANDS  # as its work left it
        there = 0
        for n in names:  # (no more than half of them are looked for where they are)
            there += holds(text, n)
            if there * 2 >= len(names):
                return STANDS  # most of what its work defined is there
        return MOVED_ON if there else GONE

    def gone(self, root: str, record: dict, renamed: Mapping[str, str]) -> str | None:
        """Why the record's anchors are all gone from the working tree at ``root`` (None:
        one stands, or it has none to check)."""
        return self.find(root, record, renamed).stale

    def check(self, tree: Tree, records: Sequence[dict], deadline: float
              ) -> dict[str, Finding]:
        """What the check found of each record, by id; the records left when ``CHECK_S``
        or the deadline passes are not checked (nor in the answer). The check runs on a
        thread of its own, waited for until then and no longer."""
        until = min(deadline, time.monotonic() + CHECK_S)
        found: dict[str, Finding] = {}
        if not records:
            return found

        def run() -> None:
            for record in records:
                if time.monotonic() >= until:
                    break
                finding = self.find(tree.root, record, tree.renamed, tree.changed)
                with self._lock:
                    found[record["record_id"]] = finding

        with contextlib.suppress(tree_files.Abandoned):
            self._reads.bounded(tree.root, until - time.monotonic() + CHECK_S, run)
        with self._lock:
            return dict(found)



def judge(result: Result, tree: Tree | None, project_id: str, checkout: Checkout,
          deadline: float, known: Callable[[dict], str | None] | None = None) -> None:
    """The result's records as the code is today. Left out (``left_out`` says why): one
    the agent has already (``known``: a rule file it loads); a record of a branch not
    merged into the tree's; one whose code is gone from the tree (with ``tree.mark``,
    shown marked instead); one the store holds stale that could not be checked again
    here. Ranked below the rest: one whose files changed a lot since, and below those
    one superseded by a later record. What the store is to hear (``stale_marks``): a
    record found stale in what its own branch has committed, and one held stale whose
    code is back. A record of another project than ``project_id`` (the global one's)
    names files of its own: it is not checked."""
    mine = [r for r in result.records if parts(r["namespace"])[1] == project_id]
    hidden: dict[str, str] = {}
    found: dict[str, Finding] = {}
    if tree is not None:
        hidden = {r["record_id"]: why for r in mine if (why := tree.hides(r))}
        found = checkout.check(tree, [r for r in mine if r["record_id"] not in hidden],
                               deadline)
    kept, changed, superseded = [], [], []
    for record in result.records:
        record_id = record["record_id"]
        why = hidden.get(record_id)  # not this branch's: neither checked nor marked
        if why is None and known is not None:
            why = known(record)
        if why is None:
            record, why = _judged(record, found.get(record_id), tree, result.stale_marks)
        if why:
            result.left_out.append({"record_id": record_id, "title": record["title"],
                                    "why": why})
        elif record.get("superseded_by"):
            superseded.append(record)
        elif record_id in found and found[record_id].changed:
            changed.append(record)
        else:
            kept.append(record)
    result.records = kept + changed + superseded


def _judged(record: dict, finding: Finding | None, tree: Tree | None,
            marks: dict[str, str | None]) -> tuple[dict, str | None]:
    """The record as it is shown, and why it is left out (None: it is not), from what
    the check found of it (None: not checked) and the store's mark."""
    held = record.get("stale")
    if finding is not None and finding.stale:
        if (finding.committed and not held and tree.branch is not None
                and (record.get("code") or {}).get("branch") == tree.branch):
            marks[record["record_id"]] = finding.stale
        if not tree.mark:
            return record, finding.stale
        return {**record, "stale": {"why": finding.stale,
                                    "at": (held or {}).get("at")}}, None
    if held and finding is not None:  # checked again: its code is back
        marks[record["record_id"]] = None
        return {k: v for k, v in record.items() if k != "stale"}, None
    if held and (tree is None or not tree.mark):
        return record, f"{held['why']} (found so {held['at'][:10]})"
    return record, None
