"""Ingest refusals: raw errors become ours, quiet acceptances are
refused, and the spill folder is the client's choice, not the store's.

Every refusal names what is wrong (table, field, row, file or path) and leaves the store as it
was: the same objects (status events aside), version and records.
"""

from __future__ import annotations

import errno
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli import app
from sediment.errors import DataError, StorageError
from sediment.files.writer import SortedFileWriter
from sediment.ingest import spill
from sediment.ingest.spill import SPILL_ENV, SortedRuns

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string()), ("n", pa.int64())])
SMALL_MEMORY = {"ingest.memory_limit_bytes": 1 << 20}  # the smallest: spills within ~1 MB


@pytest.fixture(autouse=True)
def _no_spill_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SPILL_ENV, raising=False)


def new_table(tmp_path: Path, **props: Any) -> sd.Table:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, split_points=["m"],
                               properties={"state.cache.refresh_seconds": 0, **props})
    table.ingest(rows(20, "base"))
    return table


def rows(n: int, prefix: str = "k") -> pa.Table:
    return pa.table({"key": [f"{prefix}{i:07d}" for i in range(n)], "ts": list(range(n)),
                     "value": [f"value number {i} " * 3 for i in range(n)], "n": [1] * n})


def big_input(batches: int = 8, n: int = 10_000) -> Iterator[pa.Table]:
    """Enough rows (~8 MB) to spill several runs past SMALL_MEMORY, keys across both leaves."""
    for b in range(batches):
        yield rows(n, prefix="aqz"[b % 3] + str(b))


def fingerprint(table: sd.Table) -> tuple[list[str], int, int]:
    # leases are this process's bookkeeping: a refused ingest deletes its lease entry at once
    objects = sorted(o.key for o in table.store.objects.list("")
                     if "/status/" not in o.key and "/pending/" not in o.key
                     and not o.key.endswith("/"))
    return objects, table.version, table.query().num_rows


def refused(table: sd.Table, error: type[Exception], match: str,
            action: Callable[[], Any]) -> str:
    """``action`` raises ``error`` matching ``match`` (and naming the table) and changes
    nothing; returns the message."""
    before = fingerprint(table)
    with pytest.raises(error, match=match) as info:
        action()
    assert fingerprint(table) == before, "the failed ingest changed the store"
    return str(info.value)


def watch_spills(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths of the run files present right after each spill."""
    seen: list[str] = []
    original = SortedRuns._spill

    def spy(self: SortedRuns) -> None:
        original(self)
        seen.extend(self.runs[-1:])
        assert os.path.exists(self.runs[-1])

    monkeypatch.setattr(SortedRuns, "_spill", spy)
    return seen


# ---- item 6: raw errors become DataError / StorageError ---------------------------------------
def test_lone_surrogate_key_names_field_and_row(tmp_path: Path) -> None:
    table = new_table(tmp_path)
    good = rows(5).to_pandas()
    bad = pd.DataFrame({"key": ["a", "b", "bad\ud800"], "ts": [1, 2, 3], "value": ["v"] * 3,
                        "n": [1, 2, 3]})
    message = refused(table, DataError, r"field 'key' at row 7 of input",
                      lambda: table.ingest([good, bad]))
    assert "table events" in message and "surrogates not allowed" in message
    assert "('bad\\ud800')" in message  # the value, escaped: the message prints anywhere


def test_pandas_column_mixing_str_and_int(tmp_path: Path) -> None:
    table = new_table(tmp_path)
    df = pd.DataFrame({"key": ["a", "b", 3, "d"], "ts": [1, 2, 3, 4], "value": ["v"] * 4,
                       "n": [1, 2, 3, 4]})
    message = refused(table, DataError, r"field 'key' at row 2 of input",
                      lambda: table.ingest(df))
    assert "table events" in message and "(3)" in message and "'int'" in message


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_spill_folder_missing_or_a_file(tmp_path: Path, kind: str) -> None:
    table = new_table(tmp_path, **SMALL_MEMORY)
    folder = tmp_path / "spill"
    if kind == "file":
        folder.write_text("not a folder")
    expected = "does not exist" if kind == "missing" else "is not a folder"
    message = refused(table, StorageError, expected,
                      lambda: table.ingest(big_input(), spill_dir=str(folder)))
    assert str(folder) in message and "table events" in message and "spill_dir" in message
    assert folder.exists() == (kind == "file"), "a missing spill folder is never created"


def test_spill_folder_from_the_environment_missing(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    table = new_table(tmp_path, **SMALL_MEMORY)
    monkeypatch.setenv(SPILL_ENV, str(tmp_path / "typo"))
    message = refused(table, StorageError, "does not exist",
                      lambda: table.ingest(rows(10)))
    assert f"${SPILL_ENV}" in message and str(tmp_path / "typo") in message


def test_full_disk_while_spilling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = new_table(tmp_path, **SMALL_MEMORY)
    folder = tmp_path / "spill"
    folder.mkdir()
    real = pa.OSFile

    def full_disk(path: str, mode: str = "r", **kw: Any) -> Any:
        if "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real(path, mode, **kw)

    monkeypatch.setattr(spill.pa, "OSFile", full_disk)
    message = refused(table, StorageError, "No space left on device",
                      lambda: table.ingest(big_input(), spill_dir=str(folder)))
    assert "table events" in message and str(folder) in message
    assert list(folder.iterdir()) == [], "the spill folder is cleaned up"


def test_full_disk_while_writing_data_files(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The second leaf's file fails: the first leaf's file, written and closed, is deleted
    too, and nothing is committed."""
    table = new_table(tmp_path)
    real = SortedFileWriter.write
    writers: list[str] = []

    def full_disk(self: SortedFileWriter, data: Any) -> None:
        if self.filename not in writers:
            writers.append(self.filename)
        if len(writers) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, data)

    monkeypatch.setattr(SortedFileWriter, "write", full_disk)
    data = pa.concat_tables([rows(50, "a"), rows(50, "z")])
    message = refused(table, StorageError, "No space left on device",
                      lambda: table.ingest(data))
    assert "table events" in message and writers[1] in message


