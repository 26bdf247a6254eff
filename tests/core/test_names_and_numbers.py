"""Names and numbers: bounds and refusals.

Field names are the user's: any name the schema accepts (quotes, spaces, dots, backslashes,
non-ASCII) works end to end, through DataFusion's merge and sort included, and the names of
Sediment's own columns are refused when the schema is made. Numbers in properties, iterator
configurations included, are checked when they are set: a value that would make every later
query or compaction fail is refused then, naming the table, the property and the field.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sediment as sd
from sediment.errors import PropertyError, SchemaError
from sediment.files.sort import sort_table
from sediment.iterators import AgeOff

# (row key, sort key, value, value): double quotes in every role; then spaces, dots, single
# quotes, backslashes; then non-ASCII and names that look empty
ODD_NAMES = [
    ('k"ey', 's"o"rt', '"', 'v"al'),
    ("row key.x", "it's", "back\\slash", " "),
    ("ключ \"x\"", "ü.ñ", "☃", "\u200b"),
]


def _frame(rk: str, sk: str, v1: str, v2: str, seed: int, n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({rk: [f"k{x:04d}" for x in rng.integers(0, 1000, n)],
                         sk: rng.integers(0, 10**6, n),
                         v1: [f"s{seed}-{i}" for i in range(n)],
                         v2: rng.integers(-5, 5, n)})


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in a canonical order (all columns), index reset: compares row multisets."""
    return df.sort_values(list(df.columns), kind="stable").reset_index(drop=True)


def _check(got: pa.Table, ref: pd.DataFrame) -> None:
    assert got.column_names == list(ref.columns)
    pd.testing.assert_frame_equal(_sorted(got.to_pandas()), _sorted(ref), check_dtype=False)


@pytest.mark.parametrize("names", ODD_NAMES, ids=["double-quotes", "punctuation", "unicode"])
def test_odd_field_names_work_end_to_end(tmp_path: Path, names: tuple[str, str, str, str]
                                         ) -> None:
    rk, sk, v1, v2 = names
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    schema = sd.Schema(row_keys=[(rk, pa.string())], sort_keys=[(sk, pa.int64())],
                       values=[(v1, pa.string()), (v2, pa.int64())])
    # max_merge_inputs 2 with 3 inputs: a merge round through a local file, then the last
    table = store.create_table("t", schema, properties={
        "compaction.strategy": "basic", "compaction.batch_size": 3,
        "compaction.max_merge_inputs": 2, "partition.split.threshold": 500})
    frames = [_frame(rk, sk, v1, v2, seed) for seed in range(3)]
    for f in frames:
        table.ingest(pa.Table.from_pandas(f, preserve_index=False))
    ref = pd.concat(frames, ignore_index=True)
    assert len(table.files()) == 3

    assert table.split().splits == 1
    result = table.compact()
    assert result.jobs_failed == 0 and result.errors == ()
    assert result.jobs_committed == 2 and result.rows_out == len(ref)
    leaves = [p for p in table.partitions() if p.is_leaf]
    assert len(leaves) == 2 and len(table.files()) == 2  # one merged file per leaf

    got = table.query()
    _check(got, ref)
    keys = got.column(rk).to_pylist()
    assert keys == sorted(keys)  # sorted by the odd-named key
    _check(table.query(ranges=[sd.Range("k0100", "k0600")]),
           ref[(ref[rk] >= "k0100") & (ref[rk] < "k0600")])
    some = sorted(set(ref[rk]))[::50]
    _check(table.query(keys=some), ref[ref[rk].isin(some)])
    _check(table.query(filter=pc.field(v2) > 0), ref[ref[v2] > 0])
    _check(table.query(columns=[v1, sk]), ref[[v1, sk]])
    con = duckdb.connect()
    table.to_duckdb(con, "t")
    quoted = '"' + v2.replace('"', '""') + '"'
    got_sum = con.sql(f"SELECT sum({quoted}) FROM t").fetchall()[0][0]
    assert got_sum == ref[v2].sum()
    # an iterator naming the odd fields runs in queries and in compaction
    table.set_properties({"compaction.iterators": json.dumps(
        [{"type": "aggregate", "functions": {v2: "sum", v1: "last"}}])})
    table.compact(full=True)
    agg = ref.assign(_i=range(len(ref))).sort_values([rk, sk, "_i"], kind="stable") \
        .groupby([rk, sk], sort=True).agg({v1: "last", v2: "sum"}).reset_index()
    _check(table.query(), agg[[rk, sk, v1, v2]])


