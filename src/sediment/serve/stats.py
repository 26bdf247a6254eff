"""Per-request accounting of the Flight service: one log line per request and the counters
and latency percentiles the ``stats`` action returns.

Log lines are ``key=value`` fields. A value that comes from a client (a table name, an action
type) is written as it is only when it is short and plain; anything else is written as a
quoted, escaped JSON string of a bounded prefix (:func:`log_value`), so no request can forge a
line (a newline in a table name) or a field (``" outcome=ok"``), nor fill the log.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sediment import metrics

LOG = logging.getLogger("sediment.serve")

LATENCY_WINDOW = 10_000
"""Latencies kept per method for percentiles: the most recent ones (bounded memory)."""

LOG_VALUE_CHARS = 200
"""Most characters of a client's value written in a log line (longer ones are cut, and say so)."""

LOG_VALUE_ESCAPED = 400
"""Most characters of that value once escaped (an escape takes up to 12 per character)."""

_PLAIN = re.compile(r"[A-Za-z0-9_.:/@+-]{1,200}")


def log_value(value: object) -> str:
    """``value`` as a log field's value: as it is when plain (letters, digits, ``_.:/@+-``),
    else a JSON string of its first :data:`LOG_VALUE_CHARS` characters (fewer when their
    escapes pass :data:`LOG_VALUE_ESCAPED`) with every control character, quote, non-ASCII
    character and lone surrogate escaped."""
    text = str(value)
    if _PLAIN.fullmatch(text):
        return text
    cut = text[:LOG_VALUE_CHARS]
    while len(json.dumps(cut)) > LOG_VALUE_ESCAPED:
        cut = cut[:len(cut) * 3 // 4]
    if len(cut) < len(text):
        cut = f"{cut}...({len(text) - len(cut)} more characters)"
    return json.dumps(cut, ensure_ascii=True)


@dataclass
class Request:
    """One request being served: what the log line and the counters will say."""

    method: str
    table: str = ""
    rows: int = 0
    outcome: str = "ok"


@dataclass
class _MethodStats:
    calls: int = 0
    errors: int = 0
    rows: int = 0
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))


def outcome_of(exc: BaseException) -> str:
    """``error:<class>``, the Sediment class behind a Flight error when there is one."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    return f"error:{type(cause).__name__}"


class Stats:
    """Counters and latencies per method, shared by every request thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._methods: dict[str, _MethodStats] = {}
        self.started = time.time()
        self.refused_busy = 0
        self.refused_auth = 0
        self.refused_scope = 0

    def record(self, req: Request, seconds: float) -> None:
        """Count one finished request and log it (method, table, rows, duration, outcome)."""
        with self._lock:
            m = self._methods.setdefault(req.method, _MethodStats())
            m.calls += 1
            m.rows += req.rows
            m.errors += req.outcome != "ok"
            m.latencies.append(seconds)
        metrics.request(req.method, seconds)
        LOG.info("method=%s table=%s rows=%d duration_ms=%.2f outcome=%s",
                 log_value(req.method), log_value(req.table or "-"), req.rows, seconds * 1000,
                 log_value(req.outcome))

    def refused(self, reason: str) -> None:
        with self._lock:
            if reason == "busy":
                self.refused_busy += 1
            elif reason == "scope":  # a token's scope (sediment.tokens)
                self.refused_scope += 1
            else:
                self.refused_auth += 1

    @contextmanager
    def track(self, method: str, table: str = "") -> Iterator[Request]:
        """Time the body as one request; an exception is its outcome (and propagates)."""
        req = Request(method, table)
        start = time.perf_counter()
        try:
            yield req
        except BaseException as e:
            req.outcome = outcome_of(e)
            raise
        finally:
            self.record(req, time.perf_counter() - start)

    def snapshot(self) -> dict[str, Any]:
        """The ``stats`` action's answer: per method calls, errors, rows, p50/p99 (ms)."""
        with self._lock:
            methods = {}
            for name, m in sorted(self._methods.items()):
                lat = np.fromiter(m.latencies, dtype=float) * 1000
                methods[name] = {
                    "calls": m.calls, "errors": m.errors, "rows": m.rows,
                    "p50_ms": float(np.percentile(lat, 50)) if lat.size else None,
                    "p99_ms": float(np.percentile(lat, 99)) if lat.size else None,
                }
            return {"uptime_seconds": time.time() - self.started, "methods": methods,
                    "refused_busy": self.refused_busy, "refused_auth": self.refused_auth,
                    "refused_scope": self.refused_scope}
