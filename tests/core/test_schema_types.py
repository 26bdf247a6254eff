"""Types users bring: Schema.from_arrow, temporal keys of every unit and time
zone, and pandas datetime64 refused where an integer field is meant."""

from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sediment as sd
from sediment.errors import DataError, SchemaError
from sediment.types import parse_type, storage_type

KEY_TYPES = [pa.timestamp("s"), pa.timestamp("s", tz="UTC"), pa.timestamp("ms", tz="Asia/Tokyo"),
             pa.timestamp("us", tz="UTC"), pa.timestamp("ns", tz="America/New_York"),
             pa.date64(), pa.date32()]
SECOND = 1  # every generated instant is a whole number of days for dates, of seconds otherwise


def test_from_arrow() -> None:
    arrow = pa.schema([("value", pa.float64()), ("k", pa.string()), ("ts", pa.int64()),
                       ("tags", pa.list_(pa.string()))])
    s = sd.Schema.from_arrow(arrow, row_keys=["k"], sort_keys=["ts"])
    assert s.row_key_names == ["k"] and s.sort_key_names == ["ts"]
    assert s.value_names == ["value", "tags"]
    assert not s.row_keys[0].nullable and not s.sort_keys[0].nullable  # pandas: all nullable
    assert s.values[0].nullable
    assert sd.Schema.from_arrow(arrow, row_keys=["k"]).sort_key_names == []
    with pytest.raises(SchemaError, match="row key field 'nope' is not in the Arrow schema"):
        sd.Schema.from_arrow(arrow, row_keys=["nope"])
    with pytest.raises(SchemaError, match="sort key field 'when'"):
        sd.Schema.from_arrow(arrow, row_keys=["k"], sort_keys=["when"])
    with pytest.raises(SchemaError, match="'value' has unsupported type double"):
        sd.Schema.from_arrow(arrow, row_keys=["value"])
    with pytest.raises(SchemaError, match="'k' is named more than once"):
        sd.Schema.from_arrow(arrow, row_keys=["k"], sort_keys=["k"])
    with pytest.raises(SchemaError, match="lists of field names"):
        sd.Schema.from_arrow(arrow, row_keys="k")  # type: ignore[arg-type]
    frame = pd.DataFrame({"k": ["a"], "ts": pd.to_datetime(["2024-01-01"], utc=True), "v": [1]})
    s = sd.Schema.from_arrow(pa.Schema.from_pandas(frame, preserve_index=False),
                             row_keys=["k"], sort_keys=["ts"])
    assert s.sort_keys[0].type == pa.timestamp("ns", tz="UTC")


@pytest.mark.parametrize("typ", KEY_TYPES, ids=str)
def test_temporal_key_types_accepted(typ: pa.DataType) -> None:
    s = sd.Schema(row_keys=[("k", typ)], sort_keys=[("t", typ)])
    assert s.row_keys[0].type == storage_type(typ)
    assert sd.Schema.from_json(s.to_json()) == s
    assert parse_type(str(s.row_keys[0].type)) == s.row_keys[0].type
    if pa.types.is_timestamp(typ) and typ.tz:
        assert s.row_keys[0].type.tz == typ.tz  # the time zone is kept


def _instants(typ: pa.DataType) -> st.SearchStrategy[int]:
    """Seconds since the epoch (whole days for dates), before and after 1970."""
    if pa.types.is_date(typ):
        return st.integers(-40_000, 40_000).map(lambda d: d * 86400)
    return st.integers(-2_000_000_000, 4_000_000_000)


def _column(seconds: list[int], typ: pa.DataType) -> pa.Array:
    if pa.types.is_date(typ):
        return pa.array([s // 86400 for s in seconds], pa.date32()).cast(typ)
    return pa.array(seconds, pa.int64()).cast(pa.timestamp("s", tz=typ.tz)).cast(typ)


@pytest.mark.parametrize("typ", KEY_TYPES, ids=str)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_temporal_keys_sort_and_round_trip(typ: pa.DataType, data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.tuples(_instants(typ), _instants(typ)), min_size=1,
                              max_size=60))
    split = data.draw(_instants(typ))
    ks, ts = [r[0] for r in rows], [r[1] for r in rows]
    batch = pa.table({"k": _column(ks, typ), "t": _column(ts, typ),
                      "v": pa.array(range(len(rows)), pa.int64())})
    with tempfile.TemporaryDirectory() as tmp:
        store = sd.Store.open(str(Path(tmp) / "s"), create=True)
        schema = sd.Schema.from_arrow(batch.schema, row_keys=["k"], sort_keys=["t"])
        split_key = _column([split], typ).to_pylist()[0]
        table = store.create_table("t", schema, split_points=[split_key])
        table.ingest(batch)
        got = table.query()
        # pandas' order of the same instants (stable: equal keys keep ingest order)
        frame = batch.to_pandas().sort_values(["k", "t"], kind="stable")
        expect = pa.Table.from_pandas(frame, preserve_index=False)
        assert got.column("v").to_pylist() == expect.column("v").to_pylist()
        stored = schema.to_arrow()
        for name in ("k", "t"):  # values round-trip (as the stored type: see storage_type)
            want = expect.column(name).cast(stored.field(name).type)
            assert got.column(name).to_pylist() == want.to_pylist()
        assert got.schema.field("k").type == stored.field("k").type
        # exact keys given as Python values find their rows, in every leaf
        probe = _column(ks[:3], typ).to_pylist()
        hits = table.query(keys=probe)
        assert sorted(hits.column("v").to_pylist()) == \
            sorted(i for i, k in enumerate(ks) if k in ks[:3])
        table.compact()
        assert table.query().column("v").to_pylist() == got.column("v").to_pylist()


def test_date64_not_a_whole_day_refused(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", sd.Schema(row_keys=[("d", pa.date64())]))
    table.ingest(pa.table({"d": pa.array([86_400_000], pa.date64())}))
    with pytest.raises(DataError, match="'d'"):
        table.ingest(pa.table({"d": pa.array([86_400_001], pa.date64())}))


def test_pandas_datetime64_into_int64_refused(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", sd.Schema(row_keys=[("k", pa.string())],
                                              sort_keys=[("ts", pa.int64())],
                                              values=[("seen", pa.int64())]))
    ms = int(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    table.ingest(pa.table({"k": ["a"], "ts": [ms], "seen": [ms]}))
    frame = pd.DataFrame({"k": ["b"], "ts": [ms],
                          "seen": pd.to_datetime(["2024-01-02"])})  # datetime64[ns]
    with pytest.raises(DataError, match=r"field 'seen'.*timestamp\[ns\].*nanoseconds.*int64"):
        table.ingest(frame)
    frame = pd.DataFrame({"k": ["b"], "ts": pd.to_datetime(["2024-01-02"], utc=True),
                          "seen": [ms]})
    with pytest.raises(DataError, match=r"field 'ts'.*nanoseconds"):
        table.ingest(frame)
    assert table.query().num_rows == 1  # nothing stored in the wrong unit
    # converted to the table's unit, it goes in
    frame["ts"] = frame["ts"].astype("int64") // 10**6
    table.ingest(frame)
    assert sorted(table.query().column("ts").to_pylist()) == [ms, ms + 86_400_000]
