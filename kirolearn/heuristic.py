"""The heuristic extractor: a batch of events → memory records, with no network.

A turn is a prompt, the tools used after it, and the turn summary that ends it
(``session_summary``), within one session. Each turn becomes one record: the request
as title, a summary of what was done and what the agent concluded, and facts a
developer would want back ("edited `src/app.py` (+12 −3)", "ran `pytest -q` → exit 1,
3 failed", "read `docs/api.md`"). A failed command or tool also makes an ``error``
record with the command and the first lines of its output, and every turn summary
makes a ``session_summary`` record. Listing, searching, thinking and to-do tools add
nothing of their own; ``note`` events make no records.

Tool payloads come from several agents: Kiro CLI (``fs_write``, ``fs_read`` with
``operations``, ``execute_bash`` with ``result[].exit_status``), Claude Code
(``Write``, ``Edit``, ``MultiEdit``, ``Read``, ``Bash``) and the Kiro IDE (camelCase
names mapped by its shim). Unknown tools are read by their keys: a path-like key
names a file, a ``command`` key a command.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from kirolearn import contract

STRATEGY = "heuristic"
TITLE_CHARS = 120
REQUEST_CHARS = 600
CONCLUSION_CHARS = 1500
ERROR_LINES = 8
MAX_FACTS = 30

PATH_KEYS = ("path", "file_path", "filePath", "target_file", "notebook_path", "file")
QUIET_WORDS = ("list", "glob", "grep", "search", "find", "think", "todo", "introspect",
               "knowledge")  # and `ls`: tools that look around rather than act
EDIT_TOOLS = re.compile(r"(?i)write|edit|replace|create|insert|append|patch|str_?replace")
READ_TOOLS = re.compile(r"(?i)read|view|open|cat\b")
RUN_TOOLS = re.compile(r"(?i)bash|shell|exec|command|terminal|run")
TEST_COUNTS = re.compile(r"(?i)\b(\d+) (failed|passed|errors?)\b")
ERROR_LINE = re.compile(r"(?i)(error|exception|traceback|failed|fatal|panic|✗|FAIL\b)")
PATH_IN_TEXT = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:py|ts|tsx|js|jsx|go|rs|java|rb|"
                          r"c|h|cpp|cs|md|toml|yaml|yml|json|sql|sh|kt|swift|php))\b")
IDENTIFIER = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]+)+|"
                        r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+)\b")


@dataclass
class Action:
    """What one tool use did, as far as the payload tells."""

    kind: str  # edit | read | run | quiet | other
    tool: str
    paths: list[str] = field(default_factory=list)
    command: str = ""
    added: int = 0
    removed: int = 0
    exit_status: int | None = None
    failed: bool = False
    output: str = ""


@dataclass
class Turn:
    session_id: str
    request: str = ""
    actions: list[Action] = field(default_factory=list)
    conclusion: str = ""
    event_ids: list[str] = field(default_factory=list)


# -- reading payloads ---------------------------------------------------------------------

def _lines(text: object) -> int:
    return len(str(text).splitlines()) if text else 0


def _output(response: object) -> tuple[str, int | None, bool]:
    """(output text, exit status, failed) from a tool response of any agent."""
    if not isinstance(response, dict):
        text = "" if response is None else str(response)
        return text, None, False
    exit_status = None
    parts: list[str] = []
    result = response.get("result")
    for item in result if isinstance(result, list) else []:
        if isinstance(item, dict):  # Kiro CLI: [{exit_status, stdout, stderr}]
            if str(item.get("exit_status", "")).lstrip("-").isdigit():
                exit_status = int(item["exit_status"])
            parts += [str(item.get(k) or "") for k in ("stdout", "stderr")]
        else:
            parts.append(str(item))
    if isinstance(result, str):
        parts.append(result)
    for key in ("stdout", "stderr", "output", "error"):
        if isinstance(response.get(key), str):
            parts.append(response[key])
    for key in ("exit_code", "exitCode", "returncode", "exit_status"):
        if isinstance(response.get(key), int | str) and str(response[key]).lstrip("-").isdigit():
            exit_status = int(response[key])
    failed = (exit_status not in (None, 0) or response.get("success") is False
              or response.get("is_error") is True or bool(response.get("interrupted")))
    return "\n".join(p for p in parts if p.strip()), exit_status, failed


def _items(value: object) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _paths(tool_input: dict) -> list[str]:
    found = [tool_input[k] for k in PATH_KEYS if isinstance(tool_input.get(k), str)]
    for op in _items(tool_input.get("operations")):  # Kiro CLI fs_read
        if isinstance(op.get("path"), str):
            found.append(op["path"])
    return list(dict.fromkeys(p.strip() for p in found if p.strip()))


def observe(data: object) -> Action:
    """Classify one tool use from its ``{tool_name, tool_input, tool_response}``."""
    data = data if isinstance(data, dict) else {}
    tool = str(data.get("tool_name") or "unknown")
    tool_input = data.get("tool_input") if isinstance(data.get("tool_input"), dict) else {}
    output, exit_status, failed = _output(data.get("tool_response"))
    action = Action("other", tool, _paths(tool_input), exit_status=exit_status, failed=failed,
                    output=output)
    command = tool_input.get("command") or tool_input.get("cmd")
    name = tool.rsplit("/", 1)[-1]
    modes = {op.get("mode") for op in _items(tool_input.get("operations"))}
    if (name.lower() == "ls" or any(word in name.lower() for word in QUIET_WORDS)
            or modes & {"Directory", "Search"}):
        action.kind = "quiet"
    elif isinstance(command, str) and (RUN_TOOLS.search(name) or not action.paths):
        action.kind, action.command = "run", " ".join(command.split())
    elif EDIT_TOOLS.search(name) and action.paths:
        action.kind = "edit"
        new = [tool_input.get(k) for k in ("file_text", "content", "new_str", "new_string")]
        old = [tool_input.get(k) for k in ("old_str", "old_string")]
        for edit in _items(tool_input.get("edits")):  # Claude Code MultiEdit
            new.append(edit.get("new_string"))
            old.append(edit.get("old_string"))
        action.added = sum(_lines(t) for t in new if isinstance(t, str))
        action.removed = sum(_lines(t) for t in old if isinstance(t, str))
    elif READ_TOOLS.search(name) and action.paths:
        action.kind = "read"
    return action


# -- facts and text ---------------------------------------------------------------------------

def relative(path: str, root: str | None) -> str:
    """A path as the project knows it: relative to its root when inside it."""
    if root and os.path.isabs(path):
        try:
            inside = os.path.commonpath([root, path]) == root
        except ValueError:
            inside = False
        if inside and path != root:
            return os.path.relpath(path, root)
    return path


def _test_counts(output: str) -> str:
    counts: dict[str, int] = {}
    for number, word in TEST_COUNTS.findall(output):
        word = "error" if word.lower().startswith("error") else word.lower()
        counts[word] = counts.get(word, 0) + int(number)
    return ", ".join(f"{n} {w}" for w, n in counts.items() if w in ("failed", "error")) or (
        f"{counts['passed']} passed" if "passed" in counts else "")


def fact(action: Action, root: str | None) -> str | None:
    files = [relative(p, root) for p in action.paths]
    if action.kind == "edit":
        return f"edited `{files[0]}` (+{action.added} −{action.removed})"
    if action.kind == "read":
        return "read " + ", ".join(f"`{f}`" for f in files)
    if action.kind == "run":
        text = f"ran `{cut(action.command, 160)}`"
        details = []
        if action.exit_status is not None:
            details.append(f"exit {action.exit_status}")
        elif action.failed:
            details.append("failed")
        counts = _test_counts(action.output)
        if counts:
            details.append(counts)
        return text + (" → " + ", ".join(details) if details else "")
    if action.kind == "other" and action.failed:
        return f"`{action.tool}` failed"
    return None


def cut(text: str, limit: int) -> str:
    """At most `limit` characters, ending at a word boundary with an ellipsis if cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:.") + "…"


