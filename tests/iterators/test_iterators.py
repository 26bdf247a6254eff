"""Query iterators (age-off, row filters) from the table property and the ``iterators=`` argument,
checked against the same filtering done with pandas."""

from __future__ import annotations

import json
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import sediment as sd
from reference import Reference, assert_matches, string_key_pool
from sediment.errors import PropertyError
from sediment.iterators import AgeOff, RowFilter, iterator_from_config, iterators_from_property

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string()), ("n", pa.int64()),
                           ("at", pa.timestamp("us"))])
HOUR_MS = 3_600_000


def make_table(tmp_path: Path, **props: Any) -> tuple[sd.Table, Reference, pd.DataFrame]:
    """A table of 3 leaves, shared-file and per-leaf files, ts spread over the last 4 hours."""
    rng = random.Random(21)
    now_ms = int(time.time() * 1000)
    pool = string_key_pool(rng, 40)
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table(f"t{uuid.uuid4().hex[:6]}", SCHEMA, split_points=["b", "é"],
                               properties={"state.cache.refresh_seconds": 0, **props})
    ref = Reference(SCHEMA)
    for strategy in ("per_partition", "shared_file"):
        table.set_properties({"ingest.write_strategy": strategy})
        n = 600
        # ages keep clear of the one- and two-hour cut-offs, so a slow test cannot flip a row
        ages = [rng.choice([rng.randint(0, 50), rng.randint(70, 110), rng.randint(130, 240)])
                * 60_000 for _ in range(n)]
        data = pa.table({
            "key": [rng.choice(pool) for _ in range(n)],
            "ts": [now_ms - a for a in ages],
            "value": [rng.choice(["x", "y", "", "😀", None]) for _ in range(n)],
            "n": [rng.choice([None, *range(-3, 4)]) for _ in range(n)],
            "at": pa.array([(now_ms - a) * 1000 for a in ages], pa.timestamp("us")),
        }, schema=SCHEMA.to_arrow())
        table.ingest(data)
        ref.add(data)
    return table, ref, ref.frame()


def expect(ref: Reference, frame: pd.DataFrame, mask: pd.Series, **query: Any) -> Reference:
    """A reference holding only the rows pandas keeps."""
    kept = Reference(ref.schema)
    kept.add([r for r, keep in zip(ref.rows, mask.fillna(False).astype(bool), strict=True)
              if keep])
    return kept


FILTERS: list[tuple[dict[str, Any], Any]] = [
    ({"field": "value", "op": "==", "value": "x"}, lambda f: f["value"] == "x"),
    ({"field": "value", "op": "!=", "value": "x"},
     lambda f: f["value"].notna() & (f["value"] != "x")),
    ({"field": "n", "op": "<", "value": 0}, lambda f: f["n"] < 0),
    ({"field": "n", "op": "<=", "value": 0}, lambda f: f["n"] <= 0),
    ({"field": "n", "op": ">", "value": 1}, lambda f: f["n"] > 1),
    ({"field": "n", "op": ">=", "value": 1}, lambda f: f["n"] >= 1),
    ({"field": "value", "op": "in", "value": ["", "😀"]}, lambda f: f["value"].isin(["", "😀"])),
    ({"field": "n", "op": "not_in", "value": [1, 2]},
     lambda f: ~f["n"].isin([1, 2])),
    ({"field": "value", "op": "is_null"}, lambda f: f["value"].isna()),
    ({"field": "n", "op": "not_null"}, lambda f: f["n"].notna()),
    ({"field": "key", "op": ">=", "value": "é"}, lambda f: f["key"] >= "é"),
]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[sd.Table, Reference, pd.DataFrame]:
    return make_table(tmp_path)


@pytest.mark.parametrize("cfg,pandas_mask", FILTERS, ids=[f"{c['field']}{c['op']}"
                                                          for c, _ in FILTERS])
def test_filter_via_property_and_argument(setup: Any, cfg: dict[str, Any],
                                          pandas_mask: Any) -> None:
    table, ref, frame = setup
    kept = expect(ref, frame, pandas_mask(frame))
    assert 0 < len(kept.rows) < len(ref.rows)
    full = {"type": "filter", **cfg}
    assert_matches(table.query(iterators=[full]), kept)
    assert_matches(table.scan(iterators=[full]).read_all(), kept)
    r = [sd.Range("a", "c")]
    assert_matches(table.query(ranges=r, iterators=[full]), kept, ranges=r)
    table.set_properties({"query.iterators": json.dumps([full])})
    assert_matches(table.query(), kept)
    assert_matches(table.query(ranges=r), kept, ranges=r)
    assert_matches(table.scan().read_all(), kept)
    table.set_properties(remove=["query.iterators"])
    assert_matches(table.query(), ref)


