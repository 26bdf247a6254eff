"""The dashboard's ASGI application: pages, the JSON API and static files.

Read-only: every route answers GET (and HEAD) only, but the login form's POST. A page is its
template plus its view's data embedded as JSON (Jinja's ``tojson``: ``<``, ``>`` and ``&``
escaped, in a ``<script type="application/json">`` the browser never runs); the page's script
draws it and then fetches the same data from the JSON API every few seconds. Every text from
the store (table names, keys, tags, reasons) reaches the page as JSON and is written with
``textContent``, never as HTML.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from sediment.access import HostCheck
from sediment.dashboard.auth import Guard, read_form, safe_next, scope_of, with_cookie
from sediment.dashboard.query import FORM_FIELDS, query_view
from sediment.dashboard.security import check_bind, host_allow_list
from sediment.dashboard.views import Views
from sediment.errors import (
    CorruptionError,
    InvalidTableNameError,
    QueryError,
    SedimentError,
    TableNotFoundError,
)
from sediment.metrics.asgi import TimedRequests
from sediment.store import Store
from sediment.tokens import Tokens

HERE = Path(__file__).parent
STATIC = HERE / "static"
REFRESH_SECONDS = 5.0
WARM_TABLES = 20
"""Tables whose views are prepared when the server starts (the store page lists them all)."""


def plotly_js() -> Path:
    """Plotly's own bundled ``plotly.min.js`` (in the plotly Python package): the pages load
    it from this server, so they work without internet access."""
    return Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))


def _json(data: Any, status: int = 200) -> Response:
    # allow_nan=False: a browser's JSON.parse refuses NaN (views turn such values into text)
    body = json.dumps(data, allow_nan=False, default=str, separators=(",", ":"))
    return Response(body, status, media_type="application/json",
                    headers={"Cache-Control": "no-store"})


def _not_found(name: str) -> dict[str, str]:
    return {"error": f"no table {name!r} in this store"}


def _visible(data: dict[str, Any], request: Request) -> dict[str, Any]:
    """The store view with only the tables the request's token reaches."""
    scope = scope_of(request)
    return {**data, "tables": [r for r in data["tables"] if scope.allows("read", r["name"])]}


