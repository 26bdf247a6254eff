"""Bulk import on Spark (local[2,2] and a standalone cluster; local and S3 stores): DataFrames and
files equal the pandas reference, pre-splitting, files inside their leaves, bad input failing
before anything is committed, and a retried task leaving no duplicates."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from spark_helpers import (
    SCHEMA,
    assert_files_in_their_regions,
    assert_same_rows,
    assert_sorted,
    input_location,
    leaves,
    make_frame,
    open_store,
    spark_and_store,
    write_input,
)

import sediment as sd
from sediment.errors import DataError
from sediment.spark import bulk_import
from support.races import as_another_process

pytestmark = pytest.mark.spark

PRESPLIT = {"bulk_import.target_leaf_rows": 600}


@spark_and_store(("local", "local"), ("cluster", "s3"))
def test_dataframe_presplits_and_matches_reference(spark: Any, store_uri: Any) -> None:
    store = open_store(store_uri)
    table = store.create_table("events", SCHEMA, properties=PRESPLIT)
    frame = make_frame(3000, keys=60, seed=1)
    before = table.version

    result = bulk_import(spark, table, spark.createDataFrame(frame))

    assert result.rows == 3000
    assert len(leaves(table)) >= 4  # pre-split from a sample of the input
    assert_files_in_their_regions(table)
    # one file per touched leaf, committed with the splits in one transaction
    history = [h for h in table.history() if h.version > before]
    assert [h.kind for h in history] == ["add_files_with_splits"]
    assert history[0].version == result.version
    assert len(table.files()) == result.files
    out = table.query()
    assert_sorted(out)
    assert_same_rows(out, frame)
    # a second import adds to the same leaves without splitting again
    more = make_frame(500, keys=60, seed=2, start=10_000)
    leaves_before = len(leaves(table))
    bulk_import(spark, table, spark.createDataFrame(more))
    assert len(leaves(table)) == leaves_before
    assert_same_rows(table.query(), frame, more)
    assert_files_in_their_regions(table)


@spark_and_store(("local", "local"), ("cluster", "s3"))
def test_files_of_every_format_match_reference(spark: Any, store_uri: Any,
                                               tmp_path: Path) -> None:
    """Parquet, CSV and JSON lines, by path and by glob; on S3 when the store is on S3."""
    store = open_store(store_uri)
    table = store.create_table("events", SCHEMA, properties=PRESPLIT)
    fs, base, uri = input_location(store, tmp_path)
    frames = {"a.parquet": make_frame(800, seed=3), "b.parquet": make_frame(700, seed=4,
                                                                             start=1000),
              "c.csv": make_frame(600, seed=5, start=2000),
              "d.jsonl": make_frame(500, seed=6, start=3000)}
    for name, frame in frames.items():
        write_input(fs, base, name, frame)

    result = bulk_import(spark, table, [f"{uri}/*.parquet", f"{uri}/c.csv", f"{uri}/d.jsonl"])

    assert result.rows == 2600
    assert len(leaves(table)) >= 4
    assert_files_in_their_regions(table)
    assert_same_rows(table.query(), *frames.values())


def _bad_frames() -> list[tuple[str, pd.DataFrame, str]]:
    good = make_frame(200, seed=7)
    null_key = good.copy()
    null_key.loc[150, "key"] = None
    return [("missing field", good.drop(columns=["value"]), "value"),
            ("null key", null_key, "key")]


@pytest.mark.parametrize("case", [0, 1], ids=["missing-field", "null-key"])
def test_bad_dataframe_fails_naming_the_field_and_commits_nothing(spark: Any, tmp_path: Path,
                                                                   case: int) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, properties=PRESPLIT)
    _, frame, field = _bad_frames()[case]
    before = table.version
    with pytest.raises(DataError, match=repr(field)):
        bulk_import(spark, table, spark.createDataFrame(frame, schema=_spark_schema(frame)))
    assert table.version == before  # not even a pre-split
    assert table.files() == []
    assert table.query().num_rows == 0


def _spark_schema(frame: pd.DataFrame) -> str:
    types = {"key": "string", "ts": "bigint", "value": "string", "n": "bigint"}
    return ", ".join(f"{c} {types[c]}" for c in frame.columns)


def test_bad_files_fail_naming_the_field_and_commit_nothing(spark_local: Any,
                                                            tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, properties=PRESPLIT)
    inputs = tmp_path / "in"
    inputs.mkdir()
    good = make_frame(300, seed=8)
    write_input(pafs.LocalFileSystem(), str(inputs), "good.parquet", good)
    bad = good.copy()
    bad.loc[5, "key"] = None
    bad_table = pa.Table.from_pandas(bad, preserve_index=False)
    pq.write_table(bad_table, str(inputs / "null-key.parquet"))
    pq.write_table(pa.Table.from_pandas(good.drop(columns=["n"]), preserve_index=False),
                   str(inputs / "no-n.parquet"))
    before = table.version

    with pytest.raises(DataError, match="'key'") as err:
        bulk_import(spark_local, table, [str(inputs / "good.parquet"),
                                         str(inputs / "null-key.parquet")])
    assert "null-key.parquet" in str(err.value)
    with pytest.raises(DataError, match="'n'"):
        bulk_import(spark_local, table, [str(inputs / "no-n.parquet")])
    with pytest.raises(DataError, match="no files match"):
        bulk_import(spark_local, table, [str(inputs / "*.csv")])
    assert table.version == before
    assert table.files() == []


def _fail_first_attempt(marker: str) -> Any:
    """A mapInArrow function that passes batches through; the first task to run it (by a
    marker file) fails after emitting its rows, so Spark retries it."""

    def run(batches: Any) -> Any:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            first = True
        except FileExistsError:
            first = False
        yield from batches
        if first:
            raise RuntimeError("injected failure of a first task attempt")

    return run


def test_retried_task_leaves_no_duplicates(spark: Any, tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, properties=PRESPLIT)
    frame = make_frame(2000, seed=9)
    marker = str(tmp_path / "failed-once")
    source = spark.createDataFrame(frame).repartition(3)
    flaky = source.mapInArrow(_fail_first_attempt(marker), source.schema)

    result = bulk_import(spark, table, flaky)

    assert os.path.exists(marker)  # a task did fail once
    assert result.rows == 2000
    assert_same_rows(table.query(), frame)


def test_fields_with_any_name(spark_local: Any, tmp_path: Path) -> None:
    """Field names Spark would parse (a dot, a backtick, quotes, a backslash, spaces) import
    from a DataFrame and from a Parquet file: inside Spark the columns carry positional
    names."""
    odd = sd.Schema(row_keys=[("user.id", pa.string())], sort_keys=[("t`s", pa.int64())],
                    values=[('say "hi"', pa.string(), True), ("back\\slash x", pa.int64(), True)])
    names = odd.field_names
    frame = pd.DataFrame({names[0]: [f"u{i % 37:03d}" for i in range(400)],
                          names[1]: list(range(400)),
                          names[2]: [f"v{i}" for i in range(400)],
                          names[3]: [i * 3 for i in range(400)]})
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("odd", odd, properties=PRESPLIT)
    bulk_import(spark_local, table, spark_local.createDataFrame(frame))
    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    bulk_import(spark_local, table, [str(path)])
    got = table.query().to_pandas()
    want = pd.concat([frame, frame]).sort_values(names[:2], kind="stable")
    assert got.sort_values(names).reset_index(drop=True).equals(
        want.sort_values(names).reset_index(drop=True))
    table.compact(full=True)  # DataFusion merges fields of those names too
    assert len(table.query()) == 800


def _stage_tasks(spark: Any, group: str) -> list[int]:
    """Tasks of every stage the jobs of ``group`` ran (Spark's status tracker)."""
    tracker = spark.sparkContext.statusTracker()
    out = []
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in (info.stageIds if info else []):
            s = tracker.getStageInfo(stage)
            if s is not None:
                out.append(s.numTasks)
    return out


def test_default_import_of_one_file_is_one_leaf_one_commit_many_tasks(
        spark_local: Any, tmp_path: Path) -> None:
    """400k rows from ONE Parquet file with the default properties: one leaf (not 256), one
    commit, and the file is read by several tasks (its row groups cut into pieces)."""
    frame = make_frame(400_000, keys=2000, seed=11)
    path = tmp_path / "one.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path,
                   row_group_size=25_000)
    from sediment.spark.inputs import plan_pieces

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA)
    pieces, rows = plan_pieces([(pafs.LocalFileSystem(), str(path))], 2)
    assert len(pieces) >= 3 and {p[1] for p in pieces} == {str(path)}
    assert rows == 400_000  # from the footer: 400k <= target_leaf_rows, so nothing sampled
    before = table.version
    spark_local.sparkContext.setJobGroup("one-file-import", "bulk import of one file")
    try:
        result = bulk_import(spark_local, table, [str(path)])
    finally:
        spark_local.sparkContext.setJobGroup("", "")

    assert result.rows == 400_000
    assert len(leaves(table)) == 1 and result.files == 1
    assert [h.kind for h in table.history() if h.version > before] == ["add_files"]
    # the reading stages run one task per piece (the listing's own stage has only 2)
    assert max(_stage_tasks(spark_local, "one-file-import")) >= len(pieces)
    assert_same_rows(table.query(), frame)