def first_lines(text: str, count: int) -> str:
    """The lines of an output that say what went wrong, from just before the first
    error line (where a traceback names the file), or else its last lines."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    wanted = [i for i, line in enumerate(lines) if ERROR_LINE.search(line)]
    start = max(0, wanted[0] - 3) if wanted else max(0, len(lines) - count)
    return "\n".join(line[:300] for line in lines[start:start + count])


def concepts_of(texts: list[str], files: list[str]) -> list[str]:
    """Keywords a search might use: file stems and directories, code identifiers."""
    found: list[str] = []
    for path in files:
        parts = path.replace("\\", "/").split("/")
        found += [p for p in parts[:-1] if p not in ("", ".", "..", "src", "tests", "lib")][-2:]
        stem = os.path.splitext(parts[-1])[0]
        if stem:
            found.append(stem)
    for text in texts:
        found += IDENTIFIER.findall(text)
    return [c[:100] for c in dict.fromkeys(found)][:12]


# -- records ---------------------------------------------------------------------------------

def record(namespace: str, title: str, summary: str, observation_type: str,
           facts: list[str], concepts: list[str], files: list[str],
           source_ids: list[str]) -> dict:
    return {
        "record_id": contract.new_record_id(), "namespace": namespace,
        "title": cut(title, TITLE_CHARS) or "Untitled", "summary": summary[:4000],
        "facts": [f[:500] for f in facts[:MAX_FACTS]], "concepts": concepts,
        "files_touched": [f[:500] for f in files[:100]], "observation_type": observation_type,
        "strategy": STRATEGY, "source_event_ids": source_ids, "created_at": contract.now_iso(),
    }


def _done(actions: list[Action]) -> str:
    edited = list(dict.fromkeys(p for a in actions if a.kind == "edit" for p in a.paths))
    runs = [a for a in actions if a.kind == "run"]
    read = list(dict.fromkeys(p for a in actions if a.kind == "read" for p in a.paths))
    parts = []
    if edited:
        parts.append(f"edited {len(edited)} file{'s' * (len(edited) > 1)}")
    if runs:
        failed = sum(a.failed for a in runs)
        parts.append(f"ran {len(runs)} command{'s' * (len(runs) > 1)}"
                     + (f" ({failed} failed)" if failed else ""))
    if read:
        parts.append(f"read {len(read)} file{'s' * (len(read) > 1)}")
    return ", ".join(parts)


def turn_records(namespace: str, turn: Turn, root: str | None) -> list[dict]:
    actions = [a for a in turn.actions if a.kind != "quiet"]
    facts = [f for f in (fact(a, root) for a in actions) if f]
    files = list(dict.fromkeys(relative(p, root) for a in actions for p in a.paths))
    records = []
    if turn.request or actions or turn.conclusion:
        title = turn.request or (facts[0] if facts else turn.conclusion)
        # the request is in the summary only when the title had to cut it short
        request = cut(turn.request, REQUEST_CHARS) if len(cut(title, 10**6)) > TITLE_CHARS else ""
        done = _done(actions)
        summary = "\n\n".join(part for part in (
            request, f"Done: {done}." if done else "",
            cut(turn.conclusion, CONCLUSION_CHARS)) if part) or cut(turn.request, REQUEST_CHARS)
        if summary and (turn.request or facts):
            kind = "tool_use" if actions else "discovery"
            records.append(record(namespace, title, summary, kind, list(dict.fromkeys(facts)),
                                  concepts_of([turn.request, *facts], files), files,
                                  turn.event_ids))
    for action in actions:
        if not action.failed:
            continue
        what = f"`{cut(action.command, 100)}`" if action.command else f"`{action.tool}`"
        errors = first_lines(action.output, ERROR_LINES)
        request = cut(turn.request, 200).rstrip(".!?")
        summary = f"{what} failed" + (f" while working on: {request}" if request else "") + "."
        if errors:  # fenced: a line of `===` under text would be read as a heading
            fence = "~~~" if "```" in errors else "```"
            summary += f"\n\n{fence}\n{errors}\n{fence}"
        error_files = list(dict.fromkeys(
            [relative(p, root) for p in action.paths] + PATH_IN_TEXT.findall(errors)))
        facts_here = [f for f in (fact(action, root),) if f]
        records.append(record(namespace, f"{what} failed", summary, "error", facts_here,
                              concepts_of([errors], error_files), error_files,
                              turn.event_ids))
    return records


def extract(namespace: str, events: list[dict]) -> list[dict]:
    """Records for a batch (events in time order, bodies decoded)."""
    records: list[dict] = []
    turns: dict[str, Turn] = {}
    roots = {e["session_id"]: e.get("project_path") for e in events}

    def close(session_id: str) -> None:
        turn = turns.pop(session_id, None)
        if turn is not None:
            records.extend(turn_records(namespace, turn, roots.get(session_id)))

    for event in events:
        session_id, kind, body = event["session_id"], event["kind"], event["body"]
        if kind == "prompt":
            close(session_id)
            turns[session_id] = Turn(session_id, contract.body_text(body), [], "",
                                     [event["event_id"]])
        elif kind == "tool_use":
            turn = turns.setdefault(session_id, Turn(session_id))
            turn.actions.append(observe(body.get("data")))
            turn.event_ids.append(event["event_id"])
        elif kind == "session_summary":
            text = contract.body_text(body).strip()
            turn = turns.setdefault(session_id, Turn(session_id))
            turn.conclusion = text
            turn.event_ids.append(event["event_id"])
            close(session_id)
            if text:
                records.append(record(namespace, text.splitlines()[0], text, "session_summary",
                                      [], concepts_of([text], []), [], [event["event_id"]]))
    for session_id in list(turns):
        close(session_id)
    return records
