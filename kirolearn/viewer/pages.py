"""The viewer's pages and API, one handler each.

A handler answers its page (HTML from a template) and, under ``/api``, the same data
as JSON. What a handler needs comes from ``request.app.state``: the token, the reader
(``queries.Reader``), the feed, the templates and the kirolearn home.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse

from kirolearn import contract, control, privacy
from kirolearn.config import MODES
from kirolearn.project import record_author
from kirolearn.search import MAX_NAMESPACES, OUTCOMES
from kirolearn.viewer.auth import link, require
from kirolearn.viewer.chart import chart
from kirolearn.viewer.queries import PAGE_SIZE, TAIL_SIZE

AUTHORS_LISTED = 1000  # the Memories page's author filter: the busiest
FEED_WAIT_S = 5.0  # a missed wake-up costs at most this long


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


def project_of(request: Request) -> str | None:
    return request.query_params.get("project") or None


def wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def ask_daemon(request: Request, target: str, op: str, body: dict, timeout_ms: int) -> dict:
    """A call to the daemon (search, forget): 503 when it does not answer, 400 with its
    reason when it refuses; anything else is a bug, and a 500."""
    if not control.listening(target, request.app.state.home):  # said at once, not in seconds
        raise HTTPException(503, f"the daemon's {target} role is not running")
    try:
        return control.call(target, op, body, timeout_ms=timeout_ms,
                            home=request.app.state.home)
    except control.Timeout as exc:
        raise HTTPException(503, f"the daemon's {target} role did not answer") from exc
    except control.RemoteError as exc:
        raise HTTPException(400, exc.reason) from exc


async def page(request: Request, name: str, **context: Any) -> Response:
    require(request)
    state = request.app.state
    projects = await run_in_threadpool(state.reader.projects)
    context.update(token=state.token, projects=projects, project=project_of(request),
                   labels={p["namespace"]: p["label"] for p in projects},
                   nav=name.split(".")[0], query=Query(request.query_params))
    return state.templates.TemplateResponse(request, name, context)


class ScrubbedJSONResponse(JSONResponse):
    """The JSON API's answers, scrubbed as they leave (the pages are, by the templates'
    finalize): text stored under older rules is shown under today's."""

    def render(self, content: Any) -> bytes:
        return super().render(privacy.scrub(content))


async def answer(request: Request, name: str, data: dict, **context: Any) -> Response:
    """The JSON API's answer (``data``), or the page ``name`` that shows it."""
    if wants_json(request):
        return ScrubbedJSONResponse(data)
    return await page(request, name, **context)


async def overview(request: Request) -> Response:
    require(request)
    reader = request.app.state.reader
    days = bounded_int(request.query_params.get("days"), 1, 1, 90)
    data = await run_in_threadpool(reader.overview, project_of(request), days)
    if wants_json(request):
        return ScrubbedJSONResponse({**data, "projects": await run_in_threadpool(reader.projects)})
    recent = await run_in_threadpool(reader.retrievals, project_of(request), None)
    return await page(request, "overview.html", data=data, chart=chart(data["retrievals"]),
                      days=days, recent=recent[:10], outcomes=OUTCOMES)


async def live(request: Request) -> Response:
    require(request)
    items = await run_in_threadpool(request.app.state.reader.events, 0, project_of(request),
                                    None, TAIL_SIZE, True)
    last = max((i["seq"] for i in items), default=0)
    return await page(request, "live.html", items=items, last=last)


async def events(request: Request) -> Response:
    require(request)
    after = bounded_int(request.query_params.get("after"), 0, 0, 2**62)
    limit = bounded_int(request.query_params.get("limit"), TAIL_SIZE, 1, 500)
    items = await run_in_threadpool(request.app.state.reader.events, after, project_of(request),
                                    request.query_params.get("session") or None, limit)
    return ScrubbedJSONResponse({"events": items})


async def memories(request: Request) -> Response:
    require(request)
    records, error = await find_memories(request)
    if error and wants_json(request):
        raise HTTPException(503, error)
    reader = request.app.state.reader
    strategies = await run_in_threadpool(reader.strategies)
    authors = await run_in_threadpool(reader.authors, project_of(request))
    return await answer(request, "memories.html", {"records": records}, records=records,
                        error=error, types=contract.OBSERVATION_TYPES, strategies=strategies,
                        authors=authors[:AUTHORS_LISTED])


async def find_memories(request: Request) -> tuple[list[dict], str | None]:
    """The newest records that pass the filters, or the search's answer filtered
    (with why it failed, when the daemon does not answer)."""
    q = request.query_params
    reader = request.app.state.reader
    project = project_of(request)
    kind, strategy = q.get("type") or None, q.get("strategy") or None
    since, until = q.get("since") or None, q.get("until") or None
    author = q.get("author") or None
    text = (q.get("q") or "").strip()
    if not text:
        before = bounded_int(q.get("before"), 0, 0, 2**62) or None
        return await run_in_threadpool(reader.records, project, kind, strategy, since,
                                       until, before, author), None
    mode = q.get("mode") if q.get("mode") in MODES else "hybrid"
    namespaces = [project] if project else [
        p["namespace"] for p in await run_in_threadpool(reader.projects)]
    found: list[dict] = []
    # a search takes a few namespaces at a time: every project is searched, a few at once
    for first in range(0, len(namespaces), MAX_NAMESPACES):
        try:
            reply = await run_in_threadpool(ask_daemon, request, "retrieval", "search", {
                "query": text[:10_000],
                "namespaces": namespaces[first:first + MAX_NAMESPACES],
                "mode": mode, "limit": PAGE_SIZE, "records": True, "budget_ms": 2000,
                "tokens": 1_000_000}, control.LOOKUP_MS)
        except HTTPException as exc:
            return [], str(exc.detail)
        found += reply["records"]
    if len(namespaces) > MAX_NAMESPACES:
        found.sort(key=lambda r: -r.get("score", 0))
    return [r for r in found if _passes(r, kind, strategy, author, since, until)
            ][:PAGE_SIZE], None


