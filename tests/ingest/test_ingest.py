"""Standard ingest: every input type, files, results, spilling, and bad input failing cleanly."""

from __future__ import annotations

import io
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import sediment as sd
from helpers import make_table
from reference import Reference, assert_matches, random_batch, string_key_pool
from sediment.errors import DataError
from sediment.files.sidecars import KEYS, SAMPLE, sidecar_name
from sediment.ingest import IngestResult
from sediment.ingest.spill import SortedRuns

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string()), ("n", pa.int64())])


def new_table(root: Path | str, schema: sd.Schema = SCHEMA, **kwargs: Any) -> sd.Table:
    return make_table(root, schema=schema, **kwargs)


def data_objects(table: sd.Table) -> list[str]:
    return sorted(o.key for o in table._handle.objects.list("data/"))


def sample_rows(n: int, seed: int = 0) -> pa.Table:
    rng = random.Random(seed)
    return random_batch(rng, SCHEMA, n, {"key": string_key_pool(rng, 30),
                                         "ts": [-(2**63), 0, 1, 2**63 - 1]})


# ---- accepted input types --------------------------------------------------------------------
def _inputs(data: pa.Table) -> dict[str, Any]:
    half = data.num_rows // 2
    a, b = data.slice(0, half), data.slice(half)

    def gen() -> Iterator[Any]:
        yield a.to_pandas()  # a generator may mix kinds
        yield from b.to_batches(max_chunksize=7)

    return {
        "table": data,
        "record_batch": data.combine_chunks().to_batches()[0],
        "reader": pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=9)),
        "dataframe": data.to_pandas(),
        "list_of_batches": data.to_batches(max_chunksize=11),
        "list_of_tables": [a, b],
        "generator": gen(),
        "tuple_of_frames": (a.to_pandas(), b.to_pandas()),
    }


@pytest.mark.parametrize("kind", list(_inputs(sample_rows(10))))
def test_every_input_type(tmp_path: Path, kind: str) -> None:
    data = sample_rows(300)
    table = new_table(tmp_path, split_points=["c"])
    seen: list[int] = []
    result = table.ingest(_inputs(data)[kind], progress=seen.append)
    assert result.rows == 300 == sum(seen)
    ref = Reference(SCHEMA)
    ref.add(data)
    assert_matches(table.query(), ref)


def test_input_columns_reordered_and_cast(tmp_path: Path) -> None:
    """Fields may come in any order and in castable types (int32 -> int64, large_string)."""
    table = new_table(tmp_path)
    data = pa.table({
        "n": pa.array([1, None, 3], pa.int32()),
        "value": pa.array(["x", None, "😀"], pa.large_string()),
        "ts": pa.array([3, 2, 1], pa.int16()),
        "key": pa.array(["b", "a", "b"], pa.large_string()),
    })
    table.ingest(data)
    got = table.query()
    assert got.schema == SCHEMA.to_arrow()
    assert got.to_pylist() == [
        {"key": "a", "ts": 2, "value": None, "n": None},
        {"key": "b", "ts": 1, "value": "😀", "n": 3},
        {"key": "b", "ts": 3, "value": "x", "n": 1},
    ]


def test_pandas_with_unicode_and_nullable_ints(tmp_path: Path) -> None:
    table = new_table(tmp_path, split_points=["é"])
    df = pd.DataFrame({
        "key": ["ñandú", "", "😀", "e\u0301", "é", "Z"],
        "ts": [2**63 - 1, -(2**63), 0, 5, 5, 1],
        "value": ["a", None, "c", "d", "e", "f"],
        "n": pd.array([1, None, 3, 4, None, 6], dtype="Int64"),
    })
    result = table.ingest(df)
    assert result.rows == 6
    got = table.query()
    assert got["key"].to_pylist() == ["", "Z", "e\u0301", "é", "ñandú", "😀"]
    assert got["n"].to_pylist() == [None, 6, 4, None, 1, 3]
    assert table.query(keys=["😀"])["ts"].to_pylist() == [0]


