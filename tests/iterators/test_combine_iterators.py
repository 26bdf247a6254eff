"""Aggregation and keep-latest iterators against pandas and pure-Python references.

Every combining test feeds the same sorted data in random batch splits (sizes down to 1, with
empty batches mixed in) and expects identical output, because equal keys straddle batches.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sediment as sd
from sediment.errors import PropertyError
from sediment.files.sequence import without_sequence
from sediment.iterators import Aggregate, KeepLatest, iterator_from_config
from sediment.iterators.registry import build_registered, register_iterator

SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

MAP_S64 = pa.map_(pa.string(), pa.int64())
MAP_S32 = pa.map_(pa.string(), pa.int32())
MAP_IF = pa.map_(pa.int64(), pa.float64())

# one string row key and an int sort key; two row keys and a timestamp sort key
SCHEMAS = {
    "str-int": sd.Schema(
        row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
        values=[("count", pa.int64()), ("min_v", pa.float64()), ("max_v", pa.string()),
                ("value", pa.string()), ("tags", MAP_S64), ("extra", pa.int32())]),
    "two-keys": sd.Schema(
        row_keys=[("region", pa.int32()), ("key", pa.string())],
        sort_keys=[("ts", pa.timestamp("us"))],
        values=[("count", pa.int64()), ("min_v", pa.float64()), ("max_v", pa.string()),
                ("value", pa.string()), ("tags", MAP_S64), ("extra", pa.int32())]),
}
AGG = {"count": "sum", "min_v": "min", "max_v": "max", "value": "last", "tags": "map_sum"}
MAP_SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("m_sum", MAP_S64), ("m_min", MAP_S32), ("m_max", MAP_IF)])
MAP_AGG = {"m_sum": "map_sum", "m_min": "map_min", "m_max": "map_max"}


# ---- data ----------------------------------------------------------------------------------------
def _maybe(rng: random.Random, v: Any, p: float = 0.2) -> Any:
    return None if rng.random() < p else v


def _random_map(rng: random.Random, keys: Sequence[Any], value: Any) -> Any:
    if rng.random() < 0.2:
        return None
    chosen = rng.sample(list(keys), rng.randint(0, min(3, len(keys))))
    return [(k, _maybe(rng, value(), 0.1)) for k in chosen]


def _value(rng: random.Random, f: pa.Field) -> Any:
    t = f.type
    if pa.types.is_map(t):
        if pa.types.is_string(t.key_type):
            keys: list[Any] = ["a", "b", "c", "dd", "é"]
        else:
            keys = [-3, 0, 7, 2**40]
        if pa.types.is_floating(t.item_type):
            return _random_map(rng, keys, lambda: rng.randint(-40, 40) / 4)
        return _random_map(rng, keys, lambda: rng.randint(-1000, 1000))
    if pa.types.is_floating(t):
        return _maybe(rng, rng.randint(-400, 400) / 4)
    if pa.types.is_integer(t):
        return _maybe(rng, rng.randint(-1000, 1000))
    return _maybe(rng, rng.choice(["", "a", "b", "ab", "zz", "m", "q"]) + str(rng.randint(0, 9)))


def _key_pool(f: pa.Field, n: int) -> list[Any]:
    if pa.types.is_string(f.type):
        return ["", "a", "b", "é", "ab", "zz", "😀", "a\x00", "m", "B"][:n]
    if pa.types.is_timestamp(f.type):
        return [0, 1, 1_000_000, -5, 2**40][:n]
    return [-(2**31), -1, 0, 1, 2**31 - 1][:n]


def random_sorted(schema: sd.Schema, seed: int, n: int, n_keys: int = 4) -> pa.Table:
    """``n`` rows drawn from a few key values each (many duplicates), sorted stably by key."""
    rng = random.Random(seed)
    pools = {f.name: _key_pool(f, n_keys) for f in (*schema.row_keys, *schema.sort_keys)}
    cols: dict[str, list[Any]] = {f: [] for f in schema.field_names}
    for _ in range(n):
        for f in schema.row_keys + schema.sort_keys:
            cols[f.name].append(rng.choice(pools[f.name]))
        for f in schema.values:
            cols[f.name].append(_value(rng, f))
    arrow = schema.to_arrow()
    table = pa.table({f.name: pa.array(cols[f.name], type=f.type) for f in arrow}, schema=arrow)
    return table.take(pc.sort_indices(table, sort_keys=[(k, "ascending")
                                                        for k in schema.key_names]))


def split(table: pa.Table, rng: random.Random, small: bool = True) -> Iterator[pa.RecordBatch]:
    """The table as batches of random sizes (many of size 1 when ``small``), some empty."""
    i = 0
    while i < table.num_rows:
        size = rng.choice([0, 1, 1, 2, 3, 5, 17]) if small else rng.randint(0, 64)
        if size == 0:
            yield pa.RecordBatch.from_pylist([], schema=table.schema)
        yield from table.slice(i, size).to_batches()
        i += size


def run(it: Any, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    out = list(it.apply(batches))
    for b in out:
        assert b.schema.equals(schema), (b.schema, schema)
        assert b.num_rows > 0
    return pa.Table.from_batches(out, schema=schema)


def order_key(row: dict[str, Any], names: Sequence[str]) -> tuple[Any, ...]:
    return tuple(row[n].encode() if isinstance(row[n], str) else row[n] for n in names)


def assert_sorted_unique(rows: list[dict[str, Any]], names: Sequence[str]) -> None:
    keys = [order_key(r, names) for r in rows]
    assert all(a < b for a, b in zip(keys, keys[1:], strict=False)), "not strictly sorted"


# ---- references ----------------------------------------------------------------------------------
def _none(v: Any) -> Any:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA else v


def pandas_aggregate(table: pa.Table, schema: sd.Schema, functions: dict[str, str]
                     ) -> list[dict[str, Any]]:
    """groupby(keys).sum/min/max and drop_duplicates(keep='last'); maps via python_map_agg."""
    keys = schema.key_names
    df = table.drop_columns([c for c in table.column_names
                             if pa.types.is_map(table.schema.field(c).type)]).to_pandas()
    for k in keys:  # group on exact key values (timestamps as ints)
        if pa.types.is_timestamp(table.schema.field(k).type):
            df[k] = table.column(k).cast(pa.int64()).to_numpy()
    for c in df.columns:  # nullable strings: pandas 2 cannot max() object columns with None
        if df[c].dtype == object and pa.types.is_string(table.schema.field(c).type):
            df[c] = df[c].astype("string")
    last = df.drop_duplicates(keys, keep="last").set_index(keys)
    g = df.groupby(keys, sort=False)
    ref = last.copy()
    for c, fn in functions.items():
        if c not in df.columns:
            continue
        if fn == "sum":
            ref[c] = g[c].sum(min_count=1)
        elif fn == "min":
            ref[c] = g[c].min()
        elif fn == "max":
            ref[c] = g[c].max()
    rows = []
    for idx, rec in ref.reset_index().iterrows():
        del idx
        row = {c: _none(rec[c]) for c in df.columns}
        rows.append(row)
    maps = {c: python_map_agg(table, schema, c, fn[4:])
            for c, fn in functions.items() if fn.startswith("map_")}
    for c, per_key in maps.items():
        for row in rows:
            row[c] = per_key[tuple(row[k] for k in keys)]
    for row in rows:  # back to the column types
        for f in schema.values:
            if row.get(f.name) is not None and pa.types.is_integer(f.type):
                row[f.name] = int(row[f.name])
        for k in keys:
            row[k] = row[k].item() if isinstance(row[k], np.generic) else row[k]
    rows.sort(key=lambda r: order_key(r, keys))
    return rows


def python_map_agg(table: pa.Table, schema: sd.Schema, column: str, fn: str
                   ) -> dict[tuple[Any, ...], Any]:
    """Key-by-key sum/min/max of each key group's maps, in plain Python."""
    op = {"sum": lambda a, b: a + b, "min": min, "max": max}[fn]
    keys = schema.key_names
    key_cols = [table.column(k).cast(pa.int64()) if pa.types.is_timestamp(table.column(k).type)
                else table.column(k) for k in keys]
    out: dict[tuple[Any, ...], Any] = {}
    for i, m in enumerate(table.column(column).to_pylist()):
        k = tuple(c[i].as_py() for c in key_cols)
        acc = out.setdefault(k, None)
        if m is None:
            continue
        acc = {} if acc is None else acc
        for mk, mv in m:
            if mv is None:
                acc.setdefault(mk, None)
            elif acc.get(mk) is None:
                acc[mk] = mv
            else:
                acc[mk] = op(acc[mk], mv)
        out[k] = acc
    return {k: None if v is None else sorted(v.items(), key=lambda kv: order_key(
        {"x": kv[0]}, ["x"])) for k, v in out.items()}


