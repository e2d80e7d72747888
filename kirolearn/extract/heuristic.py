"""The heuristic extractor: a batch of events → memory records, with no network.

A turn is a prompt, the tools used after it, and the turn summary that ends it
(``session_summary``), within one session. Each turn becomes one record: the request as
title, a summary of what was done and what the agent concluded (stored there once), and
facts a developer would want back ("edited `src/app.py` (+12 −3): `export_invoices`",
"ran `pytest -q` → exit 1, 3 failed (KeyError)", "read `docs/api.md`, `src/db.py`"),
told as a colleague would (``in_brief``: a file's edits as one, the files only read as
one fact). A failed command or tool also makes an ``error`` record with the command and
the first lines of its output. Listing, searching, thinking and to-do tools add nothing
of their own; ``note`` events make no records.

A turn that only asks a question, with nothing done and nothing concluded (a Kiro IDE
answer has an empty stop), would make a record that echoes the question: it makes
none; the question joins the next turn of its session in the batch, as what was
asked before it. A turn summary with no turn around it is a ``session_summary``.

What each tool use did is read by ``kirolearn.tooluse``, for any agent's payload.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from kirolearn import contract
from kirolearn.extract.anchors import of_actions
from kirolearn.tooluse import Action, cut, fact, first_lines, observe, relative
from kirolearn.words import without_noise

STRATEGY = "heuristic"
TITLE_CHARS = 120
REQUEST_CHARS = 600
CONCLUSION_CHARS = 1500
ERROR_LINES = 8
MAX_FACTS = 30
MAX_CONCEPTS = 100  # a record's most (contract.validate_record)

PATH_IN_TEXT = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:py|ts|tsx|js|jsx|go|rs|java|rb|"
                          r"c|h|cpp|cs|md|toml|yaml|yml|json|sql|sh|kt|swift|php))\b")
IDENTIFIER = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]+)+|"
                        r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+)\b")


@dataclass
class Turn:
    session_id: str
    request: str = ""
    actions: list[Action] = field(default_factory=list)
    conclusion: str = ""
    event_ids: list[str] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)  # questions of echo-only turns before it


QUESTION_WORDS = frozenset({
    "what", "why", "how", "where", "when", "who", "whom", "whose", "which", "is", "are",
    "was", "were", "do", "does", "did", "can", "could", "would", "should", "will", "shall",
    "may", "might", "have", "has", "any", "explain", "describe", "tell", "show"})
SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


def only_asks(text: str) -> bool:
    """Whether a request is questions and nothing else: no statement, no instruction
    (``which files handle billing?``, ``Explain the auth flow``), so a record of it
    alone would tell nothing. Greetings and thanks of one to three words are ignored."""
    asked = False
    for sentence in SENTENCE.findall(text):
        sentence = sentence.strip()
        words = sentence.rstrip("?!.").split()
        if not words:
            continue
        if sentence.endswith("?") or words[0].casefold().strip(",") in QUESTION_WORDS:
            asked = True
        elif len(words) > 3 or not sentence.endswith("!"):
            return False
    return asked


def concepts_of(texts: list[str], files: list[str], names: Iterable[str] = ()) -> list[str]:
    """Keywords a search might use, never shown: file stems and directories, every name
    the turn's edits touched (``names``), the code identifiers in its texts."""
    found: list[str] = []
    for path in files:
        parts = path.replace("\\", "/").split("/")
        found += [p for p in parts[:-1] if p not in ("", ".", "..", "src", "tests", "lib")][-2:]
        stem = os.path.splitext(parts[-1])[0]
        if stem:
            found.append(stem)
    found += names
    for text in texts:
        found += IDENTIFIER.findall(text)
    return [c[:100] for c in dict.fromkeys(found)][:MAX_CONCEPTS]


# -- records ---------------------------------------------------------------------------------

def record(namespace: str, title: str, summary: str, observation_type: str,
           facts: list[str], concepts: list[str], files: list[str],
           source_ids: list[str], anchors: dict[str, list[str]] | None = None,
           changes: str = "") -> dict:
    return {"anchors": anchors or {}, **({"changes": changes} if changes else {}),
        "record_id": contract.new_record_id(), "namespace": namespace,
        "title": cut(title, TITLE_CHARS) or "Untitled",
        "summary": beyond(cut(title, TITLE_CHARS), summary)[:4000],
        "facts": [f[:500] for f in facts[:MAX_FACTS]], "concepts": concepts,
        "files_touched": [f[:500] for f in files[:100]], "observation_type": observation_type,
        "strategy": STRATEGY, "source_event_ids": source_ids, "created_at": contract.now_iso(),
    }


