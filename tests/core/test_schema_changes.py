"""Schema changes as pure functions (sediment.schema_changes): ids, refusals, widenings."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from sediment.errors import SchemaError
from sediment.schema import FIELD_ID_KEY, Schema
from sediment.schema_changes import (
    add_columns,
    apply_change,
    check_properties,
    drop_columns,
    is_widening,
    rename_column,
    widen_column,
)

BASE = Schema([("k", pa.string())], [("ts", pa.int64())], [("v", pa.int32()), ("w", pa.string())])


def test_a_new_schema_numbers_its_fields_and_the_json_keeps_the_ids() -> None:
    assert BASE.ids == (1, 2, 3, 4) and BASE.last_id == 4
    changed = add_columns(drop_columns(BASE, ["w"]), [("x", pa.float64())])
    assert changed.ids == (1, 2, 3, 5) and changed.last_id == 5
    assert changed.added == {"x"} and BASE.added == frozenset()
    assert Schema.from_json(changed.to_json()) == changed
    legacy = {k: v for k, v in BASE.to_json().items() if k not in ("ids", "last_field_id")}
    assert Schema.from_json(legacy) == BASE  # a schema stored before ids: numbered in order
    arrow = changed.to_arrow(field_ids=True)
    assert [f.metadata[FIELD_ID_KEY] for f in arrow] == [b"1", b"2", b"3", b"5"]
    assert changed.to_arrow().field("x").metadata is None  # users' Arrow schemas stay plain


def test_a_dropped_name_added_again_is_a_new_id() -> None:
    again = add_columns(drop_columns(BASE, ["v"]), [("v", pa.int32())])
    assert again.id_of("v") == 5 and BASE.id_of("v") == 3


def test_rename_keeps_the_id_and_widen_keeps_it_too() -> None:
    r = rename_column(BASE, "w", "w2")
    assert r.id_of("w2") == 4 and "w" not in r.field_names
    w = widen_column(BASE, "v", pa.int64())
    assert w.field("v").type == pa.int64() and w.id_of("v") == 3


@pytest.mark.parametrize(("change", "message"), [
    (lambda: drop_columns(BASE, ["k"]), "key field 'k'"),
    (lambda: rename_column(BASE, "ts", "t"), "key field 'ts'"),
    (lambda: widen_column(BASE, "ts", pa.int64()), "key field 'ts'"),
    (lambda: drop_columns(BASE, ["nope"]), "no value column 'nope'"),
    (lambda: rename_column(BASE, "v", "w"), "'w' already exists"),
    (lambda: add_columns(BASE, [("v", pa.int8())]), "'v' already exists"),
    (lambda: add_columns(BASE, [("__sediment_x", pa.int8())]), "reserved"),
    (lambda: add_columns(BASE, [("x", pa.int8()), ("x", pa.int16())]), "'x' already exists"),
    (lambda: widen_column(BASE, "v", pa.int16()), "not a widening"),
    (lambda: widen_column(BASE, "v", pa.float32()), "not a widening"),
    (lambda: widen_column(BASE, "w", pa.int64()), "not a widening"),
    (lambda: widen_column(BASE, "v", pa.int32()), "is int32 already"),
    (lambda: add_columns(BASE, []), "at least one"),
    (lambda: drop_columns(BASE, "v"), "list of column names"),
])
def test_bad_changes_are_refused_naming_the_field(change, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SchemaError, match=message):
        change()


@pytest.mark.parametrize(("old", "new", "ok"), [
    (pa.int8(), pa.int16(), True), (pa.int16(), pa.int64(), True), (pa.int32(), pa.int64(), True),
    (pa.int64(), pa.int32(), False), (pa.uint8(), pa.int16(), True),
    (pa.uint32(), pa.int32(), False),
    (pa.int8(), pa.uint16(), False), (pa.float32(), pa.float64(), True),
    (pa.float64(), pa.float32(), False), (pa.int32(), pa.float64(), True),
    (pa.int64(), pa.float64(), False), (pa.int16(), pa.float32(), True),
    (pa.date32(), pa.timestamp("ms"), True), (pa.date32(), pa.timestamp("ns"), False),
    (pa.string(), pa.large_string(), True), (pa.binary(), pa.large_binary(), True),
    (pa.decimal128(10, 2), pa.decimal128(12, 2), True),
    (pa.decimal128(10, 2), pa.decimal128(12, 3), False), (pa.string(), pa.binary(), False),
])
def test_widenings_are_exactly_the_lossless_casts(old, new, ok) -> None:  # type: ignore[no-untyped-def]
    assert is_widening(old, new) is ok
    if ok:  # and Arrow casts the extreme values exactly: every one comes back
        values = _extremes(old)
        assert values.cast(new, safe=True).cast(old).equals(values)


def _extremes(t: pa.DataType) -> pa.Array:
    if pa.types.is_signed_integer(t):
        return pa.array([-(2 ** (t.bit_width - 1)), 0, 2 ** (t.bit_width - 1) - 1], t)
    if pa.types.is_unsigned_integer(t):
        return pa.array([0, 2 ** t.bit_width - 1], t)
    if pa.types.is_date(t):
        return pa.array([-719162, 0, 2932896], t)  # 0001-01-01 .. 9999-12-31
    if pa.types.is_decimal(t):
        return pa.array([Decimal("-99999999.99"), Decimal("0.01")], pa.decimal128(10, 2)).cast(t)
    if pa.types.is_floating(t):
        return pa.array([-3.4e38, 1.5, 3.4e38], t)
    return pa.array(["a", "\u00e9"], t) if pa.types.is_string(t) else pa.array([b"\x00"], t)


def test_apply_change_replays_what_a_transaction_stores() -> None:
    s = apply_change(BASE, "add_columns", {"columns": [["x", "int64"]]})
    assert s.field("x").type == pa.int64()
    with pytest.raises(SchemaError, match="unknown schema change"):
        apply_change(BASE, "nope", {})


def test_a_drop_or_rename_a_property_needs_is_refused_naming_it() -> None:
    props = {"compaction.iterators": '[{"type": "age_off", "field": "ts", "ttl_seconds": 5}]',
             "parquet.dictionary_columns": "w"}
    check_properties(drop_columns(BASE, ["v"]), props, "drop")
    with pytest.raises(SchemaError, match="parquet.dictionary_columns"):
        check_properties(drop_columns(BASE, ["w"]), props, "drop")
    merge = {"merge": "aggregate", "merge.functions": '{"v": "sum"}'}
    with pytest.raises(SchemaError, match="merge.functions"):
        check_properties(rename_column(BASE, "v", "v2"), merge, "rename")
