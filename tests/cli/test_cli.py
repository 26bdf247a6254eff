"""The ``sediment`` CLI: every admin command, its --json output, the store option and errors."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner, Result

import sediment as sd
from sediment.cli import admin as cli_admin
from sediment.cli import app
from sediment.cli import errors as cli_errors
from sediment.cli import options as cli_options
from sediment.cli import output as cli_format
from sediment.cli import terminal as cli_terminal
from sediment.cli.parsing import convert_split_point
from sediment.errors import TableNotFoundError
from sediment.properties import describe_properties

SCRIPT = Path(sys.executable).with_name("sediment")


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests must not pick up a SEDIMENT_STORE from the developer's shell."""
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def store(tmp_path: Path) -> str:
    """An empty store (as `sediment init` makes it: other commands never create one)."""
    path = str(tmp_path / "store")
    sd.Store.open(path, create=True)
    return path


def run(runner: CliRunner, *args: str, env: dict[str, str] | None = None,
        input: str | None = None) -> Result:
    return runner.invoke(app, list(args), env=env, input=input)


def ok(runner: CliRunner, *args: str, **kw: Any) -> Result:
    """Run a command that must succeed."""
    result = run(runner, *args, **kw)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def fails(runner: CliRunner, *args: str, **kw: Any) -> str:
    """Run a command that must fail cleanly; returns its stderr."""
    result = run(runner, *args, **kw)
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    # A clean failure: the exit, not an escaped exception, and no traceback anywhere.
    assert isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return result.stderr


def json_of(result: Result) -> Any:
    return json.loads(result.stdout)


@pytest.fixture
def events(runner: CliRunner, store: str) -> str:
    """A store with table ``events`` (string key, int64 sort key, two values, 3 leaves)."""
    ok(runner, "create-table", "events", "--store", store, "--row-key", "key:string",
       "--sort-key", "ts:int64", "--value", "value:string", "--value", "count:int64",
       "--split-point", "g", "--split-point", "p")
    return store


# ---- help, store resolution -----------------------------------------------------------------
def test_help_lists_every_command(runner: CliRunner) -> None:
    out = ok(runner, "--help").stdout
    for command in ("init", "tables", "create-table", "describe", "drop-table", "clear",
                    "reinitialise", "history",
                    "properties", "set-properties", "online", "offline"):
        assert command in out


def test_version(runner: CliRunner) -> None:
    assert ok(runner, "--version").stdout.strip() == f"sediment {sd.__version__}"


def test_no_store_is_a_clear_error(runner: CliRunner) -> None:
    err = fails(runner, "tables")
    assert "--store" in err and "SEDIMENT_STORE" in err


