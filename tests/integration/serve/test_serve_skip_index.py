"""Skip indexes over Flight: a filter on a column with bloom filters (``parquet.bloom_columns``)
sent to a real ``sediment serve`` process answers as the same filter on a table without them,
on a plain table and on a ``merge="last"`` table whose replaced records must not show."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd

KEYS = [f"k{i:05d}" for i in range(2_000)]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> sd.Store:
    s = sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)
    for merge in ("none", "last"):
        for index in (True, False):
            props: dict[str, Any] = {"merge": merge, "parquet.row_group_rows": 128}
            if index:
                props["parquet.bloom_columns"] = "value,note"
            t = s.create_table(f"{merge}_{index}", SCHEMA, split_points=["k01000"],
                               properties=props)
            t.ingest(rows(KEYS))
            # k00007's record replaced: value 7 is stale on the merge table
            t.ingest(pa.table({"key": ["k00007"], "ts": [7], "value": [70_000],
                               "note": ["n7"]}, schema=SCHEMA.to_arrow()))
    return s


@pytest.mark.parametrize("merge", ["none", "last"])
def test_filters_answer_the_same_with_and_without_the_index(server: Server,
                                                             merge: str) -> None:
    filters = [pc.field("value") == 7, pc.field("value").isin([7, 1500, 70_000]),
               "note = 'n1234'", (pc.field("note") == "n7") & (pc.field("value") > 100)]
    with server.connect() as remote:
        for f in filters:
            a = remote.table(f"{merge}_True").query(filter=f)
            b = remote.table(f"{merge}_False").query(filter=f)
            assert a.equals(b), f
        stale = remote.table(f"{merge}_True").query(filter=pc.field("value") == 7)
    assert stale.num_rows == (1 if merge == "none" else 0)
