"""Admission of every Flight call, before any handler runs: the bearer token (its digest
compared in constant time with every token's, :class:`sediment.tokens.Tokens`) and the
concurrency bound (a "busy" refusal past it, and while draining). The token found gives the
call its scope (:attr:`Call.scope`): what it may do is checked by each handler once it knows
the table (:meth:`Call.allow`), every refusal logged with the token's name.

A slot is held by a call until it completes, or until it has waited on its client for
``idle_timeout`` seconds (a ``do_get`` whose client stopped reading, a ``do_put`` whose client
sends nothing): then the slot is freed for others and the call is abandoned (it fails as soon
as its client moves again; a put commits nothing). Handlers say when they wait on the client
(:meth:`Call.waiting`) and when they work (:meth:`Call.working`); a call waits on its client
from its start until its handler runs.

Actions take no slot at admission (their type is not known there): ``do_action`` takes one
for every action but ``health`` and ``stats`` (:data:`LIGHT_ACTIONS`), which are answered
whatever the data calls hold, so a busy server can always say so.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pyarrow.flight as fl

from sediment.errors import (
    AuthenticationError,
    BadRequestError,
    PermissionDeniedError,
    ServerBusyError,
    ServiceError,
)
from sediment.serve.protocol import to_flight_error
from sediment.serve.stats import Request, Stats, log_value
from sediment.tokens import ANYONE, Right, Scope, Tokens

LOG = logging.getLogger("sediment.serve")

LIGHT_ACTIONS = frozenset({"health", "stats"})
"""Actions answered without a concurrency slot."""

_NO_SLOT = frozenset({fl.FlightMethod.DO_ACTION, fl.FlightMethod.LIST_ACTIONS})
"""Methods admitted without a slot (``do_action`` takes one itself, but for light actions)."""

_REFUSED = {fl.FlightMethod.GET_SCHEMA: "get_flight_info gives a query's schema"}
"""Methods the service does not offer, refused here: Arrow sends a Python traceback with any
error a ``get_schema`` handler raises, a Flight error included."""


class Call(fl.ServerMiddleware):
    """One admitted call: its slot (when it holds one) and whether it waits on its client."""

    def __init__(self, gate: Admission, method: str, holds: bool,
                 scope: Scope = ANYONE) -> None:
        self.gate = gate
        self.method = method
        self.holds = holds
        self.scope = scope
        """What the call's token may do (every right on every table without tokens)."""
        self.table = ""
        self.idle_since: float | None = time.monotonic()
        """Since when the call waits on its client (None: the server works on it)."""
        self.expired = False

    def waiting(self) -> None:
        """The call waits on its client (for its next message, or for room to send)."""
        self.idle_since = time.monotonic()

    def working(self) -> None:
        """The server works on the call again: ServiceError if its slot was freed meanwhile
        (the call is abandoned)."""
        with self.gate.lock:  # (the idle watcher reads both under it)
            self.idle_since = None
            expired = self.expired
        if expired:
            raise ServiceError(
                f"{self.method}: the call waited on its client for more than "
                f"{self.gate.idle_timeout:g} s (--idle-timeout) and was abandoned; nothing "
                f"of it is committed")

    def allow(self, right: Right, table: str | None, what: str) -> None:
        """Refuse (PermissionDeniedError, logged with the token's name) what the call's scope
        does not allow: ``right`` on ``table`` (None: on no table in particular)."""
        try:
            self.scope.check(right, table, what)
        except PermissionDeniedError:
            self.gate.stats.refused("scope")
            LOG.warning("refused method=%s reason=scope token=%s right=%s table=%s",
                        log_value(what), log_value(self.scope.name), right,
                        log_value(table if table is not None else "-"))
            raise

    def call_completed(self, exception: Any) -> None:
        self.gate.finish(self)


