"""The bad-input catalogue (docs/bad-input.md), one test per row.

Every bad input must raise a SedimentError of the documented class whose message names what
is wrong (field, row, file, property, name, path), and leave the table exactly as it was: same
version, same records, same objects (no stray data file, no log entry, no catalog entry).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import workers as w

import sediment as sd
from sediment.core.deletions import COMPACT_KEYS, KEYS_FORMAT
from sediment.errors import (
    CorruptDataError,
    CorruptMetadataError,
    DataError,
    InvalidTableNameError,
    ObjectNotFoundError,
    PropertyError,
    QueryError,
    SchemaError,
    UnsupportedFormatError,
)
from sediment.files.sidecars import SAMPLE, sidecar_name
from sediment.state.log import FORMAT_VERSION, log_key
from support.races import as_another_process


@pytest.fixture
def store(tmp_path: Path) -> sd.Store:
    return sd.Store.open(str(tmp_path / "store"), create=True)


@pytest.fixture
def table(store: sd.Store) -> sd.Table:
    t = store.create_table(w.TABLE, w.SCHEMA, split_points=["m"],
                           properties={"compaction.strategy": "basic",
                                       "compaction.batch_size": 2})
    t.ingest(w.to_arrow(w.batch_rows("base", 0, 50)))
    t.ingest(w.to_arrow(w.batch_rows("base", 1, 50)))
    return t


def good(n: int = 10, batch: int = 9) -> pa.Table:
    return w.to_arrow(w.batch_rows("new", batch, n))


def fingerprint(store: sd.Store) -> dict[str, Any]:
    """Everything a failed operation must not change: every object of the store (catalog,
    logs, snapshots, tags, data files; status events excepted) and each table's records.
    This process's pending-file leases are settled first (empty ones deleted, as the heartbeat
    does every 20 s on its own schedule): a lease still naming files stays visible."""
    from sediment.state import pending

    pending.flush()
    objects = sorted(o.key for o in store.objects.list("")
                     if "/status/" not in o.key and not o.key.endswith("/"))
    tables = {}
    for name in store.tables():
        t = sd.Store.open(store.uri).table(name)
        tables[name] = (t.version, w.digest(t.query().column("value").to_pylist()))
    return {"objects": objects, "tables": tables}


@contextlib.contextmanager
def leaves_store_as_it_was(store: sd.Store) -> Iterator[None]:
    before = fingerprint(store)
    yield
    assert fingerprint(store) == before, "the failed operation changed the store"


def expect(store: sd.Store, error: type[Exception], match: str,
           action: Callable[[], Any]) -> pytest.ExceptionInfo[Any]:
    """``action`` raises ``error`` matching ``match`` and changes nothing."""
    with leaves_store_as_it_was(store), pytest.raises(error, match=match) as info:
        action()
    return info


# ---- records -------------------------------------------------------------------------------
def test_wrong_schema_missing_field(store: sd.Store, table: sd.Table) -> None:
    expect(store, DataError, r"table proof: input has no field 'ts'",
           lambda: table.ingest(good().drop_columns(["ts"])))


def test_wrong_schema_extra_field(store: sd.Store, table: sd.Table) -> None:
    expect(store, DataError, r"field 'colour' which is not in the table's schema",
           lambda: table.ingest(good().append_column("colour", pa.array(["red"] * 10))))


def test_null_key(store: sd.Store, table: sd.Table) -> None:
    keys = pa.array(["a"] * 7 + [None] + ["b"] * 2)
    expect(store, DataError, r"key field 'key' is null at row 7",
           lambda: table.ingest(good().set_column(0, "key", keys)))


def test_null_key_in_a_later_batch(store: sd.Store, table: sd.Table) -> None:
    """Rows are counted across batches; the first (valid) batch is not committed either."""
    bad = good(batch=2).set_column(0, "key", pa.array(["a"] * 3 + [None] + ["b"] * 6))
    expect(store, DataError, r"key field 'key' is null at row 13",
           lambda: table.ingest([good(), bad]))


def test_wrong_types(store: sd.Store, table: sd.Table) -> None:
    # a value field: text in a key field is refused whole (one rule for key types)
    n = pa.array(["1", "2", "3", "soon"] + ["4"] * 6)
    data = good()
    expect(store, DataError, r"field 'n' at row 3 of input cannot be cast from string to int64",
           lambda: table.ingest(data.set_column(data.schema.get_field_index("n"), "n", n)))


def test_wrong_nested_type(store: sd.Store, table: sd.Table) -> None:
    n = pa.array([[1]] * 10)
    expect(store, DataError, r"field 'n' at row 0 of input cannot be cast from list",
           lambda: table.ingest(good().set_column(3, "n", n)))


def test_unsupported_input_object(store: sd.Store, table: sd.Table) -> None:
    expect(store, DataError, r"cannot ingest dict",
           lambda: table.ingest({"key": ["a"], "ts": [1]}))


# ---- files ---------------------------------------------------------------------------------
def test_corrupt_parquet_file(store: sd.Store, table: sd.Table, tmp_path: Path) -> None:
    path = tmp_path / "corrupt.parquet"
    pq.write_table(good(500), path, row_group_size=50)
    data = bytearray(path.read_bytes())
    data[len(data) - 40 : len(data) - 20] = b"\xff" * 20  # inside the footer
    path.write_bytes(bytes(data))
    expect(store, DataError, r"cannot read parquet file '.*corrupt\.parquet'",
           lambda: table.ingest_files([str(path)]))


def test_not_parquet_at_all(store: sd.Store, table: sd.Table, tmp_path: Path) -> None:
    path = tmp_path / "garbage.parquet"
    path.write_bytes(b"PAR1 this is not a parquet file PAR1")
    expect(store, DataError, r"cannot read parquet file '.*garbage\.parquet'",
           lambda: table.ingest_files([str(path)]))


def test_truncated_parquet_file(store: sd.Store, table: sd.Table, tmp_path: Path) -> None:
    path = tmp_path / "truncated.parquet"
    pq.write_table(good(200), path)
    path.write_bytes(path.read_bytes()[:-100])
    expect(store, DataError, r"cannot read parquet file '.*truncated\.parquet'",
           lambda: table.ingest_files([str(path)]))


def test_good_file_then_bad_file(store: sd.Store, table: sd.Table, tmp_path: Path) -> None:
    """One ingest of several files is one transaction: a bad file stops all of them."""
    ok, bad = tmp_path / "ok.parquet", tmp_path / "bad.parquet"
    pq.write_table(good(), ok)
    pq.write_table(good(), bad)
    bad.write_bytes(bad.read_bytes()[:50])
    expect(store, DataError, r"bad\.parquet",
           lambda: table.ingest_files([str(ok), str(bad)]))


def test_bad_csv_value(store: sd.Store, table: sd.Table, tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("key,ts,value,n\nab,1,x,1\ncd,notanumber,y,2\n")
    expect(store, DataError, r"cannot read csv file '.*in\.csv'.*'notanumber'",
           lambda: table.ingest_files([str(path)]))


def test_csv_text_that_reads_as_null_elsewhere_is_kept(table: sd.Table, tmp_path: Path) -> None:
    """Only an empty cell is null: Arrow's default null markers ("NA", "null", "N/A",
    "nan"...) are text a cell may hold, and in a key each became the one empty key."""
    path = tmp_path / "in.csv"
    path.write_text('key,ts,value,n\nNA,1,N/A,1\nnull,2,"",\nnan,3,,3\n')
    table.ingest_files([str(path)])
    got = sorted(table.query(keys=["NA", "null", "nan"]).to_pylist(), key=lambda r: r["ts"])
    assert got == [{"key": "NA", "ts": 1, "value": "N/A", "n": 1},
                   {"key": "null", "ts": 2, "value": "", "n": None},
                   {"key": "nan", "ts": 3, "value": None, "n": 3}]


def test_missing_file(store: sd.Store, table: sd.Table, tmp_path: Path) -> None:
    expect(store, DataError, r"input file '.*nowhere\.parquet' does not exist",
           lambda: table.ingest_files([str(tmp_path / "nowhere.parquet")]))


def test_glob_matching_nothing(store: sd.Store, table: sd.Table, tmp_path: Path) -> None:
    expect(store, DataError, r"no files match",
           lambda: table.ingest_files([str(tmp_path / "none-*.parquet")]))


def test_unknown_file_format(store: sd.Store, table: sd.Table, tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("key ts\n")
    expect(store, DataError, r"cannot tell the format of '.*in\.txt'",
           lambda: table.ingest_files([str(path)]))


@pytest.mark.parametrize("damage", ["truncated", "garbage", "zeroed pages"])
def test_corrupt_data_file_in_the_table(store: sd.Store, table: sd.Table, damage: str) -> None:
    """Bit rot in a committed file: reads refuse it (CorruptDataError: its size, footer or
    page CRCs differ from the sums its commit recorded) naming the file; its compaction job
    fails and commits nothing; the table keeps the file's reference and every other file."""
    ref = table.files()[0]
    path = Path(table._handle.objects.path(ref.filename))
    data = path.read_bytes()
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = bytes((i * 7919) % 251 for i in range(len(data)))
    else:  # the data pages, footer intact
        data = data[:4] + b"\0" * (len(data) // 2 - 4) + data[len(data) // 2 :]
    path.write_bytes(data)
    with pytest.raises(CorruptDataError, match=ref.filename):
        table.query()

    def damaged_leaf() -> list[tuple[str, int]]:
        return [(f.filename, f.records) for f in table.files()
                if f.partition_id == ref.partition_id]

    before = damaged_leaf()
    result = table.compact()
    assert result.jobs_failed == 1, result
    assert damaged_leaf() == before, "the failed job changed its partition"
    assert w.leftovers(table)["orphans"] == [], "a failed job left its output behind"
    lo, hi = _region_bounds(table, next(f.partition_id for f in table.files()
                                        if f.partition_id != ref.partition_id))
    assert table.query(ranges=[sd.Range(lo, hi)]).num_rows > 0  # the other leaf still reads


def _region_bounds(table: sd.Table, pid: str) -> tuple[Any, Any]:
    region = table.state().partitions[pid].region
    return (None if region.min is None else region.min[0],
            None if region.max is None else region.max[0])


def test_missing_data_file_in_the_table(store: sd.Store, table: sd.Table) -> None:
    ref = table.files()[0]
    Path(table._handle.objects.path(ref.filename)).unlink()
    with pytest.raises(ObjectNotFoundError, match=ref.filename):
        table.query()


# ---- properties, schemas, queries ------------------------------------------------------------
@pytest.mark.parametrize(("updates", "match"), [
    ({"compaction.batch_size": 1}, r"'compaction.batch_size' of table proof: 1 is below 2"),
    ({"gc.delay_seconds": "soon"}, r"'gc.delay_seconds' of table proof: 'soon' is not a valid"),
    ({"compaction.strategy": "magic"}, r"'compaction.strategy'.*not one of"),
    ({"gc.delay_seconds": float("nan")}, r"'gc.delay_seconds'.*not a valid float"),
    ({"no.such.property": 1}, r"unknown property 'no.such.property' for table proof"),
    ({"query.iterators": "[{\"kind\": \"nope\"}]"}, r"query.iterators"),
])
def test_invalid_property(store: sd.Store, table: sd.Table, updates: dict[str, Any],
                          match: str) -> None:
    expect(store, PropertyError, match, lambda: table.set_properties(updates))


def test_invalid_property_at_create_table(store: sd.Store, table: sd.Table) -> None:
    expect(store, PropertyError, r"'partition.split.threshold' of table other: 0 is below 1",
           lambda: store.create_table("other", w.SCHEMA,
                                      properties={"partition.split.threshold": 0}))


def test_invalid_schema(store: sd.Store) -> None:
    with pytest.raises(SchemaError, match=r"row key field 'k' has unsupported type double"):
        sd.Schema(row_keys=[("k", pa.float64())])
    with pytest.raises(SchemaError, match=r"at least one row key"):
        sd.Schema(row_keys=[])


def test_query_with_wrong_key_type(store: sd.Store, table: sd.Table) -> None:
    expect(store, QueryError, r"1 is not a valid string for row key field 'key'",
           lambda: table.query(keys=[1]))
    expect(store, QueryError, r"no column 'colour'", lambda: table.query(columns=["colour"]))
    expect(store, QueryError, r"no version 99", lambda: table.query(version=99))


# ---- names and paths ----------------------------------------------------------------------
HOSTILE_NAMES = ["../escape", "..", "a/b", "/abs", "a\\b", "", ".hidden", "-flag", "a\x00b",
                 "x" * 129, "a/../../b", "tables/../catalog", "naïve", "a b"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_table_name(store: sd.Store, table: sd.Table, tmp_path: Path,
                            name: str) -> None:
    outside = sorted(p.name for p in tmp_path.iterdir())
    expect(store, InvalidTableNameError, r"invalid table name",
           lambda: store.create_table(name, w.SCHEMA))
    expect(store, InvalidTableNameError, r"invalid table name", lambda: store.table(name))
    expect(store, InvalidTableNameError, r"invalid table name", lambda: store.drop_table(name))
    assert sorted(p.name for p in tmp_path.iterdir()) == outside, "wrote outside the store"


def test_hostile_table_name_on_the_command_line(store: sd.Store, table: sd.Table) -> None:
    with leaves_store_as_it_was(store):
        r = subprocess.run([sys.executable, "-m", "sediment.cli", "create-table", "../escape",
                            "--store", store.uri, "--row-key", "key:string"],
                           capture_output=True, text=True, env=w.worker_env(), timeout=60)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error: invalid table name '../escape'"), r.stderr
    assert "Traceback" not in r.stderr


# ---- dumps -------------------------------------------------------------------------------
def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _unsealed(text: str) -> dict[str, Any]:
    """A document without its seal ("crc32"): re-encoded, it reads as one written before
    seals, so an edit reaches the check it is about rather than the checksum."""
    return {k: v for k, v in json.loads(text).items() if k != "crc32"}


class DumpEditor:
    """Edit a dump on local disk, keeping checksums right unless told otherwise (so each
    test reaches the check it is about)."""

    def __init__(self, job: Any) -> None:
        self.root = Path(job.root)
        self.job_path = Path(job.manifest_uri)
        self.job = _unsealed(self.job_path.read_text())

    def manifest(self, task: int) -> tuple[Path, dict[str, Any]]:
        p = self.root / self.job["tasks"][task]["manifests"][0]["path"]
        return p, _unsealed(p.read_text())

    def save_manifest(self, task: int, doc: dict[str, Any]) -> None:
        p, _ = self.manifest(task)
        raw = json.dumps(doc).encode()
        p.write_bytes(raw)
        self.job["tasks"][task]["manifests"][0]["sha256"] = _sha(raw)
        self.save_job()

    def save_job(self) -> None:
        self.job_path.write_text(json.dumps(self.job))

    def data_file(self, task: int) -> tuple[Path, dict[str, Any], dict[str, Any]]:
        _, doc = self.manifest(task)
        entry = next(f for f in doc["files"] if f["kind"] == "data")
        return self.root / entry["path"], entry, doc

    def replace_data(self, task: int, data: pa.Table) -> None:
        path, entry, doc = self.data_file(task)
        pq.write_table(data, path)
        raw = path.read_bytes()
        entry.update(sha256=_sha(raw), crc32=f"{zlib.crc32(raw):08x}", bytes=len(raw),
                     rows=data.num_rows)
        doc["rows"] = data.num_rows
        self.save_manifest(task, doc)


@pytest.fixture
def dumped(store: sd.Store, table: sd.Table, tmp_path: Path) -> DumpEditor:
    return DumpEditor(table.dump(str(tmp_path / "dumps")))


def load_both(store: sd.Store, table: sd.Table, editor: DumpEditor,
              match: str) -> None:
    """Loading into a new table and into the existing one both fail, changing nothing."""
    for target in ("fresh", table.name):
        expect(store, CorruptMetadataError, match,
               lambda target=target: store.load(str(editor.job_path), target))


@pytest.mark.parametrize("path", ["../outside/1-manifest.json", "/etc/passwd",
                                  "s3://elsewhere/x.json", "job/../../x.json", "./x.json",
                                  "a//b.json", "..\\..\\x.json", 7])
def test_hostile_dump_manifest_path(store: sd.Store, table: sd.Table, dumped: DumpEditor,
                                    tmp_path: Path, path: Any) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "1-manifest.json").write_text("{}")
    dumped.job["tasks"][0]["manifests"][0]["path"] = path
    dumped.save_job()
    load_both(store, table, dumped, r"outside the dump root")


@pytest.mark.parametrize("path", ["../../../outside/1-data.parquet", "/etc/passwd",
                                  "file:///etc/passwd"])
def test_hostile_dump_file_path(store: sd.Store, table: sd.Table, dumped: DumpEditor,
                                path: str) -> None:
    _, entry, doc = dumped.data_file(0)
    entry["path"] = path
    dumped.save_manifest(0, doc)
    load_both(store, table, dumped, r"outside the dump root")


def test_dump_file_in_another_tasks_folder(store: sd.Store, table: sd.Table,
                                           dumped: DumpEditor) -> None:
    _, other, _ = dumped.data_file(1)
    _, entry, doc = dumped.data_file(0)
    entry.update(path=other["path"], sha256=other["sha256"], crc32=other["crc32"],
                 bytes=other["bytes"], rows=other["rows"])
    dumped.save_manifest(0, doc)
    load_both(store, table, dumped, r"outside its task's folder")


def test_dump_file_with_keys_outside_its_range(store: sd.Store, table: sd.Table,
                                               dumped: DumpEditor) -> None:
    """Checksums are right but task 0 (keys below "m") holds keys above it."""
    path1, _, _ = dumped.data_file(1)
    dumped.replace_data(0, pq.read_table(path1))
    load_both(store, table, dumped, r"outside the task's range")


def test_dump_file_not_sorted(store: sd.Store, table: sd.Table, dumped: DumpEditor) -> None:
    path0, _, _ = dumped.data_file(0)
    data = pq.read_table(path0)
    dumped.replace_data(0, data.take(list(reversed(range(data.num_rows)))))
    load_both(store, table, dumped, r"is not sorted")


def test_dump_file_checksum(store: sd.Store, table: sd.Table, dumped: DumpEditor) -> None:
    path0, _, _ = dumped.data_file(0)
    raw = bytearray(path0.read_bytes())
    raw[10] ^= 0xFF
    path0.write_bytes(bytes(raw))
    load_both(store, table, dumped, r"fails its checksum")


def test_incomplete_dump(store: sd.Store, table: sd.Table, dumped: DumpEditor) -> None:
    """A dump killed before its job manifest was written cannot be loaded."""
    dumped.job_path.unlink()
    load_both(store, table, dumped, r"job-manifest\.json is missing")


# ---- metadata from elsewhere -------------------------------------------------------------
def test_log_entry_from_a_newer_format(store: sd.Store, table: sd.Table) -> None:
    """A newer Sediment committed the next version: this one refuses to read or write the
    table (UnsupportedFormatError, saying to upgrade) and writes nothing."""
    nxt = table.version + 1
    doc = {"format": FORMAT_VERSION + 1, "table_id": table.table_id, "version": nxt,
           "time": 0.0, "writer": "future", "kind": "hyperdrive", "transaction": {}}
    table._handle.objects.put(log_key(nxt), json.dumps(doc).encode())
    for action in (lambda t: t.query(), lambda t: t.ingest(good()), lambda t: t.compact(),
                   lambda t: t.set_properties({"gc.delay_seconds": 1}), lambda t: t.version,
                   lambda t: t.history(), lambda t: t.gc()):
        with leaves_store_as_it_was_raw(store):
            fresh = as_another_process(sd.Store.open(store.uri).table(w.TABLE))
            with pytest.raises(UnsupportedFormatError,
                               match=rf"log entry {nxt} .*written in format "
                                     rf"{FORMAT_VERSION + 1}.*upgrade Sediment"):
                action(fresh)
    # the older versions stay readable
    old = as_another_process(sd.Store.open(store.uri).table(w.TABLE))
    with pytest.raises(UnsupportedFormatError):
        old.query(version=nxt - 1)  # loading any version checks the head first


def test_a_delete_by_many_keys_is_refused_by_an_older_sediment(
        store: sd.Store, table: sd.Table, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delete by many whole keys is written compactly, in format 2, in its log entry and in
    the snapshots that keep it: this Sediment reads it back exactly; one that understands
    only format 1 refuses the table (saying to upgrade) rather than read the compact form as
    a delete of every record."""
    from sediment.state import log as log_module
    from sediment.state.snapshot import snapshot_key

    before = table.query().to_pandas()
    gone = sorted(set(before["key"]))[: COMPACT_KEYS + 4]
    v = table.delete(keys=gone)
    table._handle.states.write_snapshot()
    entry = _unsealed(table._handle.objects.get(log_key(v)).decode())
    pointer = _unsealed(table._handle.objects.get(snapshot_key(v)).decode())
    assert entry["format"] == pointer["format"] == KEYS_FORMAT
    assert isinstance(entry["transaction"]["ranges"], dict)
    kept = before[~before["key"].isin(gone)].sort_values(["key", "ts"]).reset_index(drop=True)
    for fresh in (as_another_process(sd.Store.open(store.uri).table(w.TABLE)), table):
        got = fresh.query().to_pandas().sort_values(["key", "ts"]).reset_index(drop=True)
        assert got.equals(kept)
    monkeypatch.setattr(log_module, "FORMAT_VERSION", 1)  # what the older Sediment knows
    for at in (None, v - 1):
        with pytest.raises(UnsupportedFormatError, match=r"format 2.*upgrade Sediment"):
            as_another_process(sd.Store.open(store.uri).table(w.TABLE)).query(version=at)


def test_catalog_entry_from_a_newer_format(store: sd.Store, table: sd.Table) -> None:
    key = f"catalog/{w.TABLE}.json"
    doc = _unsealed(store.objects.get(key).decode())
    doc["format"] = FORMAT_VERSION + 1
    store.objects.put(key, json.dumps(doc).encode())
    with leaves_store_as_it_was_raw(store), \
            pytest.raises(UnsupportedFormatError, match=r"catalog entry .*upgrade Sediment"):
        store.table(w.TABLE)


def test_corrupt_log_entry(store: sd.Store, table: sd.Table) -> None:
    nxt = table.version + 1
    table._handle.objects.put(log_key(nxt), b"{not json")
    with leaves_store_as_it_was_raw(store), \
            pytest.raises(CorruptMetadataError, match=rf"log entry {nxt} .*not valid JSON"):
        as_another_process(sd.Store.open(store.uri).table(w.TABLE)).query()


@contextlib.contextmanager
def leaves_store_as_it_was_raw(store: sd.Store) -> Iterator[None]:
    """Like leaves_store_as_it_was, for stores whose tables cannot be read (objects only)."""
    before = sorted(o.key for o in store.objects.list("") if "/status/" not in o.key)
    yield
    after = sorted(o.key for o in store.objects.list("") if "/status/" not in o.key)
    assert after == before, "the failed operation changed the store"


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_damaged_sample_sidecar(store: sd.Store, table: sd.Table, damage: str,
                                caplog: pytest.LogCaptureFixture) -> None:
    """A data file's sample is lost or damaged. Lost: its leaf is reported unsplittable (with
    the reason), every other leaf still splits. Damaged (it fails its CRC or does not decode):
    it is rebuilt in memory from the data file with a warning, and its leaf splits too.
    Maintenance and queries go on either way."""
    table.set_properties({"partition.split.threshold": 20})
    ref = table.files()[0]
    sample = sidecar_name(ref.filename, SAMPLE)
    if damage == "missing":
        table._handle.objects.delete_many([sample])
    else:
        table._handle.objects.put(sample, b"garbage")
    before = w.digest(table.query().column("value").to_pylist())
    with caplog.at_level(logging.WARNING):
        result = table.split()
    assert result.splits >= 1
    if damage == "missing":
        assert result.unsplittable == (ref.partition_id,)
        events = [e for e in table._handle.status.events() if e.status == "unsplittable"]
        assert any("cannot read a sample" in json.dumps(e.to_json()) and sample in
                   json.dumps(e.to_json()) for e in events), "the reason names the sample"
    else:
        assert result.unsplittable == ()
        assert any(sample in r.getMessage() or ref.filename in r.getMessage()
                   for r in caplog.records if r.levelno >= logging.WARNING), caplog.text
    table.maintain()
    assert w.digest(table.query().column("value").to_pylist()) == before


def test_maintain_loop_survives_a_table_it_cannot_read(store: sd.Store, table: sd.Table
                                                       ) -> None:
    """``maintain --loop`` reports a table it cannot maintain (here: written by a newer
    Sediment) and keeps maintaining the others; a single pass fails with the error."""
    other = store.create_table("healthy", w.SCHEMA, properties={"compaction.strategy": "basic",
                                                                  "compaction.batch_size": 2})
    for b in range(3):
        other.ingest(good(batch=b))
    nxt = table.version + 1
    doc = {"format": FORMAT_VERSION + 1, "table_id": table.table_id, "version": nxt,
           "time": 0.0, "writer": "future", "kind": "hyperdrive", "transaction": {}}
    table._handle.objects.put(log_key(nxt), json.dumps(doc).encode())
    cli = [sys.executable, "-m", "sediment.cli", "maintain", "--store", store.uri, "--json"]
    loop = subprocess.run([*cli, "--loop", "--max-loops", "2", "--interval", "0.01"],
                          capture_output=True, text=True, env=w.worker_env(), timeout=120)
    assert loop.returncode == 0, loop.stderr
    rows_ = [json.loads(line) for line in loop.stdout.splitlines()]  # JSON lines
    mine = [r for r in rows_ if r["table"] == w.TABLE]
    healthy = [r for r in rows_ if r["table"] == "healthy"]
    assert len(mine) == len(healthy) == 2  # a row each, each round
    assert all("UnsupportedFormatError" in r["error"] for r in mine)
    assert not any("error" in r for r in healthy)
    assert len(sd.Store.open(store.uri).table("healthy").files()) == 1  # it was compacted
    once = subprocess.run(cli, capture_output=True, text=True, env=w.worker_env(), timeout=120)
    assert once.returncode == 1
    assert once.stderr.startswith("error: log entry"), once.stderr