def beyond(title: str, summary: str) -> str:
    """The summary, or none when it only says the title again (case, spaces and the
    closing stop aside): a summary that adds nothing is not written."""
    def plain(text: str) -> str:
        return " ".join(text.split()).rstrip(" .!?:").casefold()
    return "" if plain(summary) == plain(title) else summary


def identifiers(actions: list[Action]) -> list[str]:
    """The names the turn's edits touched, in order."""
    return list(dict.fromkeys(name for a in actions for name in a.identifiers))


def changes(actions: list[Action]) -> str:
    """The lines the turn's edits added or removed, each once, within
    ``contract.MAX_CHANGES_CHARS``: searched, never shown."""
    lines = dict.fromkeys(line for a in actions for line in a.changed)
    return "\n".join(lines)[:contract.MAX_CHANGES_CHARS].rstrip()


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


def in_brief(actions: list[Action]) -> list[Action]:
    """A turn's actions as a colleague's note tells them: each file's edits as one (their
    lines summed, the names they touched joined) where it was first edited; the files
    only read as one read where the first was; each command as it ran. Looking around
    (listing, searching) is left out."""
    edited = {a.paths[0] for a in actions if a.kind == "edit"}
    told: list[Action] = []
    edit_at: dict[str, int] = {}  # a file's edit: its place in told
    read_at: int | None = None
    for action in actions:
        if action.kind == "quiet":
            continue
        if action.kind == "edit" and action.paths[0] in edit_at:
            at = edit_at[action.paths[0]]
            edit = told[at]
            told[at] = edit._replace(
                added=edit.added + action.added, removed=edit.removed + action.removed,
                identifiers=list(dict.fromkeys([*edit.identifiers, *action.identifiers])))
        elif action.kind == "edit":
            edit_at[action.paths[0]] = len(told)
            told.append(action._replace(identifiers=list(action.identifiers)))
        elif action.kind == "read":
            paths = [p for p in action.paths if p not in edited]
            if read_at is not None:
                told[read_at] = told[read_at]._replace(
                    paths=list(dict.fromkeys(told[read_at].paths + paths)))
            elif paths:
                read_at = len(told)
                told.append(action._replace(paths=paths))
        else:
            told.append(action)
    return told


SUBJECT_CHARS = 12  # a first line this long says what a request of several lines is


def subject(request: str) -> str:
    """What a request is, for its title: its first line when it has several (a commit's
    subject, not its body's list of changes; the ask, not the log pasted under it) and
    that line says enough, else the whole of it."""
    first, _, rest = request.partition("\n")
    first = first.strip().rstrip(":")
    return first if rest.strip() and len(first) >= SUBJECT_CHARS else request


def is_echo(turn: Turn) -> bool:
    """A turn whose record would only repeat its question."""
    return (not turn.conclusion.strip() and only_asks(turn.request)
            and all(a.kind == "quiet" and not a.failed for a in turn.actions))


def turn_records(namespace: str, turn: Turn, root: str | None) -> list[dict]:
    """A turn's records: what was asked and done (or, alone, how it ended), and one
    for each command that failed."""
    actions = [a for a in turn.actions if a.kind != "quiet"]
    work = _work_record(namespace, turn, root, actions)
    return ([work] if work else []) + [_failure_record(namespace, turn, action, root)
                                       for action in actions if action.failed]


def _work_record(namespace: str, turn: Turn, root: str | None,
                 actions: list[Action]) -> dict | None:
    told = in_brief(actions)
    facts = [f for f in (fact(a, root) for a in told) if f]
    files = list(dict.fromkeys(relative(p, root) for a in actions for p in a.paths))
    conclusion = without_noise(turn.conclusion).strip()
    asked_for = without_noise(turn.request).strip()
    if not (asked_for or facts or (turn.asked and conclusion)):
        if conclusion:  # a turn summary whose prompt and tools were in an earlier batch
            return record(namespace, conclusion.splitlines()[0], conclusion,
                          "session_summary", [], concepts_of([conclusion], []), [],
                          turn.event_ids)
        return None
    title = subject(asked_for) or (facts[0] if facts else turn.asked[-1])
    kind = "tool_use" if actions else "discovery"
    summary = _work_summary(turn, title, asked_for, told, conclusion)
    return record(namespace, title, summary, kind, list(dict.fromkeys(facts)),
                  concepts_of([asked_for, *turn.asked, *facts], files, identifiers(actions)),
                  files, turn.event_ids, of_actions(actions, root), changes(actions))


