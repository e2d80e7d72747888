"""The viewer's token: who may read, and who may change anything.

- every page and API call needs the token: ``kirolearn open`` hands it over in the URL
  once (``hand_over``), and it comes back as a cookie (HttpOnly, SameSite=Strict), or
  as ``Authorization: Bearer <token>`` for scripts;
- a request that changes anything must also carry the token itself (a form field or
  the ``X-Kirolearn-Token`` header): the cookie alone never forgets a record.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

COOKIE = "kirolearn_token"
TOKEN_HEADER = "x-kirolearn-token"


def link(path: str, **params: object) -> str:
    """A URL of this viewer with the non-empty query parameters."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return path + ("?" + urlencode(kept) if kept else "")


def _same(offered: str, token: str) -> bool:
    return secrets.compare_digest(offered.encode(), token.encode())


def require(request: Request, writes: bool = False) -> None:
    """401 without the token; a write must also carry it explicitly (not just the
    cookie a browser would attach to anybody's form)."""
    token = request.app.state.token
    offered = request.cookies.get(COOKIE, "")
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    bearer = scheme.lower() == "bearer" and bool(credentials.strip())
    if bearer:  # only a well-formed header stands in for the cookie and the explicit token
        offered = credentials.strip()
    if not _same(offered, token):
        raise HTTPException(401, "this needs the viewer's token: open the viewer with"
                                 " `kirolearn open`")
    if writes and not bearer:
        explicit = request.headers.get(TOKEN_HEADER) or getattr(request.state, "form_token", None)
        if not _same(explicit or "", token):
            raise HTTPException(403, "a change must carry the viewer's token")


Endpoint = Callable[[Request], Awaitable[Response]]


def hand_over(endpoint: Endpoint) -> Endpoint:
    """A page that also takes the token from `kirolearn open`'s URL (``?token=``): it sets
    the cookie and sends the browser to the same URL without it."""
    async def page_endpoint(request: Request) -> Response:
        offered = request.query_params.get("token")
        if offered is None:
            return await endpoint(request)
        if not _same(offered, request.app.state.token):
            raise HTTPException(401, "that token is not this viewer's: run `kirolearn open`")
        rest = {k: v for k, v in request.query_params.items() if k != "token"}
        response = RedirectResponse(link(request.url.path, **rest), status_code=303)
        response.set_cookie(COOKIE, request.app.state.token, httponly=True, samesite="strict",
                            path="/")
        return response
    return page_endpoint
