"""OpenTelemetry traces of ingest, commit, query and compaction (the ``otel`` extra).

Off unless asked: :func:`enable` (a library user's call), or ``SEDIMENT_TRACES=otel`` in the
environment of any process (the commands, the maintainer's workers, Spark executors that
inherit it). Importing ``opentelemetry.trace`` takes 0.13-0.19 s, which no process that did
not ask should pay, so it is looked for only then. Spans go to the tracer provider the
application configured (``opentelemetry.trace.set_tracer_provider``: the SDK and an exporter
are its choice); with none, the API's spans record nothing.

Span names: ``sediment.ingest``, ``sediment.commit``, ``sediment.query``,
``sediment.compaction``; each carries ``sediment.table``.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from sediment.errors import MissingDependencyError, install_hint

ENV = "SEDIMENT_TRACES"
"""``otel`` turns traces on in a process (read at its first span)."""

log = logging.getLogger("sediment.metrics")

_tracer: Any = None
_decided = False
_lock = threading.Lock()


def enable() -> None:
    """Trace this process's ingests, commits, queries and compactions through OpenTelemetry;
    MissingDependencyError when the ``otel`` extra is not installed."""
    global _tracer, _decided
    try:
        from opentelemetry import trace
    except ImportError:
        raise MissingDependencyError(f"traces need OpenTelemetry: {install_hint('otel')}"
                                     ) from None
    with _lock:
        _tracer = trace.get_tracer("sediment")
        _decided = True


def disable() -> None:
    """Stop tracing in this process (spans already open end as they would)."""
    global _tracer, _decided
    with _lock:
        _tracer, _decided = None, True


def _decide() -> None:
    global _decided
    if os.environ.get(ENV, "").strip().lower() == "otel":
        try:
            enable()
        except MissingDependencyError as e:
            log.warning("%s=otel: %s; not tracing", ENV, e)
    with _lock:
        _decided = True


def span(name: str, table: str) -> AbstractContextManager[Any]:
    """A span ``name`` about ``table`` while traces are on, else a context that does
    nothing (its cost: one check of a module global)."""
    if not _decided:
        _decide()
    tracer = _tracer
    if tracer is None:
        return nullcontext()
    return tracer.start_as_current_span(name, attributes={"sediment.table": table})
