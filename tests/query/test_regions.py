"""Per-field regions (``sd.Region({field: sd.Range(...)})``) against the reference: queries,
scans and plans over two- and three-field keys, the pruning of leaves and row groups, and
bad input."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sediment as sd
from helpers import make_table
from reference import Reference, RefRange, RefRegion, assert_matches
from sediment.core.regions import Box, FieldRange, bounding, meets_interval
from sediment.errors import QueryError

# ---- the model: bounds and leaf overlap ---------------------------------------------------------


def test_region_keeps_its_lexicographic_form_and_makes_boxes_from_a_mapping() -> None:
    r = sd.Region(("a",), ("m",))
    assert isinstance(r, sd.Region) and r.contains(("b",)) and not r.contains(("m",))
    box = sd.Region({"k2": sd.Range(1, 5, min_inclusive=False, max_inclusive=True)})
    assert isinstance(box, Box) and isinstance(box, sd.Range)
    assert box.given == (("k2", sd.Range(1, 5, start_inclusive=False, end_inclusive=True)),)


def test_bounding_prefix_range() -> None:
    open_ = FieldRange()
    point = FieldRange("a", True, "a", True)
    assert bounding([open_, FieldRange(1, True, 2, False)]) == (None, True, None, True)
    assert bounding([FieldRange("c", False, "p", True), open_]) == (("c",), False, ("p",), True)
    assert bounding([point, FieldRange(None, True, 7, False)]) == (("a",), True, ("a", 7), False)
    assert bounding([point, FieldRange(3, True, 3, True)]) == (("a", 3), True, ("a", 3), True)


DOMAIN = [0, 1, 2, 3]
field_ranges = st.builds(FieldRange, st.none() | st.sampled_from(DOMAIN), st.booleans(),
                         st.none() | st.sampled_from(DOMAIN), st.booleans())


def _bound(n: int) -> st.SearchStrategy[tuple[int, ...] | None]:
    return st.none() | st.lists(st.sampled_from(DOMAIN), min_size=1, max_size=n).map(tuple)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), n=st.integers(1, 3))
def test_leaf_overlap_is_never_wrong_to_prune(data: st.DataObject, n: int) -> None:
    """A box said not to meet ``[lo, hi)`` holds no key of it (brute force over a small
    domain); a box meeting it with a key strictly inside every range is always found."""
    fields = data.draw(st.lists(field_ranges, min_size=n, max_size=n))
    lo, hi = data.draw(_bound(n)), data.draw(_bound(n))
    keys = [k for k in itertools.product(DOMAIN, repeat=n)
            if all(f.contains(v) for f, v in zip(fields, k, strict=True))
            and (lo is None or k >= lo) and (hi is None or k < hi)]
    if keys:
        assert meets_interval(fields, lo, hi), (fields, lo, hi, keys)


# ---- queries against the reference ------------------------------------------------------------

INTS = [-(2**63), -5, -1, 0, 1, 2, 7, 2**63 - 1]
STRINGS = ["", "a", "ab", "b", "é", "😀", "z"]
BINARIES = [b"", b"\x00", b"a", b"ab", b"\x80", b"\xff"]
TYPES = {"int": (pa.int64(), INTS), "string": (pa.string(), STRINGS),
         "binary": (pa.binary(), BINARIES)}


@pytest.fixture(scope="module")
def hyp_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("regions"))


@st.composite
def region_tables(draw: st.DrawFn) -> tuple[list[str], list[list[Any]], list[tuple[Any, ...]],
                                           list[tuple[Any, ...]]]:
    """Key types (2 or 3 fields), rows, split points and the pools of values."""
    kinds = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=2, max_size=3))
    pools = [TYPES[k][1] for k in kinds]
    rows = draw(st.lists(st.tuples(*(st.sampled_from(p) for p in pools)),
                         min_size=1, max_size=80))
    splits = draw(st.lists(st.tuples(*(st.sampled_from(p) for p in pools)).flatmap(
        lambda k: st.integers(1, len(k)).map(lambda m: k[:m])), max_size=4, unique=True))
    return kinds, [list(p) for p in pools], rows, sorted(splits)


@st.composite
def ref_regions(draw: st.DrawFn, names: list[str], pools: list[list[Any]]) -> RefRegion:
    fields: dict[str, tuple[Any, bool, Any, bool]] = {}
    for name, pool in zip(names, pools, strict=True):
        if draw(st.booleans()):
            continue  # an unbounded field
        lo = draw(st.none() | st.sampled_from(pool))
        hi = draw(st.none() | st.sampled_from(pool))
        lo_inc, hi_inc = draw(st.booleans()), draw(st.booleans())
        if lo is not None and hi is not None and (lo > hi or (lo == hi and not (lo_inc and
                                                                                hi_inc))):
            lo, hi, lo_inc, hi_inc = hi, lo, True, True  # an empty range is refused
        fields[name] = (lo, lo_inc, hi, hi_inc)
    if not fields:
        fields[names[-1]] = (None, True, None, True)
    return RefRegion(fields)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table_spec=region_tables(), data=st.data())
def test_random_regions_match_reference(hyp_store: str, table_spec: Any,
                                        data: st.DataObject) -> None:
    kinds, pools, rows, splits = table_spec
    names = [f"k{i}" for i in range(len(kinds))]
    schema = sd.Schema(row_keys=[(n, TYPES[k][0]) for n, k in zip(names, kinds, strict=True)],
                       sort_keys=[("s", pa.int32())], values=[("v", pa.int64())])
    table = make_table(hyp_store, schema=schema, split_points=splits or None,
                       **{"parquet.row_group_rows": 128})
    ref = Reference(schema)
    cols: dict[str, list[Any]] = {n: [r[i] for r in rows] for i, n in enumerate(names)}
    cols["s"] = [i % 3 for i in range(len(rows))]
    cols["v"] = list(range(len(rows)))
    batch = pa.table(cols, schema=ref.arrow)
    half = len(rows) // 2
    for part in (batch.slice(0, half), batch.slice(half)):  # two files in some leaves
        if part.num_rows:
            table.ingest(part)
            ref.add(part)
    regions = data.draw(st.lists(ref_regions(names, pools), min_size=1, max_size=3))
    asked: list[Any] = [r.to_sediment() for r in regions]
    assert_matches(table.query(ranges=asked), ref, ranges=regions)
    assert_matches(table.scan(ranges=asked).read_all(), ref, ranges=regions)
    one = regions[0]
    assert_matches(table.query(ranges=one.to_sediment()), ref, ranges=[one])
    # mixed with a plain range on the first field and exact keys
    plain = RefRange((pools[0][0],), (pools[0][-1],), True, False)
    key = rows[0]
    got = table.query(keys=[key], ranges=[*asked, plain.to_sediment()])
    assert_matches(got, ref, keys=[key], ranges=[*regions, plain])
    # the plan keeps every leaf holding a selected row
    plan = table.plan(ranges=asked)
    planned = {s.leaf_id for s in plan.subqueries}
    for leaf in table.partitions():
        if leaf.is_leaf and any(leaf.region.contains(ref.row_key(r)) for r in ref.rows
                                if any(x.contains_row(r) for x in regions)):
            assert leaf.id in planned
    table.store.drop_table(table.name)


def _edges(tmp_path: Path, **props: Any) -> sd.Table:
    schema = sd.Schema(row_keys=[("src", pa.string()), ("dst", pa.int64())],
                       values=[("w", pa.int64())])
    table = make_table(tmp_path, schema=schema, name="edges",
                       split_points=[("c",), ("f",), ("f", 500), ("k",)],
                       **{"parquet.row_group_rows": 128, **props})
    src = [chr(ord("a") + i // 1000) for i in range(16_000)]
    dst = list(range(16_000))  # grows with src: row groups have narrow dst ranges
    table.ingest(pa.table({"src": src, "dst": dst, "w": [1] * len(src)}))
    return table


def _row_groups_read(table: sd.Table, ranges: Any) -> int:
    prepared = table.prepare(ranges=ranges)
    ex = prepared.executor
    total = 0
    for sub in prepared.plan.subqueries:
        hashes = ex.point_hashes(sub)
        for ref in sub.references:
            total += len(ex.row_groups(ref, sub, hashes)[2])
    return total


def test_pruning_of_leaves_and_row_groups(tmp_path: Path) -> None:
    table = _edges(tmp_path)
    everything = _row_groups_read(table, None)
    # the second field only: leaves are not pruned (lexicographic), row groups are
    narrow = sd.Region({"dst": sd.Range(7_100, 7_200)})
    got = table.query(ranges=narrow)
    assert got.column("dst").to_pylist() == list(range(7_100, 7_200))
    assert got.column("src").to_pylist() == ["h"] * 100
    assert _row_groups_read(table, narrow) <= 2 < everything
    # a pinned first field and a range on the second: one leaf of the two "f" leaves
    box = sd.Region({"src": sd.Range("f", "f", max_inclusive=True), "dst": sd.Range(0, 10)})
    assert table.query(ranges=box).num_rows == 0  # "f" has dst 5000..5999
    # only the leaf [("f",), ("f", 500)) can meet it, and it holds no file
    assert table.plan(ranges=box).subqueries == ()
    box = sd.Region({"src": sd.Range("f", "f", max_inclusive=True),
                     "dst": sd.Range(5_600, None)})
    plan = table.plan(ranges=box)
    assert len(plan.subqueries) == 1
    assert table.query(ranges=box).num_rows == 400


def test_bad_regions_raise_query_errors_naming_table_and_field(tmp_path: Path) -> None:
    table = _edges(tmp_path)
    cases = [
        ({"nope": sd.Range(1, 2)}, "'nope'"),
        ({"w": sd.Range(1, 2)}, "'w'"),
        ({"dst": sd.Range("a", "b")}, "'dst'"),
        ({"src": sd.Range(1, None)}, "'src'"),
        ({"dst": sd.Range(5, 5)}, "empty"),
        ({"dst": sd.Range(6, 5, max_inclusive=True)}, "empty"),
        ({"src": sd.Range(("a", 1), None)}, "'src'"),
        ({"src": "a"}, "'src'"),
        ({}, "names no field"),
    ]
    for spec, says in cases:
        for call in (table.query, table.scan, table.plan):
            with pytest.raises(QueryError, match="edges") as info:
                call(ranges=[sd.Region(spec)])
            assert says in str(info.value), (spec, str(info.value))
    # an inclusive single value is a point, not empty
    assert table.query(ranges=sd.Region({"dst": sd.Range(5, 5, max_inclusive=True)})
                       ).num_rows == 1


@pytest.mark.parametrize("spec", [
    {"b": sd.Range(2, 4, max_inclusive=True)},
    {"a": sd.Range("m", "m", max_inclusive=True), "b": sd.Range(None, 3)},
    {"a": sd.Range("g", "u", min_inclusive=False), "b": sd.Range(5, None)},
], ids=repr)
def test_dump_of_a_region_loads_its_rows(tmp_path: Path, spec: dict[str, sd.Range]) -> None:
    schema = sd.Schema(row_keys=[("a", pa.string()), ("b", pa.int64())],
                       sort_keys=[("ts", pa.int64())], values=[("v", pa.int64())])
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = make_table(store, split_points=[("m", 3), ("t",)], schema=schema)
    ref = Reference(schema)
    gen = __import__("random").Random(5)
    for part in range(2):
        data = pa.Table.from_pylist(
            [{"a": gen.choice("fgmmmmtux"), "b": gen.randint(0, 6), "ts": gen.randint(0, 9),
              "v": part * 1000 + i} for i in range(300)], schema=schema.to_arrow())
        table.ingest(data)
        ref.add(data)
    table.compact(full=True)  # one file per leaf: a whole-file copy would be wrong
    region = sd.Region(spec)
    job = table.dump(str(tmp_path / "dumps"), range=region)
    assert job.rows == len(ref.query(ranges=[region]))
    loaded = store.load(job.manifest_uri, "copy")
    assert_matches(loaded.query(), ref, ranges=[region])
    with pytest.raises(QueryError, match="'zz'"):
        table.dump(str(tmp_path / "bad"), range=sd.Region({"zz": sd.Range(1, 2)}))



def test_cli_query_with_regions(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from sediment.cli import app

    _edges(tmp_path)
    runner = CliRunner()

    def query(*args: str) -> Any:
        return runner.invoke(app, ["query", "edges", "--store", str(tmp_path), "--json", *args])

    def rows(*args: str) -> list[tuple[str, int]]:
        r = query(*args)
        assert r.exit_code == 0, r.output
        return [(x["src"], x["dst"]) for x in map(json.loads, r.stdout.splitlines())]

    assert rows("--region", "dst=[7100,7103)") == [("h", 7100), ("h", 7101), ("h", 7102)]
    # a union with an exact key; src in (g, i] holds h and i, dst 7990..8009 only h and i
    got = rows("--region", "src=(g,i];dst=[7990,8010)", "--key", '["a", 3]')
    assert got == [("a", 3), *(("h", d) for d in range(7990, 8000)),
                   *(("i", d) for d in range(8000, 8010))]
    for bad, says in (("nope=[1,2)", "'nope'"), ("dst=[x,2)", "int64"),
                      ("dst=[9,2)", "empty"),
                      ("dst=[50,50];dst=[1,1]", "given twice")):
        r = query("--region", bad)
        assert r.exit_code == 1 and says in r.stderr, (bad, r.stderr)
