"""Data, tables, input files and checks shared by the Spark tests (no Spark needed here)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import sediment as sd

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string()), ("n", pa.int64())])
COLUMNS = ["key", "ts", "value", "n"]


def spark_and_store(*pairs: tuple[str, str]) -> Any:
    """Run a test on these (Spark session, store) pairs of the ``spark`` and ``store_uri``
    fixtures, e.g. ``("local", "local"), ("cluster", "s3")``, instead of all four."""
    return pytest.mark.parametrize(
        ("spark", "store_uri"),
        [pytest.param(s, st, id=f"{s}-{st}", marks=[pytest.mark.s3] if st == "s3" else [])
         for s, st in pairs], indirect=True)


def make_frame(rows: int, *, keys: int = 40, seed: int = 0, start: int = 0) -> pd.DataFrame:
    """Rows over ``keys`` distinct keys (k000...), unique ``ts``, some null ``n``."""
    rng = np.random.default_rng(seed)
    ts = np.arange(start, start + rows, dtype=np.int64)
    n = rng.integers(0, 1000, rows).astype("float64")
    n[rng.random(rows) < 0.1] = np.nan
    return pd.DataFrame({
        "key": [f"k{int(k):03d}" for k in rng.integers(0, keys, rows)],
        "ts": ts,
        "value": [f"v{int(v)}" for v in rng.integers(0, 10_000, rows)],
        "n": pd.array(n, dtype="Int64"),
    })


def arrow(frame: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(frame, schema=SCHEMA.to_arrow(), preserve_index=False)


def open_store(store_uri: tuple[str, dict[str, Any]]) -> sd.Store:
    uri, options = store_uri
    return sd.Store.open(uri, **options, create=True)


def reader_options(store: sd.Store) -> dict[str, str]:
    """Options of ``spark.read.format("sediment")`` for this store (S3 settings included)."""
    spec = store.spec()
    out = {"store": str(spec["uri"])}
    out.update({k: str(v) for k, v in spec.items() if k != "uri" and v is not None})
    return out


def canonical(data: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Rows in one order (every column), index reset, nulls as None: the pandas reference."""
    frame = data.to_pandas() if isinstance(data, pa.Table) else data
    frame = frame[COLUMNS].astype({"ts": "int64", "n": "Int64", "key": "object",
                                   "value": "object"})
    return frame.sort_values(COLUMNS, na_position="first").reset_index(drop=True)


def assert_same_rows(actual: pa.Table | pd.DataFrame, *expected: pd.DataFrame) -> None:
    """``actual`` holds exactly the rows of the expected frames (as multisets)."""
    want = canonical(pd.concat(expected, ignore_index=True))
    got = canonical(actual)
    assert len(got) == len(want), f"{len(got)} rows, expected {len(want)}"
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def assert_sorted(table: pa.Table) -> None:
    keys = list(zip(table.column("key").to_pylist(), table.column("ts").to_pylist(),
                    strict=True))
    assert keys == sorted(keys), "query result is not sorted by (key, ts)"


def leaves(table: sd.Table) -> list[Any]:
    return [p for p in table.partitions() if p.is_leaf]


def assert_files_in_their_regions(table: sd.Table) -> None:
    """Every data file's keys lie inside the region of each partition referencing it."""
    parts = {p.id: p for p in table.partitions()}
    fs, _ = table._handle.objects.arrow_filesystem()
    refs = table.files()
    assert refs, "the table has no files"
    for ref in refs:
        keys = pq.read_table(table._handle.objects.path(ref.filename), columns=["key"],
                             filesystem=fs).column("key").to_pylist()
        assert keys, f"{ref.filename} is empty"
        region = parts[ref.partition_id].region
        for k in (min(keys), max(keys)):
            assert region.contains((k,)), (f"{ref.filename}: key {k!r} outside the region "
                                           f"{region} of partition {ref.partition_id}")


# ---- input files ---------------------------------------------------------------------------
def input_location(store: sd.Store, tmp_path: Path) -> tuple[pafs.FileSystem, str, str]:
    """Where to write input files: (filesystem, base path, base URI). On S3 for an S3 store
    (the store's bucket, outside the store's prefix), else a local folder."""
    root = store.objects.root()
    if root.uri.startswith("s3://"):
        fs, base = root.arrow_filesystem()
        bucket = base.split("/", 1)[0]
        folder = f"{bucket}/inputs-{uuid.uuid4().hex[:8]}"
        return fs, folder, f"s3://{folder}"
    local = tmp_path / f"inputs-{uuid.uuid4().hex[:8]}"
    local.mkdir(parents=True)
    return pafs.LocalFileSystem(), str(local), str(local)


def write_input(fs: pafs.FileSystem, base: str, name: str, frame: pd.DataFrame) -> None:
    """Write ``frame`` as Parquet, CSV or JSON lines, by the name's suffix."""
    table = arrow(frame)
    path = f"{base}/{name}"
    if name.endswith(".parquet"):
        pq.write_table(table, path, filesystem=fs)
    elif name.endswith(".csv"):
        with fs.open_output_stream(path) as out:
            pacsv.write_csv(table, out)
    elif name.endswith(".jsonl"):
        lines = "".join(json.dumps(r) + "\n" for r in table.to_pylist())
        with fs.open_output_stream(path) as out:
            out.write(lines.encode())
    else:
        raise ValueError(name)