# ---- item 8: quiet acceptances are refused ----------------------------------------------------
def test_two_fields_of_one_name(tmp_path: Path) -> None:
    table = new_table(tmp_path)
    data = rows(5)
    twice = pa.table(data.columns + [data.column("value")], names=[*data.column_names, "value"])
    refused(table, DataError, r"table events: input has two fields named 'value'",
            lambda: table.ingest(twice))
    frame = pd.DataFrame([["a", 1, "x", "y", 1]], columns=["key", "ts", "value", "value", "n"])
    refused(table, DataError, r"table events: input has two columns named 'value'",
            lambda: table.ingest(frame))
    csv = tmp_path / "twice.csv"
    csv.write_text("key,ts,value,value,n\na,1,x,y,1\n", encoding="utf-8")
    message = refused(table, DataError, r"two fields named 'value'",
                      lambda: table.ingest_files([str(csv)]))
    assert str(csv) in message


@pytest.mark.parametrize("values, given, text", [([1.5, 2.0], "double", "'1.5'"),
                                                 ([True, False], "bool", "'true'")])
def test_float_or_bool_is_no_string_key(tmp_path: Path, values: list[Any], given: str,
                                        text: str) -> None:
    table = new_table(tmp_path)
    data = pa.table({"key": values, "ts": [1, 2], "value": ["v", "w"], "n": [1, 2]})
    message = refused(table, DataError, rf"field 'key' of input is {given} but the table "
                      "stores it as string", lambda: table.ingest(data))
    assert "table events" in message and text in message
    # nor are integers (one rule for key types: tests/state/test_api_gaps.py)
    refused(table, DataError, r"key field 'key' of input is int64 but the table's key is "
            "string", lambda: table.ingest(pa.table({"key": [7], "ts": [1], "value": ["v"],
                                                      "n": [1]})))


def test_jsonl_extra_field_is_named(tmp_path: Path) -> None:
    table = new_table(tmp_path)
    path = tmp_path / "extra.jsonl"
    path.write_text('{"key": "a", "ts": 1, "value": "x", "n": 1}\n'
                    '{"key": "b", "ts": 2, "value": "y", "n": 2, "colour": "red"}\n',
                    encoding="utf-8")
    message = refused(table, DataError, r"field 'colour' \(first at row 1\) is not in the "
                      r"table's schema", lambda: table.ingest_files([str(path)]))
    assert str(path) in message


# ---- item 9: the spill folder is the client's ------------------------------------------------
def test_spill_dir_argument_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = new_table(tmp_path, **SMALL_MEMORY)
    folder = tmp_path / "my-spill"
    folder.mkdir()
    seen = watch_spills(monkeypatch)
    result = table.ingest(big_input(), spill_dir=str(folder))
    assert result.rows == 80_000 and table.query().num_rows == 80_020
    assert seen and all(Path(p).parent.parent == folder for p in seen), seen
    assert list(folder.iterdir()) == [], "runs are deleted after the ingest"