class Admission(fl.ServerMiddlewareFactory):
    """One factory for both checks so that their order is fixed: authentication first (a
    caller without the token learns nothing, not even that the server is busy), then a slot.

    ``tokens``: the bearer tokens a call may carry, each with its scope (None: no check,
    every call has every right). ``limit``: most calls
    at once. ``idle_timeout``: seconds a call may wait on its client before its slot is freed
    (None: for ever). ``draining``: set on shutdown; every new call is refused as busy.
    """

    def __init__(self, tokens: Tokens | None, limit: int, stats: Stats,
                 idle_timeout: float | None = None) -> None:
        super().__init__()
        self._tokens = tokens
        self.limit = limit
        self.stats = stats
        self.idle_timeout = idle_timeout
        self.draining = False
        self.lock = threading.Lock()
        self._held: set[Call] = set()
        self.active = 0
        self._stop = threading.Event()
        if idle_timeout is not None:
            threading.Thread(target=self._reap, name="sediment-serve-idle",
                             daemon=True).start()

    def _scope(self, headers: dict[str, list[Any]]) -> Scope | str:
        """The scope of a call's token, or why the call is not authenticated. Never says
        what was sent."""
        if self._tokens is None:
            return ANYONE
        values = headers.get("authorization", [])
        if not values:
            return "no token"
        given = b""
        for value in values:
            v = value.encode() if isinstance(value, str) else bytes(value)
            if v[:7].lower() == b"bearer ":
                given = v[7:].strip()
        if not given:
            return "not a bearer token"
        scope = self._tokens.scope_of(given)
        return "wrong token" if scope is None else scope

    def start_call(self, info: Any, headers: dict[str, list[Any]]) -> Call:
        method = str(getattr(info.method, "name", info.method)).lower()
        scope = self._scope(headers)
        if isinstance(scope, str):
            refusal = scope
            self.stats.refused("auth")
            LOG.warning("refused method=%s reason=authentication detail=%s", method,
                        log_value(refusal))
            # the client is told whether its token was missing or refused (never what it
            # sent): a wrong token and a forgotten one are different mistakes to fix
            said = ("the token sent is not one this server accepts (check the token, or the "
                    "server's --token / --tokens-file)" if refusal == "wrong token" else
                    "send the server's token as 'authorization: Bearer <token>' "
                    "(sd.connect(uri, token=...))")
            raise to_flight_error(AuthenticationError(f"authentication required: {said}"))
        if info.method in _REFUSED:
            self.stats.record(Request(method, outcome="error:BadRequestError"), 0.0)
            raise to_flight_error(BadRequestError(
                f"sediment serve does not offer {method}: {_REFUSED[info.method]}"))
        call = Call(self, method, holds=False, scope=scope)
        if info.method in _NO_SLOT and not self.draining:
            return call
        self.hold(call)
        return call

    def hold(self, call: Call) -> None:
        """Give ``call`` a slot, or refuse it as busy (at the limit, or draining)."""
        with self.lock:
            if self.draining:
                refusal = "the server is shutting down"
            elif self.active >= self.limit:
                refusal = f"server busy: {self.active} calls in progress (--max-concurrency " \
                          f"{self.limit}); retry later"
            else:
                self.active += 1
                call.holds = True
                self._held.add(call)
                return
        self.stats.refused("busy")
        LOG.warning("refused method=%s reason=busy active=%d", call.method, self.active)
        raise to_flight_error(ServerBusyError(refusal))

    def finish(self, call: Call) -> None:
        with self.lock:
            if call in self._held:
                self._held.discard(call)
                self.active -= 1

    def expire_idle(self, now: float) -> list[Call]:
        """Free the slots of calls waiting on their clients for ``idle_timeout`` or more."""
        if self.idle_timeout is None:
            return []
        with self.lock:
            idle = [c for c in self._held if c.idle_since is not None
                    and now - c.idle_since >= self.idle_timeout]
            for c in idle:
                c.expired = True
                self._held.discard(c)
                self.active -= 1
        for c in idle:
            LOG.warning("idle method=%s table=%s: waited on its client for more than %g s "
                        "(--idle-timeout); its slot is freed", c.method,
                        log_value(c.table or "-"), self.idle_timeout)
        return idle

    def _reap(self) -> None:
        assert self.idle_timeout is not None
        interval = max(0.05, min(1.0, self.idle_timeout / 4))
        while not self._stop.wait(interval):
            self.expire_idle(time.monotonic())

    def close(self) -> None:
        """Stop watching for idle calls (the server is shutting down)."""
        self._stop.set()