def test_read_command_does_not_create_a_missing_store(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    err = fails(runner, "tables", "--store", str(missing))
    assert "no Sediment store" in err and "sediment init" in err
    assert not missing.exists()


def test_store_from_environment(runner: CliRunner, store: str) -> None:
    ok(runner, "init", env={"SEDIMENT_STORE": store})
    ok(runner, "create-table", "t", "--row-key", "k:int64", env={"SEDIMENT_STORE": store})
    assert json_of(ok(runner, "tables", "--json", env={"SEDIMENT_STORE": store})) == ["t"]
    # --store wins over the environment
    other = store + "-other"
    ok(runner, "init", "--store", other, env={"SEDIMENT_STORE": store})
    assert json_of(ok(runner, "tables", "--json", "--store", other,
                      env={"SEDIMENT_STORE": store})) == []


# ---- init, properties ---------------------------------------------------------------------------
def test_init_prints_uri_and_creates_store(runner: CliRunner, store: str) -> None:
    out = ok(runner, "init", "--store", store).stdout.strip()
    assert out == Path(store).resolve().as_uri()
    assert (Path(store) / "store.json").exists()


def test_init_json_and_store_properties(runner: CliRunner, tmp_path: Path) -> None:
    store = str(tmp_path / "fresh")
    first = json_of(ok(runner, "init", "--store", store, "--json",
                       "--property", "compaction.batch_size=8"))
    assert first["created"] is True
    assert first["properties"] == {"compaction.batch_size": 8}
    again = json_of(ok(runner, "init", "--store", store, "--json", "-p", "compaction.ratio=4"))
    assert again["created"] is False
    assert again["properties"] == {"compaction.batch_size": 8, "compaction.ratio": 4.0}
    # store properties are defaults for new tables
    ok(runner, "create-table", "t", "--store", store, "--row-key", "k:string")
    props = json_of(ok(runner, "describe", "t", "--store", store, "--json"))["properties"]
    assert props["compaction.batch_size"] == 8


def test_init_rejects_unknown_property(runner: CliRunner, store: str) -> None:
    err = fails(runner, "init", "--store", store, "--property", "no.such=1")
    assert "no.such" in err
    err = fails(runner, "init", "--store", store, "--property", "compaction.batch_size")
    assert "NAME=VALUE" in err


def test_properties_lists_every_property(runner: CliRunner) -> None:
    rows = json_of(ok(runner, "properties", "--json"))
    assert rows == json.loads(json.dumps(describe_properties()))
    text = ok(runner, "properties").stdout
    assert "partition.split.threshold" in text and "compaction.strategy" in text


def test_properties_with_store_shows_store_defaults(runner: CliRunner, store: str) -> None:
    ok(runner, "init", "--store", store, "-p", "compaction.batch_size=6")
    rows = {r["name"]: r for r in json_of(ok(runner, "properties", "--store", store, "--json"))}
    assert rows["compaction.batch_size"]["store_value"] == 6
    assert rows["compaction.batch_size"]["default"] == 12
    text = ok(runner, "properties", "--store", store).stdout
    assert "store 6" in text and "store 12" not in text


# ---- create-table -------------------------------------------------------------------------------
def test_create_table_from_options(runner: CliRunner, events: str) -> None:
    info = json_of(ok(runner, "describe", "events", "--store", events, "--json"))
    assert info["name"] == "events" and info["version"] == 1 and info["online"] is True
    schema = info["schema"]
    assert [(f["name"], f["type"], f["nullable"]) for f in schema["row_keys"]] == \
        [("key", "string", False)]
    assert [(f["name"], f["type"]) for f in schema["sort_keys"]] == [("ts", "int64")]
    assert [(f["name"], f["type"], f["nullable"]) for f in schema["values"]] == \
        [("value", "string", True), ("count", "int64", True)]
    assert info["leaf_partitions"] == 3 and info["partitions"] == 5
    assert info["files"] == info["references"] == info["records"] == 0
    # the library sees the same table
    table = sd.Store.open(events).table("events")
    assert table.schema.row_key_names == ["key"]


def test_create_table_json_output(runner: CliRunner, store: str) -> None:
    info = json_of(ok(runner, "create-table", "t", "--store", store, "--row-key", "k:int32",
                      "--value", "m:map<string, int64>", "-p", "parquet.compression=snappy",
                      "--json"))
    assert info["name"] == "t" and info["version"] == 1
    assert info["schema"]["values"][0]["type"] == "map<string, int64>"
    assert info["properties"]["parquet.compression"] == "snappy"


def test_create_table_text_output(runner: CliRunner, store: str) -> None:
    out = ok(runner, "create-table", "t", "--store", store, "--row-key", "k:string").stdout
    assert "created table t" in out and "version 1" in out


def test_create_table_offline(runner: CliRunner, store: str) -> None:
    out = ok(runner, "create-table", "t", "--store", store, "--row-key", "k:string",
             "--offline").stdout
    assert "created table t" in out and "offline" in out
    assert json_of(ok(runner, "describe", "t", "--store", store, "--json"))["online"] is False
    history = json_of(ok(runner, "history", "t", "--store", store, "--json"))
    assert len(history) == 1 and "offline" in history[0]["summary"]
    ok(runner, "online", "t", "--store", store)
    assert sd.Store.open(store).table("t").online


def test_create_table_from_schema_file(runner: CliRunner, store: str, tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({
        "row_keys": [{"name": "key", "type": "string"}],
        "sort_keys": [{"name": "ts", "type": "int64"}],
        "values": [{"name": "value", "type": "string"},
                   {"name": "score", "type": "double", "nullable": False}],
    }))
    ok(runner, "create-table", "t", "--store", store, "--schema", str(path))
    schema = sd.Store.open(store).table("t").schema
    assert schema.key_names == ["key", "ts"]
    assert schema.field("score").type == pa.float64()
    assert not schema.field("score").nullable


def test_schema_file_round_trips_describe_output(runner: CliRunner, events: str,
                                                 tmp_path: Path) -> None:
    schema = json_of(ok(runner, "describe", "events", "--store", events, "--json"))["schema"]
    path = tmp_path / "copy.json"
    path.write_text(json.dumps(schema))
    ok(runner, "create-table", "copy", "--store", events, "--schema", str(path))
    assert sd.Store.open(events).table("copy").schema == sd.Store.open(events).table(
        "events").schema


def test_schema_file_errors(runner: CliRunner, store: str, tmp_path: Path) -> None:
    err = fails(runner, "create-table", "t", "--store", store, "--schema",
                str(tmp_path / "missing.json"))
    assert "missing.json" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "not valid JSON" in fails(runner, "create-table", "t", "--store", store,
                                     "--schema", str(bad))
    bad.write_text(json.dumps({"row_keys": [{"name": "k", "type": "strng"}]}))
    err = fails(runner, "create-table", "t", "--store", store, "--schema", str(bad))
    assert "strng" in err and "bad.json" in err
    bad.write_text(json.dumps([1, 2]))
    assert "JSON object" in fails(runner, "create-table", "t", "--store", store,
                                  "--schema", str(bad))


def test_create_table_bad_type_name(runner: CliRunner, store: str) -> None:
    err = fails(runner, "create-table", "t", "--store", store, "--row-key", "k:strng")
    assert "strng" in err and "--row-key" in err
    err = fails(runner, "create-table", "t", "--store", store, "--row-key", "k:string",
                "--value", "v:list<nope>")
    assert "nope" in err


def test_create_table_bad_key_type(runner: CliRunner, store: str) -> None:
    err = fails(runner, "create-table", "t", "--store", store, "--row-key", "k:double")
    assert "'k'" in err


def test_create_table_malformed_field(runner: CliRunner, store: str) -> None:
    assert "NAME:TYPE" in fails(runner, "create-table", "t", "--store", store,
                                "--row-key", "key")


def test_create_table_invalid_name(runner: CliRunner, store: str) -> None:
    err = fails(runner, "create-table", "../x", "--store", store, "--row-key", "k:string")
    assert "invalid table name" in err and "'../x'" in err
    assert not (Path(store).parent / "x").exists()


def test_create_table_unknown_property(runner: CliRunner, store: str) -> None:
    err = fails(runner, "create-table", "t", "--store", store, "--row-key", "k:string",
                "--property", "compaction.bogus=1")
    assert "compaction.bogus" in err
    err = fails(runner, "create-table", "t", "--store", store, "--row-key", "k:string",
                "--property", "compaction.batch_size=lots")
    assert "compaction.batch_size" in err and "lots" in err


def test_create_table_needs_exactly_one_schema_source(runner: CliRunner, store: str,
                                                      tmp_path: Path) -> None:
    assert "--schema" in fails(runner, "create-table", "t", "--store", store)
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"row_keys": [{"name": "k", "type": "string"}]}))
    assert "not both" in fails(runner, "create-table", "t", "--store", store,
                               "--schema", str(path), "--row-key", "k:string")