def test_ingest_result_fields(tmp_path: Path) -> None:
    data = sample_rows(2000, seed=3)
    table = new_table(tmp_path, split_points=["b", "d"])
    before = table.version
    result = table.ingest(data)
    assert isinstance(result, IngestResult)
    assert result.rows == 2000
    assert result.version == table.version == before + 1
    assert result.seconds > 0
    assert result.rows_per_second > 0
    touched = {f.partition_id for f in table.files()}
    assert result.files == len(touched) == 3
    sizes = {o.key: o.size for o in table._handle.objects.list("data/")}
    data_files = [k for k in sizes if k.endswith(".parquet")]  # sidecars do not end so
    assert len(data_files) == result.files
    assert result.bytes == sum(sizes[k] for k in data_files) > 0
    assert sum(f.records for f in table.files()) == 2000
    for f in table.files():  # every data file has its sample and key filters
        assert sidecar_name(f.filename, SAMPLE) in sizes
        assert sidecar_name(f.filename, KEYS) in sizes


def test_shared_file_strategy_writes_one_file(tmp_path: Path) -> None:
    data = sample_rows(2000, seed=4)
    table = new_table(tmp_path, split_points=["b", "d"],
                      **{"ingest.write_strategy": "shared_file"})
    result = table.ingest(data)
    assert result.files == 1
    refs = table.files()
    assert len(refs) == 3 and len({r.filename for r in refs}) == 1
    assert sum(r.records for r in refs) == 2000
    ref = Reference(SCHEMA)
    ref.add(data)
    assert_matches(table.query(), ref)


def test_empty_input_commits_nothing(tmp_path: Path) -> None:
    table = new_table(tmp_path)
    v = table.version
    result = table.ingest(SCHEMA.to_arrow().empty_table())
    assert (result.rows, result.files, result.bytes, result.version) == (0, 0, 0, v)
    assert table.ingest([]).rows == 0
    assert table.version == v
    assert data_objects(table) == []


