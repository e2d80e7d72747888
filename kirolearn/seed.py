"""A repository's history as memory on day one: each commit replayed as an agent's
session (``kirolearn seed --git``), through ingest like any import.

A commit becomes one session: a prompt with its message, a read of each file it
changed, an edit (``Edit``; ``Write`` for a new file) per hunk of its diff, and the
turn's end, at the commit's time, so extraction makes of it what it makes of live
work: a record with the files, the code words and the anchors of the change, as old
as the commit. The commits are the project's history, in the namespace of the user
who seeds it (one project, whatever the number of authors); the branch, the commit
and its author are the events' ``source`` (the author is kept on each record, a
filter of the viewer and of ``stats``).

Every event's id comes from the commit hash (its time and a hash of the commit and the
event's place in it), so a second run stores nothing new and a run killed half-way,
run again, stores what it had not. Where a run got to is kept (``seeded.json`` in the
home, by checkout: the newest commit whose events, and every earlier one's, ingest has
answered, as it goes, ``Resume``), and the next starts after it: only the new commits,
and those a killed run left unanswered, are read.

Left out, as they tell no work of their own: merge commits (their changes are the
merged commits', each replayed), commits of bots (an author named ``…[bot]``,
dependabot, renovate, pre-commit-ci), formatting commits (a message that says
format, reformat, style, black, prettier, ruff format or isort, touching more than
``MASS_FILES`` files) and mass changes (more than ``MAX_FILES`` files: a vendored
library, a licence header everywhere).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from kirolearn import __version__, contract, paths, project
from kirolearn.code.git import Git

HUNK_LINES = 200  # an edit's old or new text, as an agent would send it
MAX_EDITS = 60  # the hunks of a commit replayed as edits (the rest: its files are read)
MASS_FILES = 20  # a formatting commit touching more files than this tells no work
MAX_FILES = 300  # a commit touching more files than this is a mass change
BOT = re.compile(r"\[bot\]|dependabot|renovate|pre-commit-ci|github-actions", re.I)
FORMATTING = re.compile(r"^\W*(?:re)?format|^\W*style\b|\b(?:black|prettier|ruff format|"
                        r"isort|gofmt|rustfmt|clang-format)\b", re.I)
SURFACE = "git"
GIT_TIMEOUT_S = 600.0  # one git command of a seed (a long history's log)


class GitFailed(Exception):
    """git could not read the repository (what it said, or that it did not finish)."""


@dataclass
class Commit:
    sha: str
    when: str  # ISO 8601, the author's time
    author: str
    email: str
    message: str
    files: int = 0  # how many it changed


@functools.lru_cache(maxsize=8)
def reader(root: str) -> Git:
    """git for the repository at root, as a reader (``code.git``), once per run."""
    return Git(root, GIT_TIMEOUT_S)


def git(root: str, *args: str) -> str:
    """What a git command printed; GitFailed when it failed or did not finish."""
    done = reader(root).run(*args)
    if done is None:
        raise GitFailed(f"git {args[0]} did not finish within {GIT_TIMEOUT_S:.0f} s")
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitFailed(f"git {args[0]}: {said[-1] if said else 'failed'}")
    return done.stdout.decode("utf-8", errors="replace")


def head(root: str) -> str | None:
    """The commit checked out at root (None: not a git working tree with a commit)."""
    found = reader(root).text("rev-parse", "--verify", "-q", "HEAD")
    return found.strip() if found else None


def since_time(root: str, text: str) -> int | None:
    """The time (epoch seconds) a ``--since`` date means, as git reads it; None when git
    cannot read it as a date (git takes any words it does not know for now)."""
    said = reader(root).text("rev-parse", f"--since={text}")
    found = re.fullmatch(r"--max-age=(\d+)", (said or "").strip())
    if found is None:
        return None
    now = reader(root).text("rev-parse", "--since=now") or ""
    means_now = found[0] == now.strip() or abs(
        int(found[1]) - int(re.sub(r"\D", "", now) or 0)) <= 1
    return None if means_now and text.strip().lower() != "now" else int(found[1])


def history(root: str, after: str | None = None, since: str | None = None,
            limit: int | None = None) -> list[Commit]:
    """The commits of HEAD's history, oldest first, merges left out: those after
    ``after`` (a commit seeded before; all when it is not in the history), since a date,
    or the newest ``limit``."""
    args = ["log", "--no-merges", "--format=%x01%H%x00%aI%x00%an%x00%ae%x00%B%x00",
            "--shortstat"]
    if since:
        args.append(f"--since={since}")
    if limit:
        args.append(f"-n{limit}")
    span = "HEAD"
    ancestor = reader(root).run("merge-base", "--is-ancestor", after, "HEAD") if after else None
    if ancestor is not None and ancestor.returncode == 0:
        span = f"{after}..HEAD"
    found = []
    for entry in git(root, *args, span, "--").split("\x01")[1:]:
        sha, when, author, email, message, stat = entry.split("\x00", 5)
        files = re.match(r"\s*(\d+) files? changed", stat)
        found.append(Commit(sha, when, author, email, message.strip(),
                            int(files[1]) if files else 0))
    return found[::-1]


def left_out(commit: Commit) -> str | None:
    """Why a commit is not replayed (None: it is)."""
    if BOT.search(commit.author) or BOT.search(commit.email):
        return "by a bot"
    if commit.files > MAX_FILES:
        return "mass change"
    if commit.files > MASS_FILES and FORMATTING.search(commit.message.partition("\n")[0]):
        return "formatting"
    if not commit.message:
        return "no message"
    return None


def hunks(root: str, sha: str) -> list[tuple[str, str, str, bool]]:
    """(path, old text, new text, new file) per hunk of the commit, with context."""
    diff = git(root, "show", "--format=", "-U3", "--no-renames", "--no-ext-diff",
               "--no-textconv", sha)
    out: list[tuple[str, str, str, bool]] = []
    path, new_file, old, new = None, False, [], []

    def flush() -> None:
        if path and (old or new):
            out.append((path, "\n".join(old[:HUNK_LINES]), "\n".join(new[:HUNK_LINES]),
                        new_file))

    for line in diff.splitlines():
        if line.startswith("diff --git"):
            flush()
            path, new_file, old, new = None, False, [], []
        elif line.startswith("new file mode"):
            new_file = True
        elif line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("@@"):
            flush()
            old, new = [], []
        elif line.startswith("Binary files"):
            path = None
        elif path and line[:1] in (" ", "-", "+"):
            if line[0] != "+":
                old.append(line[1:])
            if line[0] != "-":
                new.append(line[1:])
    flush()
    return out


def event_id(commit: Commit, place: int) -> str:
    """The same ULID for the same event of the same commit, every run: the commit's
    time, then 80 bits of a hash of the commit and the event's place in it."""
    ms = max(0, int(datetime.fromisoformat(commit.when).timestamp() * 1000))
    return contract.ulid_of(ms, hashlib.sha256(f"{commit.sha}:{place}".encode()).digest())


