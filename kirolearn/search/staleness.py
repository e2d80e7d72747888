"""Memories checked against the code as it is: before a record goes into a prompt's
context, the code it is about (its files, and the names its work defined in them:
``extract.anchors``) is looked for in the working tree the prompt comes from.

A record whose anchors are all gone (each file deleted, or none of the names its work
defined in it there any more) may mislead: it is left out, or shown marked, by
``retrieval.stale``. A file renamed (``worktree``: the working tree and its last
commits) is followed. The check reads only the candidates' files, stats them first
and keeps their text by (mtime, size), never walks the tree, and stops at its
budget: what it could not check in time stands, as a slow filesystem must not cost
the context. Only the retrieval role of the machine holding the working tree checks
(a client elsewhere's project is not there), for a prompt of this machine, in a git
working tree git has read (where a moved file can be followed; elsewhere, and before
the project's first reading, the records are shown as they are).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import NamedTuple

CHECK_S = 0.02  # the most one search spends checking; past it the rest are not checked
MAX_FILE_BYTES = 2 << 20  # a larger file is not read: its anchor stands
MAX_TEXTS = 512  # files whose text is kept


class Tree(NamedTuple):
    """The working tree a prompt comes from, as a search checks its records against it."""

    root: str  # the checkout (``project.Project.checkout``)
    renamed: Mapping[str, str]  # old path → new (``worktree.Worktrees.renamed``)
    mark: bool = False  # show a stale record, marked, instead of leaving it out


def _word(name: str) -> re.Pattern:
    return re.compile(r"(?<![\w$])" + re.escape(name) + r"(?![\w$])")


class Checkout:
    """Reads working trees for the check, keeping what it read by (mtime, size)."""

    def __init__(self) -> None:
        self._texts: OrderedDict[str, tuple[int, int, str]] = OrderedDict()
        self._lock = threading.Lock()

    def _text(self, path: str, stat: os.stat_result) -> str | None:
        key = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            known = self._texts.get(path)
            if known is not None and known[:2] == key:
                self._texts.move_to_end(path)
                return known[2]
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read(MAX_FILE_BYTES + 1)
        except OSError:
            return None
        with self._lock:
            self._texts[path] = (*key, text)
            while len(self._texts) > MAX_TEXTS:
                self._texts.popitem(last=False)
        return text

    def gone(self, root: str, record: dict, renamed: Mapping[str, str]) -> str | None:
        """Why the record's anchors are all gone from the working tree at ``root`` (None:
        one stands, or it has none to check)."""
        anchors: dict[str, list[str]] = record.get("anchors") or {}
        files = [f for f in dict.fromkeys([*record.get("files_touched", []), *anchors])
                 if not os.path.isabs(f)]
        why = []
        for name in files:
            now = renamed.get(name, name)
            path = os.path.normpath(os.path.join(root, now))
            if not path.startswith(root.rstrip(os.sep) + os.sep):
                return None  # not within the project: not ours to judge
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                why.append(f"`{name}` no longer exists")
                continue
            except OSError:
                return None
            names = anchors.get(name, [])
            if not names or stat.st_size > MAX_FILE_BYTES:
                return None
            text = self._text(path, stat)
            if text is None or any(_word(n).search(text) for n in names):
                return None
            shown = ", ".join(f"`{n}`" for n in names[:3]) + (" …" if len(names) > 3 else "")
            why.append(f"{shown} no longer in `{now}`")
        return "; ".join(why[:3]) if why else None

    def check(self, root: str, records: Sequence[dict], renamed: Mapping[str, str],
              deadline: float) -> dict[str, str]:
        """Why each record whose anchors are all gone is stale, by id; the records left
        when ``CHECK_S`` or the deadline passes are not checked."""
        until = min(deadline, time.monotonic() + CHECK_S)
        stale = {}
        for record in records:
            if time.monotonic() >= until:
                break
            why = self.gone(root, record, renamed)
            if why:
                stale[record["record_id"]] = why
        return stale
