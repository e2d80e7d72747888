"""The viewer's web app: what was captured, distilled and retrieved, on 127.0.0.1.

Pages are rendered on the server (Jinja2, autoescaped) with one small script for the
live tail and the confirm dialogs; the JSON API lives under ``/api``; new events reach
the browser as server-sent events. Everything the pages use ships in the package (no
CDN), so the viewer works offline. Reads go straight to SQLite (a read-only
connection per request); search and forget go through the daemon like every other
client (retrieval, then ingest, which scrubs and relays to the single writer).

Security, for a server any local process or web page could try to reach:
- the Host header must be ``127.0.0.1`` (a DNS-rebinding page names its own host);
- every page and API call needs the token: ``kirolearn open`` hands it over in the URL
  once, and it comes back as a cookie (HttpOnly, SameSite=Strict), or as
  ``Authorization: Bearer <token>`` for scripts;
- a request that changes anything must also carry the token itself (a form field or
  the ``X-Kirolearn-Token`` header): the cookie alone never forgets a record;
- strict headers on every answer: a CSP with scripts and styles from 'self' only, no
  framing, nosniff, no referrer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sqlite3
import statistics
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from kirolearn import contract, db, heuristic, paths, search, transport

COOKIE = "kirolearn_token"
TOKEN_HEADER = "x-kirolearn-token"
PAGE_SIZE = 50
TAIL_SIZE = 50
FEED_WAIT_S = 5.0  # a missed wake-up costs at most this long
USES_LOOKBACK = 5000  # retrievals searched for the prompts a memory was given to
HERE = Path(__file__).parent
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
        " connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
OBSERVATION_TYPES = ("tool_use", "decision", "error", "discovery", "pattern", "session_summary")


# -- the token -------------------------------------------------------------------------------

def token_path(base: Path) -> Path:
    return base / "viewer.token"


def load_token(base: Path) -> str:
    """The viewer's token, made at first start: random, in a file only the user can read."""
    path = token_path(base)
    with contextlib.suppress(FileNotFoundError):
        token = path.read_text("utf-8").strip()
        if len(token) >= 32:
            path.chmod(0o600)
            return token
    token = secrets.token_urlsafe(32)
    paths.write_private(path, (token + "\n").encode())
    return token


# -- the feed --------------------------------------------------------------------------------