@pytest.mark.parametrize("kind", ["string-prefixes", "int-keys", "string-ties"])
def test_sort_table_with_odd_names_on_every_path(kind: str) -> None:
    """sort_table's three paths (pyarrow below 64k rows is covered above): the normalised-key
    sort (distinct string prefixes), DataFusion (integer keys; strings whose prefixes tie)."""
    rng = np.random.default_rng(3)
    n = 70_000
    first = 'a"b'
    if kind == "string-prefixes":
        keys: Any = [f"{x:08d}" for x in rng.permutation(n)]
    elif kind == "int-keys":
        keys = rng.integers(0, 1000, n)
    else:
        keys = [f"same-prefix-{x:04d}" for x in rng.integers(0, 1000, n)]
    table = pa.table({first: keys, "__run": rng.integers(0, 50, n),
                      "x.y'z": np.arange(n)})
    got = sort_table(table, [first, "__run"])
    ref = table.to_pandas().sort_values([first, "__run"], kind="stable")
    assert got.schema == table.schema
    assert got.column("x.y'z").to_pylist() == ref["x.y'z"].tolist()  # stable, exact order


@pytest.mark.parametrize("role,name", [
    ("row_keys", "__sediment_seq"), ("values", "__sediment_seq"),
    ("sort_keys", "__sediment_run"), ("values", "__sediment_group"),
    ("row_keys", "__sediment_leaf"), ("values", "__sediment_anything"),
    ("row_keys", "__count"), ("row_keys", "__idx"),
    ("values", "a\0b"),  # not reserved, but Parquet readers cut the name at the NUL
])
def test_reserved_names_are_refused_at_schema_creation(tmp_path: Path, role: str,
                                                       name: str) -> None:
    fields: dict[str, list[Any]] = {"row_keys": [("k", pa.string())], "sort_keys": [],
                                    "values": []}
    if role == "row_keys":
        fields["row_keys"] = [(name, pa.string())]
    else:
        fields[role].append((name, pa.int64()))
    with pytest.raises(SchemaError, match=re.escape(repr(name))):
        sd.Schema(**fields)
    arrow = pa.schema([pa.field(n, t) for n, t in
                       [*fields["row_keys"], *fields["sort_keys"], *fields["values"]]])
    with pytest.raises(SchemaError, match=re.escape(repr(name))):
        sd.Schema.from_arrow(arrow, [f[0] for f in fields["row_keys"]],
                             [f[0] for f in fields["sort_keys"]])
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    with pytest.raises(SchemaError, match=re.escape(repr(name))):
        store.create_table("t", sd.Schema.from_json(
            {role: [{"name": n, "type": str(t)} for n, t in fields[role]]
             for role in ("row_keys", "sort_keys", "values")}))
    assert store.tables() == []


