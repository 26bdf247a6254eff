"""Schema definitions, JSON forms, type names and key checks; property parsing."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pyarrow as pa
import pytest

from sediment.errors import PropertyError, SchemaError
from sediment.properties import (
    PROPERTIES,
    PropertySpec,
    defaults,
    describe_properties,
    validate_properties,
)
from sediment.schema import Schema
from sediment.types import KEY_TYPES, parse_type, storage_type

# ---- schema definition ----------------------------------------------------------------------


def test_schema_fields_and_views() -> None:
    s = Schema(row_keys=[("key", pa.string()), ("n", "int32")], sort_keys=[("ts", pa.int64())],
               values=[("v", pa.string()), ("req", pa.int64(), False),
                       pa.field("f", pa.float64())])
    assert s.row_key_names == ["key", "n"]
    assert s.sort_key_names == ["ts"]
    assert s.key_names == ["key", "n", "ts"]
    assert s.value_names == ["v", "req", "f"]
    assert s.field_names == ["key", "n", "ts", "v", "req", "f"]
    assert s.to_arrow().names == s.field_names
    assert [f.nullable for f in s.to_arrow()] == [False, False, False, True, False, True]
    assert s.field("n").type == pa.int32()
    with pytest.raises(SchemaError, match="no field 'zz'; fields: key, n, ts"):
        s.field("zz")


@pytest.mark.parametrize("key_type", list(KEY_TYPES.values()), ids=str)
def test_every_key_type_is_accepted(key_type: pa.DataType) -> None:
    s = Schema(row_keys=[("k", key_type)], sort_keys=[("s", key_type)])
    # timestamp[s] and date64 are stored as timestamp[ms] and date32 (types.storage_type)
    assert s.row_keys[0].type == storage_type(key_type) and not s.row_keys[0].nullable


def test_schema_needs_a_row_key() -> None:
    with pytest.raises(SchemaError, match="at least one row key"):
        Schema(row_keys=[], values=[("v", pa.string())])


@pytest.mark.parametrize("fields, match", [
    ({"row_keys": [("a", pa.string())], "values": [("a", pa.int64())]}, "duplicate field name 'a'"),
    ({"row_keys": [("a", pa.string())], "sort_keys": [("a", pa.int64())]}, "duplicate"),
    ({"row_keys": [("a", pa.string()), ("a", pa.string())]}, "duplicate"),
    ({"row_keys": [("k", pa.string())], "values": [("v", pa.int8()), ("v", pa.int8())]},
     "duplicate"),
    ({"row_keys": [("", pa.string())]}, "must not be empty"),
])
def test_duplicate_and_empty_names(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        Schema(**fields)


@pytest.mark.parametrize("bad", [pa.float64(), pa.float32(), pa.list_(pa.string()),
                                 pa.bool_(), pa.uint64(), pa.large_string(),
                                 pa.struct([("a", pa.int64())]), pa.duration("us"),
                                 pa.map_(pa.string(), pa.string()), pa.decimal128(10, 2)],
                         ids=str)
def test_unsupported_key_types(bad: pa.DataType) -> None:
    with pytest.raises(SchemaError, match="row key field 'k' has unsupported type"):
        Schema(row_keys=[("k", bad)])
    with pytest.raises(SchemaError, match="sort key field 's' has unsupported type"):
        Schema(row_keys=[("k", pa.int64())], sort_keys=[("s", bad)])


def test_value_fields_take_any_type() -> None:
    values = [("f", pa.float64()), ("l", pa.list_(pa.string())), ("b", pa.bool_()),
              ("m", pa.map_(pa.string(), pa.int64())), ("d", pa.decimal128(10, 2)),
              ("s", pa.struct([("a", pa.int64()), ("b", pa.list_(pa.float32()))]))]
    s = Schema(row_keys=[("k", pa.int64())], values=values)
    assert [f.type for f in s.values] == [t for _, t in values]
    assert all(f.nullable for f in s.values)


def test_nullable_key_fields_are_rejected() -> None:
    with pytest.raises(SchemaError, match="row key field 'k' must not be nullable"):
        Schema(row_keys=[pa.field("k", pa.string())])  # pa.field defaults to nullable
    with pytest.raises(SchemaError, match="sort key field 's' must not be nullable"):
        Schema(row_keys=[("k", pa.string())], sort_keys=[("s", pa.int64(), True)])
    s = Schema(row_keys=[pa.field("k", pa.string(), nullable=False)])
    assert not s.row_keys[0].nullable


@pytest.mark.parametrize("spec", [("k",), ("k", pa.string(), True, 1), "k", ("k", 5),
                                  (5, pa.string())])
def test_malformed_field_specs(spec: Any) -> None:
    with pytest.raises(SchemaError):
        Schema(row_keys=[spec])


def test_type_names_in_tuples() -> None:
    s = Schema(row_keys=[("k", "string")], values=[("v", "map<string, list<int64>>")])
    assert s.values[0].type == pa.map_(pa.string(), pa.list_(pa.int64()))
    with pytest.raises(SchemaError, match="unknown type 'nope'"):
        Schema(row_keys=[("k", "nope")])


# ---- JSON ------------------------------------------------------------------------------------

COMPLEX = Schema(
    row_keys=[("k", pa.binary()), ("d", pa.date32())],
    sort_keys=[("ts", pa.timestamp("ns")), ("n", pa.int32())],
    values=[("l", pa.list_(pa.string())),
            ("m", pa.map_(pa.string(), pa.list_(pa.int64()))),
            ("s", pa.struct([("x", pa.float64()), ("y", pa.list_(pa.struct([("z", pa.int8())])))])),
            ("ll", pa.large_list(pa.large_string())),
            ("req", pa.float32(), False),
            ("dec", pa.decimal128(12, 3)),
            ("dict", pa.dictionary(pa.int32(), pa.string()))])


@pytest.mark.parametrize("schema", [
    COMPLEX,
    Schema(row_keys=[("key", pa.string())]),
    Schema(row_keys=[("a", pa.int64()), ("b", pa.string())], values=[("v", pa.binary())]),
], ids=["complex", "minimal", "two-keys"])
def test_json_round_trip(schema: Schema) -> None:
    doc = json.loads(json.dumps(schema.to_json()))
    back = Schema.from_json(doc)
    assert back == schema
    assert back.to_arrow().equals(schema.to_arrow())
    assert back.row_key_names == schema.row_key_names
    assert back.sort_key_names == schema.sort_key_names
    assert [f.nullable for f in back.values] == [f.nullable for f in schema.values]


def test_json_type_strings_parse_back_without_the_arrow_blob() -> None:
    """The readable half of the JSON form (what `describe` shows) is itself a schema document."""
    schema = Schema(row_keys=[("k", pa.string()), ("day", pa.date32())],
                    sort_keys=[("ts", pa.timestamp("ms"))],
                    values=[("l", pa.list_(pa.string())), ("m", pa.map_(pa.string(), pa.int64())),
                            ("s", pa.struct([("a", pa.int64()), ("b", pa.list_(pa.float64()))])),
                            ("f", pa.float64()), ("req", pa.bool_(), False)])
    doc = {k: v for k, v in schema.to_json().items() if k != "arrow"}
    assert Schema.from_json(json.loads(json.dumps(doc))) == schema


def test_hand_written_schema_document() -> None:
    s = Schema.from_json({"row_keys": [{"name": "key", "type": "string"}],
                          "sort_keys": [{"name": "ts", "type": "int64"}],
                          "values": [{"name": "v", "type": "list<double>"},
                                     {"name": "w", "type": "int32", "nullable": False}]})
    assert s == Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("v", pa.list_(pa.float64())), ("w", pa.int32(), False)])


@pytest.mark.parametrize("doc, match", [
    ({"row_keys": [{"name": "k"}]}, "invalid schema document"),
    ({"row_keys": [{"name": "k", "type": "float64"}]}, "unsupported type"),
    ({"row_keys": [{"name": "k", "type": "wat"}]}, "unknown type 'wat'"),
    ({"row_keys": []}, "at least one row key"),
    ({"row_keys": [{"name": "k", "type": "string"}], "arrow": "not base64 arrow"},
     "invalid schema document"),
    ({"values": [{"name": "v", "type": "string"}]}, "at least one row key"),
])
def test_bad_schema_documents(doc: dict[str, Any], match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        Schema.from_json(doc)


# ---- parse_type ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("int64", pa.int64()), ("  int32 ", pa.int32()), ("string", pa.string()),
    ("binary", pa.binary()), ("bool", pa.bool_()), ("double", pa.float64()),
    ("float", pa.float32()), ("float64", pa.float64()), ("uint8", pa.uint8()),
    ("timestamp[us]", pa.timestamp("us")), ("timestamp[s]", pa.timestamp("s")),
    ("date32", pa.date32()), ("date32[day]", pa.date32()), ("date64[ms]", pa.date64()),
    ("large_string", pa.large_string()),
    ("list<string>", pa.list_(pa.string())),
    ("list<item: int64>", pa.list_(pa.int64())),
    ("list<list<int8>>", pa.list_(pa.list_(pa.int8()))),
    ("large_list<item: string>", pa.large_list(pa.string())),
    ("map<string, int64>", pa.map_(pa.string(), pa.int64())),
    ("map<string,map<int32, list<string>>>",
     pa.map_(pa.string(), pa.map_(pa.int32(), pa.list_(pa.string())))),
    ("struct<a: int64, b: list<item: string>>",
     pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])),
    ("struct<>", pa.struct([])),
])
def test_parse_type(text: str, expected: pa.DataType) -> None:
    assert parse_type(text) == expected


@pytest.mark.parametrize("t", [
    *KEY_TYPES.values(), pa.bool_(), pa.float32(), pa.float64(), pa.int8(), pa.uint64(),
    pa.date64(), pa.large_binary(), pa.list_(pa.string()), pa.large_list(pa.int64()),
    pa.map_(pa.string(), pa.list_(pa.int64())),
    pa.struct([("a", pa.int64()), ("b", pa.struct([("c", pa.string())]))]),
], ids=str)
def test_parse_type_reads_arrow_type_names(t: pa.DataType) -> None:
    assert parse_type(str(t)) == t


@pytest.mark.parametrize("text", ["", "int128", "list<>", "list<nope>", "map<string>",
                                  "map<string, int64, int64>", "struct<a>", "struct<: int64>",
                                  "list<string"])
def test_parse_type_errors(text: str) -> None:
    with pytest.raises(SchemaError):
        parse_type(text)


# ---- check_row_key ---------------------------------------------------------------------------

def test_check_row_key_scalars_tuples_and_prefixes() -> None:
    s = Schema(row_keys=[("a", pa.string()), ("b", pa.int64())])
    assert s.check_row_key("x") == ("x",)
    assert s.check_row_key(("x", 5)) == ("x", 5)
    assert s.check_row_key(["x", 5]) == ("x", 5)
    assert s.check_row_key(("x",)) == ("x",)


@pytest.mark.parametrize("value, match", [
    ((), "must have 1..2 fields"),
    (("x", 1, 2), "must have 1..2 fields"),
    ((5,), "5 is not a valid string for row key field 'a'"),
    (("x", "5"), "'5' is not a valid int64 for row key field 'b'"),
    (("x", True), "True is not a valid int64"),
    (("x", 2**63), "is not a valid int64"),
    (("x", 1.0), "is not a valid int64"),
    ((b"x",), "is not a valid string"),
])
def test_check_row_key_errors(value: Any, match: str) -> None:
    s = Schema(row_keys=[("a", pa.string()), ("b", pa.int64())])
    with pytest.raises(SchemaError, match=match):
        s.check_row_key(value, what="split point")


def test_check_row_key_int_bounds_and_binary() -> None:
    s = Schema(row_keys=[("a", pa.int32()), ("b", pa.binary())])
    assert s.check_row_key((-(2**31), b"\x00")) == (-(2**31), b"\x00")
    with pytest.raises(SchemaError):
        s.check_row_key((2**31,))
    with pytest.raises(SchemaError, match="is not a valid binary"):
        s.check_row_key((1, "text"))


def test_check_row_key_temporal_values_become_ints() -> None:
    s = Schema(row_keys=[("ts", pa.timestamp("us")), ("d", pa.date32())])
    epoch_2020_us = 1_577_836_800_000_000
    assert s.check_row_key((datetime.datetime(2020, 1, 1), datetime.date(2020, 1, 2))) == (
        epoch_2020_us, 18263)
    assert s.check_row_key((epoch_2020_us, 18263)) == (epoch_2020_us, 18263)
    for bad in [("2020-01-01",), (1.5,), (True,)]:
        with pytest.raises(SchemaError, match="not a valid timestamp"):
            s.check_row_key(bad)


# ---- properties ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, raw, parsed", [
    ("partition.split.threshold", "1000", 1000),
    ("partition.split.threshold", "1e6", 1_000_000),
    ("partition.split.threshold", 2.0, 2),
    ("partition.split.threshold", 7, 7),
    ("gc.delay_seconds", "1.5", 1.5),
    ("gc.delay_seconds", 3, 3.0),
    ("compaction.strategy", "basic", "basic"),
    ("ingest.write_strategy", "shared_file", "shared_file"),
    ("ingest.spill_dir", "", ""),
    ("query.threads", "0", 0),
])
def test_property_parse(name: str, raw: Any, parsed: Any) -> None:
    v = PROPERTIES[name].parse(raw)
    assert v == parsed and type(v) is type(parsed)


@pytest.mark.parametrize("raw, parsed", [("true", True), ("FALSE", False), (" yes ", True),
                                         ("no", False), ("1", True), ("0", False),
                                         (True, True), (False, False)])
def test_bool_property_parse(raw: Any, parsed: bool) -> None:
    spec = PropertySpec("x.flag", bool, False, "a flag")
    assert spec.parse(raw) is parsed


@pytest.mark.parametrize("name, raw, match", [
    ("partition.split.threshold", "lots", "not a valid int"),
    ("partition.split.threshold", "1.5", "not a valid int"),
    ("partition.split.threshold", "1.5e0", "not a valid int"),
    ("partition.split.threshold", 2.5, "not a valid int"),
    ("partition.split.threshold", True, "not a valid int"),
    ("partition.split.threshold", None, "not a valid int"),
    ("partition.split.threshold", 0, "below 1"),
    ("partition.split.threshold", "-5", "below 1"),
    ("compaction.batch_size", 1, "below 2"),
    ("gc.delay_seconds", "soon", "not a valid float"),
    ("gc.delay_seconds", "nan", "not a valid float"),
    ("gc.delay_seconds", -1, "below 0"),
    ("gc.delay_seconds", False, "not a valid float"),
    ("compaction.strategy", "fastest", "not one of size_ratio, basic"),
    ("compaction.strategy", 3, "not a valid str"),
    ("parquet.compression", "brotli", "not one of"),
])
def test_property_parse_errors(name: str, raw: Any, match: str) -> None:
    with pytest.raises(PropertyError, match=match) as info:
        PROPERTIES[name].parse(raw, context="table t")
    assert repr(name) in str(info.value) and "of table t" in str(info.value)


@pytest.mark.parametrize("raw", ["maybe", "", 1, 0, None])
def test_bool_property_errors(raw: Any) -> None:
    with pytest.raises(PropertyError, match="not a valid bool"):
        PropertySpec("x.flag", bool, False, "a flag").parse(raw)


def test_validate_properties_and_unknown_names() -> None:
    assert validate_properties({"compaction.batch_size": "4", "gc.delay_seconds": "2"}) == {
        "compaction.batch_size": 4, "gc.delay_seconds": 2.0}
    assert validate_properties({}) == {}
    with pytest.raises(PropertyError, match="unknown property 'compaction.size' for table x"):
        validate_properties({"compaction.size": 1}, context="table x")


def test_every_default_is_valid_and_documented() -> None:
    d = defaults()
    assert set(d) == set(PROPERTIES)
    for name, spec in PROPERTIES.items():
        assert spec.parse(spec.default) == spec.default, name
        assert spec.doc
    assert validate_properties(d) == d
    rows = describe_properties()
    assert [r["name"] for r in rows] == list(PROPERTIES)
    assert all(r["type"] in ("int", "float", "str", "bool") for r in rows)
