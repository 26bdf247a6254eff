"""Small API gaps closed: ``table.leaves()``; ``create_table(..., exist_ok=True)``; "did you
mean" for mistyped table and property names; one rule for key types at ingest (Arrow and
pandas key columns of another kind refused naming the field, as ``keys=`` refuses them; CSV
and JSON text still parsed to the schema)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import sediment as sd
from sediment.errors import (
    DataError,
    PropertyError,
    QueryError,
    TableExistsError,
    TableNotFoundError,
)

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string())])


def new_store() -> sd.Store:
    return sd.Store.open(f"memory://gaps-{uuid.uuid4().hex}", create=True)


# ---- leaves ---------------------------------------------------------------------------------
def test_leaves_are_the_leaf_partitions_in_key_order() -> None:
    table = new_store().create_table("t", SCHEMA, split_points=["g", "p"],
                                     properties={"partition.split.threshold": 50})
    assert len(table.partitions()) == 5 and len(table.leaves()) == 3
    table.ingest(pa.table({"key": [f"a{i:03d}" for i in range(200)], "ts": list(range(200)),
                           "value": ["v"] * 200}))
    assert table.split().splits >= 1  # a deeper leaf on the left
    leaves = table.leaves()
    assert {p.id for p in leaves} == {p.id for p in table.partitions() if p.is_leaf}
    # they tile the key space, in order
    assert leaves[0].region.min is None and leaves[-1].region.max is None
    for a, b in zip(leaves, leaves[1:], strict=False):
        assert a.region.max == b.region.min
    old = table.version - 1
    assert len(table.leaves(version=old)) == 3


# ---- exist_ok -------------------------------------------------------------------------------
def test_exist_ok_returns_the_table_of_the_same_schema() -> None:
    store = new_store()
    table = store.create_table("t", SCHEMA)
    table.ingest(pa.table({"key": ["a"], "ts": [1], "value": ["x"]}))
    again = store.create_table("t", SCHEMA, exist_ok=True, split_points=["m"])
    assert again.table_id == table.table_id and again.query().num_rows == 1
    assert len(again.leaves()) == 1  # the existing table, as it is
    with pytest.raises(TableExistsError, match="already exists"):
        store.create_table("t", SCHEMA)


@pytest.mark.parametrize("other, field", [
    (sd.Schema(row_keys=[("key", pa.int64())], sort_keys=[("ts", pa.int64())],
               values=[("value", pa.string())]),
     "row key field 'key' is string in the existing schema, int64 in the one given"),
    (sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
               values=[("value", pa.string()), ("n", pa.int64())]),
     "value field 'n' is not in the existing schema"),
    (sd.Schema(row_keys=[("key", pa.string())], values=[("value", pa.string())]),
     "sort key field 'ts' of the existing schema is missing"),
    (sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
               values=[("other", pa.string())]),
     "value field 1 is 'value' in the existing schema, 'other' in the one given"),
])
def test_exist_ok_refuses_another_schema_naming_the_field(other: sd.Schema,
                                                          field: str) -> None:
    store = new_store()
    store.create_table("t", SCHEMA)
    with pytest.raises(TableExistsError, match="with another schema") as info:
        store.create_table("t", other, exist_ok=True)
    assert field in str(info.value) and "table 't'" in str(info.value)
    assert store.tables() == ["t"]


# ---- did you mean ---------------------------------------------------------------------------
def test_mistyped_table_and_property_names_get_a_suggestion() -> None:
    store = new_store()
    table = store.create_table("events", SCHEMA)
    with pytest.raises(TableNotFoundError, match=r"no table 'event' .* \(did you mean "
                                                 r"'events'\?\)"):
        store.table("event")
    with pytest.raises(TableNotFoundError) as info:
        store.table("zzzzzz")
    assert "did you mean" not in str(info.value)  # nothing close: no guess
    with pytest.raises(PropertyError, match=r"unknown property 'gc.delay_second' for table "
                                            r"events \(did you mean 'gc.delay_seconds'\?\)"):
        table.set_properties({"gc.delay_second": 0})
    with pytest.raises(PropertyError, match=r"did you mean 'retention.seconds'"):
        table.set_properties(remove=["retention.second"])
    with pytest.raises(PropertyError, match=r"did you mean 'compaction.batch_size'"):
        store.create_table("other", SCHEMA, properties={"compaction.batchsize": 3})


# ---- one rule for key types -----------------------------------------------------------------
def refused(table: sd.Table, data: Any, message: str) -> None:
    version = table.version
    with pytest.raises(DataError, match=message) as info:
        table.ingest(data)
    assert f"table {table.name}" in str(info.value)
    assert table.version == version


@pytest.mark.parametrize("column, given", [
    (pa.array([7, 8], pa.int64()), "int64"),
    (pa.array([b"a", b"b"], pa.binary()), "binary"),
    (pa.array([1, 2], pa.int32()).dictionary_encode(), "dictionary"),
])
def test_a_string_key_takes_text_only(column: pa.Array, given: str) -> None:
    table = new_store().create_table("t", SCHEMA)
    data = pa.table({"key": column, "ts": [1, 2], "value": ["x", "y"]})
    refused(table, data, rf"key field 'key' of input is {given}.* but the table's key is "
                         "string")
    # as keys= refuses the same
    with pytest.raises(QueryError, match="not a valid string for row key field 'key'"):
        table.query(keys=[7])
    # pandas: ints in the key column are refused the same way
    refused(table, pd.DataFrame({"key": [7, 8], "ts": [1, 2], "value": ["x", "y"]}),
            "key field 'key' of input is int64")
    # text in any encoding is the key's kind, and goes in
    table.ingest(pa.table({"key": pa.array(["a", "b"]).dictionary_encode(), "ts": [1, 2],
                           "value": ["x", "y"]}))
    table.ingest(pa.table({"key": pa.array(["c"], pa.large_string()), "ts": [3],
                           "value": ["z"]}))
    assert table.query().column("key").to_pylist() == ["a", "b", "c"]


def test_int_and_binary_keys_refuse_other_kinds(tmp_path: Path) -> None:
    store = new_store()
    ints = store.create_table("ints", sd.Schema(row_keys=[("id", pa.int32())],
                                                values=[("v", pa.string())]))
    refused(ints, pa.table({"id": ["1", "2"], "v": ["a", "b"]}),
            "key field 'id' of input is string but the table's key is int32")
    refused(ints, pa.table({"id": [1.0, 2.0], "v": ["a", "b"]}), "key field 'id'")
    ints.ingest(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))  # widths cast
    blobs = store.create_table("blobs", sd.Schema(row_keys=[("id", pa.binary())]))
    refused(blobs, pa.table({"id": ["a"]}), "key field 'id' of input is string")
    # sort keys too
    table = store.create_table("t", SCHEMA)
    refused(table, pa.table({"key": ["a"], "ts": ["1"], "value": ["x"]}),
            "key field 'ts' of input is string but the table's key is int64")
    # value fields keep their casts (an int into a string value is the safe cast)
    table.ingest(pa.table({"key": ["a"], "ts": [1], "value": [5]}))
    assert table.query().column("value").to_pylist() == ["5"]


def test_csv_and_json_text_is_still_parsed_to_the_schema(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA)
    ints = store.create_table("ints", sd.Schema(row_keys=[("id", pa.int64())],
                                                values=[("v", pa.string())]))
    csv = tmp_path / "in.csv"
    csv.write_text("key,ts,value\n7,1,x\n8,2,y\n", encoding="utf-8")
    table.ingest_files([str(csv)])  # the digits are text of a string key
    assert table.query(keys=["7"]).num_rows == 1
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"id": 7, "v": "x"}\n', encoding="utf-8")
    ints.ingest_files([str(jsonl)])
    assert ints.query(keys=[7]).num_rows == 1
