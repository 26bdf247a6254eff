"""The model-based test (test_model.TableModel) on S3 through the fault proxy.

Every operation of the state machine (ingest, compact, split, maintain, gc, property changes,
tags, restore, dump and load, queries) runs against a table on the moto server reached only
through tests/faultproxy.py, which loses the answer of a share of the log-entry PUTs (the
entry is written: an ambiguous commit that the committer must recognise as its own), resets a
few connections and delays some requests, at random with a fixed seed. The model's checks are
unchanged: every operation must do exactly what it does without faults (each commit exactly
once, at the version the model expects), and every query must equal the model's answer.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import test_model as tm
import workers as w
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

import sediment as sd
from faultproxy import ProxiedS3

pytestmark = [pytest.mark.s3, pytest.mark.slow]

_CURRENT: dict[str, Any] = {}
"""The proxied bucket of the running test (state machines are built without fixtures)."""


class FaultyTableModel(tm.TableModel):
    def __init__(self) -> None:
        super().__init__()  # a local table: its properties are the model's
        s3: ProxiedS3 = _CURRENT["s3"]
        properties = dict(self.table._handle.states.head().properties)
        self.store = sd.Store.open(f"{s3.uri}-{uuid.uuid4().hex[:8]}", **s3.options, create=True)
        self.table = self.store.create_table("model", w.SCHEMA, properties=properties)


def test_table_model_through_faults(proxied_s3: ProxiedS3) -> None:
    proxy = proxied_s3.proxy
    proxy._rng.seed(7)
    # one lost answer for sure (the third log-entry write), then three in ten at random:
    # how many log entries a run writes depends on the steps hypothesis draws
    sure = proxy.add_rule("drop_response", method="PUT", path=r"/log/\d{20}\.json$",
                          skip=2, count=1, name="a lost log-entry answer")
    lost = proxy.add_rule("drop_response", method="PUT", path=r"/log/\d{20}\.json$",
                          probability=0.3, name="lost log-entry answer")
    # each reset costs botocore a backoff sleep (~0.5 s): a few per test
    proxy.add_rule("reset", probability=0.01, count=10 * w.SCALE, name="reset")
    proxy.add_rule("delay", probability=0.02, delay=0.02, name="delay")
    _CURRENT["s3"] = proxied_s3
    try:
        run_state_machine_as_test(FaultyTableModel, settings=settings(
            max_examples=3 * w.SCALE, stateful_step_count=15, deadline=None, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    finally:
        _CURRENT.clear()
        proxy.clear()
    print({"lost log-entry answers": sure.fired + lost.fired, **dict(proxy.counts)})
    assert sure.fired + lost.fired > 0
