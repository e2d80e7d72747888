"""Which commits wrote a range of a file's lines (``git blame``), and which blob each of
them left the file as: what ``search.why`` looks records up by.

git runs as a reader (``code.git``), bounded in time; a file outside the tree, or one
git does not track, is blamed for nothing. The lines not yet committed are left out:
no commit wrote them yet. The repository's own list of commits to ignore is not read
(``blame.ignoreRevsFile`` may name any file on the machine).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from kirolearn.code.git import Git

HEADER = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64}) \d+ (\d+)(?: \d+)?$")
UNCOMMITTED = re.compile(r"^0+$")


class Blamed(NamedTuple):
    """A commit that wrote some of the lines asked about."""

    commit: str
    path: str  # the file's name in that commit (it may have been renamed since)
    lines: tuple[int, ...]  # the lines it wrote, as the file numbers them today
    when: int  # the commit's author time (seconds since the epoch)


def parse_porcelain(output: bytes) -> list[Blamed]:
    """``git blame --porcelain``'s answer: the commits, those that wrote the most lines
    first (then the newest), uncommitted lines left out."""
    lines: dict[str, list[int]] = {}
    paths: dict[str, str] = {}
    times: dict[str, int] = {}
    sha = ""
    for line in output.decode("utf-8", "surrogateescape").split("\n"):
        header = HEADER.match(line)
        if header:
            sha = header[1]
            lines.setdefault(sha, []).append(int(header[2]))
        elif line.startswith("filename ") and sha:
            paths.setdefault(sha, line[len("filename "):])
        elif line.startswith("author-time ") and sha and line[12:].strip().isdigit():
            times[sha] = int(line[12:].strip())
    found = [Blamed(sha, paths.get(sha, ""), tuple(numbers), times.get(sha, 0))
             for sha, numbers in lines.items() if not UNCOMMITTED.match(sha) and paths.get(sha)]
    return sorted(found, key=lambda b: (-len(b.lines), -b.when))


def blame(git: Git, path: str, timeout_s: float) -> list[Blamed]:
    """The commits that wrote the file as the working tree has it (each line's last
    change, whitespace and moves included: the work a change there builds on); [] when
    git cannot say in time (a file it does not track, a path that leads out of the
    tree)."""
    if not path or path.startswith(("/", "-")) or ".." in path.split("/"):
        return []
    done = git.run("blame", "--porcelain", "--ignore-revs-file=", "--", path,
                   timeout_s=timeout_s)
    return parse_porcelain(done.stdout) if done is not None and done.returncode == 0 else []


def within(blamed: list[Blamed], first: int, last: int) -> list[Blamed]:
    """The commits that wrote lines ``first``–``last`` (1-based, inclusive), each with
    those lines alone, the most lines first (then the newest)."""
    found = [b._replace(lines=tuple(n for n in b.lines if first <= n <= last)) for b in blamed]
    return sorted((b for b in found if b.lines), key=lambda b: (-len(b.lines), -b.when))


def blobs(git: Git, blamed: list[Blamed], timeout_s: float) -> dict[str, str]:
    """Commit → the blob id its file (as it was named there) had in it."""
    if not blamed:
        return {}
    asked = "".join(f"{b.commit}:{b.path}\n" for b in blamed).encode("utf-8", "surrogateescape")
    done = git.run("cat-file", "--batch-check", stdin=asked, timeout_s=timeout_s)
    if done is None or done.returncode != 0:
        return {}
    found = {}
    for b, line in zip(blamed, done.stdout.decode("ascii", "replace").splitlines(), strict=False):
        parts = line.split()
        if len(parts) == 3 and parts[1] == "blob":
            found[b.commit] = parts[0]
    return found


def lines_of(text: str, old: str) -> tuple[int, int] | None:
    """The lines (1-based, inclusive) where ``old`` first stands in ``text``: the text
    an edit is about to replace; None when it is not there."""
    if not old.strip():
        return None
    at = text.find(old)
    if at < 0:
        return None
    first = text.count("\n", 0, at) + 1
    return first, first + old.rstrip("\n").count("\n")
