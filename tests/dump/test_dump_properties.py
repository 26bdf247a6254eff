"""A dump carries every table property of its source (issue 34): a table loaded from it
answers as the source did (an aggregating table aggregates after the load), custom
properties come back as they were, a dump written before dumps carried properties still
loads, and a job manifest whose properties this Sediment refuses is refused before anything
is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import sediment as sd
from sediment.errors import CorruptMetadataError
from sediment.storage import open_object_store

SCHEMA = sd.Schema(row_keys=[("key", pa.string())],
                   values=[("count", pa.int64(), True), ("label", pa.string(), True)])
AGGREGATE = json.dumps([{"type": "aggregate", "functions": {"count": "sum"}}])


def _batch(n: int, seed: int) -> pa.Table:
    """``n`` rows over 20 keys (many duplicates: the aggregation has work to do)."""
    keys = [f"k{(i * 7 + seed) % 20:02d}" for i in range(n)]
    return pa.table({"key": keys, "count": [i + seed for i in range(n)],
                     "label": [f"l{seed}-{i}" for i in range(n)]}, schema=SCHEMA.to_arrow())


def _pandas_sum(batches: list[pa.Table]) -> list[dict[str, Any]]:
    """The independent reference: one row per key, counts summed, the last label kept."""
    df = pd.concat([b.to_pandas() for b in batches], ignore_index=True)
    out = df.groupby("key", sort=True).agg(count=("count", "sum"), label=("label", "last"))
    return [{"key": k, "count": int(r["count"]), "label": r["label"]}
            for k, r in out.iterrows()]


def _dump(table: sd.Table, root: Path) -> str:
    return table.dump(str(root)).manifest_uri


def _job(manifest_uri: str) -> tuple[Any, str, dict[str, Any]]:
    root, job = manifest_uri.rsplit("/", 2)[0], "/".join(manifest_uri.rsplit("/", 2)[1:])
    objects = open_object_store(root)
    doc = json.loads(objects.get(job))
    doc.pop("crc32")  # edited and re-encoded, it reads as a manifest written before seals
    return objects, job, doc


def test_an_aggregating_table_answers_alike_after_dump_and_load(tmp_path: Path) -> None:
    src = sd.Store.open(str(tmp_path / "src"), create=True)
    table = src.create_table("agg", SCHEMA, split_points=["k10"],
                             properties={"query.iterators": AGGREGATE,
                                         "compaction.iterators": AGGREGATE})
    batches = [_batch(60, s) for s in (1, 2, 3)]
    for b in batches:
        table.ingest(b)
    want = _pandas_sum(batches)
    assert table.query().to_pylist() == want

    manifest = _dump(table, tmp_path / "dumps")
    dest = sd.Store.open(str(tmp_path / "dest"), create=True)
    loaded = dest.load(manifest, "agg")
    assert loaded.properties["query.iterators"] == AGGREGATE
    assert loaded.query().to_pylist() == want
    assert loaded.query(keys=["k03"]).to_pylist() == [r for r in want if r["key"] == "k03"]
    # and compaction keeps aggregating there (the compaction iterators came along too)
    loaded.ingest(_batch(40, 4))
    loaded.compact()
    assert loaded.query().to_pylist() == _pandas_sum([*batches, _batch(40, 4)])


def test_custom_properties_come_back_as_they_were(tmp_path: Path) -> None:
    custom = {"compaction.batch_size": 5, "parquet.row_group_rows": 1024,
              "retention.seconds": 3600.0, "partition.split.threshold": 5000,
              "compaction.strategy": "basic", "parquet.dictionary_columns": "label",
              "ingest.stall_files": 9}
    src = sd.Store.open(str(tmp_path / "src"), create=True)
    table = src.create_table("t", SCHEMA, properties=custom)
    table.ingest(_batch(50, 1))
    table.set_properties({"gc.delay_seconds": 60.0}, remove=["ingest.stall_files"])
    manifest = _dump(table, tmp_path / "dumps")
    dest = sd.Store.open(str(tmp_path / "dest"), create=True)
    loaded = dest.load(manifest, "t")
    assert loaded.describe()["properties"] == table.describe()["properties"]
    assert loaded.properties["gc.delay_seconds"] == 60.0
    assert loaded.properties["ingest.stall_files"] == 0
    assert loaded.query().to_pylist() == table.query().to_pylist()
    # an existing table keeps its own properties (the load only adds files)
    other = dest.create_table("other", SCHEMA)
    dest.load(manifest, "other")
    assert other.properties["compaction.batch_size"] != 5
    assert sorted(other.query().column("key").to_pylist()) == \
        sorted(table.query().column("key").to_pylist())


def test_a_member_of_a_scheme_loads_as_a_table_of_its_own(tmp_path: Path) -> None:
    src = sd.Store.open(str(tmp_path / "src"), create=True)
    src.create_scheme("s", [("key", pa.string())], ["k05"])
    table = src.create_table("m", SCHEMA, scheme="s",
                             properties={"query.iterators": AGGREGATE})
    batches = [_batch(30, 1), _batch(30, 2)]
    for b in batches:
        table.ingest(b)
    manifest = _dump(table, tmp_path / "dumps")
    _, _, doc = _job(manifest)
    assert "partition.scheme" not in doc["properties"]
    dest = sd.Store.open(str(tmp_path / "dest"), create=True)
    loaded = dest.load(manifest, "m")
    assert loaded.properties["partition.scheme"] == ""
    assert loaded.query().to_pylist() == _pandas_sum(batches)


def test_a_dump_without_properties_still_loads(tmp_path: Path) -> None:
    """Dumps written before job manifests carried properties: the store's defaults apply."""
    src = sd.Store.open(str(tmp_path / "src"), create=True)
    table = src.create_table("t", SCHEMA, properties={"compaction.batch_size": 5})
    table.ingest(_batch(50, 1))
    manifest = _dump(table, tmp_path / "dumps")
    objects, job, doc = _job(manifest)
    del doc["properties"]
    objects.put(job, json.dumps(doc).encode())
    dest = sd.Store.open(str(tmp_path / "dest"), create=True)
    loaded = dest.load(manifest, "t")
    assert loaded.properties["compaction.batch_size"] == 12
    assert loaded.query().to_pylist() == table.query().to_pylist()


@pytest.mark.parametrize(("properties", "match"), [
    ({"no.such.property": 1}, "no.such.property"),
    ({"compaction.batch_size": "many"}, "compaction.batch_size"),
    ({"query.iterators": '[{"type": "aggregate", "functions": {"nope": "sum"}}]'}, "nope"),
    ({"partition.scheme": "abc"}, "partition.scheme"),
    (["query.iterators"], "must be an object"),
], ids=["unknown", "bad-value", "iterator-field", "scheme", "not-an-object"])
def test_a_manifest_with_refused_properties_is_refused(tmp_path: Path, properties: Any,
                                                       match: str) -> None:
    src = sd.Store.open(str(tmp_path / "src"), create=True)
    table = src.create_table("t", SCHEMA)
    table.ingest(_batch(20, 1))
    manifest = _dump(table, tmp_path / "dumps")
    objects, job, doc = _job(manifest)
    doc["properties"] = properties
    objects.put(job, json.dumps(doc).encode())
    dest = sd.Store.open(str(tmp_path / "dest"), create=True)
    with pytest.raises(CorruptMetadataError, match=match):
        dest.load(manifest, "t")
    assert dest.tables() == []
    assert not any(o.key.startswith("tables/") for o in dest.objects.list(""))
