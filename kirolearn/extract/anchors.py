"""A record's anchors: the code it is about, so that it can be checked against the code
as it is when it would be recalled (``search.staleness``).

For each file a turn edited, the names its edits define: the functions, classes,
methods and constants of the edit's new text. Python is read with ``ast`` (a whole
file, or an edit's text when it parses on its own); other languages, and a Python
fragment that does not parse, by one light pattern for the definitions of the common
languages (``def``, ``class``, ``function``, ``func`` and Go's methods, ``fn``,
``struct``, ``enum``, ``trait``, ``interface``, ``type``, ``const``/``let``/``var``)
and UPPER_CASE constants: Python, JavaScript/TypeScript, Go, Rust, Swift, Kotlin and
the like; Java's and C#'s methods (no keyword) are anchored by their classes. No
language server, no file read: what the agent's edit said.

Beside them, where the work was (``code``): the branch and commit its turn was on (as
the hooks' events say: ``project.git_head``) and, where the project is on this
machine, the git blob id of each anchored file as the turn left it, read when its
batch is extracted (a file the check finds still that blob is not searched again). The
tree is untrusted: a file is read only when it is a regular file inside it
(``code.files``), and the reads stop at ``BLOB_READ_S``, so that a FIFO or a hung
filesystem never holds the worker.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import textwrap

from kirolearn.code import files
from kirolearn.contract import MAX_ANCHORED_BYTES
from kirolearn.contract import MAX_ANCHORED_FILES as MAX_FILES
from kirolearn.contract import MAX_ANCHORED_SYMBOLS as MAX_SYMBOLS
from kirolearn.project import blob_id
from kirolearn.tooluse import DEFINITION, Action, observe, relative
from kirolearn.words import STOP_WORDS

CONSTANT = re.compile(r"^\s*([A-Z][A-Z0-9_]{2,})\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)
METHOD = re.compile(r"\bfunc\s*\([^)]*\)\s*([A-Za-z_]\w*)")  # Go: func (s *Server) Name
BLOB_READ_S = 1.0  # a record's files are read for their blob ids this long at most
MIN_CHARS = 4  # a shorter name (`get`, `run`) is found anywhere: it would anchor nothing


def _python(text: str) -> list[str] | None:
    """The definitions of Python text (top level, and the methods of its classes);
    None when it does not parse on its own."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except (SyntaxError, ValueError):
        return None
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        if isinstance(node, ast.ClassDef):
            names += [item.name for item in node.body
                      if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)]
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        # constants (an edit's text is often a function's body: its names are locals)
        names += [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()]
    return names


def definitions(path: str, texts: list[str] | tuple[str, ...]) -> list[str]:
    """The names these texts (an edit's new text, of one file) define, in order."""
    found: list[str] = []
    for text in texts:
        parsed = _python(text) if path.endswith((".py", ".pyi")) else None
        found += parsed if parsed is not None else (DEFINITION.findall(text)
                                                    + METHOD.findall(text)
                                                    + CONSTANT.findall(text))
    return [name for name in dict.fromkeys(found)
            if len(name) >= MIN_CHARS and name.lower() not in STOP_WORDS][:MAX_SYMBOLS]


def of_actions(actions: list[Action], root: str | None) -> dict[str, list[str]]:
    """Each file the turn's edits changed inside its project (as the project names it)
    and the names those edits define there (none: the file is the anchor)."""
    anchors: dict[str, list[str]] = {}
    for action in actions:
        if action.kind != "edit":
            continue
        for path in action.paths:
            name = relative(path, root)
            if name.startswith("/") or len(name) > 500:  # outside the project
                continue
            if name in anchors or len(anchors) < MAX_FILES:
                known = anchors.setdefault(name, [])
                known += [d for d in definitions(name, action.new_texts) if d not in known]
                del known[MAX_SYMBOLS:]
    return anchors


def of_batch(events: list[dict]) -> dict[str, list[str]]:
    """The anchors of a batch's edits, every session's (bodies decoded): what a model's
    records, which name the files they are about, are anchored by."""
    found: dict[str, list[str]] = {}
    for event in events:
        body = event.get("body")
        if event.get("kind") == "tool_use" and isinstance(body, dict):
            for path, names in of_actions([observe(body.get("data"))],
                                          event.get("project_path")).items():
                found[path] = list(dict.fromkeys(found.get(path, []) + names))
    return found


def changes_of_batch(events: list[dict]) -> dict[str, list[str]]:
    """The lines a batch's edits added or removed (``Action.changed``), by file as the
    project names it: what a model's records, which name the files they are about, are
    searched by too (``changes``)."""
    found: dict[str, list[str]] = {}
    for event in events:
        body = event.get("body")
        if event.get("kind") == "tool_use" and isinstance(body, dict):
            action = observe(body.get("data"))
            for path in action.paths if action.kind == "edit" else ():
                found.setdefault(relative(path, event.get("project_path")), []).extend(
                    action.changed)
    return found


def code(record: dict, events: list[dict]) -> dict:
    """Where the record's work left the code: the branch and commit of its last event
    that says (``source.branch``, ``source.commit``; a seeded commit's author too), and
    the blob id of each of its anchored files found in that event's project on this
    machine."""
    sources = set(record["source_event_ids"])
    mine = [e for e in events if e["event_id"] in sources and e.get("commit")] or [
        e for e in events if e.get("commit")]
    if not mine:
        return {}
    last = mine[-1]
    found = {key: last[key] for key in ("branch", "commit", "author") if last.get(key)}
    root = last.get("project_path")
    blobs: dict[str, str] = {}
    if root and os.path.isabs(root) and record.get("anchors"):
        def read() -> None:
            for path in record["anchors"]:
                data = files.read_in(root, path, MAX_ANCHORED_BYTES + 1)
                if data is not None and len(data) <= MAX_ANCHORED_BYTES:
                    blobs[path] = blob_id(data, len(last["commit"]))
        # what was read in time stands; the rest are checked by their names alone
        with contextlib.suppress(files.Abandoned):
            files.bounded(BLOB_READ_S, read)
    blobs = dict(blobs)
    return {**found, "blobs": blobs} if blobs else found
