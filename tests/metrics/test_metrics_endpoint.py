"""The metrics of one process, scraped from its endpoint (in this process): every family
of the issue is exposed; the counters move with what the table's own history says was
committed, ingested, compacted and collected, a lost race counts one conflict and a lost
answer one unknown outcome; the endpoint keeps Sediment's access rules (loopback or a token,
the Host check)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

import sediment as sd
from sediment.metrics.endpoint import MetricsEndpoint, MetricsEndpointError
from sediment.metrics.families import FAMILIES
from support.scrape import scrape, value

SCHEMA = sd.Schema(row_keys=[("k", pa.string())], values=[("v", pa.int64())])


@pytest.fixture(scope="module")
def endpoint() -> Iterator[MetricsEndpoint]:
    e = MetricsEndpoint("127.0.0.1", 0, allowed=["metrics.example"])
    yield e
    e.close()


def fetch(port: int, path: str = "/metrics", host: str = "127.0.0.1",
          token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Host": host})
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_every_family_is_exposed_and_counters_follow_the_history(
        endpoint: MetricsEndpoint, tmp_path: Path) -> None:
    name = f"t{uuid.uuid4().hex[:8]}"  # the process's counters are shared by its tests
    table = sd.Store.open(str(tmp_path / "s"), create=True).create_table(
        name, SCHEMA, properties={"gc.delay_seconds": 0, "gc.clock_skew_seconds": 0,
                                  "retention.seconds": 0, "compaction.strategy": "basic",
                                  "compaction.batch_size": 2})
    before = scrape(endpoint.port)
    rows = 0
    for i in range(3):
        table.ingest(pa.table({"k": [f"a{i}", f"b{i}"], "v": [i, i]}))
        rows += 2
    assert table.query(keys=["a0"]).num_rows == 1
    table.compact(full=True)
    gc = table.gc()
    status, text = fetch(endpoint.port)
    assert status == 200
    families = {f.name for f in text_string_to_metric_families(text)}
    exposed = {n.removesuffix("_total") for n in FAMILIES}
    assert exposed <= families
    after = scrape(endpoint.port)

    kinds: dict[str, int] = {}
    for entry in table.history():
        kinds[entry.kind] = kinds.get(entry.kind, 0) + 1
    for kind, n in kinds.items():
        assert value(after, "sediment_commits_total", table=name, kind=kind) == n, kind
    assert value(after, "sediment_ingest_rows_total", table=name) == rows
    assert value(after, "sediment_compaction_rows_total", table=name) == rows
    assert value(after, "sediment_compaction_seconds_count") > \
        value(before, "sediment_compaction_seconds_count")
    assert value(after, "sediment_gc_deleted_files_total", table=name) == gc.deleted > 0
    assert value(after, "sediment_files_per_leaf", table=name) == \
        max(len(table.files()), 1)
    misses = value(after, "sediment_cache_misses_total", cache="footer")
    assert misses > value(before, "sediment_cache_misses_total", cache="footer")


def test_the_endpoint_answers_only_its_host_names_and_path(endpoint: MetricsEndpoint) -> None:
    assert fetch(endpoint.port, host="metrics.example:9464")[0] == 200
    assert fetch(endpoint.port, host="localhost")[0] == 200
    status, body = fetch(endpoint.port, host="attacker.example")
    assert status == 421 and "misdirected" in body
    assert fetch(endpoint.port, path="/")[0] == 404


def test_a_token_is_required_when_set_and_beyond_loopback() -> None:
    with pytest.raises(MetricsEndpointError, match="non-loopback address needs a token"):
        MetricsEndpoint("0.0.0.0", 0)
    with pytest.raises(MetricsEndpointError, match="not a port number"):
        MetricsEndpoint("127.0.0.1", 70000)
    e = MetricsEndpoint("127.0.0.1", 0, token="s3cret")
    try:
        assert fetch(e.port)[0] == 401
        assert fetch(e.port, token="wrong")[0] == 401
        assert fetch(e.port, token="s3cret")[0] == 200
    finally:
        e.close()


def test_scraped_sources_that_fail_are_left_out(endpoint: MetricsEndpoint) -> None:
    from sediment import metrics

    def broken() -> int:
        raise OSError("gone")

    metrics.watch_queue("test_broken", broken)
    metrics.watch_queue("test_depth", lambda: 7)
    started = time.monotonic()
    status, text = fetch(endpoint.port)
    assert status == 200 and time.monotonic() - started < 10
    assert "test_depth" in text
    scraped = scrape(endpoint.port)
    assert value(scraped, "sediment_queue_depth", queue="test_depth") == 7
    assert ("sediment_queue_depth", frozenset({("queue", "test_broken")})) not in scraped


def test_a_lost_race_for_a_version_counts_one_conflict(endpoint: MetricsEndpoint,
                                                        tmp_path: Path) -> None:
    """Two writers of one table (two stores opened on it): the second commits while the
    first builds its transaction on the head it read, so the first loses that version once
    and lands on the next."""
    from sediment.core.transactions.table import SetProperties

    name = f"t{uuid.uuid4().hex[:8]}"
    first = sd.Store.open(str(tmp_path / "s"), create=True).create_table(name, SCHEMA)
    second = sd.Store.open(str(tmp_path / "s")).table(name)
    builds: list[int] = []

    def build(head: Any) -> SetProperties:
        builds.append(head.version)
        if len(builds) == 1:  # the other writer takes the version this one is about to try
            second.ingest(pa.table({"k": ["x"], "v": [1]}))
        return SetProperties({"compaction.batch_size": 5})

    before = scrape(endpoint.port)
    state = first._handle.states.commit(build)
    after = scrape(endpoint.port)
    assert builds == [1, 2] and state.version == 3
    assert value(after, "sediment_commit_conflicts_total", table=name) - \
        value(before, "sediment_commit_conflicts_total", table=name) == 1
    assert value(after, "sediment_commits_total", table=name, kind="set_properties") == 1


def test_a_commit_the_store_never_confirmed_counts_one_unknown_outcome(
        endpoint: MetricsEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sediment.core.transactions.table import SetProperties
    from sediment.errors import CommitOutcomeUnknownError, WriteOutcomeUnknownError

    name = f"t{uuid.uuid4().hex[:8]}"
    table = sd.Store.open(str(tmp_path / "s"), create=True).create_table(name, SCHEMA)
    states = table._handle.states

    def lost(*args: Any, **kwargs: Any) -> bool:
        raise WriteOutcomeUnknownError("the store's answer was lost (injected)")

    monkeypatch.setattr(states.log, "try_append", lost)
    before = scrape(endpoint.port)
    with pytest.raises(CommitOutcomeUnknownError):
        states.commit(SetProperties({"compaction.batch_size": 5}))
    after = scrape(endpoint.port)
    assert value(after, "sediment_commit_unknown_outcomes_total", table=name) - \
        value(before, "sediment_commit_unknown_outcomes_total", table=name) == 1
    assert value(after, "sediment_commits_total", table=name, kind="set_properties") == 0