def test_create_table_twice(runner: CliRunner, events: str) -> None:
    err = fails(runner, "create-table", "events", "--store", events, "--row-key", "k:string")
    assert "'events'" in err and "exists" in err


def test_split_points_are_typed_by_first_row_key(runner: CliRunner, store: str) -> None:
    ok(runner, "create-table", "ints", "--store", store, "--row-key", "k:int64",
       "--split-point", "-5", "--split-point", "10", "--split-point", "200")
    ok(runner, "create-table", "bins", "--store", store, "--row-key", "k:binary",
       "--row-key", "k2:int32", "--split-point", "m")
    st = sd.Store.open(store, create=True)
    leaves = [p for p in st.table("ints").partitions() if p.is_leaf]
    assert sorted(p.region.min for p in leaves if p.region.min) == [(-5,), (10,), (200,)]
    leaves = [p for p in st.table("bins").partitions() if p.is_leaf]
    assert [p.region.min for p in leaves if p.region.min] == [(b"m",)]


def test_split_point_errors(runner: CliRunner, store: str) -> None:
    err = fails(runner, "create-table", "t", "--store", store, "--row-key", "k:int64",
                "--split-point", "ten")
    assert "'ten'" in err and "'k'" in err
    err = fails(runner, "create-table", "t", "--store", store, "--row-key", "k:string",
                "--split-point", "m", "--split-point", "c")
    assert "increasing" in err