def _work_summary(turn: Turn, title: str, asked_for: str, told: list[Action],
                  conclusion: str) -> str:
    """The request (only when the title had to cut it short), the questions asked
    before it, what was done and how it ended."""
    request = cut(asked_for, REQUEST_CHARS) if title != asked_for or len(
        cut(title, 10**6)) > TITLE_CHARS else ""
    asked = "Asked before: " + " ".join(cut(q, 200) for q in turn.asked) if turn.asked else ""
    done = _done(told)
    return "\n\n".join(part for part in (
        request, asked, f"Done: {done}." if done else "",
        cut(conclusion, CONCLUSION_CHARS)) if part)


def _failure_record(namespace: str, turn: Turn, action: Action, root: str | None) -> dict:
    what = f"`{cut(action.command, 100)}`" if action.command else f"`{action.tool}`"
    errors = first_lines(action.output, ERROR_LINES)
    request = cut(turn.request, 200).rstrip(".!?")
    summary = f"{what} failed" + (f" while working on: {request}" if request else "") + "."
    if errors:  # fenced: a line of `===` under text would be read as a heading
        fence = "~~~" if "```" in errors else "```"
        summary += f"\n\n{fence}\n{errors}\n{fence}"
    error_files = list(dict.fromkeys(
        [relative(p, root) for p in action.paths] + PATH_IN_TEXT.findall(errors)))
    facts = [f for f in (fact(action, root),) if f]
    return record(namespace, f"{what} failed", summary, "error", facts,
                  concepts_of([errors], error_files), error_files, turn.event_ids)


class HeuristicExtractor:
    """The default extractor: deterministic, no network."""

    strategy = STRATEGY

    def extract(self, namespace: str, events: list[dict]) -> tuple[list[dict], str]:
        return extract(namespace, events), STRATEGY

    def status(self) -> dict:
        return {}


def happened(event: dict) -> tuple[float, str] | None:
    """When an event happened (its ``valid_time``): a record is as old as the work it
    tells of, not as its extraction (an import, a backlog)."""
    try:
        return contract.parse_valid_time(event["valid_time"]).timestamp(), event["valid_time"]
    except (KeyError, TypeError, ValueError):
        return None


def extract(namespace: str, events: list[dict]) -> list[dict]:
    """Records for a batch (events in time order, bodies decoded), each as old as the
    last event of its turn."""
    records: list[dict] = []
    turns: dict[str, Turn] = {}
    echoes: dict[str, Turn] = {}  # per session, the echo-only turns waiting for the next
    roots = {e["session_id"]: e.get("project_path") for e in events}
    done = {e["event_id"]: moment for e in events if (moment := happened(e))}

    def close(session_id: str) -> None:
        turn = turns.pop(session_id, None)
        if turn is None:
            return
        if is_echo(turn):
            waiting = echoes.setdefault(session_id, Turn(session_id))
            waiting.asked += [*turn.asked, turn.request]
            waiting.event_ids += turn.event_ids
            return
        made = turn_records(namespace, turn, roots.get(session_id))
        when = max((done[i] for i in turn.event_ids if i in done), default=None)
        records.extend({**r, "created_at": when[1]} if when else r for r in made)

    def start(session_id: str, request: str = "", event_ids: list[str] | None = None) -> Turn:
        waiting = echoes.pop(session_id, Turn(session_id))
        turn = Turn(session_id, request, [], "", [*waiting.event_ids, *(event_ids or [])],
                    waiting.asked)
        turns[session_id] = turn
        return turn

    for event in events:
        session_id, kind, body = event["session_id"], event["kind"], event["body"]
        if kind == "prompt":
            close(session_id)
            start(session_id, contract.body_text(body), [event["event_id"]])
        elif kind == "tool_use":
            turn = turns.get(session_id) or start(session_id)
            turn.actions.append(observe(body.get("data")))
            turn.event_ids.append(event["event_id"])
        elif kind == "session_summary":
            turn = turns.get(session_id) or start(session_id)
            turn.conclusion = contract.body_text(body).strip()
            turn.event_ids.append(event["event_id"])
            close(session_id)
    for session_id in list(turns):
        close(session_id)
    return records