def _passes(record: dict, kind: str | None, strategy: str | None, author: str | None,
            since: str | None, until: str | None) -> bool:
    """Whether a record found passes the page's filters (each None: not filtered on)."""
    return ((not kind or record["observation_type"] == kind)
            and (not strategy or record["strategy"] == strategy)
            and (not author or record_author(record) == author)
            and (not since or record["created_at"] >= since)
            and (not until or record["created_at"][:10] <= until))


async def memory(request: Request) -> Response:
    require(request)
    record = found(await run_in_threadpool(request.app.state.reader.record,
                                           request.path_params["record_id"]),
                   "memory (it may have been forgotten)")
    return await answer(request, "memory.html", record, record=record)


async def forget(request: Request) -> Response:
    require(request)  # nobody without the token gets a body read
    form = await request.form()
    request.state.form_token = form.get("token")
    require(request, writes=True)
    record_id = request.path_params["record_id"]
    record = found(await run_in_threadpool(request.app.state.reader.record, record_id),
                   "memory (it may have been forgotten already)")
    reply = await run_in_threadpool(ask_daemon, request, "ingest", "forget", {
        "record_id": record_id, "namespaces": [record["namespace"]]}, control.WRITE_MS)
    if wants_json(request):
        return ScrubbedJSONResponse({"record_id": record_id, "deleted": reply["deleted"]})
    return RedirectResponse(link("/memories", project=record["namespace"],
                                 forgotten=record["title"][:200]), status_code=303)


async def brief(request: Request) -> Response:
    """The project's brief (the daemon's ``brief``), for the project picked."""
    require(request)
    namespace = project_of(request)
    data: dict = {"brief": "", "sections": [], "record_ids": []}
    error = None
    if namespace is not None:
        try:
            data = await run_in_threadpool(ask_daemon, request, "retrieval", "brief",
                                           {"namespace": namespace}, control.LOOKUP_MS)
        except HTTPException as exc:
            if wants_json(request):
                raise
            error = str(exc.detail)
    return await answer(request, "brief.html", data, page_brief=data, error=error)


async def retrievals(request: Request) -> Response:
    require(request)
    outcome = request.query_params.get("outcome") or None
    before = bounded_int(request.query_params.get("before"), 0, 0, 2**62) or None
    items = await run_in_threadpool(request.app.state.reader.retrievals, project_of(request),
                                    outcome, before)
    return await answer(request, "retrievals.html", {"retrievals": items}, items=items,
                        outcomes=OUTCOMES)


async def retrieval(request: Request) -> Response:
    require(request)
    item = found(await run_in_threadpool(request.app.state.reader.retrieval,
                                         request.path_params["retrieval_id"]), "retrieval")
    return await answer(request, "retrieval.html", item, item=item)


async def sessions(request: Request) -> Response:
    require(request)
    items = await run_in_threadpool(request.app.state.reader.sessions, project_of(request))
    return await answer(request, "sessions.html", {"sessions": items}, items=items)


async def session(request: Request) -> Response:
    require(request)
    session_id = request.path_params["session_id"]
    turns = found(await run_in_threadpool(request.app.state.reader.session, session_id),
                  "session")
    return await answer(request, "session.html", {"session_id": session_id, "turns": turns},
                        session_id=session_id, turns=turns)


async def event(request: Request) -> Response:
    require(request)
    stored = found(await run_in_threadpool(request.app.state.reader.event,
                                           request.path_params["event_id"]), "event")
    return await answer(request, "event.html", stored["event"], event=stored["event"],
                        item=stored["summary"],
                        body=json.dumps(stored["event"]["body"], indent=2, ensure_ascii=False))


async def export(request: Request) -> Response:
    require(request)
    project = project_of(request)
    name = "kirolearn-" + (project.strip("/").rsplit("/", 1)[-1] if project else "all")
    return StreamingResponse(
        iterate_in_threadpool(request.app.state.reader.export(project)),
        media_type="application/x-ndjson",
        headers={"content-disposition": f'attachment; filename="{name}.jsonl"'})


async def stream(request: Request) -> Response:
    """New events as server-sent events (``event: event``, ``id:`` the arrival seq),
    from ``after`` or the browser's Last-Event-ID, so a reconnect misses nothing."""
    require(request)
    state = request.app.state
    after = bounded_int(request.headers.get("last-event-id")
                        or request.query_params.get("after"), 0, 0, 2**62)
    project = project_of(request)

    async def new_events() -> AsyncIterator[dict]:
        nonlocal after
        while True:
            seen = state.feed.version
            items = await run_in_threadpool(state.reader.events, after, project, None, 200)
            for item in items:
                after = item["seq"]
                yield {"event": "event", "id": str(after),
                       "data": json.dumps(privacy.scrub(item), ensure_ascii=False)}
            if len(items) < 200:
                await state.feed.wait(seen, FEED_WAIT_S)

    return EventSourceResponse(new_events(), ping=15, send_timeout=30)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if request.url.path.startswith("/api/"):
        return ScrubbedJSONResponse({"error": exc.detail}, status_code=exc.status_code)
    return request.app.state.templates.TemplateResponse(
        request, "error.html", {"status": exc.status_code, "message": exc.detail, "nav": "",
                                "projects": [], "project": None, "labels": {},
                                "query": Query(), "token": ""}, status_code=exc.status_code)