def test_internal_names_outside_the_row_key_stay_usable(tmp_path: Path) -> None:
    """``__count``/``__idx`` are reserved only where they collide (beside the row keys in key
    samples); the sort's old working column name ``__run`` is an ordinary name now."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    schema = sd.Schema([("__run", pa.string())], [("__count", pa.int64())],
                       [("__idx", pa.int64())])
    table = store.create_table("t", schema, properties={"partition.split.threshold": 100})
    rng = np.random.default_rng(1)
    data = pa.table({"__run": [f"k{x:03d}" for x in rng.integers(0, 500, 400)],
                     "__count": rng.integers(0, 9, 400), "__idx": np.arange(400)})
    table.ingest(data)
    table.ingest(data)
    assert table.split().splits == 1
    assert table.compact().jobs_failed == 0
    ref = pd.concat([data.to_pandas()] * 2, ignore_index=True)
    _check(table.query(), ref)


TTL_BAD = [
    ({"ttl_seconds": 1e308}, "out of range; give 0 to 9223372036854775 seconds (unit 'ms')"),
    ({"ttl_seconds": -1e20}, "out of range; give 0 to 9223372036854775 seconds (unit 'ms')"),
    ({"ttl_seconds": -1}, "out of range; give 0 to 9223372036854775 seconds (unit 'ms')"),
    ({"ttl_seconds": 1e17, "unit": "ns"}, "out of range; give 0 to 9223372036 seconds "
                                          "(unit 'ns')"),
    ({"ttl_seconds": 1e16, "unit": "us"}, "out of range; give 0 to 9223372036854 seconds "
                                          "(unit 'us')"),
]


def _age_off(field: str, **cfg: Any) -> str:
    return json.dumps([{"type": "age_off", "field": field, **cfg}])


BAD_SETTINGS: list[tuple[str, Any, str]] = [
    *[(p, _age_off("ts", **cfg), f"age_off iterator field 'ttl_seconds': {cfg['ttl_seconds']!r}"
       f" is {message}") for p in ("query.iterators", "compaction.iterators")
      for cfg, message in TTL_BAD],
    ("query.iterators", '[{"type": "age_off", "field": "ts", "ttl_seconds": NaN}]',
     "age_off iterator field 'ttl_seconds': nan is not a finite number"),
    ("compaction.iterators", '[{"type": "age_off", "field": "ts", "ttl_seconds": Infinity}]',
     "age_off iterator field 'ttl_seconds': inf is not a finite number"),
    ("query.iterators", '[{"type": "age_off", "field": "ts", "ttl_seconds": 1e999}]',
     "age_off iterator field 'ttl_seconds': inf is not a finite number"),
    ("query.iterators", '[{"type": "filter", "field": "n", "op": "in", "value": [1, NaN]}]',
     "filter iterator field 'value': nan is not a finite number"),
    ("compaction.iterators", '[{"type": "filter", "field": "n", "op": ">", "value": -1e400}]',
     "filter iterator field 'value': -inf is not a finite number"),
    ("gc.delay_seconds", float("inf"), "inf is not a valid float"),
    ("gc.delay_seconds", "-inf", "'-inf' is not a valid float"),
    ("retention.seconds", 1e300, "1e+300 is above 3153600000.0"),
    ("compaction.ratio", float("nan"), "nan is not a valid float"),
    ("compaction.ratio", "Infinity", "'Infinity' is not a valid float"),
    ("compaction.batch_size", 10**30, "is out of range (-9223372036854775808 to "
                                      "9223372036854775807)"),
]


@pytest.mark.parametrize("prop,value,message", BAD_SETTINGS)
def test_bad_numbers_are_refused_when_set(tmp_path: Path, prop: str, value: Any,
                                          message: str) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    schema = sd.Schema([("key", pa.string())], [("ts", pa.int64())], [("n", pa.int64())])
    with pytest.raises(PropertyError) as caught:
        store.create_table("fresh", schema, properties={prop: value})
    text = str(caught.value)
    assert "table fresh" in text and prop in text and message in text, text
    assert store.tables() == []  # nothing created

    table = store.create_table("t", schema)
    table.ingest(pa.table({"key": ["a", "b"], "ts": [int(time.time() * 1000), 0],
                           "n": [1, 2]}))
    version = table.version
    with pytest.raises(PropertyError) as caught:
        table.set_properties({prop: value})
    text = str(caught.value)
    assert "table t" in text and prop in text and message in text, text
    assert table.version == version
    assert table.query().num_rows == 2  # queries go on as before


def test_an_age_off_built_in_code_checks_its_numbers() -> None:
    for ttl in (math.inf, math.nan, -5.0, 1e308):
        with pytest.raises(PropertyError, match="ttl_seconds"):
            AgeOff("ts", ttl)
    with pytest.raises(PropertyError, match="unit 'weeks'"):
        AgeOff("ts", 5, "weeks")


def test_a_valid_ttl_still_works(tmp_path: Path) -> None:
    """Age-off in ms, at the largest ttl its unit takes, on a timestamp[ns] field (its own
    unit) and on an int32 field in ms (whose now is past int32: every value is older)."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    schema = sd.Schema([('k"', pa.string())], [("t s", pa.int64())],
                       [("at", pa.timestamp("ns")), ("small", pa.int32())])
    table = store.create_table("t", schema, properties={"compaction.strategy": "basic",
                                                        "compaction.batch_size": 2})
    now_ms = int(time.time() * 1000)
    hour = 3_600_000
    ages = np.array([0, 1, 3, 5, 10, 60, 2 * 10**6]) * hour // 2  # none on a boundary
    frame = pd.DataFrame({'k"': [f"k{i}" for i in range(len(ages))], "t s": now_ms - ages,
                          "at": pd.to_datetime((now_ms - ages) * 1_000_000, unit="ns"),
                          "small": np.arange(len(ages), dtype=np.int32)})
    data = pa.Table.from_pandas(frame, preserve_index=False).cast(schema.to_arrow())
    table.ingest(data.slice(0, 4))
    table.ingest(data.slice(4))
    ref = data.to_pandas()

    table.set_properties({"query.iterators": _age_off("t s", ttl_seconds=3600)})
    _check(table.query(), ref[ref["t s"] >= now_ms - hour])
    table.set_properties({"query.iterators": _age_off("at", ttl_seconds=7200)})
    _check(table.query(), ref[ref["t s"] >= now_ms - 2 * hour])
    table.set_properties({"query.iterators": _age_off("t s", ttl_seconds=9223372036854775)})
    _check(table.query(), ref)  # the largest ttl in ms: nothing is that old
    table.set_properties({"query.iterators": _age_off("at", ttl_seconds=9223372036,
                                                      unit="ns")})
    _check(table.query(), ref)  # the largest in ns, on a ns field: ~292 years back
    table.set_properties({"query.iterators": _age_off("small", ttl_seconds=60)})
    assert table.query().num_rows == 0  # an int32 in ms is at most 25 days after 1970
    table.set_properties({"query.iterators": _age_off("small", ttl_seconds=60, unit="s")})
    assert table.query().num_rows == 0
    table.set_properties({"query.iterators": ""})
    # in compaction too
    table.set_properties({"compaction.iterators": _age_off("t s", ttl_seconds=3600)})
    result = table.compact(full=True)
    assert result.jobs_failed == 0 and result.rows_out == int((ref["t s"] >= now_ms - hour)
                                                              .sum())
    _check(table.query(), ref[ref["t s"] >= now_ms - hour])


