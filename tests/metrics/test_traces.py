"""OpenTelemetry traces (the ``otel`` extra): off until asked (no span, nothing imported on
their account); once on, an ingest, its commit, a query and a compaction job each open their
span, named and tagged with the table, in the tracer provider the application set."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext

import sediment as sd
from sediment.metrics import traces

SCHEMA = sd.Schema(row_keys=[("k", pa.string())], values=[("v", pa.int64())])


class Recorder(trace.TracerProvider):
    """A tracer provider of the OpenTelemetry API that remembers every span started."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, dict[str, Any]]] = []

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _Tracer(self)


class _Tracer(trace.Tracer):
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def start_span(self, name: str, context: Any = None, kind: Any = None,
                   attributes: Any = None, *args: Any, **kwargs: Any) -> trace.Span:
        self.recorder.spans.append((name, dict(attributes or {})))
        return NonRecordingSpan(SpanContext(0, 0, False))

    def start_as_current_span(self, name: str, context: Any = None, kind: Any = None,
                              attributes: Any = None, *args: Any, **kwargs: Any) -> Any:
        return trace.use_span(self.start_span(name, attributes=attributes), end_on_exit=True)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    traces.enable()
    traces._tracer = rec.get_tracer("sediment")  # the application's provider, for this test
    try:
        yield rec
    finally:
        traces.disable()


def test_an_ingest_query_and_compaction_open_their_spans(recorder: Recorder,
                                                          tmp_path: Path) -> None:
    table = sd.Store.open(str(tmp_path / "s"), create=True).create_table("t", SCHEMA)
    recorder.spans.clear()
    table.ingest(pa.table({"k": ["a", "b"], "v": [1, 2]}))
    table.ingest(pa.table({"k": ["c"], "v": [3]}))
    assert table.query(keys=["a"]).num_rows == 1
    table.compact(full=True)
    names = [n for n, _ in recorder.spans]
    assert names.count("sediment.ingest") == 2
    assert names.count("sediment.query") >= 1
    assert names.count("sediment.compaction") == 1
    # two ingests, the job assignment and the compaction commit at least
    assert names.count("sediment.commit") >= 4
    assert {a["sediment.table"] for _, a in recorder.spans} == {"t"}


def test_traces_are_off_unless_asked(tmp_path: Path) -> None:
    """A fresh process that ingests and queries opens no span and never imports
    OpenTelemetry (0.13-0.19 s of every command's start otherwise)."""
    code = (f"import sys, pyarrow as pa, sediment as sd\n"
            f"t = sd.Store.open({str(tmp_path / 's')!r}, create=True).create_table("
            f"'t', sd.Schema(row_keys=[('k', pa.string())], values=[('v', pa.int64())]))\n"
            f"t.ingest(pa.table({{'k': ['a'], 'v': [1]}})); t.query(keys=['a'])\n"
            f"print(sorted(m for m in sys.modules if m.startswith(('opentelemetry', "
            f"'prometheus_client'))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
