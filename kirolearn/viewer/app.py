"""The viewer's web app: routes, the security middleware, and the app's state.

Pages are rendered on the server (Jinja2, autoescaped) with one small script for the
live tail and the confirm dialogs; the JSON API lives under ``/api``; new events reach
the browser as server-sent events. Everything the pages use ships in the package (no
CDN), so the viewer works offline. Reads go straight to SQLite (``queries``); search
and forget go through the daemon like every other client (``control``).

Security, for a server any local process or web page could try to reach:
- the Host header must be ``127.0.0.1`` (a DNS-rebinding page names its own host);
- the token (``auth``) for every request, and explicitly for every change;
- strict headers on every answer: a CSP with scripts and styles from 'self' only, no
  framing, nosniff, no referrer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from kirolearn import paths, privacy
from kirolearn.viewer import pages
from kirolearn.viewer.auth import hand_over, link
from kirolearn.viewer.feed import Feed
from kirolearn.viewer.queries import Reader

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
# Each page answers at its path and, as JSON, under /api (the overview at /api/overview).
PAGES = [("/", pages.overview), ("/memories", pages.memories),
         ("/memories/{record_id}", pages.memory), ("/retrievals", pages.retrievals),
         ("/retrievals/{retrieval_id:int}", pages.retrieval), ("/sessions", pages.sessions),
         ("/sessions/{session_id:path}", pages.session), ("/events/{event_id}", pages.event),
         ("/brief", pages.brief)]


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


def scrubbed(value: Any) -> Any:
    """Every value a page shows passes here: text is scrubbed as it leaves (markup a
    filter made, ``code_spans``, was scrubbed there)."""
    if isinstance(value, Markup):
        return value
    return privacy.scrub_text(value) if isinstance(value, str) else value


CODE_SPAN = re.compile(r"`([^`\n]+)`")


def code_spans(text: str) -> Markup:
    """Text scrubbed and escaped, its `code` spans (the markdown a brief or a fact
    writes) as ``<code>``: shown as it reads, not as markdown's backticks."""
    text = privacy.scrub_text(str(text))
    parts, last = [], 0
    for span in CODE_SPAN.finditer(text):
        parts += [escape(text[last:span.start()]), Markup("<code>%s</code>") % span[1]]
        last = span.end()
    parts.append(escape(text[last:]))
    return Markup("").join(parts)


def create_app(home: paths.Home, token: str, feed: Feed | None = None) -> Starlette:
    """The viewer for the kirolearn home ``home``; requests must carry ``token``."""
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                     autoescape=True, undefined=jinja2.StrictUndefined,
                                     finalize=scrubbed)
    environment.globals["link"] = link
    environment.filters["code_spans"] = code_spans
    routes = [
        *(Route(path, hand_over(endpoint)) for path, endpoint in PAGES),
        *(Route("/api" + ("/overview" if path == "/" else path), endpoint)
          for path, endpoint in PAGES),
        Route("/live", hand_over(pages.live)),
        Route("/export", pages.export),
        Route("/api/export", pages.export),
        Route("/api/events", pages.events),
        Route("/api/stream", pages.stream),
        Route("/memories/{record_id}/forget", pages.forget, methods=["POST"]),
        Route("/api/memories/{record_id}/forget", pages.forget, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [Middleware(SecurityHeaders),
                  Middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1"])]
    app = Starlette(routes=routes, middleware=middleware,
                    exception_handlers={HTTPException: pages.http_error})
    app.state.home = home
    app.state.token = token
    app.state.reader = Reader(home)
    app.state.feed = feed or Feed()
    app.state.templates = Jinja2Templates(env=environment)
    return app
