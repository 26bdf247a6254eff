"""A real ``sediment serve`` over S3, reaching it through the fault proxy, given flipped bytes
in GET answers (issue 38): a flip once is read again and the client gets the right answer;
damage in every read is one clear error naming the table and the object, of the class the
server raised (CorruptDataError, CorruptMetadataError), and the server keeps serving."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pytest
from serve_helpers import SCHEMA, rows

from faultproxy import ProxiedS3
from sediment.errors import CorruptDataError, CorruptMetadataError

pytestmark = [pytest.mark.s3, pytest.mark.faults]

KEYS = [f"k{i:05d}" for i in range(1000)]
PROPS = {"parquet.compression": "none", "parquet.row_group_rows": 128,
         "state.cache.refresh_seconds": 0}


def _sorted(t: pa.Table) -> list[tuple[Any, ...]]:
    t = t.select(["key", "ts", "value", "note"])
    return sorted(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))


def test_flipped_reads_behind_a_server(proxied_s3: ProxiedS3, start_server: Any) -> None:
    s3, proxy = proxied_s3, proxied_s3.proxy
    store = s3.open()
    bad = store.create_table("bad", SCHEMA, properties=PROPS)
    bad.ingest(rows(KEYS))
    bad.tag("first")
    good = store.create_table("good", SCHEMA, properties=PROPS)
    good.ingest(rows(KEYS[:10]))
    (ref,) = bad.files()
    raw = s3.open_direct().table("bad")._handle.objects.get(ref.filename)
    at = raw.index(b"n503") + 3  # a note value's last digit: n503 would read n502
    want = _sorted(rows(KEYS))
    server = start_server(s3.uri, env=s3.env())
    path = re.escape(ref.filename) + "$"
    with server.connect() as client:
        rule = proxy.add_rule("corrupt", path=path, offset=at, count=1)
        assert _sorted(client.table("bad").query()) == want and rule.fired == 1
        proxy.clear()
        rule = proxy.add_rule("corrupt", path=path, offset=at)
        for _ in range(2):  # the same answer each time: the server did not fall over
            with pytest.raises(CorruptDataError) as err:
                client.table("bad").query()
            text = str(err.value)
            assert "table bad" in text and ref.filename in text, text
            assert client.table("good").query().num_rows == 10
            assert client.table("bad").query(keys=["k00999"]).column("value").to_pylist() \
                == [999]  # another row group of the same file
        with pytest.raises(CorruptDataError):  # streamed: the error, never a short answer
            client.table("bad").scan().read_all()
        assert rule.fired >= 4
        proxy.clear()
        tag = proxy.add_rule("corrupt", path=r"/tags/first\.json$", offset=-25)
        with pytest.raises(CorruptMetadataError, match="tags/first.json"):
            client.table("bad").query(version="first")
        assert tag.fired >= 2
        proxy.clear()
        assert _sorted(client.table("bad").query(version="first")) == want
    assert server.proc.poll() is None