def author_of(commit: Commit) -> str:
    """The commit's author by name (their e-mail's name part when git has none): an
    address is never kept."""
    name = " ".join(commit.author.split()) or commit.email.partition("@")[0] or "unknown"
    return name[:255]


def session_events(root: str, commit: Commit, here: project.Project, actor: str,
                   branch: str | None) -> list[dict]:
    """One commit as an agent's session: the prompt, a read of each file, its edits
    (``MAX_EDITS`` at most), the turn's end."""
    place = iter(range(10_000))

    def event(kind: str, body: dict, parent: str | None = None) -> dict:
        made = contract.make_event(
            kind, contract.truncate_body(body, contract.TRUNCATE_BYTES),
            namespace=here.namespace(actor), actor_id=actor,
            session_id=f"git-{commit.sha[:40]}", surface=SURFACE, version=__version__,
            client_id="seed", project_path=here.checkout, parent_event_id=parent,
            valid_time=commit.when, branch=branch, commit=commit.sha,
            author=author_of(commit))
        return {**made, "event_id": event_id(commit, next(place))}

    def tool(name: str, tool_input: dict, response: dict) -> dict:
        return event("tool_use", {"type": "json", "data": {
            "tool_name": name, "tool_input": tool_input, "tool_response": response}},
            prompt["event_id"])

    prompt = event("prompt", {"type": "text", "content": commit.message})
    events = [prompt]
    said = set()  # a change made alike in two places is one edit (ingest would drop it)
    edits = hunks(root, commit.sha)
    for path in dict.fromkeys(path for path, *_ in edits):
        events.append(tool("Read", {"file_path": f"{here.checkout}/{path}"}, {"type": "text"}))
    for path, old, new, new_file in edits[:MAX_EDITS]:
        where = f"{here.checkout}/{path}"
        made = (tool("Write", {"file_path": where, "content": new}, {"type": "create"})
                if new_file else tool("Edit", {"file_path": where, "old_string": old,
                                               "new_string": new}, {"success": True}))
        if made["content_hash"] not in said:  # its place is taken either way: ids stay
            said.add(made["content_hash"])
            events.append(made)
    events.append(event("session_summary", {"type": "text", "content": ""},
                        prompt["event_id"]))
    return events


def lines(root: str, commits: list[Commit], here: project.Project,
          done: Callable[[Commit], None] = lambda commit: None) -> Iterator[str]:
    """The events of each commit as JSON lines, for ``importer.import_lines``; ``done``
    is told of each commit once its lines are out."""
    branch, _ = project.git_head(root)
    user = project.actor_id()
    for commit in commits:
        for item in session_events(root, commit, here, user, branch):
            yield json.dumps(item, ensure_ascii=False)
        done(commit)


class Resume:
    """Where a run has got to, kept as it goes: each commit's last line as it is sent
    (``lines``), and, as ingest answers (``answered``: the line up to which every line
    was answered), the newest commit all of whose lines were, remembered as where the
    next run starts."""

    def __init__(self, home: paths.Home, checkout: str) -> None:
        self.home = home
        self.checkout = checkout
        self.sent = 0  # lines out so far
        self.ends: collections.deque[tuple[int, str]] = collections.deque()

    def lines(self, root: str, commits: list[Commit], here: project.Project,
              done: Callable[[Commit], None] = lambda commit: None) -> Iterator[str]:
        def sent(commit: Commit) -> None:
            self.ends.append((self.sent, commit.sha))
            done(commit)

        for line in lines(root, commits, here, sent):
            self.sent += 1
            yield line

    def answered(self, through: int) -> None:
        newest = None
        while self.ends and self.ends[0][0] <= through:
            newest = self.ends.popleft()[1]
        if newest is not None:
            remember(self.home, self.checkout, newest)


def last_seeded(home: paths.Home, checkout: str) -> str | None:
    """The newest commit a finished run seeded from this checkout."""
    found = paths.read_json_object(home.seeded_file).get(checkout)
    return found if isinstance(found, str) else None


def remember(home: paths.Home, checkout: str, sha: str) -> None:
    """A run finished: the next starts after ``sha``."""
    known = paths.read_json_object(home.seeded_file)
    known[checkout] = sha
    paths.write_json(home.seeded_file, known)
