"""Admission of every Flight call, before any handler runs: the bearer token (compared in
constant time) and the concurrency bound (a "busy" refusal past it, and while draining)."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow.flight as fl

from sediment.access import same_token
from sediment.errors import AuthenticationError, ServerBusyError
from sediment.serve.protocol import to_flight_error
from sediment.serve.stats import Stats


class _Slot(fl.ServerMiddleware):
    """Holds one admitted call's place until the call completes."""

    def __init__(self, gate: Admission) -> None:
        self.gate = gate

    def call_completed(self, exception: Any) -> None:
        self.gate.release()


class Admission(fl.ServerMiddlewareFactory):
    """One factory for both checks so that their order is fixed: authentication first (a
    caller without the token learns nothing, not even that the server is busy), then a slot.

    ``token``: the bearer token every call must carry (None: no check). ``limit``: most calls
    at once. ``draining``: set on shutdown; every new call is refused as busy.
    """

    def __init__(self, token: str | None, limit: int, stats: Stats) -> None:
        super().__init__()
        self._token = token.encode() if token is not None else None
        self.limit = limit
        self.stats = stats
        self.draining = False
        self._lock = threading.Lock()
        self.active = 0

    def _authenticated(self, headers: dict[str, list[Any]]) -> bool:
        if self._token is None:
            return True
        given = b""
        for value in headers.get("authorization", []):
            v = value.encode() if isinstance(value, str) else bytes(value)
            if v[:7].lower() == b"bearer ":
                given = v[7:].strip()
        return same_token(given, self._token)

    def start_call(self, info: Any, headers: dict[str, list[Any]]) -> _Slot:
        if not self._authenticated(headers):
            self.stats.refused("auth")
            raise to_flight_error(AuthenticationError(
                "authentication required: send the server's token as 'authorization: "
                "Bearer <token>' (sd.connect(uri, token=...))"))
        with self._lock:
            if self.draining:
                refusal = "the server is shutting down"
            elif self.active >= self.limit:
                refusal = f"server busy: {self.active} calls in progress (--max-concurrency " \
                          f"{self.limit}); retry later"
            else:
                self.active += 1
                return _Slot(self)
        self.stats.refused("busy")
        raise to_flight_error(ServerBusyError(refusal))

    def release(self) -> None:
        with self._lock:
            self.active -= 1
