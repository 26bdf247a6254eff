"""``sediment dashboard --metrics-port``: the real dashboard's endpoint, scraped over HTTP,
follows a table as its pages read it (its most files per leaf, as the table's own file list
says, before and after an ingest), times its requests by endpoint, and answers only the
dashboard's host names (``--allowed-host`` included)."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pyarrow as pa
import pytest
from dashboard_helpers import fetch, free_port, start, stop

import sediment as sd
from support.scrape import Scrape, scrape, value, wait_for_scrape

SCHEMA = sd.Schema(row_keys=[("k", pa.string())], values=[("v", pa.int64())])


def test_the_dashboards_metrics_move_with_its_pages(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties={"state.cache.refresh_seconds": 0})
    for i in range(3):  # three files in the one leaf
        table.ingest(pa.table({"k": [f"k{i}"], "v": [i]}))
    port = free_port()
    proc, server = start(store.uri, tmp_path / "dashboard.log",
                         args=("--metrics-port", str(port), "--allowed-host", "dash.example"))
    # a request is timed once its answer is sent, so a scrape right after an answer may not
    # count it yet: each scrape waits for the count of the page just fetched
    timed = "sediment_request_seconds_count"

    def pages(s: Scrape) -> float:
        return value(s, timed, method="http:api_table")

    try:
        assert fetch(f"{server.url}/api/tables/t")[0] == 200
        before = wait_for_scrape(port, lambda s: pages(s) >= 1, what="the page's request")
        assert value(before, "sediment_files_per_leaf", table="t") == 3
        table.ingest(pa.table({"k": ["k9"], "v": [9]}))  # a fourth file in the leaf
        assert fetch(f"{server.url}/api/tables/t")[0] == 200
        after = wait_for_scrape(port, lambda s: pages(s) > pages(before),
                                what="the second page's request")
        assert value(after, "sediment_files_per_leaf", table="t") == len(table.files()) == 4
        assert pages(after) - pages(before) == 1
        assert scrape(port, host="dash.example")  # the dashboard's own --allowed-host
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape(port, host="rebound.example")
        assert refused.value.code == 421
    finally:
        stop(proc)
