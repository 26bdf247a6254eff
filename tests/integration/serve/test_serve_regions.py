"""Per-field regions through ``sediment serve``: a region travels as its fields' ranges and
the server answers as the local API does (bad regions as the same QueryError)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from sediment.errors import QueryError
from sediment.serve.protocol import decode_value, encode_value

SCHEMA = sd.Schema(row_keys=[("src", pa.string()), ("dst", pa.int64())],
                   values=[("w", pa.int64())])


def test_a_region_round_trips_through_the_protocol() -> None:
    region = sd.Region({"src": sd.Range("c", "p", min_inclusive=False),
                        "dst": sd.Range(5, None)})
    back = decode_value(encode_value(region, "ranges"), "ranges")
    assert back == region and back.given == region.given


@pytest.mark.parametrize("partitioning", ["lexicographic", "dimensions"])
def test_remote_regions_equal_local(tmp_path: Any, start_server: Any,
                                    partitioning: str) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("edges", SCHEMA, split_points=["g"],
                           properties={"partitioning": partitioning,
                                       "state.cache.refresh_seconds": 0.0})
    n = 500
    t.ingest(pa.table({"src": [chr(ord("a") + i % 12) for i in range(n)],
                       "dst": [(i * 13) % 97 for i in range(n)], "w": list(range(n))},
                      schema=SCHEMA.to_arrow()))
    remote = start_server(store.uri).connect().table("edges")
    region = sd.Region({"src": sd.Range("c", "p", min_inclusive=False),
                        "dst": sd.Range(10, 20, max_inclusive=True)})
    want = t.query(ranges=[region])
    assert want.num_rows > 0
    assert remote.query(ranges=[region]).equals(want)
    assert remote.query(ranges=region).equals(want)
    with pytest.raises(QueryError, match="'nope'"):
        remote.query(ranges=[sd.Region({"nope": sd.Range(1, 2)})])