@pytest.mark.parametrize("cfg,message", [
    ({"type": "filter", "field": "n", "op": "==", "value": 1e308},
     "filter on 'n': 1e+308 is not a valid int64"),
    ({"type": "filter", "field": "n", "op": "in", "value": [1, 2**70]},
     "is not a valid int64"),
    ({"type": "age_off", "field": "key", "ttl_seconds": 5},
     "age_off field 'key' has type string"),
    ({"type": "filter", "field": "nope", "op": "==", "value": 1}, "unknown field 'nope'"),
])
def test_iterator_settings_are_checked_against_the_schema_when_given(
        cfg: dict[str, Any], message: str) -> None:
    """``validate_properties(..., schema=)``: what only the table's schema can tell (a filter
    value its field cannot hold) is refused with the setting, as every query would refuse it."""
    from sediment.properties import validate_properties

    schema = sd.Schema([("key", pa.string())], [("ts", pa.int64())], [("n", pa.int64())])
    text = json.dumps([cfg])
    with pytest.raises(PropertyError) as caught:
        validate_properties({"query.iterators": text}, context="table t", schema=schema)
    assert "property query.iterators of table t" in str(caught.value)
    assert message in str(caught.value), str(caught.value)
    validate_properties({"query.iterators": text}, context="table t")  # no schema: no field


def test_a_stored_value_refused_today_still_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A value committed by an older Sediment that today's checks refuse is kept and logged
    when the log is replayed: the table opens and reads, and setting a valid value mends it.
    Nothing committed is refused after the fact."""
    from sediment.core.transactions.table import SetProperties

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("events", sd.Schema(row_keys=[("k", pa.string())]))
    table.ingest(pa.table({"k": ["a", "b"]}))
    with monkeypatch.context() as m:  # as an older Sediment committed it
        m.setattr(SetProperties, "validate", lambda self, state: None)
        table._handle.states.commit(SetProperties({"gc.delay_seconds": float("inf")}))
    reopened = sd.Store.open(str(tmp_path / "s")).table("events")
    assert reopened.query().num_rows == 2
    assert reopened.properties["gc.delay_seconds"] == float("inf")
    assert any("gc.delay_seconds" in r.getMessage() and "stored value" in r.getMessage()
               for r in caplog.records)
    with pytest.raises(PropertyError, match="gc.delay_seconds"):
        reopened.set_properties({"gc.delay_seconds": float("inf")})  # never newly
    reopened.set_properties({"gc.delay_seconds": 60})
    assert sd.Store.open(str(tmp_path / "s")).table("events").properties[
        "gc.delay_seconds"] == 60