class Feed:
    """Wakes the live streams when storage says something changed. ``notify`` may be
    called from any thread; ``wait`` runs on the server's event loop."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.version = 0  # bumped on every change; a stream waits for it to move
        self.waiters: set[asyncio.Future] = set()

    def notify(self) -> None:
        if self.loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self.loop.call_soon_threadsafe(self._bump)

    def _bump(self) -> None:
        self.version += 1
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    async def wait(self, seen: int, timeout_s: float) -> None:
        """Until the version moves past ``seen`` (read before the stream's last query, so
        a change during that query is never missed), or ``timeout_s``."""
        self.loop = asyncio.get_running_loop()
        if self.version != seen:
            return
        waiter = self.loop.create_future()
        self.waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            pass
        finally:
            self.waiters.discard(waiter)


# -- reading the database --------------------------------------------------------------------

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
        action = heuristic.observe(body.get("data"))
        item["headline"] = action.tool
        done = heuristic.fact(action, event.get("source", {}).get("project_path"))
        item["detail"] = done or action.command or ", ".join(action.paths)
        if action.failed:
            item["outcome"] = "failed" + (f" (exit {action.exit_status})"
                                          if action.exit_status not in (None, 0) else "")
        elif action.exit_status is not None:
            item["outcome"] = f"exit {action.exit_status}"
        if action.output.strip():  # the lines that say what went wrong, else the last ones
            item["output"] = heuristic.first_lines(action.output, 8)[:1000]
    else:
        text = contract.body_text(body)
        item["headline"] = {"prompt": "Prompt", "session_summary": "Turn summary",
                            "note": "Note"}.get(kind, kind)
        item["detail"] = text[:2000] + ("…" if len(text) > 2000 else "")
    return item


class Reader:
    """The viewer's queries, each on a fresh read-only connection (requests run on
    several threads)."""

    def __init__(self, base: Path):
        self.path = paths.db_path(base)

    @contextlib.contextmanager
    def conn(self) -> Iterator[sqlite3.Connection]:
        if not self.path.exists():
            raise HTTPException(503, "no database yet: kirolearn has not stored anything")
        conn = db.connect_reader(self.path)
        try:
            yield conn
        finally:
            conn.close()

    def projects(self) -> list[dict]:
        """Every namespace, with the project folder its events came from when known.
        Each page asks, so each namespace costs an index seek, not a scan of the tables."""
        with self.conn() as conn:
            found: dict[str, dict] = {}
            for table in ("events", "memory_records"):
                for (namespace,) in conn.execute(
                        f"WITH RECURSIVE ns(n) AS (SELECT min(namespace) FROM {table} UNION ALL"
                        f" SELECT (SELECT min(namespace) FROM {table} WHERE namespace > n)"
                        " FROM ns WHERE n IS NOT NULL) SELECT n FROM ns WHERE n IS NOT NULL"):
                    found[namespace] = {"namespace": namespace, "label": namespace}
            for namespace, entry in found.items():
                row = conn.execute("SELECT project_path FROM events WHERE namespace = ?"
                                   " AND project_path IS NOT NULL ORDER BY seq DESC LIMIT 1",
                                   (namespace,)).fetchone()
                if row and row[0]:
                    entry["label"] = row[0]
        return sorted(found.values(), key=lambda p: p["label"])

    def strategies(self) -> list[str]:
        with self.conn() as conn:
            return [row[0] for row in conn.execute(
                "SELECT DISTINCT strategy FROM memory_records ORDER BY 1")]

    def overview(self, namespace: str | None, days: int) -> dict:
        with self.conn() as conn:
            stats = db.stats(conn, namespace)
            where, args = conditions(("namespace = ?", namespace))
            types = dict(conn.execute(
                f"SELECT observation_type, count(*) FROM memory_records {where}"
                " GROUP BY observation_type ORDER BY 2 DESC", args).fetchall())
            strategies = dict(conn.execute(
                f"SELECT strategy, count(*) FROM memory_records {where}"
                " GROUP BY strategy ORDER BY 2 DESC", args).fetchall())
            since = (datetime.now(UTC) - timedelta(days=days)).isoformat(timespec="seconds")
            rows = conn.execute(  # from the covering index, not the rows (they hold contexts)
                "SELECT created_at, latency_ms, outcome FROM retrievals"
                " INDEXED BY retrievals_time WHERE created_at >= ?"
                + (" AND namespace = ?" if namespace else "") + " ORDER BY created_at",
                [since, *args]).fetchall()
        events: dict[str, int] = {}
        for entry in stats["namespaces"]:
            for kind, count in entry["events"].items():
                events[kind] = events.get(kind, 0) + count
        return {"totals": stats["totals"], "events_by_kind": events, "records_by_type": types,
                "strategies": strategies, "retrievals": latency_series(rows, days)}

    def events(self, after: int = 0, namespace: str | None = None, session_id: str | None = None,
               limit: int = TAIL_SIZE, newest: bool = False) -> list[dict]:
        """Events past seq ``after`` (oldest first), or the newest ``limit`` (newest first)."""
        where, args = conditions(("seq > ?", after), ("namespace = ?", namespace),
                                 ("session_id = ?", session_id))
        with self.conn() as conn:
            rows = conn.execute(f"SELECT seq, {db.EVENT_COLUMNS}, project_path FROM events"
                                f" {where} ORDER BY seq {'DESC' if newest else 'ASC'} LIMIT ?",
                                [*args, limit]).fetchall()
        items = []
        for row in rows:
            event = db.event_from_row(row[1:-1])
            event.setdefault("source", {})["project_path"] = row[-1]
            items.append(summarize_event(event, row[0]))
        return items

    def event(self, event_id: str) -> dict | None:
        with self.conn() as conn:
            row = conn.execute(f"SELECT seq, {db.EVENT_COLUMNS}, project_path FROM events"
                               " WHERE event_id = ?", (event_id,)).fetchone()
        if row is None:
            return None
        event = db.event_from_row(row[1:-1])
        return {"event": event, "summary": summarize_event(event, row[0])}

    def records(self, namespace: str | None, observation_type: str | None,
                strategy: str | None, since: str | None, until: str | None,
                before: int | None = None) -> list[dict]:
        """Newest first, PAGE_SIZE at a time (``before``: the id to continue below)."""
        where, args = conditions(
            ("namespace = ?", namespace), ("observation_type = ?", observation_type),
            ("strategy = ?", strategy),
            ("+created_at >= ?", since),  # `+`: newest first by id, not a sort of all since
            ("substr(created_at, 1, 10) <= ?", until), ("id < ?", before))
        with self.conn() as conn:
            rows = conn.execute(f"SELECT id, {db.RECORD_COLUMNS} FROM memory_records {where}"
                                " ORDER BY id DESC LIMIT ?", [*args, PAGE_SIZE]).fetchall()
        return [{**db.record_from_row(row[1:]), "id": row[0]} for row in rows]

    def record(self, record_id: str) -> dict | None:
        with self.conn() as conn:
            row = conn.execute(f"SELECT {db.RECORD_COLUMNS} FROM memory_records"
                               " WHERE record_id = ?", (record_id,)).fetchone()
            if row is None:
                return None
            record = db.record_from_row(row)
            marks = ",".join("?" * len(record["source_event_ids"]))
            found = {r[0]: r for r in conn.execute(
                f"SELECT event_id, kind, valid_time, body_json FROM events"
                f" WHERE event_id IN ({marks})", record["source_event_ids"])}
            uses = conn.execute(  # among the project's latest retrievals: a bounded look
                "SELECT r.id, r.created_at, r.outcome FROM (SELECT * FROM retrievals"
                " WHERE namespace = ? ORDER BY id DESC LIMIT ?) r, json_each(r.record_ids_json) j"
                " WHERE j.value = ? ORDER BY r.id DESC LIMIT 20",
                (record["namespace"], USES_LOOKBACK, record_id)).fetchall()
        record["sources"] = [
            {"event_id": i, "kind": found[i][1] if i in found else None,
             "valid_time": found[i][2] if i in found else None,
             "text": heuristic.cut(contract.body_text(json.loads(found[i][3])), 200)
             if i in found else ""}
            for i in record["source_event_ids"]]
        record["retrievals"] = [{"id": r[0], "created_at": r[1], "outcome": r[2]} for r in uses]
        return record

    def retrievals(self, namespace: str | None, outcome: str | None,
                   before: int | None = None) -> list[dict]:
        where, args = conditions(("r.namespace = ?", namespace), ("r.outcome = ?", outcome),
                                 ("r.id < ?", before))
        with self.conn() as conn:
            rows = conn.execute(f"SELECT {RETRIEVAL_COLUMNS} FROM retrievals r"
                                f" LEFT JOIN events e ON e.event_id = r.prompt_event_id {where}"
                                " ORDER BY r.id DESC LIMIT ?", [*args, PAGE_SIZE]).fetchall()
        return [retrieval_from_row(row) for row in rows]

    def retrieval(self, retrieval_id: int) -> dict | None:
        with self.conn() as conn:
            row = conn.execute(
                f"SELECT {RETRIEVAL_COLUMNS}, r.context FROM retrievals r"
                " LEFT JOIN events e ON e.event_id = r.prompt_event_id WHERE r.id = ?",
                (retrieval_id,)).fetchone()
            if row is None:
                return None
            item = retrieval_from_row(row[:-1], prompt_chars=None)
            item["context"] = row[-1]
            found = {r["record_id"]: r for r in db.records_by_id(
                conn, item["record_ids"], [item["namespace"] or ""])}
        item["records"] = [{**found[i], "forgotten": False} if i in found
                           else {"record_id": i, "forgotten": True} for i in item["record_ids"]]
        return item

    def sessions(self, namespace: str | None) -> list[dict]:
        where, args = conditions(("namespace = ?", namespace))
        with self.conn() as conn:
            rows = conn.execute(
                "SELECT session_id, namespace, min(valid_time), max(valid_time), count(*),"
                " sum(kind = 'prompt'), sum(kind = 'tool_use') FROM events"
                f" {where} GROUP BY session_id, namespace ORDER BY max(valid_ms) DESC LIMIT ?",
                [*args, PAGE_SIZE]).fetchall()
        return [{"session_id": r[0], "namespace": r[1], "first": r[2], "last": r[3],
                 "events": r[4], "prompts": r[5], "tools": r[6]} for r in rows]

    def session(self, session_id: str) -> list[dict]:
        """The session's turns in order: a prompt, the tools used after it, and the turn
        summary that ended it (events before the first prompt make a turn of their own)."""
        with self.conn() as conn:
            rows = conn.execute(
                f"SELECT seq, {db.EVENT_COLUMNS}, project_path FROM events WHERE session_id = ?"
                " ORDER BY valid_ms, seq", (session_id,)).fetchall()
        turns: list[dict] = []
        for row in rows:
            event = db.event_from_row(row[1:-1])
            event.setdefault("source", {})["project_path"] = row[-1]
            item = summarize_event(event, row[0])
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
        """Events, then memory records, as JSON Lines (``kirolearn export``'s format)."""
        with self.conn() as conn:
            for event in db.iter_events(conn, namespace):
                yield json.dumps(event, ensure_ascii=False) + "\n"
            for record in db.iter_records(conn, namespace):
                yield json.dumps(record, ensure_ascii=False) + "\n"


RETRIEVAL_COLUMNS = ("r.id, r.prompt_event_id, r.namespace, r.record_ids_json, r.latency_ms,"
                     " r.outcome, r.created_at, r.error, e.body_json")


def conditions(*pairs: tuple[str, Any]) -> tuple[str, list]:
    """A ``WHERE`` clause from (SQL with one ``?``, value) pairs; a pair whose value is
    empty is left out."""
    kept = [(sql, value) for sql, value in pairs if value]
    clause = ("WHERE " + " AND ".join(sql for sql, _ in kept)) if kept else ""
    return clause, [value for _, value in kept]


def retrieval_from_row(row: tuple, prompt_chars: int | None = 200) -> dict:
    prompt = contract.body_text(json.loads(row[8])) if row[8] else ""
    if prompt_chars is not None:
        prompt = heuristic.cut(prompt, prompt_chars)
    return {"id": row[0], "prompt_event_id": row[1], "namespace": row[2],
            "record_ids": json.loads(row[3]), "latency_ms": round(row[4], 1), "outcome": row[5],
            "created_at": row[6], "error": row[7], "prompt": prompt}


def latency_series(rows: list[tuple], days: int, now: datetime | None = None) -> dict:
    """Retrievals per time bucket (an hour when ``days`` ≤ 2, else a day), every bucket
    of the last ``days`` included so that a quiet spell shows: latency p50 and p95 (None
    for an empty bucket), and how many of each outcome."""
    hourly = days <= 2
    step = timedelta(hours=1) if hourly else timedelta(days=1)
    label = "%Y-%m-%d %H:00" if hourly else "%Y-%m-%d"

    def empty(key: str) -> dict:
        return {"bucket": key, "latencies": [], **{o: 0 for o in search.OUTCOMES}}

    now = now or datetime.now(UTC)
    buckets = {}
    when = now - timedelta(days=days)
    while when <= now:
        buckets[when.strftime(label)] = empty(when.strftime(label))
        when += step
    for created_at, latency_ms, outcome in rows:
        key = contract.parse_valid_time(created_at).astimezone(UTC).strftime(label)
        bucket = buckets.setdefault(key, empty(key))
        bucket["latencies"].append(latency_ms)
        bucket[outcome] = bucket.get(outcome, 0) + 1
    series = []
    for key in sorted(buckets):
        bucket = buckets[key]
        latencies = sorted(bucket.pop("latencies"))
        bucket.update(count=len(latencies), p50_ms=None, p95_ms=None)
        if latencies:
            bucket.update(p50_ms=round(statistics.median(latencies), 1),
                          p95_ms=round(latencies[min(len(latencies) - 1,
                                                     int(0.95 * len(latencies)))], 1))
        series.append(bucket)
    return {"unit": "hour" if hourly else "day", "days": days, "buckets": series}


def chart(series: dict, width: int = 720, height: int = 220) -> dict:
    """Geometry for the overview's SVG chart: outcome bars per bucket (left axis, count)
    and p50/p95 latency lines (right axis, ms). Numbers only; the template draws it."""
    buckets = series["buckets"]
    if not any(b["count"] for b in buckets):
        return {"empty": True, "width": width, "height": height}
    pad, plot_w, plot_h = 40, width - 100, height - 50
    step = plot_w / len(buckets)
    top_count = max(b["count"] for b in buckets) or 1
    top_ms = max(b["p95_ms"] or 0 for b in buckets) or 1.0
    bars, p50, p95, labels, points = [], [], [], [], []
    for n, bucket in enumerate(buckets):
        x = pad + n * step
        y = 10 + plot_h
        for outcome in search.OUTCOMES:
            h = plot_h * bucket[outcome] / top_count
            if h:
                y -= h
                bars.append({"x": round(x + step * 0.15, 1), "y": round(y, 1),
                             "w": round(step * 0.7, 1), "h": round(h, 1), "outcome": outcome,
                             "title": f"{bucket['bucket']}: {bucket[outcome]} {outcome}"})
        mid = x + step / 2
        for name, line in (("p50", p50), ("p95", p95)):
            if bucket[f"{name}_ms"] is None:
                continue  # no retrieval then: the line goes straight to the next one
            y = 10 + plot_h - plot_h * bucket[f"{name}_ms"] / top_ms
            line.append(f"{mid:.1f},{y:.1f}")
            points.append({"x": round(mid, 1), "y": round(y, 1), "line": name,
                           "title": f"{bucket['bucket']}: {name} {bucket[f'{name}_ms']} ms"})
        if n % max(1, len(buckets) // 6) == 0:
            labels.append({"x": round(mid, 1), "text": bucket["bucket"][5:]})
    return {"empty": False, "width": width, "height": height, "bars": bars,
            "p50": " ".join(p50), "p95": " ".join(p95), "points": points, "labels": labels,
            "top_count": top_count, "top_ms": top_ms, "base_y": 10 + plot_h,
            "right": pad + plot_w}


# -- the daemon, for search and forget ------------------------------------------------------

class Daemon:
    """Calls to the daemon's roles, one REQ socket per call (requests run on threads)."""

    def __init__(self, base: Path):
        self.base = base

    def call(self, role: str, op: str, body: dict, timeout_ms: int = 5000) -> dict:
        try:
            with transport.Client(paths.endpoint(role, self.base), timeout_ms=timeout_ms) as c:
                return c.call(op, body)
        except transport.Timeout as exc:
            raise HTTPException(503, f"the daemon's {role} role did not answer") from exc
        except Exception as exc:  # a refusal (RemoteError) says why
            raise HTTPException(400, str(exc)) from exc


# -- the app ---------------------------------------------------------------------------------

class SecurityHeaders:
    """Adds SECURITY_HEADERS (and no-store for anything but static files) to every answer."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope["path"].startswith("/static/")

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(base: Path, token: str, feed: Feed | None = None) -> Starlette:
    """The viewer for the kirolearn home ``base``; requests must carry ``token``."""
    reader = Reader(base)
    daemon = Daemon(base)
    feed = feed or Feed()
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                     autoescape=True, undefined=jinja2.StrictUndefined)
    templates = Jinja2Templates(env=environment)

    def authorized(request: Request) -> bool:
        offered = request.cookies.get(COOKIE, "")
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            offered = header[7:].strip()
        return secrets.compare_digest(offered.encode(), token.encode())

    def require(request: Request, writes: bool = False) -> None:
        """401 without the token; a write must also carry it explicitly (not just the
        cookie a browser would attach to anybody's form)."""
        if not authorized(request):
            raise HTTPException(401, "this needs the viewer's token: open the viewer with"
                                     " `kirolearn open`")
        if writes and not request.headers.get("authorization", "").lower().startswith("bearer"):
            explicit = (request.headers.get(TOKEN_HEADER)
                        or getattr(request.state, "form_token", None))
            if not secrets.compare_digest((explicit or "").encode(), token.encode()):
                raise HTTPException(403, "a change must carry the viewer's token")

    def project_of(request: Request) -> str | None:
        return request.query_params.get("project") or None

    async def page(request: Request, name: str, **context: Any) -> Response:
        require(request)
        projects = await run_in_threadpool(reader.projects)
        context.update(token=token, projects=projects, project=project_of(request),
                       labels={p["namespace"]: p["label"] for p in projects},
                       nav=name.split(".")[0], query=Query(request.query_params))
        return templates.TemplateResponse(request, name, context)

    def link(path: str, **params: Any) -> str:
        kept = {k: v for k, v in params.items() if v not in (None, "")}
        return path + ("?" + urlencode(kept) if kept else "")

    environment.globals["link"] = link

    async def with_token(request: Request) -> Response | None:
        """``?token=`` from `kirolearn open`: set the cookie and drop it from the URL."""
        offered = request.query_params.get("token")
        if offered is None:
            return None
        if not secrets.compare_digest(offered.encode(), token.encode()):
            raise HTTPException(401, "that token is not this viewer's: run `kirolearn open`")
        rest = {k: v for k, v in request.query_params.items() if k != "token"}
        response = RedirectResponse(link(request.url.path, **rest), status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return response

    def handed_over(endpoint: Any) -> Any:
        """A page that also takes the token from `kirolearn open`'s URL."""
        async def page_endpoint(request: Request) -> Response:
            return await with_token(request) or await endpoint(request)
        return page_endpoint

    def wants_json(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    async def answer(request: Request, name: str, data: dict, **context: Any) -> Response:
        """The JSON API's answer (``data``), or the page ``name`` that shows it."""
        if wants_json(request):
            return JSONResponse(data)
        return await page(request, name, **context)

    async def overview(request: Request) -> Response:
        require(request)
        days = bounded_int(request.query_params.get("days"), 1, 1, 90)
        data = await run_in_threadpool(reader.overview, project_of(request), days)
        if wants_json(request):
            return JSONResponse({**data, "projects": await run_in_threadpool(reader.projects)})
        recent = await run_in_threadpool(reader.retrievals, project_of(request), None)
        return await page(request, "overview.html", data=data, chart=chart(data["retrievals"]),
                          days=days, recent=recent[:10], outcomes=search.OUTCOMES)

    async def live(request: Request) -> Response:
        require(request)
        items = await run_in_threadpool(reader.events, 0, project_of(request), None,
                                        TAIL_SIZE, True)
        last = max((i["seq"] for i in items), default=0)
        return await page(request, "live.html", items=items, last=last)

    async def events(request: Request) -> Response:
        require(request)
        after = bounded_int(request.query_params.get("after"), 0, 0, 2**62)
        limit = bounded_int(request.query_params.get("limit"), TAIL_SIZE, 1, 500)
        items = await run_in_threadpool(reader.events, after, project_of(request),
                                        request.query_params.get("session") or None, limit)
        return JSONResponse({"events": items})

    async def memories(request: Request) -> Response:
        require(request)
        found, error = await find_memories(request)
        if error and wants_json(request):
            raise HTTPException(503, error)
        strategies = await run_in_threadpool(reader.strategies)
        return await answer(request, "memories.html", {"records": found}, records=found,
                            error=error, types=OBSERVATION_TYPES, strategies=strategies)

    async def find_memories(request: Request) -> tuple[list[dict], str | None]:
        """The newest records that pass the filters, or the search's answer filtered
        (with why it failed, when the daemon does not answer)."""
        q = request.query_params
        project = project_of(request)
        kind, strategy = q.get("type") or None, q.get("strategy") or None
        since, until = q.get("since") or None, q.get("until") or None
        text = (q.get("q") or "").strip()
        if not text:
            before = bounded_int(q.get("before"), 0, 0, 2**62) or None
            return await run_in_threadpool(reader.records, project, kind, strategy, since,
                                           until, before), None
        mode = q.get("mode") if q.get("mode") in search.MODES else "hybrid"
        namespaces = [project] if project else [
            p["namespace"] for p in await run_in_threadpool(reader.projects)]
        if not namespaces:
            return [], None
        try:
            reply = await run_in_threadpool(daemon.call, "retrieval", "search", {
                "query": text[:10_000], "namespaces": namespaces, "mode": mode,
                "limit": PAGE_SIZE, "records": True, "budget_ms": 2000, "tokens": 1_000_000})
        except HTTPException as exc:
            return [], str(exc.detail)
        records = [r for r in reply["records"]
                   if (not kind or r["observation_type"] == kind)
                   and (not strategy or r["strategy"] == strategy)
                   and (not since or r["created_at"] >= since)
                   and (not until or r["created_at"][:10] <= until)]
        return records, None

    async def memory(request: Request) -> Response:
        require(request)
        record = found(await run_in_threadpool(reader.record, request.path_params["record_id"]),
                       "memory (it may have been forgotten)")
        return await answer(request, "memory.html", record, record=record)

    async def forget(request: Request) -> Response:
        form = await request.form()
        request.state.form_token = form.get("token")
        require(request, writes=True)
        record_id = request.path_params["record_id"]
        record = found(await run_in_threadpool(reader.record, record_id),
                       "memory (it may have been forgotten already)")
        reply = await run_in_threadpool(daemon.call, "ingest", "forget", {
            "record_id": record_id, "namespaces": [record["namespace"]]})
        if wants_json(request):
            return JSONResponse({"record_id": record_id, "deleted": reply["deleted"]})
        return RedirectResponse(link("/memories", project=record["namespace"],
                                     forgotten=record["title"][:200]), status_code=303)

    async def retrievals(request: Request) -> Response:
        require(request)
        outcome = request.query_params.get("outcome") or None
        before = bounded_int(request.query_params.get("before"), 0, 0, 2**62) or None
        items = await run_in_threadpool(reader.retrievals, project_of(request), outcome, before)
        return await answer(request, "retrievals.html", {"retrievals": items}, items=items,
                            outcomes=search.OUTCOMES)

    async def retrieval(request: Request) -> Response:
        require(request)
        item = found(await run_in_threadpool(reader.retrieval,
                                             request.path_params["retrieval_id"]), "retrieval")
        return await answer(request, "retrieval.html", item, item=item)

    async def sessions(request: Request) -> Response:
        require(request)
        items = await run_in_threadpool(reader.sessions, project_of(request))
        return await answer(request, "sessions.html", {"sessions": items}, items=items)

    async def session(request: Request) -> Response:
        require(request)
        session_id = request.path_params["session_id"]
        turns = found(await run_in_threadpool(reader.session, session_id), "session")
        return await answer(request, "session.html", {"session_id": session_id, "turns": turns},
                            session_id=session_id, turns=turns)

    async def event(request: Request) -> Response:
        require(request)
        stored = found(await run_in_threadpool(reader.event, request.path_params["event_id"]),
                       "event")
        return await answer(request, "event.html", stored["event"], event=stored["event"],
                            item=stored["summary"],
                            body=json.dumps(stored["event"]["body"], indent=2,
                                            ensure_ascii=False))

    async def export(request: Request) -> Response:
        require(request)
        project = project_of(request)
        name = "kirolearn-" + (project.strip("/").rsplit("/", 1)[-1] if project else "all")
        return StreamingResponse(
            iterate_in_threadpool(reader.export(project)), media_type="application/x-ndjson",
            headers={"content-disposition": f'attachment; filename="{name}.jsonl"'})

    async def stream(request: Request) -> Response:
        """New events as server-sent events (``event: event``, ``id:`` the arrival seq),
        from ``after`` or the browser's Last-Event-ID, so a reconnect misses nothing."""
        require(request)
        after = bounded_int(request.headers.get("last-event-id")
                            or request.query_params.get("after"), 0, 0, 2**62)
        project = project_of(request)

        async def new_events() -> AsyncIterator[dict]:
            nonlocal after
            while True:
                seen = feed.version
                items = await run_in_threadpool(reader.events, after, project, None, 200)
                for item in items:
                    after = item["seq"]
                    yield {"event": "event", "id": str(after),
                           "data": json.dumps(item, ensure_ascii=False)}
                if len(items) < 200:
                    await feed.wait(seen, FEED_WAIT_S)

        return EventSourceResponse(new_events(), ping=15, send_timeout=30)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
        return templates.TemplateResponse(
            request, "error.html", {"status": exc.status_code, "message": exc.detail,
                                    "nav": "", "projects": [], "project": None, "labels": {},
                                    "query": Query(),
                                    "token": ""}, status_code=exc.status_code)

    pages = [("/", overview), ("/memories", memories), ("/memories/{record_id}", memory),
             ("/retrievals", retrievals), ("/retrievals/{retrieval_id:int}", retrieval),
             ("/sessions", sessions), ("/sessions/{session_id:path}", session),
             ("/events/{event_id}", event)]
    routes = [
        *(Route(path, handed_over(endpoint)) for path, endpoint in pages),
        *(Route("/api" + ("/overview" if path == "/" else path), endpoint)
          for path, endpoint in pages),
        Route("/live", handed_over(live)),
        Route("/export", export),
        Route("/api/export", export),
        Route("/api/events", events),
        Route("/api/stream", stream),
        Route("/memories/{record_id}/forget", forget, methods=["POST"]),
        Route("/api/memories/{record_id}/forget", forget, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [Middleware(SecurityHeaders),
                  Middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1"])]
    return Starlette(routes=routes, middleware=middleware,
                     exception_handlers={HTTPException: http_error})


class Query(dict):
    """The query string as templates read it: ``query.q`` is "" when absent."""

    def __getattr__(self, name: str) -> str:
        return self.get(name, "")


def found(value: Any, what: str) -> Any:
    """The value, or a 404 saying there is no such ``what``."""
    if not value:
        raise HTTPException(404, f"no such {what}")
    return value


def bounded_int(value: str | None, default: int, low: int, high: int) -> int:
    """A query parameter as an int in [low, high]; anything else is the default."""
    try:
        number = int(value) if value not in (None, "") else default
    except ValueError:
        return default
    return min(max(number, low), high)
