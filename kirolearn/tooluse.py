"""What one tool use did, read from any agent's payload, and the short text it is told in.

Tool payloads come from several agents: Kiro CLI (``fs_write``, ``fs_read`` with
``operations``, ``execute_bash`` with ``result[].exit_status``), Claude Code
(``Write``, ``Edit``, ``MultiEdit``, ``Read``, ``Bash``) and the Kiro IDE (camelCase
names mapped by its shim). Unknown tools are read by their keys: a path-like key
names a file, a ``command`` key a command. The heuristic extractor builds records
from these readings; the viewer shows them in its live tail.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from kirolearn.words import STOP_WORDS

PATH_KEYS = ("path", "file_path", "filePath", "target_file", "notebook_path", "file")
# An edit's new and old text: Kiro CLI (file_text, new_str), Claude Code (content,
# new_string), the Kiro IDE (fsWrite's text, strReplace's newStr and oldStr).
NEW_TEXT_KEYS = ("file_text", "content", "new_str", "new_string", "text", "newStr")
OLD_TEXT_KEYS = ("old_str", "old_string", "oldStr")
QUIET_WORDS = ("list", "glob", "grep", "search", "find", "think", "todo", "introspect",
               "knowledge")  # and `ls`: tools that look around rather than act
EDIT_TOOLS = re.compile(r"(?i)write|edit|replace|create|insert|append|patch|str_?replace")
READ_TOOLS = re.compile(r"(?i)read|view|open|cat\b")
RUN_TOOLS = re.compile(r"(?i)bash|shell|exec|command|terminal|run")
# What an edit touched: names defined on its changed lines (def, class, function...),
# then other code-like names there (snake_case, camelCase, dotted, CONSTANTS).
DEFINITION = re.compile(r"\b(?:def|class|function|func|fn|interface|struct|enum|type|trait|"
                        r"impl|module|const|let|var)\s+\*?([A-Za-z_$][\w$]*)")
CODE_NAME = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]+)+|"
                       r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|"
                       r"[A-Z]\w*(?:Error|Exception|Warning))\b")
KEY_NAME = re.compile(r"^\s*[\"']?([A-Za-z_][\w.-]*)[\"']?\s*[:=]")  # settings: `key = v`
MAX_IDENTIFIERS = 8  # the names an edit's fact shows (all are searched: its concepts)
EXCERPT_BYTES = 4096  # what is kept of a read-only tool's use
EXIT_CODE = re.compile(r"Exit code (-?\d+)\b")
ERROR_NAME = re.compile(r"\b([A-Z]\w*(?:Error|Exception)|panic|Segmentation fault)\b")
TEST_COUNTS = re.compile(r"(?i)\b(\d+) (failed|passed|errors?)\b")
ERROR_LINE = re.compile(r"(?i)(error|exception|traceback|failed|fatal|panic|✗|FAIL\b)")


class Action(NamedTuple):
    """What one tool use did, as far as the payload tells. (A NamedTuple: every tool
    hook's shim reads one, and a dataclass would cost it the import of ``inspect``.)"""

    kind: str  # edit | read | run | quiet | other
    tool: str
    paths: list[str]
    command: str = ""
    added: int = 0
    removed: int = 0
    exit_status: int | None = None
    failed: bool = False
    output: str = ""
    identifiers: tuple[str, ...] | list[str] = ()  # what an edit touched
    new_texts: tuple[str, ...] = ()  # an edit's new text (what it defines: its anchors)
    changed: tuple[str, ...] = ()  # the lines an edit added or removed (``changed_lines``)


# -- reading payloads ---------------------------------------------------------------------

def _lines(text: object) -> int:
    return len(str(text).splitlines()) if text else 0


def _output(response: object) -> tuple[str, int | None, bool]:
    """(output text, exit status, failed) from a tool response of any agent."""
    if not isinstance(response, dict):
        text = "" if response is None else str(response)
        return text, None, False
    result = response.get("result")
    parts, exit_status = _result_items(result)
    if isinstance(result, str):
        parts.append(result)
    parts += [response[key] for key in ("stdout", "stderr", "output", "error")
              if isinstance(response.get(key), str)]
    exit_status = _exit_status(response, exit_status)
    failed = (exit_status not in (None, 0) or response.get("success") is False
              or response.get("is_error") is True or bool(response.get("interrupted")))
    return "\n".join(p for p in parts if p.strip()), exit_status, failed


def _result_items(result: object) -> tuple[list[str], int | None]:
    """The output and exit status of a list result (Kiro CLI's
    ``[{exit_status, stdout, stderr}]``, or plain items)."""
    parts: list[str] = []
    exit_status = None
    for item in result if isinstance(result, list) else []:
        if isinstance(item, dict):
            if str(item.get("exit_status", "")).lstrip("-").isdigit():
                exit_status = int(item["exit_status"])
            parts += [str(item.get(k) or "") for k in ("stdout", "stderr")]
        else:
            parts.append(str(item))
    return parts, exit_status


def _exit_status(response: dict, found: int | None) -> int | None:
    """The exit status a response states (over one ``found`` in its result), or the one
    its error says (Claude Code's failed Bash)."""
    for key in ("exit_code", "exitCode", "returncode", "exit_status"):
        if isinstance(response.get(key), int | str) and str(response[key]).lstrip("-").isdigit():
            found = int(response[key])
    said = EXIT_CODE.match(str(response.get("error") or ""))
    if found is None and said:
        found = int(said.group(1))
    return found


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
    paths = _paths(tool_input)
    command = tool_input.get("command") or tool_input.get("cmd")
    name = tool.rsplit("/", 1)[-1]
    modes = {op.get("mode") for op in _items(tool_input.get("operations"))}
    action = Action("other", tool, paths, exit_status=exit_status, failed=failed,
                    output=output)
    if (name.lower() == "ls" or any(word in name.lower() for word in QUIET_WORDS)
            or modes & {"Directory", "Search"}):
        return action._replace(kind="quiet")
    if isinstance(command, str) and (RUN_TOOLS.search(name) or not paths):
        return action._replace(kind="run", command=" ".join(command.split()))
    if EDIT_TOOLS.search(name) and paths:
        return _edit(action, tool_input)
    if READ_TOOLS.search(name) and paths:
        return action._replace(kind="read")
    return action


def _edit(action: Action, tool_input: dict) -> Action:
    """An edit: the lines it added and removed, the names it touched, its new text."""
    new = [tool_input.get(k) for k in NEW_TEXT_KEYS]
    old = [tool_input.get(k) for k in OLD_TEXT_KEYS]
    for edit in _items(tool_input.get("edits")):  # Claude Code MultiEdit
        new.append(edit.get("new_string"))
        old.append(edit.get("old_string"))
    new_texts = [t for t in new if isinstance(t, str)]
    old_texts = [t for t in old if isinstance(t, str)]
    return action._replace(kind="edit", added=sum(map(_lines, new_texts)),
                           removed=sum(map(_lines, old_texts)),
                           identifiers=touched(new_texts, old_texts),
                           new_texts=tuple(new_texts),
                           changed=tuple(changed_lines(new_texts, old_texts)))


class Lines(NamedTuple):
    """The lines of a file a tool is about to read or change: a read's range (its
    ``offset``, from 1, and ``limit``), or the text an edit replaces (found in the
    file by whoever reads it)."""

    path: str
    first: int = 1
    last: int = 0  # 0: with ``text``, where the text ends
    text: str = ""


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def lines_asked(data: object, first_line: int = 1) -> Lines | None:
    """The lines a tool use (``{tool_name, tool_input}``, before it runs) is about: a
    read of a range (``first_line``: the number its ``offset`` gives a file's first line,
    1 for Claude Code, 0 for Gemini CLI and Qwen Code), an edit of some text; None for
    anything else (a whole file read or written tells of no lines in particular)."""
    action = observe(data)
    tool_input = data.get("tool_input") if isinstance(data, dict) else None
    if action.kind not in ("read", "edit") or not isinstance(tool_input, dict):
        return None
    if action.kind == "edit":
        olds = [tool_input.get(k) for k in OLD_TEXT_KEYS] + [
            edit.get("old_string") for edit in _items(tool_input.get("edits"))]
        old = next((t for t in olds if isinstance(t, str) and t.strip()), None)
        return None if old is None else Lines(action.paths[0], text=old)
    offset = tool_input.get("offset")
    offset = _positive(offset + 1 - first_line) if isinstance(offset, int) else None
    limit = _positive(tool_input.get("limit"))
    if offset is None and limit is None:
        return None
    first, count = offset or 1, limit or 2000  # Claude Code reads 2,000 lines unless told
    return Lines(action.paths[0], first, first + count - 1)


def _stripped(texts: list[str]) -> list[str]:
    return [line.strip() for text in texts for line in text.splitlines() if line.strip()]


def changed_lines(new: list[str], old: list[str]) -> list[str]:
    """The lines an edit added, then those it removed (stripped; all lines of a new
    file), each once."""
    before, after = _stripped(old), _stripped(new)
    return list(dict.fromkeys([*(line for line in after if line not in set(before)),
                               *(line for line in before if line not in set(after))]))


def touched(new: list[str], old: list[str]) -> list[str]:
    """The names an edit touched: the definitions in its text (an edit's unchanged lines
    name the function it is in), then the code-like names and setting keys on the lines
    it changed (all lines of a new file); no plain English word (``STOP_WORDS``)."""
    before, after = _stripped(old), _stripped(new)
    changed = changed_lines(new, old)
    text = "\n".join(changed)
    names = DEFINITION.findall("\n".join(after + before)) + CODE_NAME.findall(text)
    names += [m.group(1) for line in changed if (m := KEY_NAME.match(line))
              and not DEFINITION.match(line)]
    return [n for n in dict.fromkeys(names) if len(n) > 2 and n.lower() not in STOP_WORDS]


def only_looks(body: object) -> bool:
    """Whether a tool_use body is a read, a search or a listing: stored as its paths and
    an excerpt of what it saw (``EXCERPT_BYTES``), not the whole file for ever."""
    data = body.get("data") if isinstance(body, dict) and body.get("type") == "json" else None
    return isinstance(data, dict) and observe(data).kind in ("read", "quiet")


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
        names = ", ".join(f"`{name}`" for name in action.identifiers[:MAX_IDENTIFIERS])
        return f"edited `{files[0]}` (+{action.added} −{action.removed})" + (
            f": {names}" if names else "")
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
        errors = list(dict.fromkeys(ERROR_NAME.findall(action.output)))[:3]
        if errors and (action.failed or action.exit_status):
            details.append(f"({', '.join(errors)})")
        return text + (" → " + ", ".join(details).replace(", (", " (") if details else "")
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