def test_pieces_of_files_read_every_row_once(spark_local: Any, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Parquet row-group pieces and JSON-lines byte ranges (cut small here) read each row
    exactly once, and import into leaves split in the same one commit; a bad JSON line in a
    piece is reported by its row in the file."""
    from sediment.spark import inputs

    monkeypatch.setattr(inputs, "MIN_PIECE_BYTES", 4096)
    parquet, jsonl = make_frame(3000, seed=12), make_frame(2500, seed=13, start=5000)
    pq.write_table(pa.Table.from_pandas(parquet, preserve_index=False),
                   tmp_path / "a.parquet", row_group_size=200)
    write_input(pafs.LocalFileSystem(), str(tmp_path), "b.jsonl", jsonl)
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, properties={"bulk_import.target_leaf_rows":
                                                             2000})
    before = table.version

    result = bulk_import(spark_local, table, [str(tmp_path / "a.parquet"),
                                              str(tmp_path / "b.jsonl")])

    assert result.rows == 5500
    assert len(leaves(table)) >= 2
    assert [h.kind for h in table.history() if h.version > before] == \
        ["add_files_with_splits"]
    assert_files_in_their_regions(table)
    assert_same_rows(table.query(), parquet, jsonl)
    lines = (tmp_path / "b.jsonl").read_text().splitlines(keepends=True)
    lines[2000] = lines[2000].replace('"key": "', '"key": null, "x": "')
    (tmp_path / "c.jsonl").write_text("".join(lines))
    with pytest.raises(DataError, match="c.jsonl"):
        bulk_import(spark_local, table, [str(tmp_path / "c.jsonl")])
    assert table.version == result.version


def test_retired_min_leaf_partitions_still_opens(spark_local: Any, tmp_path: Path) -> None:
    """A table that set bulk_import.min_leaf_partitions (older versions read it) opens with a
    warning, and a bulk import ignores it: leaves follow the data."""
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    with pytest.warns(UserWarning, match="min_leaf_partitions"):
        table = store.create_table("events", SCHEMA,
                                   properties={"bulk_import.min_leaf_partitions": 16})
    frame = make_frame(2000, seed=14)
    with pytest.warns(UserWarning, match="min_leaf_partitions"):
        # another process reads the table's properties anew (in this one, the head it
        # shares with the first handle was read once, and warned once)
        reopened = as_another_process(sd.Store.open(str(tmp_path / "store")).table("events"))
        bulk_import(spark_local, reopened, spark_local.createDataFrame(frame))
    assert len(leaves(table)) == 1
    assert_same_rows(reopened.query(), frame)


def test_splits_commit_with_the_files_and_conflict_with_a_concurrent_split(
        spark_local: Any, tmp_path: Path) -> None:
    """The planned splits land with the files (a reopened store replays them); a split of the
    same leaf committed by another writer before the import's commit makes the whole import
    invalid: nothing of it is committed and its files are deleted."""
    import uuid

    from sediment.core.transactions import SplitPartition
    from sediment.errors import TransactionInvalidError
    from sediment.handle import handle_of

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, properties=PRESPLIT)
    frame = make_frame(3000, keys=60, seed=15)
    h = handle_of(table)
    root = h.states.head().leaf_partitions()[0].id

    def split_first(_: Any) -> None:
        h.states.commit(SplitPartition(root, ("k020",), uuid.uuid4().hex[:16],
                                       uuid.uuid4().hex[:16]))

    with pytest.raises(TransactionInvalidError, match="no longer a leaf"):
        bulk_import(spark_local, table, spark_local.createDataFrame(frame),
                    before_commit=split_first)
    assert [h.kind for h in table.history()][-1] == "split_partition"
    assert table.files() == [] and len(leaves(table)) == 2
    assert not [p for p in (tmp_path / "store").rglob("*.parquet")
                if "data" in p.parts]  # the import's files are deleted

    result = bulk_import(spark_local, table, spark_local.createDataFrame(frame))
    reopened = sd.Store.open(str(tmp_path / "store")).table("events")
    assert len(leaves(reopened)) == len(leaves(table)) > 2
    assert reopened.version == result.version
    assert_files_in_their_regions(reopened)
    assert_same_rows(reopened.query(), frame)


def test_the_cli_command_imports_on_the_session_it_starts(spark_local: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``sediment bulk-import TABLE GLOB --master M`` (README's shell card; the card's own run
    ingests instead, so the docs test starts no JVM of its own): the command asks
    ``sediment.spark.session`` for a session on ``M``, imports every file of the glob in one
    commit, reports it and stops its session. Here the session it gets is the Spark lane's,
    whose ``stop`` is recorded instead of done (the lane's other tests still need it)."""
    from typer.testing import CliRunner

    import sediment.spark
    from sediment.cli.app import app

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA)
    fs, base, uri = input_location(store, tmp_path)
    frames = [make_frame(400, seed=21), make_frame(300, seed=22, start=1000)]
    for i, frame in enumerate(frames):
        write_input(fs, base, f"part-{i}.parquet", frame)
    calls: list[tuple[str | None, str]] = []

    class Session:
        """The lane's session, its ``stop`` recorded."""

        def __getattr__(self, name: str) -> Any:
            return getattr(spark_local, name)

        def stop(self) -> None:
            calls.append((None, "stop"))

    def session(master: str | None = None, **kwargs: Any) -> Any:
        calls.append((master, "session"))
        return Session()

    monkeypatch.setattr(sediment.spark, "session", session)
    before = table.version
    out = CliRunner().invoke(app, ["bulk-import", "events", f"{uri}/*.parquet",
                                   "--master", "local[*]", "--store", str(tmp_path / "store"),
                                   "--json"])

    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["table"] == "events" and report["rows"] == 700
    assert calls == [("local[*]", "session"), (None, "stop")]
    # (the command committed through its own handle: a fresh one reads the new head)
    table = sd.Store.open(str(tmp_path / "store")).table("events")
    history = [h for h in table.history() if h.version > before]
    assert [h.version for h in history] == [report["version"]]
    assert_same_rows(table.query(), *frames)
