"""A real ``sediment dashboard`` over S3, reaching it through the fault proxy, given flipped
bytes in GET answers (issue 38), checked by HTTP: a flip once is read again and the query
page shows the right rows; damage in every read is one clear error naming the table and the
file (the error page, JSON under /api, status 500), and the dashboard keeps serving."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pyarrow as pa
import pytest
from dashboard_helpers import fetch, get_json, start, stop

import sediment as sd
from faultproxy import ProxiedS3

pytestmark = [pytest.mark.s3, pytest.mark.faults]

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string())])
PROPS = {"parquet.compression": "none", "parquet.row_group_rows": 128,
         "state.cache.refresh_seconds": 0,
         # every read goes to the (damaged) bytes: a page the block cache kept from the
         # first, clean read would answer without them (and so would the disk cache's
         # verified copy of its bytes)
         "query.block_cache_bytes": 0, "query.disk_cache_bytes": 0}


def _rows(n: int) -> pa.Table:
    return pa.table({"key": [f"k{i:05d}" for i in range(n)], "ts": list(range(n)),
                     "value": [f"v-{i:06d}" for i in range(n)]}, schema=SCHEMA.to_arrow())


def test_flipped_reads_behind_the_dashboard(proxied_s3: ProxiedS3, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    s3, proxy = proxied_s3, proxied_s3.proxy
    store = s3.open()
    bad = store.create_table("bad", SCHEMA, properties=PROPS)
    bad.ingest(_rows(1000))
    store.create_table("good", SCHEMA, properties=PROPS).ingest(_rows(10))
    (ref,) = bad.files()
    raw = s3.open_direct().table("bad")._handle.objects.get(ref.filename)
    at = raw.index(b"v-000300") + 7
    for k, v in s3.env().items():  # the dashboard process reaches S3 through the proxy
        monkeypatch.setenv(k, v)
    proc, server = start(s3.uri, tmp_path / "dashboard.log")
    try:
        query = "/tables/bad/query?" + urllib.parse.urlencode({"keys": "k00300\nk00301"})
        path = re.escape(ref.filename) + "$"
        rule = proxy.add_rule("corrupt", path=path, offset=at, count=1)
        data = get_json(server, "/api" + query)
        assert data["rows"] == [["k00300", 300, "v-000300"], ["k00301", 301, "v-000301"]]
        assert rule.fired == 1
        proxy.clear()
        rule = proxy.add_rule("corrupt", path=path, offset=at)
        for _ in range(2):  # the same answer each time: the dashboard did not fall over
            status, headers, body = fetch(server.url + query)
            text = body.decode()
            assert status == 500 and headers["content-type"].startswith("text/html"), text
            assert "CorruptDataError" in text and "table bad" in text, text
            assert ref.filename in text and "v-000301" not in text
            error = get_json(server, "/api" + query, 500)["error"]
            assert error.startswith("CorruptDataError") and ref.filename in error
            good = get_json(server, "/api/tables/good/query?limit=1000")
            assert len(good["rows"]) == 10
        assert rule.fired >= 4
        assert fetch(server.url + "/api/health")[0] == 200
    finally:
        stop(proc)