def test_convert_split_point_types() -> None:
    assert convert_split_point("42", pa.field("k", pa.int32())) == 42
    assert convert_split_point("abc", pa.field("k", pa.string())) == "abc"
    assert convert_split_point("é", pa.field("k", pa.binary())) == "é".encode()
    assert convert_split_point("2024-05-01", pa.field("k", pa.date32())) == dt.date(2024, 5, 1)
    assert convert_split_point("2024-05-01T10:00:00", pa.field("k", pa.timestamp("us"))) == \
        dt.datetime(2024, 5, 1, 10)
    assert convert_split_point("17", pa.field("k", pa.timestamp("ms"))) == 17
    with pytest.raises(cli_errors.CliError, match="not a valid date32"):
        convert_split_point("May", pa.field("k", pa.date32()))


# ---- tables, describe ---------------------------------------------------------------------------
def test_tables(runner: CliRunner, events: str) -> None:
    ok(runner, "create-table", "alpha", "--store", events, "--row-key", "k:string")
    assert json_of(ok(runner, "tables", "--store", events, "--json")) == ["alpha", "events"]
    assert ok(runner, "tables", "--store", events).stdout.split() == ["alpha", "events"]


def test_tables_empty_store(runner: CliRunner, store: str) -> None:
    ok(runner, "init", "--store", store)
    assert json_of(ok(runner, "tables", "--store", store, "--json")) == []
    assert ok(runner, "tables", "--store", store).stdout == ""


def test_describe_text(runner: CliRunner, events: str) -> None:
    out = ok(runner, "describe", "events", "--store", events).stdout
    for word in ("events", "Schema", "row key", "sort key", "ts", "count", "int64",
                 "online", "Contents", "all defaults"):
        assert word in out
    ok(runner, "set-properties", "events", "compaction.batch_size=5", "--store", events)
    out = ok(runner, "describe", "events", "--store", events).stdout
    assert "compaction.batch_size" in out and "differing from defaults" in out
    assert "partition.split.threshold" not in out  # only changed properties are shown


def test_describe_unknown_table(runner: CliRunner, events: str) -> None:
    err = fails(runner, "describe", "nope", "--store", events)
    assert "'nope'" in err
    assert "'nope'" in fails(runner, "describe", "nope", "--store", events, "--json")


# ---- drop-table ---------------------------------------------------------------------------------
def test_drop_table_needs_yes_off_a_terminal(runner: CliRunner, events: str) -> None:
    err = fails(runner, "drop-table", "events", "--store", events)
    assert "--yes" in err
    assert sd.Store.open(events).tables() == ["events"]
    assert "dropped table events" in ok(runner, "drop-table", "events", "--store", events,
                                        "--yes").stdout
    assert sd.Store.open(events).tables() == []


def test_drop_table_confirms_on_a_terminal(runner: CliRunner, events: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_terminal, "is_interactive", lambda: True)
    result = run(runner, "drop-table", "events", "--store", events, input="n\n")
    assert result.exit_code == 1
    assert sd.Store.open(events).tables() == ["events"]
    ok(runner, "drop-table", "events", "--store", events, input="y\n")
    assert sd.Store.open(events).tables() == []


def test_drop_unknown_table(runner: CliRunner, events: str) -> None:
    assert "'ghost'" in fails(runner, "drop-table", "ghost", "--store", events, "--yes")


# ---- history ------------------------------------------------------------------------------------
def test_history(runner: CliRunner, events: str) -> None:
    ok(runner, "set-properties", "events", "compaction.ratio=4", "--store", events)
    ok(runner, "offline", "events", "--store", events)
    rows = json_of(ok(runner, "history", "events", "--store", events, "--json"))
    assert [r["version"] for r in rows] == [1, 2, 3]
    assert [r["kind"] for r in rows] == ["initialise", "set_properties", "set_online"]
    assert "compaction.ratio" in rows[1]["summary"]
    when = dt.datetime.fromisoformat(rows[0]["time"])
    assert when.tzinfo is not None
    assert abs((dt.datetime.now(dt.UTC) - when).total_seconds()) < 600
    last = json_of(ok(runner, "history", "events", "--store", events, "--json", "--limit", "2"))
    assert [r["version"] for r in last] == [2, 3]
    text = ok(runner, "history", "events", "--store", events, "-n", "1").stdout
    assert "set_online" in text and "initialise" not in text


