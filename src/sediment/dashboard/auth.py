"""Access to the dashboard: tokens, when configured, and the response headers of a
read-only site (the bind rule is in :mod:`sediment.dashboard.security`).

A browser gives its token once, as ``?token=`` or in the login form, and keeps it in an
HttpOnly, SameSite=Strict cookie; scripts send ``Authorization: Bearer <token>``.

Scoped tokens (``--tokens-file``, :mod:`sediment.tokens`): the dashboard only reads, so every
right reaches it, and a token reaches the tables its patterns match: a table's pages and API
(``/tables/NAME...``, ``/api/tables/NAME...``) answer 403 for another table (logged with the
token's name), and the store's page and ``/api/store`` list only the token's tables. The
scope is ``request.state.scope`` for the routes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlencode

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp

from sediment.tokens import ANYONE, Scope, Tokens

LOG = logging.getLogger("sediment.dashboard")

COOKIE = "sediment_dashboard"
PUBLIC_PATHS = ("/login", "/static/dashboard.css")
"""Reachable without the token: the login form and its style sheet."""
MAX_FORM_BYTES = 8192

SECURITY_HEADERS = {
    # Scripts only from this server (the page data is JSON in a non-executed script
    # element); Plotly sets inline styles on the charts it draws.
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
                               "style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                               "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
                               "form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def safe_next(path: str | None) -> str:
    """A local path to return to after login: never another site (``//host``, a scheme)."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def table_of_path(path: str) -> str | None:
    """The table a page or API path is about (``/tables/NAME...``, ``/api/tables/NAME...``);
    None for the store's pages and the rest."""
    parts = path.split("/")
    if len(parts) >= 3 and parts[1] == "tables":
        return parts[2]
    if len(parts) >= 4 and parts[1] == "api" and parts[2] == "tables":
        return parts[3]
    return None


def scope_of(request: Request) -> Scope:
    """The scope the Guard found for ``request`` (every table without tokens)."""
    scope = getattr(request.state, "scope", ANYONE)
    return scope if isinstance(scope, Scope) else ANYONE


def with_cookie(response: Response, token: str) -> Response:
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
    return response


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def _without_token(request: Request) -> str:
    """The request's path and query, the ``token`` parameter removed."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    return request.url.path + (f"?{urlencode(kept)}" if kept else "")


async def read_form(request: Request) -> dict[str, str]:
    """A small urlencoded form body (the login form): first value of each field."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    parsed = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}


class Guard(BaseHTTPMiddleware):
    """Checks the token and its scope (when there are tokens) and adds the security headers
    to every answer."""

    def __init__(self, app: ASGIApp, tokens: Tokens | None) -> None:
        super().__init__(app)
        self.tokens = tokens

    async def dispatch(self, request: Request,
                       call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await self._check(request, call_next)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _check(self, request: Request,
                     call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        tokens = self.tokens
        path = request.url.path
        if tokens is None or path in PUBLIC_PATHS:
            return await call_next(request)
        given = request.query_params.get("token")
        if given is not None:
            if tokens.scope_of(given) is not None:  # kept in the cookie; the URL loses it
                return with_cookie(RedirectResponse(_without_token(request), 303), given)
            return _refused(request, "wrong token")
        scope = tokens.scope_of(request.cookies.get(COOKIE)) or \
            tokens.scope_of(_bearer(request))
        if scope is None:
            return _refused(request, "this dashboard needs its token")
        table = table_of_path(request.scope["path"])  # (what the routes match, decoded)
        if table is not None and not scope.allows("read", table):
            LOG.warning("refused path=%r reason=scope token=%r table=%r", path, scope.name,
                        table)
            return _forbidden(request, f"permission denied: token {scope.name!r} does not "
                                       f"reach table {table} (its tables: "
                                       f"{', '.join(scope.tables) or 'none'})")
        request.state.scope = scope
        return await call_next(request)


def _forbidden(request: Request, reason: str) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": reason}, 403)
    return PlainTextResponse(reason + "\n", 403)


def _refused(request: Request, reason: str) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": reason}, 401,
                            headers={"WWW-Authenticate": 'Bearer realm="sediment"'})
    target = "/login?" + urlencode({"next": _without_token(request)})
    if reason == "wrong token":
        target += "&wrong=1"
    return RedirectResponse(target, 303)