def test_spill_dir_environment_variable_is_used(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    table = new_table(tmp_path, **SMALL_MEMORY)
    folder = tmp_path / "env-spill"
    folder.mkdir()
    monkeypatch.setenv(SPILL_ENV, str(folder))
    seen = watch_spills(monkeypatch)
    table.ingest(big_input())
    assert seen and all(Path(p).parent.parent == folder for p in seen), seen
    # the argument wins over the environment
    other = tmp_path / "arg-spill"
    other.mkdir()
    seen.clear()
    table.ingest(big_input(batches=4), spill_dir=str(other))
    assert seen and all(Path(p).parent.parent == other for p in seen), seen


def test_cli_spill_dir_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = new_table(tmp_path, **SMALL_MEMORY)
    inputs = tmp_path / "in.parquet"
    pq.write_table(pa.concat_tables(big_input()), inputs)
    folder = tmp_path / "cli-spill"
    folder.mkdir()
    seen = watch_spills(monkeypatch)
    runner = CliRunner()
    result = runner.invoke(app, ["ingest", "events", str(inputs), "--spill-dir", str(folder),
                                 "--store", table.store.uri, "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert seen and all(Path(p).parent.parent == folder for p in seen), seen
    missing = runner.invoke(app, ["ingest", "events", str(inputs), "--spill-dir",
                                  str(tmp_path / "nope"), "--store", table.store.uri])
    assert missing.exit_code == 1 and "spill folder" in missing.stderr
    assert str(tmp_path / "nope") in missing.stderr and "Traceback" not in missing.output


def test_spill_dir_property_is_no_longer_read(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that set ingest.spill_dir (older versions read it) still opens and ingests;
    the property is ignored, and setting it again warns where the setting moved."""
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("x")
    with warnings.catch_warnings():  # the store as an older version left it
        warnings.simplefilter("ignore")
        new_table(tmp_path, **SMALL_MEMORY, **{"ingest.spill_dir": str(not_a_folder)})
    with warnings.catch_warnings(record=True) as caught:  # replaying its log may warn
        warnings.simplefilter("always")
        reopened = sd.Store.open(str(tmp_path / "store")).table("events")
        seen = watch_spills(monkeypatch)
        result = reopened.ingest(big_input())
    assert all("no longer read" in str(c.message) for c in caught)
    assert result.rows == 80_000 and reopened.query().num_rows == 80_020
    assert seen and all(not p.startswith(str(not_a_folder)) for p in seen)
    with pytest.warns(UserWarning, match=r"no longer read .* --spill-dir .*SEDIMENT_SPILL_DIR"):
        reopened.set_properties({"ingest.spill_dir": str(tmp_path)})


def test_an_upsert_refused_says_upsert(tmp_path: Path) -> None:
    """The refusals name the write they refuse: an upsert's say upsert, on every route of
    it (Arrow input, a DataFrame, a keyed write, files)."""
    table = new_table(tmp_path)
    extra = rows(2).append_column("colour", pa.array(["red", "blue"]))
    refused(table, DataError, r"upsert into table events: input has field 'colour'",
            lambda: table.upsert(extra))
    refused(table, DataError, r"upsert into table events: input has field 'colour'",
            lambda: table.upsert(extra, idempotency_key="u-1"))
    refused(table, DataError, r"upsert into table events: input has field 'colour'",
            lambda: table.upsert(extra.to_pandas()))
    refused(table, DataError, r"upsert into table events: no input files given",
            lambda: table.upsert_files([]))
    refused(table, DataError, r"ingest into table events: input has field 'colour'",
            lambda: table.ingest(extra))


def test_a_file_named_twice_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """By two names or a name and a glob: its records would be written twice (ingest,
    upsert, the batcher)."""
    from sediment.ingest import batcher

    table = new_table(tmp_path)
    path = tmp_path / "one.parquet"
    pq.write_table(rows(5), path)
    for names in ([str(path), str(path)], [str(path), str(tmp_path / "o*.parquet")],
                  [str(tmp_path / "one.parquet"), str(tmp_path / "." / "one.parquet")]):
        refused(table, DataError, "is named twice", lambda n=names: table.ingest_files(n))
        refused(table, DataError, "is named twice", lambda n=names: table.upsert_files(n))
        with pytest.raises(DataError, match="is named twice"):
            batcher.submit(table, names)
    assert batcher.pending(table) == []