def test_history_unknown_table(runner: CliRunner, events: str) -> None:
    assert "'nope'" in fails(runner, "history", "nope", "--store", events)


# ---- set-properties, online/offline -------------------------------------------------------------
def test_set_properties(runner: CliRunner, events: str) -> None:
    out = json_of(ok(runner, "set-properties", "events", "compaction.batch_size=7",
                     "parquet.compression=snappy", "--store", events, "--json"))
    assert out == {"table": "events", "version": 2,
                   "set": {"compaction.batch_size": 7, "parquet.compression": "snappy"},
                   "removed": []}
    text = ok(runner, "set-properties", "events", "compaction.ratio=2.5",
              "--remove", "parquet.compression", "--store", events).stdout
    assert "version 3" in text
    props = sd.Store.open(events).table("events").properties
    assert props["compaction.batch_size"] == 7
    assert props["compaction.ratio"] == 2.5
    assert props["parquet.compression"] == "zstd"
    assert len(sd.Store.open(events).table("events").history()) == 3  # one version per call


def test_set_properties_errors(runner: CliRunner, events: str) -> None:
    err = fails(runner, "set-properties", "events", "no.such=1", "--store", events)
    assert "'no.such'" in err and "events" in err
    err = fails(runner, "set-properties", "events", "--remove", "no.such", "--store", events)
    assert "'no.such'" in err
    err = fails(runner, "set-properties", "events", "compaction.strategy=random",
                "--store", events)
    assert "compaction.strategy" in err
    assert "nothing to change" in fails(runner, "set-properties", "events", "--store", events)
    assert "NAME=VALUE" in fails(runner, "set-properties", "events", "compaction.ratio",
                                 "--store", events)
    assert "both set and removed" in fails(runner, "set-properties", "events",
                                           "compaction.ratio=2", "--remove",
                                           "compaction.ratio", "--store", events)
    assert "'ghost'" in fails(runner, "set-properties", "ghost", "compaction.ratio=2",
                              "--store", events)
    assert sd.Store.open(events).table("events").version == 1  # nothing was committed


def test_online_offline(runner: CliRunner, events: str) -> None:
    out = json_of(ok(runner, "offline", "events", "--store", events, "--json"))
    assert out == {"table": "events", "online": False, "version": 2}
    assert json_of(ok(runner, "describe", "events", "--store", events, "--json"))["online"] \
        is False
    assert "offline" in ok(runner, "describe", "events", "--store", events).stdout
    assert "is online" in ok(runner, "online", "events", "--store", events).stdout
    assert sd.Store.open(events).table("events").online is True
    assert "'ghost'" in fails(runner, "online", "ghost", "--store", events)


# ---- extensibility and the real console script --------------------------------------------------
@pytest.fixture
def extra_command() -> Iterator[None]:
    """A command registered on ``app`` the way another module would add one."""

    @app.command("raise-for-test", hidden=True)
    def _raise(store: cli_options.StoreOption = None, json_out: cli_options.JsonOption = False
               ) -> None:
        table = "x" if store is None else store
        cli_format.emit({"table": table}, json_out, lambda d: d["table"])
        raise TableNotFoundError(f"no table {table!r} [bold]here[/bold]")

    yield
    app.registered_commands.pop()


def test_errors_from_added_commands_are_reported(runner: CliRunner,
                                                 extra_command: None) -> None:
    result = run(runner, "raise-for-test", "--store", "s", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {"table": "s"}
    # no markup interpretation, no traceback
    assert result.stderr == "error: no table 's' [bold]here[/bold]\n"


def test_unexpected_exceptions_are_not_swallowed(runner: CliRunner,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 store: str) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli_admin, "open_store", boom)
    # a bug is one ``error: internal error`` line naming the exception, exit code 1 ...
    stderr = fails(runner, "create-table", "t", "--store", store, "--row-key", "k:string")
    assert stderr.startswith("error: internal error: RuntimeError: a bug")
    assert stderr.count("\n") == 1
    # ... and SEDIMENT_DEBUG=1 lets it escape with its traceback
    result = run(runner, "create-table", "t", "--store", store, "--row-key", "k:string",
                 env={"SEDIMENT_DEBUG": "1"})
    assert isinstance(result.exception, RuntimeError)


