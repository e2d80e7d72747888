"""The rule files agents load themselves (CLAUDE.md, AGENTS.md, .cursorrules…), as
memories: which they are, which of them changed since they were last sent, and which
agent loads which.

A rule file becomes one record of the project (``extract.rules``), named by the
file's path, and a new version of it when the file changes (ingest's
``put_rule_file``): never a second record. A session's start sends the files that
changed since the last start (by size and time, kept in ``rules.json`` in the home,
so an unchanged project costs a few ``stat`` calls and no request); ``seed --git``
sends them all. Context given to an agent leaves out the records of the files that
agent loads itself (``loads``, its entry's in ``kirolearn.agents``): it has them already.

The checkout is untrusted: a rule file is read only when it is a regular file inside
it (a link to ``/proc/self/environ`` or out of the tree is no rule file), and no more
than ``MAX_BYTES`` of it (``code.files``).

Light: a hook imports it.
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

from kirolearn import control, paths, project
from kirolearn.agents import AGENTS
from kirolearn.code import files

# The files, relative to the checkout's root; and folders whose every file of these
# endings is one.
RULE_FILES = ("CLAUDE.md", "CLAUDE.local.md", ".claude/CLAUDE.md", "AGENTS.md", "GEMINI.md",
              "QWEN.md", ".cursorrules", ".windsurfrules", ".github/copilot-instructions.md")
RULE_FOLDERS = ((".cursor/rules", (".mdc", ".md")), (".kiro/steering", (".md",)),
                (".windsurf/rules", (".md",)))
AUTO_MEMORY = "~/.claude/projects/{folder}/memory/MEMORY.md"  # Claude Code's own notes
MOST_FILES = 30  # of a folder: a project's rules, not a library of documents
MAX_BYTES = 64 * 1024  # read of a file: the rest is left out
SEND_MS = 1000  # a session's start waits this long at most for a file's record

def loads(surface: object, name: str) -> bool:
    """Whether the agent (its surface) loads the rule file of this name itself."""
    agent = AGENTS.get(surface) if isinstance(surface, str) else None
    return agent is not None and any(fnmatch.fnmatchcase(name, pattern) for pattern in agent.loads)


def auto_memory(checkout: str, user_home: str) -> tuple[str, Path]:
    """The name and path of Claude Code's auto memory of a checkout (its folder is the
    checkout's path with every other character than a letter or digit a ``-``)."""
    name = AUTO_MEMORY.format(folder=re.sub(r"[^A-Za-z0-9]", "-", checkout))
    return name, Path(user_home) / name[2:]


def found(checkout: str, user_home: str) -> dict[str, Path]:
    """The rule files there are, by name, each by its real path: the checkout's (regular
    files inside it, a link followed only while it stays inside), and Claude Code's
    auto memory (a regular file, not a link)."""
    there: dict[str, Path] = {}
    for name in RULE_FILES:
        real = _regular_in(checkout, name)
        if real is not None:
            there[name] = real
    for folder, endings in RULE_FOLDERS:
        directory = files.inside(checkout, folder)
        try:
            names = sorted(entry.name for entry in os.scandir(directory)
                           if entry.name.endswith(endings)) if directory else []
        except OSError:
            continue
        for entry in names[:MOST_FILES]:
            real = _regular_in(checkout, f"{folder}/{entry}")
            if real is not None:
                there[f"{folder}/{entry}"] = real
    name, path = auto_memory(checkout, user_home)
    if files.is_regular(str(path)):
        there[name] = path
    return there


def _regular_in(checkout: str, name: str) -> Path | None:
    """The real path of ``name`` when it is a regular file inside the checkout."""
    real = files.inside(checkout, name)
    return Path(real) if real is not None and files.is_regular(real) else None


def signature(path: Path) -> list[int] | None:
    """What tells a file changed without reading it: its size and time (None: gone)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return [stat.st_size, stat.st_mtime_ns]


def read(path: Path) -> str | None:
    """A rule file's text, its first ``MAX_BYTES`` (None: it cannot be read, or is no
    longer a regular file)."""
    data = files.read_regular(str(path), MAX_BYTES)
    return None if data is None else data.decode("utf-8", errors="replace")


def changed(home: paths.Home, checkout: str, user_home: str
            ) -> list[tuple[str, Path | None, list[int] | None]]:
    """The rule files whose size or time differ from when they were last sent, and those
    sent before that are gone (path None): (name, path, signature)."""
    known = sent(home).get(checkout) or {}
    there = found(checkout, user_home)
    out: list[tuple[str, Path | None, list[int] | None]] = []
    for name, path in there.items():
        now = signature(path)
        if now is not None and now != known.get(name):
            out.append((name, path, now))
    out += [(name, None, None) for name in known if name not in there]
    return out


def remember(home: paths.Home, checkout: str, name: str, now: list[int] | None) -> None:
    """A rule file was sent (``now`` None: its being gone was)."""
    known = sent(home)
    files = known.setdefault(checkout, {})
    if not isinstance(files, dict):
        files = known[checkout] = {}
    if now is None:
        files.pop(name, None)
    else:
        files[name] = now
    paths.write_json(home.rules_file, known)


def sent(home: paths.Home) -> dict[str, dict[str, list[int]]]:
    known = paths.read_json_object(home.rules_file)
    return {checkout: files for checkout, files in known.items() if isinstance(files, dict)}


def send(home: paths.Home, here: project.Project, actor: str, user_home: str,
         everything: bool = False, timeout_ms: int = SEND_MS) -> dict[str, str]:
    """Send ingest the project's rule files that changed since they were last sent
    (``everything``: all there are), each remembered once its record is stored; the
    status of each by name (``put_rule_file``). Raises control.Timeout or
    protocol.RemoteError, having sent what went before."""
    if everything:
        todo = [(name, path, signature(path))
                for name, path in found(here.checkout, user_home).items()]
    else:
        todo = changed(home, here.checkout, user_home)
    done: dict[str, str] = {}
    for name, path, now in todo:
        text = None if path is None else read(path)
        if path is not None and text is None:
            continue  # unreadable now: tried again at the next start
        reply = control.call("ingest", "put_rule_file", {
            "namespace": here.namespace(actor), "name": name, "text": text},
            timeout_ms=timeout_ms, home=home)
        done[name] = str(reply.get("status"))
        remember(home, here.checkout, name, now)
    return done