def test_age_off_via_property(setup: Any) -> None:
    table, ref, frame = setup
    now_ms = time.time() * 1000
    kept = expect(ref, frame, frame["ts"] >= now_ms - HOUR_MS)
    table.set_properties({"query.iterators": json.dumps(
        [{"type": "age_off", "field": "ts", "ttl_seconds": 3600}])})
    assert_matches(table.query(), kept)
    assert_matches(table.scan().read_all(), kept)
    keys = list({r["key"] for r in ref.rows})[:5]
    assert_matches(table.query(keys=keys), kept, keys=keys)
    # seconds as the unit; and a timestamp field, whose unit is its own
    table.set_properties({"query.iterators": json.dumps(
        [{"type": "age_off", "field": "ts", "ttl_seconds": 2 * 3_600_000, "unit": "s"}])})
    assert_matches(table.query(), ref)  # ms read as seconds: nothing is that old
    table.set_properties({"query.iterators": json.dumps(
        [{"type": "age_off", "field": "at", "ttl_seconds": 7200}])})
    two_hours = expect(ref, frame, frame["ts"] >= now_ms - 2 * HOUR_MS)
    assert 0 < len(two_hours.rows) < len(ref.rows)
    assert_matches(table.query(), two_hours)


def test_property_and_argument_iterators_combine(setup: Any) -> None:
    table, ref, frame = setup
    now_ms = time.time() * 1000
    table.set_properties({"query.iterators": json.dumps(
        [{"type": "age_off", "field": "ts", "ttl_seconds": 7200}])})
    mask = (frame["ts"] >= now_ms - 2 * HOUR_MS) & (frame["n"] > 0)
    kept = expect(ref, frame, mask)
    got = table.query(iterators=[RowFilter("n", ">", 0)])
    assert_matches(got, kept)
    got = table.query(iterators=[{"type": "filter", "field": "n", "op": ">", "value": 0}])
    assert_matches(got, kept)
    both = expect(ref, frame, mask & (frame["ts"] >= now_ms - HOUR_MS))
    fixed_now = AgeOff("ts", 3600, now=lambda: now_ms / 1000)
    assert_matches(table.query(iterators=[RowFilter("n", ">", 0), fixed_now]), both)


def test_iterator_fields_read_even_when_not_selected(setup: Any) -> None:
    table, ref, frame = setup
    kept = expect(ref, frame, frame["n"] == 2)
    got = table.query(columns=["value"], iterators=[RowFilter("n", "==", 2)])
    assert got.column_names == ["value"]
    assert_matches(got, kept, columns=["value"])
    got = table.scan(columns=["key"], iterators=[RowFilter("n", "==", 2)]).read_all()
    assert_matches(got, kept, columns=["key"])


def test_iterators_do_not_change_versions_or_data(setup: Any) -> None:
    table, ref, _ = setup
    v = table.version
    table.query(iterators=[RowFilter("n", "==", 2)])
    assert table.version == v
    assert_matches(table.query(), ref)


BAD_CONFIGS: list[Any] = [
    "not json",
    "{}",
    "[1, 2]",
    '[{"type": "nope"}]',
    '[{"type": "age_off", "ttl_seconds": 5}]',
    '[{"type": "age_off", "field": "ts"}]',
    '[{"type": "age_off", "field": "ts", "ttl_seconds": 5, "unit": "weeks"}]',
    '[{"type": "age_off", "field": "ts", "ttl_seconds": "soon"}]',
    '[{"type": "filter", "field": "n", "op": "~"}]',
    '[{"type": "filter", "op": "=="}]',
]


@pytest.mark.parametrize("text", BAD_CONFIGS)
def test_invalid_iterator_property_is_rejected(tmp_path: Path, text: str) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    with pytest.raises(PropertyError):
        store.create_table("t", SCHEMA, properties={"query.iterators": text})
    table = store.create_table("t", SCHEMA)
    v = table.version
    with pytest.raises(PropertyError):
        table.set_properties({"query.iterators": text})
    assert table.version == v
    with pytest.raises(PropertyError):
        iterators_from_property(text, SCHEMA)


@pytest.mark.parametrize("cfg", [
    {"type": "nope"},
    {"type": "filter", "field": "missing", "op": "==", "value": 1},
    {"type": "age_off", "field": "missing", "ttl_seconds": 1},
    {"type": "filter", "field": "n", "op": "between", "value": 1},
    {"type": "filter", "field": "n", "op": "==", "value": "not a number"},
    {"type": "filter", "field": "n", "op": "in", "value": 5},
    {"type": "age_off", "field": "value", "ttl_seconds": 1},
])
def test_invalid_iterator_argument_is_rejected(setup: Any, cfg: dict[str, Any]) -> None:
    table = setup[0]
    with pytest.raises(PropertyError):
        table.query(iterators=[cfg])
    with pytest.raises(PropertyError):
        iterator_from_config(cfg, SCHEMA)


def test_property_naming_an_unknown_field_fails_clearly(tmp_path: Path) -> None:
    table = make_table(tmp_path)[0]
    bad = json.dumps([{"type": "filter", "field": "nope", "op": "is_null"}])
    with pytest.raises(PropertyError, match="nope"):
        table.set_properties({"query.iterators": bad})
        table.query()  # if the property was accepted, the query must say what is wrong
