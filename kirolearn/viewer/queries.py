"""What the viewer's pages show, read from the database (``db.views``) and shaped for
the templates and the JSON API. Each call opens its own read-only connection:
requests run on several threads."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from starlette.exceptions import HTTPException

from kirolearn import contract, db, paths, project, tooluse
from kirolearn.db import batches, reads, views
from kirolearn.db.store import Connection
from kirolearn.viewer.chart import latency_series

PAGE_SIZE = 50
TAIL_SIZE = 50
USES_LOOKBACK = 5000  # retrievals searched for the prompts a memory was given to


def summarize_event(event: dict, seq: int) -> dict:
    """One event as the live tail and the session pages show it: each kind its own way
    (a prompt's text; a tool's name, what it did and how it ended; a turn summary; a
    note)."""
    body = event["body"]
    kind = event["kind"]
    item = {"seq": seq, "event_id": event["event_id"], "kind": kind,
            "namespace": event["namespace"], "session_id": event["session_id"],
            "valid_time": event["valid_time"], "headline": "", "detail": "", "outcome": "",
            "output": ""}
    if kind == "tool_use" and isinstance(body, dict) and body.get("type") == "json":
        action = tooluse.observe(body.get("data"))
        item["headline"] = action.tool
        done = tooluse.fact(action, event.get("source", {}).get("project_path"))
        item["detail"] = done or action.command or ", ".join(action.paths)
        if action.failed:
            item["outcome"] = "failed" + (f" (exit {action.exit_status})"
                                          if action.exit_status not in (None, 0) else "")
        elif action.exit_status is not None:
            item["outcome"] = f"exit {action.exit_status}"
        if action.output.strip():  # the lines that say what went wrong, else the last ones
            item["output"] = tooluse.first_lines(action.output, 8)[:1000]
    else:
        text = contract.body_text(body)
        item["headline"] = {"prompt": "Prompt", "session_summary": "Turn summary",
                            "note": "Note"}.get(kind, kind)
        item["detail"] = text[:2000] + ("…" if len(text) > 2000 else "")
    return item


def retrieval_from_row(row: tuple, prompt_chars: int | None = 200) -> dict:
    """A retrieval as the pages show it: what asked for it (a prompt's text; a tool's
    name and files, for a file opened), its answer and how long it took."""
    body = json.loads(row[8]) if row[8] else None
    prompt = contract.body_text(body) if body else ""
    if row[9] == "tool_use" and isinstance(body, dict):
        action = tooluse.observe(body.get("data"))
        prompt = f"{action.tool}: " + (", ".join(action.paths) or action.command)
    if prompt_chars is not None:
        prompt = tooluse.cut(prompt, prompt_chars)
    return {"id": row[0], "prompt_event_id": row[1], "namespace": row[2],
            "record_ids": json.loads(row[3]), "latency_ms": round(row[4], 1), "outcome": row[5],
            "created_at": row[6], "error": row[7], "prompt": prompt}


CONTRIBUTORS_SHOWN = 10  # the Overview names the busiest; the rest are counted


def contributors(authors: list[tuple[str, int]]) -> dict:
    """The busiest authors, and how many more there are (a history of hundreds)."""
    return {"top": [{"author": author, "records": count}
                    for author, count in authors[:CONTRIBUTORS_SHOWN]],
            "more": max(0, len(authors) - CONTRIBUTORS_SHOWN), "count": len(authors)}


class Reader:
    """The viewer's reads of one kirolearn home."""

    def __init__(self, home: paths.Home):
        self.path = db.location(home)

    @contextlib.contextmanager
    def conn(self) -> Iterator[Connection]:
        if not db.exists(self.path):
            raise HTTPException(503, "no database yet: kirolearn has not stored anything")
        with db.reading(self.path) as conn:
            yield conn

    def projects(self) -> list[dict]:
        """Every namespace as a project: its name and folder when known (else its id),
        with its actor when there are several (a team's daemon)."""
        with self.conn() as conn:
            found = views.namespaces(conn)
        several = len({project.parts(ns)[0] for ns in found}) > 1
        shown = []
        for ns, folder in found.items():
            name, actor = project.display_name(ns, folder), project.parts(ns)[0]
            shown.append({"namespace": ns, "name": name, "path": folder, "actor": actor,
                          "label": name + (f" ({folder})" if folder else "")
                          + (f" · {actor}" if several else "")})
        return sorted(shown, key=lambda p: p["label"])

    def authors(self, namespace: str | None) -> list[dict]:
        """Who did the records' work, most records first."""
        with self.conn() as conn:
            return [{"author": author, "records": count}
                    for author, count in views.authors(conn, namespace)]

    def strategies(self) -> list[str]:
        with self.conn() as conn:
            return views.strategies(conn)

    def overview(self, namespace: str | None, days: int) -> dict:
        since = (datetime.now(UTC) - timedelta(days=days)).isoformat(timespec="seconds")
        with self.conn() as conn:
            stats = reads.stats(conn, namespace)
            types = views.record_counts(conn, "observation_type", namespace)
            strategies = views.record_counts(conn, "strategy", namespace)
            rows = views.retrieval_latencies(conn, since, namespace)
            failed = batches.failed_batches(conn, namespace)
            authors = views.authors(conn, namespace)
        events: dict[str, int] = {}
        for entry in stats["namespaces"]:
            for kind, count in entry["events"].items():
                events[kind] = events.get(kind, 0) + count
        return {"totals": stats["totals"], "actors": stats["actors"],
                "authors": contributors(authors), "events_by_kind": events,
                "records_by_type": types,
                "strategies": strategies, "retrievals": latency_series(rows, days),
                "failed_batches": failed}

    def events(self, after: int = 0, namespace: str | None = None, session_id: str | None = None,
               limit: int = TAIL_SIZE, newest: bool = False) -> list[dict]:
        """Events past seq ``after`` (oldest first), or the newest ``limit`` (newest first)."""
        with self.conn() as conn:
            found = views.events_page(conn, after, namespace, session_id, limit, newest)
        return [summarize_event(event, seq) for seq, event in found]

    def event(self, event_id: str) -> dict | None:
        with self.conn() as conn:
            found = views.event_by_id(conn, event_id)
        if found is None:
            return None
        seq, event = found
        return {"event": event, "summary": summarize_event(event, seq)}

    def records(self, namespace: str | None, observation_type: str | None,
                strategy: str | None, since: str | None, until: str | None,
                before: int | None = None, author: str | None = None) -> list[dict]:
        """Newest first, PAGE_SIZE at a time (``before``: the id to continue below)."""
        with self.conn() as conn:
            return views.records_page(conn, namespace, observation_type, strategy, since,
                                      until, before, PAGE_SIZE, author)

    def record(self, record_id: str) -> dict | None:
        with self.conn() as conn:
            record = reads.record_by_id(conn, record_id)
            if record is None:
                return None
            found = views.source_events(conn, record["source_event_ids"])
            uses = views.record_uses(conn, record["namespace"], record_id, USES_LOOKBACK)
        record["sources"] = [
            {"event_id": i, "kind": found[i][1] if i in found else None,
             "valid_time": found[i][2] if i in found else None,
             "text": tooluse.cut(contract.body_text(json.loads(found[i][3])), 200)
             if i in found else ""}
            for i in record["source_event_ids"]]
        record["retrievals"] = [{"id": r[0], "created_at": r[1], "outcome": r[2]} for r in uses]
        return record

    def retrievals(self, namespace: str | None, outcome: str | None,
                   before: int | None = None) -> list[dict]:
        with self.conn() as conn:
            rows = views.retrievals_page(conn, namespace, outcome, before, PAGE_SIZE)
        return [retrieval_from_row(row) for row in rows]

    def retrieval(self, retrieval_id: int) -> dict | None:
        with self.conn() as conn:
            row = views.retrieval_by_id(conn, retrieval_id)
            if row is None:
                return None
            item = retrieval_from_row(row[:-1], prompt_chars=None)
            item["context"] = row[-1]
            found = {r["record_id"]: r for r in reads.records_by_id(
                conn, item["record_ids"], [item["namespace"] or ""])}
        item["records"] = [{**found[i], "forgotten": False} if i in found
                           else {"record_id": i, "forgotten": True} for i in item["record_ids"]]
        return item

    def sessions(self, namespace: str | None) -> list[dict]:
        with self.conn() as conn:
            return views.sessions_page(conn, namespace, PAGE_SIZE)

    def session(self, session_id: str) -> list[dict]:
        """The session's turns in order: a prompt, the tools used after it, and the turn
        summary that ended it (events before the first prompt make a turn of their own)."""
        with self.conn() as conn:
            found = views.session_events(conn, session_id)
        turns: list[dict] = []
        for seq, event in found:
            item = summarize_event(event, seq)
            if item["kind"] == "prompt" or not turns or turns[-1]["summary"] is not None:
                turns.append({"prompt": None, "tools": [], "notes": [], "summary": None})
            turn = turns[-1]
            if item["kind"] == "prompt":
                turn["prompt"] = item
            elif item["kind"] == "tool_use":
                turn["tools"].append(item)
            elif item["kind"] == "session_summary":
                turn["summary"] = item
            else:
                turn["notes"].append(item)
        return turns

    def export(self, namespace: str | None) -> Iterator[str]:
        """``kirolearn export``'s lines (``reads.export_lines``)."""
        with self.conn() as conn:
            yield from reads.export_lines(conn, namespace)