def test_console_script_smoke(tmp_path: Path) -> None:
    assert SCRIPT.exists(), SCRIPT
    store = str(tmp_path / "st")
    env = {**os.environ, "SEDIMENT_STORE": store}

    def sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                              timeout=120, check=False)

    init = sh("init")
    assert init.returncode == 0, init.stderr
    assert init.stdout.strip() == Path(store).resolve().as_uri()
    made = sh("create-table", "t", "--row-key", "k:string", "--value", "v:int64")
    assert made.returncode == 0, made.stderr
    assert json.loads(sh("tables", "--json").stdout) == ["t"]
    missing = sh("describe", "nope")
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: ") and "'nope'" in missing.stderr
    assert "Traceback" not in missing.stderr


# ---- clear, reinitialise ----------------------------------------------------
def _ingest_events(events: str) -> sd.Table:
    table = sd.Store.open(events).table("events")
    table.ingest(pa.table({"key": ["a", "k", "z"], "ts": [1, 2, 3], "value": ["x", "y", "z"],
                           "count": [1, 2, 3]}))
    return table


def _records(events: str) -> int:
    """Records in ``events`` read through a fresh handle (a handle caches its head)."""
    return sd.Store.open(events).table("events").query().num_rows


def test_clear_needs_yes_off_a_terminal(runner: CliRunner, events: str) -> None:
    _ingest_events(events)
    assert "--yes" in fails(runner, "clear", "events", "--store", events)
    assert _records(events) == 3
    assert "cleared table events" in ok(runner, "clear", "events", "--store", events,
                                        "--yes").stdout
    assert _records(events) == 0
    assert sd.Store.open(events).table("events").schema.field_names == [
        "key", "ts", "value", "count"]
    assert "nothing to clear" in ok(runner, "clear", "events", "--store", events, "-y").stdout


def test_clear_confirms_on_a_terminal(runner: CliRunner, events: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _ingest_events(events)
    monkeypatch.setattr(cli_terminal, "is_interactive", lambda: True)
    assert run(runner, "clear", "events", "--store", events, input="n\n").exit_code == 1
    assert _records(events) == 3
    ok(runner, "clear", "events", "--store", events, input="y\n")
    assert _records(events) == 0


def test_clear_unknown_table(runner: CliRunner, events: str) -> None:
    assert "'ghost'" in fails(runner, "clear", "ghost", "--store", events, "--yes")


def test_reinitialise(runner: CliRunner, events: str) -> None:
    _ingest_events(events)
    err = fails(runner, "reinitialise", "events", "--store", events, "--split-point", "m")
    assert "holds records" in err and "clear it first" in err
    ok(runner, "clear", "events", "--store", events, "--yes")
    out = ok(runner, "reinitialise", "events", "--store", events, "--split-point", "c",
             "--split-point", "m", "--split-point", "t").stdout
    assert "reinitialised table events" in out and "4 leaf partitions" in out
    d = json_of(ok(runner, "reinitialise", "events", "--store", events, "--json"))
    assert d["leaf_partitions"] == 1
    assert "increasing" in fails(runner, "reinitialise", "events", "--store", events,
                                 "--split-point", "m", "--split-point", "c")
    assert _records(events) == 0


def test_a_process_assembles_only_the_command_it_runs() -> None:
    """``main`` hands typer the app narrowed to the invoked command or group (root options
    and their values skipped); root options alone, or a name of no command, get the whole
    app (its help lists every command; its error names the unknown one)."""
    from sediment.cli.app import invoked, narrowed

    assert invoked(["--store", "s", "query", "t"]) == "query"
    assert invoked(["--trust-iterator-module", "m", "--store=s", "alter", "add-columns"]) \
        == "alter"
    assert invoked(["--version"]) is None and invoked([]) is None
    query = narrowed("query")
    assert [c.callback.__name__ for c in query.registered_commands] == ["query"]
    assert not query.registered_groups and query.registered_callback is app.registered_callback
    alter = narrowed("alter")
    assert [g.name for g in alter.registered_groups] == ["alter"]
    assert not alter.registered_commands
    assert narrowed(None) is app and narrowed("nosuch") is app
    assert len(app.registered_commands) > 40  # the app itself is left whole
