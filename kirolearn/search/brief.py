"""A project's brief: a short living page made from its records, for a session's start,
the viewer and ``kirolearn brief``.

Deterministic: the same records make the same page. From the newest ``BRIEF_RECORDS``
records in force (valid, not stale, not superseded), it says:

- what the project is: the first paragraph of a rule file (CLAUDE.md, AGENTS.md…),
  and how much work memory holds, since when, by how many (``Totals``: all of it, not
  the window read; the window said when it is smaller);
- the conventions and decisions in force: the rule files, then the decisions and
  patterns, newest first;
- the files most worked on, and why: the files of the project's logic the most
  records name (not changelogs, lock, version or requirement files, docs nor CI
  settings), each with its most telling record (``telling``: a change, not a typo's
  fix nor a bump, about that file more than many others, newest of the equals);
- open work: a turn that ended on a failure, or that left a TODO, with no later record
  on the same files;
- the recent changes: the newest records of work that changed something (not a
  question answered by reading, nor a bot's bump).

Each line without trailers, addresses or generated lines (``words.without_noise``);
each part is cut to a few lines, and the whole to a number of tokens.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from kirolearn import contract
from kirolearn.words import without_noise

HEADER = "## Project brief (from kirolearn)"
BRIEF_RECORDS = 500  # the newest records in force it is made from
IN_FORCE = 6  # conventions and decisions listed
HOT_FILES = 5
OPEN_WORK = 3
RECENT = 5
LINE_CHARS = 160
UNFINISHED = re.compile(r"\b(?:TODO|FIXME|XXX|not yet|still fails?|left to do|unfinished)\b")
WORK = ("tool_use", "session_summary", "discovery", "error")
# Files every change touches, which say nothing of the work, and files that are not the
# project's logic: changelogs, lock, version and requirement files, packaging and CI
# settings, docs.
BOOKKEEPING = re.compile(
    r"(?:^|/)(?:CHANGES|CHANGELOG|HISTORY|NEWS|RELEASE[-_]?NOTES|AUTHORS|CONTRIBUTORS)"
    r"(?:\.\w+)?$|(?:^|/)[\w.-]*\.lock$|(?:^|/)(?:package-lock\.json|go\.sum|"
    r"pnpm-lock\.yaml|package\.json|pyproject\.toml|setup\.(?:py|cfg)|MANIFEST\.in|tox\.ini"
    r"|\.pre-commit-config\.yaml|\.gitignore|Makefile)$|(?:^|/)_*version_*\.\w+$"
    r"|(?:^|/)requirements[\w.-]*\.(?:txt|in)$|(?:^|/)(?:\.github|\.circleci|docs?)/"
    r"|\.(?:md|rst|txt)$", re.I)
# A change that says nothing of why a file is what it is: a typo's fix, a bump.
TRIVIAL = re.compile(r"\b(?:typos?|spelling|wording|whitespace|bump(?:ed)?|version|release"
                     r"|changelog|lint(?:ing)?|format(?:ting)?|merge|revert|update"
                     r" dependencies)\b", re.I)
BOT_LINE = re.compile(r"^\W*(?:bump\b.*\bfrom\b|\[pre-commit\.ci\]|pre-commit autoupdate"
                      r"|chore\(deps)", re.I)


def _line(text: str) -> str:
    text = " ".join(without_noise(text).split())
    return text if len(text) <= LINE_CHARS else text[:LINE_CHARS - 1].rstrip() + "…"


def _open(record: dict) -> bool:
    return record["observation_type"] == "error" or UNFINISHED.search(
        "\n".join([record["title"], record["summary"], *record["facts"]])) is not None


@dataclass
class Totals:
    """All the work in force the brief's project holds, not just the window it reads."""

    records: int
    authors: int
    since: str  # the oldest record's time


def _telling(record: dict) -> tuple:
    """How well a record tells why a file is what it is (more is better): a change to
    it, not a trivial one, a decision or a pattern, about few files, in words enough."""
    return (_changed(record), TRIVIAL.search(record["title"]) is None,
            record["observation_type"] in ("decision", "pattern"),
            -len(record["files_touched"]), min(len(record["title"].split()), 6))


def _changed(record: dict) -> bool:
    """Whether a record tells of a change (an edit), not of a question read about."""
    if BOT_LINE.search(record["title"]):
        return False
    if record["strategy"] == "heuristic":
        return any(fact.startswith("edited ") for fact in record["facts"])
    return record["observation_type"] in WORK


Lines = list[tuple[str, str | None]]  # a part's lines, each with the record it tells of