# ---- files -----------------------------------------------------------------------------------
def _write_inputs(folder: Path, data: pa.Table) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    n = data.num_rows
    parts = [data.slice(0, n // 4), data.slice(n // 4, n // 4), data.slice(n // 2, n // 4),
             data.slice(3 * (n // 4))]
    paths = {
        "p1": folder / "a.parquet", "p2": folder / "b.parquet",
        "csv": folder / "c.csv", "jsonl": folder / "d.jsonl",
    }
    pq.write_table(parts[0], paths["p1"], row_group_size=50)
    pq.write_table(parts[1], paths["p2"])
    pacsv.write_csv(parts[2], paths["csv"])
    with open(paths["jsonl"], "w", encoding="utf-8") as out:
        for row in parts[3].to_pylist():
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return paths


def test_ingest_files_of_every_format(tmp_path: Path) -> None:
    data = sample_rows(800, seed=5)
    paths = _write_inputs(tmp_path / "in", data)
    table = new_table(tmp_path / "store", split_points=["c"])
    result = table.ingest_files([str(p) for p in paths.values()])
    assert result.rows == 800
    ref = Reference(SCHEMA)
    ref.add(data)
    assert_matches(table.query(), ref)


def test_ingest_files_glob_and_single_path(tmp_path: Path) -> None:
    data = sample_rows(400, seed=6)
    paths = _write_inputs(tmp_path / "in", data)
    table = new_table(tmp_path / "store")
    result = table.ingest_files(str(tmp_path / "in" / "*.parquet"))
    assert result.rows == 200
    ref = Reference(SCHEMA)
    ref.add(data.slice(0, 200))
    assert_matches(table.query(), ref)
    table.ingest_files(str(paths["csv"]))
    table.ingest_files([f"file://{paths['jsonl']}"])
    ref.add(data.slice(200))
    assert_matches(table.query(), ref)


def test_csv_empty_string_key(tmp_path: Path) -> None:
    """An empty CSV cell in a string key field is the empty key, not a null."""
    path = tmp_path / "in.csv"
    path.write_text("key,ts,value,n\n,1,,\na,2,x,3\n", encoding="utf-8")
    table = new_table(tmp_path / "store")
    table.ingest_files([str(path)])
    assert table.query().to_pylist() == [
        {"key": "", "ts": 1, "value": None, "n": None},
        {"key": "a", "ts": 2, "value": "x", "n": 3},
    ]


def test_ingest_files_on_store(store_uri: tuple[str, dict[str, Any]]) -> None:
    """Input files inside the store itself (S3 inputs reuse the store's S3 settings)."""
    uri, options = store_uri
    data = sample_rows(300, seed=7)
    table = new_table(uri, options=options, split_points=["c"])
    for i, part in enumerate((data.slice(0, 100), data.slice(100))):
        buf = io.BytesIO()
        pq.write_table(part, buf)
        table.store.objects.put(f"inputs/part-{i}.parquet", buf.getvalue())
    result = table.ingest_files([table.store.uri + "/inputs/*.parquet"])
    assert result.rows == 300
    ref = Reference(SCHEMA)
    ref.add(data)
    assert_matches(table.query(), ref)
    assert_matches(table.query(keys=["", "a"]), ref, keys=["", "a"])
    version, objects = table.version, data_objects(table)
    for paths, message in (([table.store.uri + "/nothing/here/*.parquet"], "no files match"),
                           ([table.store.uri + "/inputs/*.csv"], "no files match"),
                           ([table.store.uri + "/inputs/absent.parquet"], "does not exist")):
        with pytest.raises(DataError, match=message):
            table.ingest_files(paths)
    assert table.version == version and data_objects(table) == objects


# ---- bounded memory: spilling ----------------------------------------------------------------
@pytest.mark.slow  # ingests past the memory limit, many spill files: the full lane
@pytest.mark.parametrize("strategy", ["per_partition", "shared_file"])
def test_ingest_past_memory_limit_spills_and_stays_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strategy: str) -> None:
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    table = new_table(tmp_path / "store", split_points=["g", "p"],
                      **{"ingest.memory_limit_bytes": 1 << 20,
                         "ingest.write_strategy": strategy,
                         "parquet.row_group_rows": 4096})
    spills: list[int] = []
    original = SortedRuns._spill

    def counting_spill(self: Any) -> None:
        spills.append(self.buffered)
        original(self)

    monkeypatch.setattr(SortedRuns, "_spill", counting_spill)
    rng = np.random.default_rng(42)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    frames: list[pd.DataFrame] = []

    def batches() -> Iterator[pa.Table]:
        for _ in range(60):
            n = 5000
            chars = letters[rng.integers(0, 26, size=(n, 4))]
            keys = ["".join(c) for c in chars]
            df = pd.DataFrame({"key": keys, "ts": rng.integers(-5, 5, n),
                               "value": [f"v{i}" for i in rng.integers(0, 10**6, n)],
                               "n": rng.integers(0, 10, n)})
            frames.append(df)
            yield pa.Table.from_pandas(df, schema=SCHEMA.to_arrow(), preserve_index=False)

    result = table.ingest(batches(), spill_dir=str(spill_dir))
    assert result.rows == 300_000
    assert len(spills) >= 5, "the ingest should have spilled sorted runs"
    assert not spill_dir.exists() or not any(spill_dir.iterdir()), "runs not cleaned up"
    refs = table.files()
    if strategy == "per_partition":  # runs merged: one file per touched leaf
        assert result.files == len(refs) == 3
        assert len({r.partition_id for r in refs}) == 3
    else:
        assert result.files == 1 and len(refs) == 3
    got = table.query().to_pandas()
    want = pd.concat(frames, ignore_index=True)
    assert len(got) == len(want)
    # key order of the result itself
    k, t = got["key"].to_numpy(dtype=object), got["ts"].to_numpy()
    assert bool(np.all((k[1:] > k[:-1]) | ((k[1:] == k[:-1]) & (t[1:] >= t[:-1]))))
    cols = ["key", "ts", "value", "n"]
    pd.testing.assert_frame_equal(
        got.sort_values(cols).reset_index(drop=True).astype(object),
        want.sort_values(cols).reset_index(drop=True).astype(object))
    # each data file is sorted with row groups of exactly parquet.row_group_rows rows
    for name in {r.filename for r in refs}:
        md = pq.ParquetFile(table._handle.objects.path(name)).metadata
        sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
        assert all(s == 4096 for s in sizes[:-1]) and 0 < sizes[-1] <= 4096


# ---- bad input fails before anything is committed ---------------------------------------------
def _bad_inputs() -> dict[str, tuple[Any, str]]:
    good = sample_rows(10, seed=8)
    # a value field: text in a key field is refused whole (one rule for key types)
    bad_ts = pa.table({"key": ["a", "b", "c"], "ts": [1, 2, 3], "value": ["v"] * 3,
                       "n": ["1", "2", "x"]})
    null_key = pa.table({"key": ["a", "b", None, "d"], "ts": [1, 2, 3, 4],
                         "value": ["v"] * 4, "n": [1, 2, 3, 4]})
    return {
        "missing_field": (good.drop_columns(["value"]), "'value'"),
        "extra_field": (good.append_column("bogus", pa.array([1] * 10)), "'bogus'"),
        "uncastable": (bad_ts, r"'n' at row 2"),
        "uncastable_second_batch": ([good, bad_ts], r"'n' at row 12"),
        "null_key": (null_key, r"'key' is null at row 2"),
        "null_key_later_batch": ([good, good, null_key], r"'key' is null at row 22"),
        "not_data": (42, "cannot ingest int"),
        "bad_element": ([good, "text"], "cannot ingest an element of type str"),
    }


@pytest.mark.parametrize("case", list(_bad_inputs()))
def test_bad_input_gives_data_error_and_changes_nothing(tmp_path: Path, case: str) -> None:
    table = new_table(tmp_path, split_points=["c"])
    table.ingest(sample_rows(50, seed=9))
    version, objects = table.version, data_objects(table)
    data, message = _bad_inputs()[case]
    with pytest.raises(DataError, match=message) as info:
        table.ingest(data)
    assert table.name in str(info.value) or case in ("not_data", "bad_element")
    assert table.version == version
    assert data_objects(table) == objects
    assert table.query().num_rows == 50


def test_int32_overflow_names_field_and_row(tmp_path: Path) -> None:
    schema = sd.Schema(row_keys=[("k", pa.int32())], values=[("v", pa.string())])
    table = new_table(tmp_path, schema)
    version = table.version
    data = pa.table({"k": pa.array([1, 2, 2**31, 4], pa.int64()), "v": ["a"] * 4})
    with pytest.raises(DataError, match=r"'k' at row 2"):
        table.ingest(data)
    assert table.version == version and data_objects(table) == []


def test_bad_batch_after_spilling_writes_nothing(tmp_path: Path) -> None:
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    table = new_table(tmp_path / "store", **{"ingest.memory_limit_bytes": 1 << 20})
    version = table.version

    def batches() -> Iterator[pa.Table]:
        for i in range(12):
            yield sample_rows(4000, seed=i)
        yield pa.table({"key": ["a", None], "ts": [1, 2], "value": ["v", "w"], "n": [1, 2]})

    with pytest.raises(DataError, match=r"'key' is null at row 48001"):
        table.ingest(batches(), spill_dir=str(spill_dir))
    assert table.version == version
    assert data_objects(table) == []
    assert not any(spill_dir.iterdir())


def test_bad_files_give_data_error(tmp_path: Path) -> None:
    table = new_table(tmp_path / "store")
    table.ingest(sample_rows(20))
    version, objects = table.version, data_objects(table)
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("key,ts,value,n\na,1,x,1\nb,notanumber,y,2\n", encoding="utf-8")
    extra_json = tmp_path / "extra.jsonl"
    extra_json.write_text('{"key": "a", "ts": 1, "value": "x", "n": 1, "zzz": 2}\n',
                          encoding="utf-8")
    good = tmp_path / "good.parquet"
    pq.write_table(sample_rows(30), good)
    missing_col = tmp_path / "missing.parquet"
    pq.write_table(sample_rows(30).drop_columns(["n"]), missing_col)
    cases: list[tuple[Any, str]] = [
        ([], "no input files"),
        ([str(tmp_path / "nothing" / "*.parquet")], "no files match"),
        ([str(tmp_path / "absent.parquet")], "does not exist"),
        ([str(good), str(bad_csv)], "bad.csv"),
        ([str(extra_json)], "extra.jsonl"),
        ([str(good), str(missing_col)], r"missing\.parquet.*'n'|'n'.*missing\.parquet"),
        ([str(tmp_path / "bad.txt")], "cannot tell the format"),
    ]
    (tmp_path / "bad.txt").write_text("x", encoding="utf-8")
    for paths, message in cases:
        with pytest.raises(DataError, match=message):
            table.ingest_files(paths)
        assert table.version == version, paths
        assert data_objects(table) == objects, paths
    assert os.path.exists(good)