def create_app(store: Store, *, token: str | None = None, tokens: Tokens | None = None,
               refresh_seconds: float = REFRESH_SECONDS, host: str = "127.0.0.1",
               allowed_hosts: Iterable[str] = ()) -> Starlette:
    """The dashboard over ``store``; with ``token`` (every table) or ``tokens`` (scoped:
    :mod:`sediment.tokens`), every page and API call needs one. It answers only requests
    whose ``Host`` is the bound address ``host``, a loopback name or one of
    ``allowed_hosts`` (421 otherwise, before the token is even looked at)."""
    if token is not None:
        tokens = Tokens.single(token) if tokens is None else tokens.plus(Tokens.single(token))
    hosts = host_allow_list(host, allowed_hosts)
    views = Views(store)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    js = plotly_js()

    def page(request: Request, template: str, title: str, view: str, data: Any,
             api: str, status: int = 200) -> Response:
        context = {"title": title, "view": view, "data": data, "api": api,
                   "refresh_ms": int(refresh_seconds * 1000), "store": store.uri,
                   "token": tokens is not None}
        return templates.TemplateResponse(request, template, context, status_code=status,
                                          headers={"Cache-Control": "no-store"})

    def table_or_404(request: Request, build: Any) -> tuple[Any, int]:
        name = request.path_params["name"]
        try:
            return build(name), 200
        except (TableNotFoundError, InvalidTableNameError):
            return _not_found(name), 404

    # ---- pages -------------------------------------------------------------------------
    def store_page(request: Request) -> Response:
        return page(request, "store.html", "Tables", "store",
                    _visible(views.store_view(), request), "/api/store")

    def table_page(request: Request) -> Response:
        data, status = table_or_404(request, views.table_view)
        name = request.path_params["name"]
        if status == 404:
            return page(request, "error.html", "Not found", "error", data, "", 404)
        tree = views.tree_view(name)
        return page(request, "table.html", name, "table", {"view": data, "tree": tree},
                    request.url.path.replace("/tables/", "/api/tables/", 1))

    def query_page(request: Request) -> Response:
        name = request.path_params["name"]
        form = {k: request.query_params.get(k, "") for k in FORM_FIELDS}
        try:
            table = views.table(name)
        except (TableNotFoundError, InvalidTableNameError):
            return page(request, "error.html", "Not found", "error", _not_found(name), "", 404)
        try:
            data: dict[str, Any] = query_view(table, form)
            status = 200
        except QueryError as e:
            data, status = {"table": name, "form": form, "error": str(e)}, 400
        api = request.url.path.replace("/tables/", "/api/tables/", 1)
        return page(request, "query.html", f"Query {name}", "query", data, api, status)

    # ---- JSON API ----------------------------------------------------------------------
    def api_store(request: Request) -> Response:
        return _json(_visible(views.store_view(), request))

    def api_table(request: Request) -> Response:
        return _json(*table_or_404(request, views.table_view))

    def api_partitions(request: Request) -> Response:
        root = request.query_params.get("root") or None
        try:
            return _json(*table_or_404(request, lambda n: views.tree_view(n, root)))
        except KeyError:
            return _json({"error": f"no partition {root!r} at the table's latest version"},
                         404)

    def api_query(request: Request) -> Response:
        name = request.path_params["name"]
        form = {k: request.query_params.get(k, "") for k in FORM_FIELDS}
        try:
            table = views.table(name)
        except (TableNotFoundError, InvalidTableNameError):
            return _json(_not_found(name), 404)
        try:
            return _json(query_view(table, form))
        except QueryError as e:
            return _json({"table": name, "form": form, "error": str(e)}, 400)

    def api_health(request: Request) -> Response:
        return _json({"ok": True, "time": time.time()})

    # ---- login, static -----------------------------------------------------------------
    async def login(request: Request) -> Response:
        if tokens is None:
            return RedirectResponse("/", 303)
        if request.method == "POST":
            form = await read_form(request)
            target = safe_next(form.get("next"))
            given = form.get("token")
            if given and tokens.scope_of(given) is not None:
                return with_cookie(RedirectResponse(target, 303), given)
            return page(request, "login.html", "Sign in", "login",
                        {"next": target, "wrong": True}, "", 401)
        return page(request, "login.html", "Sign in", "login",
                    {"next": safe_next(request.query_params.get("next")),
                     "wrong": request.query_params.get("wrong") == "1"}, "")

    def static(request: Request) -> Response:
        name = request.path_params["file"]
        if name == "plotly.min.js":
            path = js
        else:
            path = STATIC / name
            if os.sep in name or "/" in name or name.startswith(".") or not path.is_file():
                return JSONResponse({"error": "not found"}, 404)
        return FileResponse(path, headers={"Cache-Control": "public, max-age=3600"})

    def not_found(request: Request, exc: Exception) -> Response:
        """Unknown paths: JSON under /api, the error page elsewhere."""
        if request.url.path.startswith("/api/"):
            return _json({"error": "no such endpoint"}, 404)
        return page(request, "error.html", "Not found", "error",
                    {"error": "no such page"}, "", 404)

    def damaged(request: Request, exc: Exception) -> Response:
        """Stored bytes that stay damaged (a CorruptionError: a data file, a sidecar, a log
        entry, a tag...): one clear error naming the table and the object, JSON under /api,
        the error page elsewhere, where a bare 500 said nothing; the server goes on."""
        error = {"error": f"{type(exc).__name__}: {exc}"}
        if request.url.path.startswith("/api/"):
            return _json(error, 500)
        return page(request, "error.html", "Damaged data", "error", error, "", 500)

    routes = [
        Route("/", store_page),
        Route("/tables/{name}", table_page),
        Route("/tables/{name}/query", query_page),
        Route("/api/store", api_store),
        Route("/api/health", api_health),
        Route("/api/tables/{name}", api_table),
        Route("/api/tables/{name}/partitions", api_partitions),
        Route("/api/tables/{name}/query", api_query),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/static/{file}", static),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(HostCheck, allowed=hosts),
                                               Middleware(Guard, tokens=tokens),
                                               Middleware(TimedRequests)],
                    exception_handlers={404: not_found, CorruptionError: damaged})
    app.state.views = views
    return app


def warm_up(views: Views, tables: int = WARM_TABLES) -> None:
    """Load the first ``tables`` tables' states, figures and commit logs, so that the first
    visit finds them as a refresh does (run in a thread when the server starts)."""
    try:
        for row in views.store_view()["tables"][:tables]:
            views.table_view(row["name"])
            views.tree_view(row["name"])
    except SedimentError:
        return  # the page asked for shows the error


def serve(store: Store, *, host: str = "127.0.0.1", port: int = 8050,
          token: str | None = None, tokens: Tokens | None = None,
          refresh_seconds: float = REFRESH_SECONDS,
          allowed_hosts: Iterable[str] = ()) -> None:
    """Run the dashboard until interrupted. Refuses (DashboardSecurityError) a bind beyond
    loopback without a token, or an ``allowed_hosts`` entry that is no host name, before any
    socket is opened. Requests naming another ``Host`` than the bound address, a loopback
    name or ``allowed_hosts`` get 421. The first tables' views are prepared meanwhile in a
    thread (:func:`warm_up`)."""
    import uvicorn

    check_bind(host, token or tokens)
    app = create_app(store, token=token, tokens=tokens, refresh_seconds=refresh_seconds,
                     host=host, allowed_hosts=allowed_hosts)
    threading.Thread(target=warm_up, args=(app.state.views,), name="dashboard-warm-up",
                     daemon=True).start()
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                server_header=False)
