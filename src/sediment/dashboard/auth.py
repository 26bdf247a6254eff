"""Access to the dashboard: a token, when one is configured, and the response headers of a
read-only site (the bind rule is in :mod:`sediment.dashboard.security`).

A browser gives the token once, as ``?token=`` or in the login form, and keeps it in an
HttpOnly, SameSite=Strict cookie; scripts send ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlencode

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp

from sediment.access import same_token

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
    """Checks the token (when there is one) and adds the security headers to every answer."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        super().__init__(app)
        self.token = token or None

    async def dispatch(self, request: Request,
                       call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await self._check(request, call_next)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _check(self, request: Request,
                     call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        token = self.token
        path = request.url.path
        if token is None or path in PUBLIC_PATHS:
            return await call_next(request)
        given = request.query_params.get("token")
        if given is not None:
            if same_token(given, token):  # kept in the cookie; the URL loses it
                return with_cookie(RedirectResponse(_without_token(request), 303), token)
            return _refused(request, "wrong token")
        if same_token(request.cookies.get(COOKIE), token) or same_token(_bearer(request),
                                                                        token):
            return await call_next(request)
        return _refused(request, "this dashboard needs its token")


def _refused(request: Request, reason: str) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": reason}, 401,
                            headers={"WWW-Authenticate": 'Bearer realm="sediment"'})
    target = "/login?" + urlencode({"next": _without_token(request)})
    if reason == "wrong token":
        target += "&wrong=1"
    return RedirectResponse(target, 303)
