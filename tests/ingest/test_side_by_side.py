"""A large ingest is written by a writer per core, each a run of the key order
(``SortedRuns.sorted_streams``, ``ingest.standard._write_partitioned``): the table reads as
one writer would have written it, for every merge rule and for upserts (the last of equal
keys in the input wins, wherever the runs are cut), and one run's failure commits nothing.
The runs' size floor is lowered here so that small inputs take that path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import sediment as sd
import sediment.ingest.spill as spill
from sediment.errors import StorageError
from sediment.files.writer import SortedFileWriter

ROWS = 6_000


@pytest.fixture(autouse=True)
def _small_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill, "PARALLEL_MIN_ROWS", 1_000)
    monkeypatch.setattr("os.cpu_count", lambda: 3)  # three runs, whatever this machine has


def _table(tmp_path: Path, merge: str = "none", split_points: list[str] | None = None
           ) -> sd.Table:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    schema = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("v", pa.int64())])
    return store.create_table("t", schema, split_points=split_points,
                              properties={"merge": merge})


def _input(seed: int) -> pa.Table:
    """Keys with many repeats (equal record keys too), in random order."""
    rng = np.random.default_rng(seed)
    return pa.table({"key": [f"{k:05d}-user" for k in rng.integers(0, ROWS // 4, ROWS)],
                     "ts": pa.array(rng.integers(0, 3, ROWS), pa.int64()),
                     "v": pa.array(np.arange(ROWS), pa.int64())})


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["key", "ts", "v"], kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("split_points", [None, ["00500-user"]])
def test_plain_ingest_reads_as_one_writer_wrote_it(tmp_path: Path,
                                                   split_points: list[str] | None) -> None:
    table = _table(tmp_path, split_points=split_points)
    data = _input(1)
    result = table.ingest(data)
    assert result.rows == ROWS
    assert result.files >= 3  # the runs' files (a leaf two runs share has one of each)
    got = table.query().to_pandas()
    # key order, and equal keys in input order (v is the input position)
    assert got.equals(data.to_pandas().sort_values(["key", "ts"], kind="stable")
                      .reset_index(drop=True))


@pytest.mark.parametrize("merge, keep", [("last", "last"), ("first", "first")])
def test_merge_rules_keep_input_order_across_runs(tmp_path: Path, merge: str,
                                                  keep: str) -> None:
    table = _table(tmp_path, merge)
    data = _input(2)
    table.ingest(data)
    want = data.to_pandas().drop_duplicates(["key", "ts"], keep=keep)
    assert _sorted(table.query().to_pandas()).equals(_sorted(want))


def test_upsert_of_repeated_keys_keeps_the_last(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.ingest(_input(3))
    upsert = _input(4)
    result = table.upsert(upsert)
    assert result.files >= 3
    base = _input(3).to_pandas()
    new = upsert.to_pandas().drop_duplicates(["key", "ts"], keep="last")
    kept = base.merge(new[["key", "ts"]], on=["key", "ts"], how="left", indicator=True)
    want = pd.concat([kept[kept["_merge"] == "left_only"].drop(columns="_merge"), new])
    assert _sorted(table.query().to_pandas()).equals(_sorted(want))


def test_a_run_that_fails_commits_nothing(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path)
    table.ingest(_input(5).slice(0, 10))
    before = table.version, sorted(f.filename for f in table.files())
    real = SortedFileWriter.write
    seen: list[str] = []

    def write(self: SortedFileWriter, data: pa.Table | pa.RecordBatch) -> None:
        if self.filename not in seen:
            seen.append(self.filename)
        if len(seen) >= 2 and self.filename == seen[1]:
            raise OSError("disk full (test)")
        real(self, data)

    monkeypatch.setattr(SortedFileWriter, "write", write)
    with pytest.raises(StorageError, match="disk full"):
        table.ingest(_input(6))
    assert (table.version, sorted(f.filename for f in table.files())) == before
    data_files = sorted(p.name for p in (tmp_path / "store").rglob("*.parquet")
                        if "/data/" in str(p))
    assert len(data_files) == 1  # the first ingest's file only: the runs' files are deleted


def test_one_writer_when_asked(tmp_path: Path) -> None:
    """A Spark task stages its rows with one writer (its executor's other cores run other
    tasks): one file per leaf, whatever the input's size."""
    from sediment.ingest.standard import stage_batches

    table = _table(tmp_path)
    handle = table._handle
    staged = stage_batches(handle, handle.states.head(),
                           (("input", b) for b in _input(7).to_batches()), writers=1)
    assert staged.rows == ROWS and len(staged.references) == 1
    assert staged.staging is not None
    staged.staging.delete()
