"""How the MCP tools say what they found: plain text for a model, one function a shape."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from kirolearn import contract

RECALL_TEXT_CHARS = 300  # a recall bullet's text is cut here
SUMMARY_MAX = 4000
TRUNCATED = "[truncated]"
SUMMARY_SECTIONS = (("investigated", "What was investigated"), ("learned", "What was learned"),
                    ("completed", "What was completed"), ("next_steps", "Next steps"))


def one_line(text: str) -> str:
    return " ".join(text.split())


def utc(created_at: str, with_time: bool = True) -> str:
    """A record's time as ``YYYY-MM-DD HH:MM`` (or the date) in UTC."""
    moment = contract.parse_valid_time(created_at).astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M" if with_time else "%Y-%m-%d")


def search_block(record: dict) -> str:
    """One search result: title, summary, concepts, files, and where to find it."""
    lines = [f"### {one_line(record['title'])}", record["summary"].strip()]
    if record["concepts"]:
        lines.append("Concepts: " + ", ".join(record["concepts"]))
    if record["files_touched"]:
        lines.append("Files: " + ", ".join(record["files_touched"]))
    lines.append(f"(id: {record['record_id']}, {record['observation_type']},"
                 f" {utc(record['created_at'], with_time=False)})")
    return "\n".join(lines)


def recall_text(records: list[dict], now: datetime | None = None) -> str:
    """The recall tool's answer: a count with the time, then one bullet per memory with
    its id, type, date and a confidence c. In hybrid and semantic search c is the
    record's ``relevance``: how close it is in meaning to the query (the cosine of their
    embeddings), on one scale for every answer, so it says how good the best match is
    too (a score relative to the best match's said 1.00 for the best of a poor lot). In
    lexical search it is the BM25 score relative to the best match's (1.00); a record
    not embedded yet, or a substring match, has none."""
    if not records:
        return "No relevant memories found."
    now = now or datetime.now(UTC)
    best = min((r["score"] for r in records if r.get("score") is not None), default=None)
    lines = []
    for record in records:
        text = one_line(record["summary"]) or one_line(record["title"])
        if len(text) > RECALL_TEXT_CHARS:
            text = text[:RECALL_TEXT_CHARS - 1].rstrip() + "…"
        line = (f"- {text} (id: {record['record_id']}) [{record['observation_type']}]"
                f" ({utc(record['created_at'], with_time=False)})")
        score = record.get("score")
        if record.get("relevance") is not None:
            line += f" c:{record['relevance']:.2f}"
        elif score is not None and best:
            line += f" c:{score / best:.2f}"
        lines.append(line)
    noun = "memory" if len(records) == 1 else "memories"
    return (f"Found {len(records)} relevant {noun} (as of {now:%Y-%m-%d %H:%M} UTC):\n\n"
            + "\n".join(lines))


def timeline_text(records: list[dict], anchor: str, label: str) -> str:
    rows = [f"Records around {anchor} in {label}, oldest first (times UTC; → marks it):"]
    for record in records:
        mark = "→" if record["record_id"] == anchor else " "
        rows.append(f"{mark} {record['record_id']}  {utc(record['created_at'])}"
                    f"  {record['observation_type']}  {one_line(record['title'])}")
    return "\n".join(rows)


def full_record(record: dict) -> str:
    seen = 1 + sum(v.get("reason") is None for v in record.get("versions") or [])
    lines = [f"### {one_line(record['title'])}",
             f"id: {record['record_id']} · type: {record['observation_type']} · strategy:"
             f" {record['strategy']} · created: {utc(record['created_at'])} UTC"
             + (f" · seen {seen} times (repeats merged in)" if seen > 1 else ""),
             "", record["summary"].strip()]
    if record["facts"]:
        lines += ["", "Facts:", *(f"- {one_line(fact)}" for fact in record["facts"])]
    if record["concepts"] or record["files_touched"]:
        lines.append("")
    if record["concepts"]:
        lines.append("Concepts: " + ", ".join(record["concepts"]))
    if record["files_touched"]:
        lines.append("Files: " + ", ".join(record["files_touched"]))
    lines += ["", "Source events: " + ", ".join(record["source_event_ids"])]
    if record.get("invalid_reason"):
        lines.insert(2, f"INVALID: {record['invalid_reason']} (kept, never recalled)")
    for number, version in enumerate(record.get("versions") or [], start=1):
        why = f"; {one_line(version['reason'])}" if version.get("reason") else ""
        lines += ["", f"Version {number} (until {utc(version['replaced_at'])} UTC{why}):",
                  version["summary"].strip()]
        if version["facts"]:
            lines += [f"- {one_line(fact)}" for fact in version["facts"]]
    return "\n".join(lines)


def session_summary(request: str, sections: dict[str, str]) -> tuple[str, str]:
    """The title and summary of a turn summary, as the seed builds them: the title is
    the request cut to 200 characters; the summary is four ``##`` sections, and when
    they exceed 4,000 characters whole sections are dropped from the bottom (the last
    one left is cut) and ``[truncated]`` says so."""
    title = one_line(request)[:200]
    parts = [f"## {heading}\n{sections[key].strip() or '(none)'}"
             for key, heading in SUMMARY_SECTIONS]
    summary = "\n\n".join(parts)
    if len(summary) <= SUMMARY_MAX:
        return title, summary
    tail = "\n\n" + TRUNCATED
    while len(parts) > 1 and len("\n\n".join(parts)) + len(tail) > SUMMARY_MAX:
        parts.pop()
    kept = "\n\n".join(parts)[:SUMMARY_MAX - len(tail)].rstrip()
    return title, kept + tail


def unique(items: Iterable[str]) -> list[str]:
    """The items in order, each once."""
    return list(dict.fromkeys(items))