def brief(records: list[dict], tokens: int, totals: Totals | None = None) -> Brief:
    """The brief of these records (newest first, in force) within ``tokens`` (about
    four characters each); one without sections when there are none. ``totals``: what
    the project holds in all (default: these records)."""
    if not records or tokens <= 0:
        return Brief([])
    rules = [r for r in records if r["strategy"] == contract.RULE_FILE]
    work = [r for r in records if r["strategy"] != contract.RULE_FILE]
    parts = [("What it is", _what_it_is(rules, work, totals)),
             ("Conventions and decisions in force", _in_force(rules, work)),
             ("Files most worked on", _files_most_worked_on(work)),
             ("Open work", _open_work(work)),
             ("Recent changes", _recent_changes(work))]
    return Brief(_fitted(parts, tokens * 4 - len(HEADER) - 2))


def _what_it_is(rules: list[dict], work: list[dict], totals: Totals | None) -> Lines:
    about = next((r["summary"] for r in rules if r["summary"]), "")
    if work:
        totals = totals or Totals(len(work), len({r.get("author") for r in work}),
                                  min(r["created_at"] for r in work))
        said = (f"{totals.records:,} memories of its work since {totals.since[:10]}"
                + (f", by {totals.authors:,} people" if totals.authors > 1 else "")
                + (f"; this brief reads the newest {BRIEF_RECORDS:,}"
                   if totals.records > BRIEF_RECORDS else ""))
        about = f"{about} ({said}.)" if about else said[0].upper() + said[1:] + "."
    return [(_line(about), None)] if about else []


def _in_force(rules: list[dict], work: list[dict]) -> Lines:
    in_force = rules + [r for r in work if r["observation_type"] in ("decision", "pattern")]
    return [(_line(r["title"]) + (f" ({len(r['facts'])} rules)" if r in rules and r["facts"]
                                  else f" · {r['created_at'][:10]}"), r["record_id"])
            for r in in_force[:IN_FORCE]]


def _files_most_worked_on(work: list[dict]) -> Lines:
    counts = Counter(f for r in work for f in dict.fromkeys(r["files_touched"])
                     if not BOOKKEEPING.search(f))
    hot = [(name, n) for name, n in counts.most_common(HOT_FILES) if n > 1]
    told = {name: max((r for r in work if name in r["files_touched"]),  # newest first:
                      key=_telling)  # of the equals, max keeps the first
            for name, _ in hot}
    return [(f"`{name}` ({n} memories): {_line(told[name]['title'])}", told[name]["record_id"])
            for name, n in hot]


def _open_work(work: list[dict]) -> Lines:
    unfinished: list[dict] = []
    later_files: set[str] = set()  # those of the records newer than the one looked at
    for record in work:
        if len(unfinished) == OPEN_WORK:
            break
        if _open(record) and not later_files.intersection(record["files_touched"]):
            unfinished.append(record)
        later_files.update(record["files_touched"])
    return [(f"{r['created_at'][:10]} {_line(r['title'])}"
             + (" (failed)" if r["observation_type"] == "error" else ""), r["record_id"])
            for r in unfinished]


def _recent_changes(work: list[dict]) -> Lines:
    recent = [r for r in work if r["observation_type"] in WORK and _changed(r)][:RECENT]
    return [(f"{r['created_at'][:10]} {_line(r['title'])}", r["record_id"]) for r in recent]


def _fitted(parts: list[tuple[str, Lines]], budget: int) -> list[dict]:
    """The parts as sections, each cut to what is left of ``budget`` characters; a
    part with no line left out."""
    sections: list[dict] = []
    for heading, items in parts:
        cost = len(heading) + 6
        kept = []
        for text, record_id in items:
            if cost + len(text) + 3 > budget:
                break
            kept.append({"text": text, "record_id": record_id})
            cost += len(text) + 3
        if kept:
            sections.append({"heading": heading, "items": kept})
            budget -= cost
    return sections


@dataclass
class Brief:
    """A brief's parts, each a heading and its lines (with the record a line tells of)."""

    sections: list[dict]

    @property
    def record_ids(self) -> list[str]:
        return list(dict.fromkeys(item["record_id"] for section in self.sections
                                  for item in section["items"] if item["record_id"]))

    @property
    def markdown(self) -> str:
        """As the agent and ``kirolearn brief`` show it ("" when it says nothing)."""
        if not self.sections:
            return ""
        lines = [HEADER]
        for section in self.sections:
            if section["heading"] == "What it is":
                lines += ["", f"**{section['heading']}:** {section['items'][0]['text']}"]
            else:
                lines += ["", f"**{section['heading']}:**",
                          *(f"- {item['text']}" for item in section["items"])]
        return "\n".join(lines)
