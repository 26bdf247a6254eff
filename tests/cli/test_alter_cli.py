"""``sediment alter add-column|drop-column|rename-column|widen-column``: each change against
an independent pandas reference (the same change applied to a frame of the records), one
version per call (several columns in one call too), the output (human and ``--json``), and
the refusals (one ``error:`` line naming the table and the field, exit 1, nothing committed;
usage errors exit 2). The commands run in process (typer's runner: their own code, quick);
the console script runs one change as a separate process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from typer.testing import CliRunner, Result

import sediment as sd
from sediment.cli import app

SCRIPT = Path(sys.executable).with_name("sediment")
SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string()), ("n", pa.int32())])


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)


def _table(tmp_path: Path, **props: Any) -> tuple[str, sd.Table, pd.DataFrame]:
    """Table ``events`` of two leaves holding 8 records; the records as a frame."""
    store = str(tmp_path / "store")
    table = sd.Store.open(store, create=True).create_table(
        "events", SCHEMA, split_points=["m"],
        properties={"state.cache.refresh_seconds": 0, **props})
    data = pa.table({"key": list("abcdnpqz"), "ts": list(range(8)),
                     "value": [f"v{i}" if i % 3 else None for i in range(8)],
                     "n": pa.array([i * 1000 - 3000 for i in range(8)], pa.int32())})
    table.ingest(data)
    return store, table, data.to_pandas()


def _records(table: sd.Table) -> list[dict[str, Any]]:
    """The table's records, as the reference's (None for a missing value, key order)."""
    df = table.query().to_pandas().sort_values("key")
    return [{k: None if v is None or v != v else v for k, v in r.items()}
            for r in df.to_dict("records")]


def _reference(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: None if v is None or v != v else v for k, v in r.items()}
            for r in df.sort_values("key").to_dict("records")]


def _cli(*args: str) -> Result:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def _refused(*args: str, code: int = 1) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    if code == 1:
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    return result.stderr


def test_each_change_matches_the_reference_one_version_per_call(tmp_path: Path) -> None:
    store, table, ref = _table(tmp_path)
    v0 = table.version

    out = _cli("alter", "add-column", "events", "colour:string", "score:float64",
               "--store", store).stdout
    assert out.splitlines()[0] == (f"altered table events: added colour:string, "
                                   f"score:double (version {v0 + 1})")
    assert "colour" in out and "score" in out and "Schema" in out
    assert table.version == v0 + 1  # two columns, one transaction
    ref = ref.assign(colour=None, score=None)
    assert _records(table) == _reference(ref)

    _cli("alter", "widen-column", "events", "n:int64", "--store", store)
    assert table.schema_at(table.version).to_arrow().field("n").type == pa.int64()
    assert table.query().schema.field("n").type == pa.int64()
    assert _records(table) == _reference(ref)  # every old value exactly

    _cli("alter", "rename-column", "events", "value", "note", "--store", store)
    ref = ref.rename(columns={"value": "note"})
    assert _records(table) == _reference(ref)  # the renamed column keeps its values

    _cli("alter", "drop-column", "events", "colour", "score", "--store", store)
    ref = ref.drop(columns=["colour", "score"])
    assert table.version == v0 + 4
    assert _records(table) == _reference(ref)
    assert table.schema_at(table.version).value_names == ["note", "n"]

    # a re-added name starts empty: the dropped column's values never come back
    _cli("alter", "add-column", "events", "score:int64", "--store", store)
    assert _records(table) == _reference(ref.assign(score=None))

    history = json.loads(_cli("history", "events", "--store", store, "--json").stdout)
    assert [(h["kind"], h["summary"]) for h in history[-5:]] == [
        ("alter_schema", "added colour:string, score:double"),
        ("alter_schema", "widened n to int64"),
        ("alter_schema", "renamed value to note"),
        ("alter_schema", "dropped colour, score"),
        ("alter_schema", "added score:int64")]
    # every version reads with its own schema
    assert list(table.query(version=v0).schema.names) == ["key", "ts", "value", "n"]


def test_json_prints_the_version_the_change_and_the_new_schema(tmp_path: Path) -> None:
    store, table, _ = _table(tmp_path)
    doc = json.loads(_cli("alter", "rename-column", "events", "value", "note", "--store",
                          store, "--json").stdout)
    assert doc["table"] == "events" and doc["version"] == table.version
    assert doc["change"] == "renamed value to note"
    schema = table.schema_at(table.version).to_json()
    assert doc["schema"] == {k: v for k, v in schema.items() if k != "arrow"}
    assert [f["name"] for f in doc["schema"]["values"]] == ["note", "n"]
    assert doc["schema"]["ids"] == [1, 2, 3, 4]  # the rename kept the column's id

    doc = json.loads(_cli("alter", "add-column", "events", "a:int8", "b:string",
                          "--store", store, "--json").stdout)
    assert doc["change"] == "added a:int8, b:string"
    assert doc["schema"]["ids"] == [1, 2, 3, 4, 5, 6] and doc["schema"]["last_field_id"] == 6
    assert doc["schema"]["values"][-2:] == [
        {"name": "a", "type": "int8", "nullable": True},
        {"name": "b", "type": "string", "nullable": True}]
    doc = json.loads(_cli("alter", "widen-column", "events", "a:int32", "--store", store,
                          "--json").stdout)
    assert doc["change"] == "widened a to int32" and doc["version"] == table.version
    doc = json.loads(_cli("alter", "drop-column", "events", "a", "b", "--store", store,
                          "--json").stdout)
    assert doc["change"] == "dropped a, b" and doc["schema"]["last_field_id"] == 6


@pytest.mark.parametrize(("args", "message"), [
    # key fields never change
    (["drop-column", "events", "key"], "table events: cannot drop key field 'key'"),
    (["rename-column", "events", "ts", "time"], "table events: cannot rename key field 'ts'"),
    (["widen-column", "events", "ts:int64"], "table events: cannot widen key field 'ts'"),
    (["add-column", "events", "key:string"], "table events: column 'key' already exists"),
    # unknown columns
    (["drop-column", "events", "value", "ghost"], "table events: no value column 'ghost'"),
    (["rename-column", "events", "ghost", "g"], "table events: no value column 'ghost'"),
    (["widen-column", "events", "ghost:int64"], "table events: no value column 'ghost'"),
    # narrowing, lossy or no change
    (["widen-column", "events", "n:int16"], "table events: column 'n': int32 -> int16 is "
                                            "not a widening"),
    (["widen-column", "events", "n:float32"], "table events: column 'n': int32 -> float is "
                                              "not a widening"),
    (["widen-column", "events", "value:int64"], "table events: column 'value': string -> "
                                                "int64 is not a widening"),
    (["widen-column", "events", "n:int32"], "table events: column 'n' is int32 already"),
    # duplicates and reserved names
    (["add-column", "events", "value:string"], "table events: column 'value' already exists"),
    (["add-column", "events", "c:int8", "c:int16"], "table events: column 'c' already exists"),
    (["rename-column", "events", "value", "n"], "table events: cannot rename 'value' to 'n': "
                                                "column 'n' already exists"),
    (["add-column", "events", "__sediment_x:int64"],
     "table events: field name '__sediment_x': names starting with '__sediment' are reserved"),
    (["rename-column", "events", "value", "__sediment_v"],
     "table events: field name '__sediment_v': names starting with '__sediment' are reserved"),
    # the NAME:TYPE syntax and types of create-table
    (["add-column", "events", "colour"], "add-column on table events: 'colour' must be "
                                         "NAME:TYPE"),
    (["add-column", "events", ":string"], "add-column on table events: ':string' must be "
                                          "NAME:TYPE"),
    (["widen-column", "events", "n"], "widen-column on table events: 'n' must be NAME:TYPE"),
    (["add-column", "events", "c:strng"], "add-column on table events: 'c:strng': unknown "
                                          "type 'strng'"),
    # a property naming the column
    (["drop-column", "events", "value"], "table events: dropped value would leave property "
                                         "'parquet.dictionary_columns'"),
    (["rename-column", "events", "value", "v2"], "table events: renamed value to v2 would "
                                                 "leave property 'parquet.dictionary_columns'"),
    # an unknown table
    (["add-column", "ghost", "c:int8"], "no table 'ghost'"),
])
def test_refusals_are_one_line_naming_the_table_and_commit_nothing(
        tmp_path: Path, args: list[str], message: str) -> None:
    store, table, ref = _table(tmp_path, **{"parquet.dictionary_columns": "value"})
    before = table.version
    err = _refused("alter", *args, "--store", store)
    assert re.search(message, err), err
    assert table.version == before
    assert table.schema_at(table.version).to_json() == SCHEMA.to_json()
    assert _records(table) == _reference(ref)


@pytest.mark.parametrize("args", [
    ["add-column", "events"], ["drop-column", "events"], ["rename-column", "events", "value"],
    ["widen-column", "events"], ["widen-column", "events", "n:int64", "value:large_string"],
    ["narrow-column", "events", "n:int8"],
])
def test_usage_errors_exit_2_and_commit_nothing(tmp_path: Path, args: list[str]) -> None:
    store, table, _ = _table(tmp_path)
    before = table.version
    _refused("alter", *args, "--store", store, code=2)
    assert table.version == before


def test_the_console_script(tmp_path: Path) -> None:
    """The installed ``sediment`` as a separate process: a rename, then a read."""
    store, table, ref = _table(tmp_path)
    env = {**os.environ, "SEDIMENT_STORE": store}
    done = subprocess.run([str(SCRIPT), "alter", "rename-column", "events", "n", "count"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"altered table events: renamed n to count (version "
                                  f"{table.version})")
    assert _records(table) == _reference(ref.rename(columns={"n": "count"}))
