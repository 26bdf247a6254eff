"""Two ``sediment serve`` processes over one store on (moto) S3: consistent answers, and each
sees the other's commits within ``state.cache.refresh_seconds``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from serve_helpers import SCHEMA, rows

import sediment as sd

REFRESH = 1.0  # state.cache.refresh_seconds of the table


@pytest.mark.slow
@pytest.mark.s3
def test_two_servers_over_one_s3_store(s3_store_uri: tuple[str, dict[str, Any]],
                                       s3_server: str, start_server: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    uri, _options = s3_store_uri
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)  # here and in the servers
    store = sd.Store.open(uri, create=True)
    store.create_table("events", SCHEMA, split_points=["m"],
                       properties={"state.cache.refresh_seconds": REFRESH})
    one, two = start_server(uri).connect(), start_server(uri).connect()
    a, b = one.table("events"), two.table("events")
    first = a.ingest(rows(["b", "x"]))
    seen_at = None
    start = time.monotonic()
    while time.monotonic() - start < REFRESH + 5:
        if b.query().num_rows == 2:
            seen_at = time.monotonic() - start
            break
        time.sleep(0.05)
    assert seen_at is not None and seen_at <= REFRESH + 1.0
    second = b.ingest(rows(["c", "y", "z"], 10))
    assert second.version == first.version + 1
    start = time.monotonic()
    while a.query().num_rows != 5:
        assert time.monotonic() - start < REFRESH + 1.0
        time.sleep(0.05)
    expected = sd.Store.open(uri).table("events").query()
    assert a.query().equals(expected) and b.query().equals(expected)
    assert a.query(version=first.version).equals(b.query(version=first.version))
    assert one.tables() == two.tables() == ["events"]