def as_comparable(table: pa.Table, schema: sd.Schema) -> list[dict[str, Any]]:
    """Rows as Python values, timestamps as ints (as the references hold them)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            table = table.set_column(i, f.name, table.column(i).cast(pa.int64()))
    return table.to_pylist()


# ---- aggregation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("schema_name", list(SCHEMAS))
@SETTINGS
@given(seed=st.integers(0, 2**32), n=st.integers(0, 300), n_keys=st.integers(1, 5))
def test_aggregate_matches_pandas_in_any_batch_split(schema_name: str, seed: int, n: int,
                                                     n_keys: int) -> None:
    schema = SCHEMAS[schema_name]
    table = random_sorted(schema, seed, n, n_keys)
    arrow = schema.to_arrow()
    it = iterator_from_config({"type": "aggregate", "functions": AGG}, schema)
    whole = run(it, iter(table.to_batches()), arrow)
    expected = pandas_aggregate(table, schema, {**AGG, "extra": "last"})
    got = as_comparable(whole, schema)
    assert got == expected
    assert_sorted_unique(got, schema.key_names)
    rng = random.Random(seed)
    for small in (True, False):
        parts = run(it, split(table, rng, small), arrow)
        assert parts.equals(whole)
    ones = run(it, iter(table.to_batches(max_chunksize=1)), arrow)
    assert ones.equals(whole)


@SETTINGS
@given(seed=st.integers(0, 2**32), n=st.integers(0, 200), n_keys=st.integers(1, 5))
def test_map_functions_match_python(seed: int, n: int, n_keys: int) -> None:
    table = random_sorted(MAP_SCHEMA, seed, n, n_keys)
    arrow = MAP_SCHEMA.to_arrow()
    it = iterator_from_config({"type": "aggregate", "functions": MAP_AGG}, MAP_SCHEMA)
    whole = run(it, iter(table.to_batches()), arrow)
    refs = {c: python_map_agg(table, MAP_SCHEMA, c, fn[4:]) for c, fn in MAP_AGG.items()}
    rows = whole.to_pylist()
    assert [(r["key"], r["ts"]) for r in rows] == sorted(
        refs["m_sum"], key=lambda k: (k[0].encode(), k[1]))
    for r in rows:
        for c in MAP_AGG:
            assert r[c] == refs[c][(r["key"], r["ts"])], c
    rng = random.Random(seed)
    assert run(it, split(table, rng), arrow).equals(whole)
    assert run(it, iter(table.to_batches(max_chunksize=1)), arrow).equals(whole)


def test_map_edge_cases() -> None:
    schema = MAP_SCHEMA
    m = [[("b", 1), ("a", 2)], None, [], [("a", None)], [("c", 5), ("a", 3)], None, None]
    table = pa.table({"key": ["k", "k", "k", "k", "k", "n", "n"], "ts": [1] * 7,
                      "m_sum": pa.array(m, MAP_S64), "m_min": pa.array(m, MAP_S32),
                      "m_max": pa.array([None] * 7, MAP_IF)}, schema=schema.to_arrow())
    it = Aggregate(MAP_AGG, schema)
    for batches in (table.to_batches(), table.to_batches(max_chunksize=1),
                    table.slice(1).to_batches()):
        out = run(it, iter(batches), schema.to_arrow()).to_pylist()
        assert out[-1] == {"key": "n", "ts": 1, "m_sum": None, "m_min": None, "m_max": None}
    out = run(it, iter(table.to_batches(max_chunksize=2)), schema.to_arrow()).to_pylist()
    assert out[0]["m_sum"] == [("a", 5), ("b", 1), ("c", 5)]
    assert out[0]["m_min"] == [("a", 2), ("b", 1), ("c", 5)]
    # a null map whose segment is not empty (Arrow allows it): its entries are not data
    ghost = pa.MapArray.from_arrays(pa.array([0, 2, 3], pa.int32()), pa.array(["a", "b", "a"]),
                                    pa.array([1, 2, 3], pa.int64()), type=MAP_S64,
                                    mask=pa.array([True, False]))
    t2 = pa.table({"key": ["k", "k"], "ts": [1, 1], "m_sum": ghost,
                   "m_min": pa.array([None, None], MAP_S32),
                   "m_max": pa.array([None, None], MAP_IF)}, schema=schema.to_arrow())
    out = run(it, iter(t2.to_batches()), schema.to_arrow()).to_pylist()
    assert out[0]["m_sum"] == [("a", 3)]
    # a sliced map array (non-zero offset) reads only its own entries
    sliced = table.slice(2, 2)
    out = run(it, iter(sliced.to_batches()), schema.to_arrow()).to_pylist()
    assert out == [{"key": "k", "ts": 1, "m_sum": [("a", None)], "m_min": [("a", None)],
                    "m_max": None}]


def test_sums_keep_the_field_type_and_nulls() -> None:
    schema = sd.Schema(row_keys=[("k", pa.int64())],
                       values=[("i8", pa.int8()), ("f32", pa.float32()), ("d", pa.date32()),
                               ("b", pa.binary())])
    table = pa.table({"k": [1, 1, 2, 3, 3], "i8": pa.array([100, 100, None, 1, None], pa.int8()),
                      "f32": pa.array([0.5, 0.25, None, None, None], pa.float32()),
                      "d": pa.array([3, 1, 2, None, 4], pa.date32()),
                      "b": [b"x", b"\xff", b"", None, None]}, schema=schema.to_arrow())
    it = Aggregate({"i8": "sum", "f32": "sum", "d": "min", "b": "max"}, schema)
    out = run(it, iter(table.to_batches(max_chunksize=1)), schema.to_arrow())
    assert out.column("i8").to_pylist() == [-56, None, 1]  # wraps like int8 arithmetic
    assert out.column("f32").to_pylist() == [0.75, None, None]
    assert out.column("d").cast(pa.int32()).to_pylist() == [1, 2, 4]
    assert out.column("b").to_pylist() == [b"\xff", b"", None]


def test_last_is_the_last_row_even_when_null() -> None:
    schema = sd.Schema(row_keys=[("k", pa.string())], values=[("v", pa.string())])
    table = pa.table({"k": ["a", "a", "b", "b"], "v": ["x", None, None, "y"]},
                     schema=schema.to_arrow())
    out = run(Aggregate({}, schema), iter(table.to_batches(max_chunksize=1)), schema.to_arrow())
    assert out.to_pylist() == [{"k": "a", "v": None}, {"k": "b", "v": "y"}]


def test_aggregate_on_a_column_subset() -> None:
    """A query may read only some value columns: missing unlisted ones are simply absent."""
    schema = SCHEMAS["str-int"]
    table = random_sorted(schema, 7, 200).select(["key", "ts", "count", "tags"])
    it = Aggregate(AGG, schema)
    out = run(it, split(table, random.Random(1)), table.schema)
    full = run(it, iter(random_sorted(schema, 7, 200).to_batches()), schema.to_arrow())
    assert out.equals(full.select(["key", "ts", "count", "tags"]))


def test_a_long_group_spanning_many_batches() -> None:
    schema = sd.Schema(row_keys=[("k", pa.string())], values=[("n", pa.int64())])
    n = 20_000
    keys = ["a"] + ["b"] * (n - 2) + ["c"]
    table = pa.table({"k": keys, "n": np.ones(n, dtype=np.int64)}, schema=schema.to_arrow())
    out = run(Aggregate({"n": "sum"}, schema), iter(table.to_batches(max_chunksize=7)),
              schema.to_arrow())
    assert out.to_pylist() == [{"k": "a", "n": 1}, {"k": "b", "n": n - 2}, {"k": "c", "n": 1}]


# ---- keep latest ---------------------------------------------------------------------------------
KL_SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                      values=[("version", pa.int64()), ("value", pa.string())])


def pandas_keep_latest(table: pa.Table, by: str) -> list[dict[str, Any]]:
    df = table.to_pandas()
    df["_pos"] = np.arange(len(df))
    df["_has"] = df[by].notna()
    df = df.sort_values(["key", "_has", by, "_pos"], kind="stable")
    df = df.drop_duplicates("key", keep="last")
    rows = [{c: _none(r[c]) for c in table.column_names} for _, r in df.iterrows()]
    for r in rows:
        r["ts"] = int(r["ts"])
        r["version"] = None if r["version"] is None else int(r["version"])
    return sorted(rows, key=lambda r: r["key"].encode())


@pytest.mark.parametrize("by", ["version", "ts"])
@SETTINGS
@given(seed=st.integers(0, 2**32), n=st.integers(0, 300), n_keys=st.integers(1, 8))
def test_keep_latest_matches_pandas(by: str, seed: int, n: int, n_keys: int) -> None:
    rng = random.Random(seed)
    table = random_sorted(KL_SCHEMA, seed, n, n_keys)
    # few versions: many ties, which the last row in stream order wins
    table = table.set_column(2, "version", pa.array(
        [_maybe(rng, rng.randint(0, 3)) for _ in range(n)], pa.int64()))
    it = iterator_from_config({"type": "keep_latest", "by": by}, KL_SCHEMA)
    whole = run(it, iter(table.to_batches()), table.schema)
    assert whole.to_pylist() == pandas_keep_latest(table, by)
    assert run(it, split(table, rng), table.schema).equals(whole)
    assert run(it, iter(table.to_batches(max_chunksize=1)), table.schema).equals(whole)


# ---- configuration -------------------------------------------------------------------------------
@pytest.mark.parametrize(("cfg", "needle"), [
    ({"type": "aggregate", "functions": {"nope": "sum"}}, "'nope'"),
    ({"type": "aggregate", "functions": {"value": "sum"}}, "'value'"),
    ({"type": "aggregate", "functions": {"max_v": "map_sum"}}, "'max_v'"),
    ({"type": "aggregate", "functions": {"tags": "sum"}}, "'tags'"),
    ({"type": "aggregate", "functions": {"tags": "min"}}, "'tags'"),
    ({"type": "aggregate", "functions": {"count": "avg"}}, "'avg'"),
    ({"type": "aggregate", "functions": {"key": "max"}}, "'key'"),
    ({"type": "aggregate", "functions": ["count"]}, "functions"),
    ({"type": "aggregate", "functions": {}, "fields": 1}, "'fields'"),
    ({"type": "keep_latest"}, "'by'"),
    ({"type": "keep_latest", "by": "missing"}, "'missing'"),
    ({"type": "keep_latest", "by": "tags"}, "'tags'"),
])
def test_invalid_configs(cfg: dict[str, Any], needle: str) -> None:
    with pytest.raises(PropertyError, match=needle):
        iterator_from_config(cfg, SCHEMAS["str-int"], where="here")
    with pytest.raises(PropertyError, match="^here: "):
        iterator_from_config(cfg, SCHEMAS["str-int"], where="here")


def test_fields_and_registry_passes_schema() -> None:
    schema = SCHEMAS["str-int"]
    it = iterator_from_config({"type": "aggregate", "functions": AGG}, schema)
    assert isinstance(it, Aggregate)
    assert it.fields() == {"key", "ts", "count", "min_v", "max_v", "value", "tags"}
    kl = iterator_from_config({"type": "keep_latest", "by": "ts"}, schema)
    assert isinstance(kl, KeepLatest) and kl.fields() == {"key", "ts"}
    seen: list[Any] = []
    register_iterator("probe_test", lambda cfg, s: seen.append((dict(cfg), s)) or kl)
    assert build_registered({"type": "probe_test"}, schema, where="w") is kl
    assert seen == [({"type": "probe_test"}, schema)]
    # without a schema only the config's shape is checked, and it cannot run
    loose = iterator_from_config({"type": "aggregate", "functions": {"x": "sum"}})
    with pytest.raises(PropertyError, match="schema"):
        list(loose.apply(iter([])))


# ---- end to end through a table ------------------------------------------------------------------
def _ingest_batch(rng: random.Random, n: int) -> pa.Table:
    keys = [rng.choice(["a", "b", "é", "zz", "😀", "m"]) for _ in range(n)]
    ts = [rng.randint(0, 3) for _ in range(n)]
    return pa.table({
        "key": keys, "ts": ts,
        "count": [_maybe(rng, rng.randint(0, 100)) for _ in range(n)],
        "min_v": [_maybe(rng, rng.randint(-400, 400) / 4) for _ in range(n)],
        "max_v": [_maybe(rng, rng.choice("abcdefgh") + str(rng.randint(0, 9))) for _ in range(n)],
        # last: a function of the key, so it does not depend on the merge order of equal keys
        "value": [f"{k}:{t}" for k, t in zip(keys, ts, strict=True)],
        "tags": pa.array([_random_map(rng, ["x", "y", "z"], lambda: rng.randint(0, 9))
                          for _ in range(n)], MAP_S64),
        "extra": pa.array([t * 2 for t in ts], pa.int32()),
    }, schema=SCHEMAS["str-int"].to_arrow())


def test_table_aggregates_before_and_after_compaction(tmp_path: Path) -> None:
    schema = SCHEMAS["str-int"]
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    cfg = [{"type": "aggregate", "functions": AGG}]
    table = store.create_table(f"t{uuid.uuid4().hex[:8]}", schema, properties={
        "compaction.iterators": json.dumps(cfg), "compaction.strategy": "basic",
        "compaction.batch_size": 2, "state.cache.refresh_seconds": 0,
        "parquet.row_group_rows": 128})
    rng = random.Random(3)
    batches = [_ingest_batch(rng, rng.randint(200, 400)) for _ in range(4)]
    for b in batches:
        table.ingest(b)
    assert len(table.files()) == 4
    everything = pa.concat_tables(batches)
    everything = everything.take(pc.sort_indices(everything, sort_keys=[("key", "ascending"),
                                                                        ("ts", "ascending")]))
    expected = pandas_aggregate(everything, schema, {**AGG, "extra": "last"})
    assert len(expected) < everything.num_rows
    assert table.query().to_pylist() == expected
    assert table.query(columns=["key", "count"]).to_pylist() == [
        {"key": r["key"], "count": r["count"]} for r in expected]
    streamed = table.scan().read_all()
    assert streamed.to_pylist() == expected

    result = table.compact()
    assert result.jobs_committed == 2 and not result.errors
    assert len(table.files()) == 2
    assert table.query().to_pylist() == expected
    result = table.compact()
    assert result.jobs_committed == 1 and not result.errors
    (ref,) = table.files()
    assert ref.records == len(expected)
    stored = pq.read_table(pa.BufferReader(table._handle.objects.get(ref.filename)))
    assert without_sequence(stored).to_pylist() == expected  # (+ the hidden sequences)
    assert table.query().to_pylist() == expected
    assert table.query(keys=["é"]).to_pylist() == [r for r in expected if r["key"] == "é"]


def test_table_property_check_and_query_iterators(tmp_path: Path) -> None:
    schema = KL_SCHEMA
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("kl", schema, properties={"state.cache.refresh_seconds": 0})
    with pytest.raises(PropertyError, match="'avg'"):
        table.set_properties({"query.iterators": '[{"type": "aggregate", '
                                                 '"functions": {"version": "avg"}}]'})
    with pytest.raises(PropertyError, match="'by'"):
        table.set_properties({"query.iterators": '[{"type": "keep_latest"}]'})
    rng = random.Random(5)
    data = random_sorted(schema, 11, 300, 6)
    data = data.set_column(2, "version", pa.array([_maybe(rng, rng.randint(0, 3))
                                                   for _ in range(300)], pa.int64()))
    half = data.num_rows // 2
    table.ingest(data.slice(0, half))
    table.ingest(data.slice(half))
    got = table.query(iterators=[{"type": "keep_latest", "by": "ts"}])
    assert got.to_pylist() == pandas_keep_latest(data, "ts")
    table.set_properties({"query.iterators": '[{"type": "keep_latest", "by": "ts"}]'})
    assert table.query().to_pylist() == pandas_keep_latest(data, "ts")
    # a type error only the schema reveals is refused when set (the table has its schema)
    before = table.version
    with pytest.raises(PropertyError, match="'value'"):
        table.set_properties({"query.iterators": '[{"type": "aggregate", '
                                                 '"functions": {"value": "sum"}}]'})
    assert table.version == before
    assert table.query().to_pylist() == pandas_keep_latest(data, "ts")
