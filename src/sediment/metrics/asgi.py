"""The time of each HTTP request of an ASGI application (the dashboard), as
``sediment_request_seconds{method="http:<endpoint>"}``: the endpoint's function name once
the router chose it (``http:api_table``), so the label takes a handful of values whatever the
paths asked for. Pure ASGI, like :class:`sediment.access.HostCheck`."""

from __future__ import annotations

import time
from typing import Any

from sediment import metrics


class TimedRequests:
    """ASGI middleware timing each HTTP request (nothing while metrics are off)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or not metrics.enabled():
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            endpoint = scope.get("endpoint")  # set by the router on this same scope
            name = getattr(endpoint, "__name__", None) or "unrouted"
            metrics.request(f"http:{name}", time.perf_counter() - started)
