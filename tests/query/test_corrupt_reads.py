"""A flipped byte of a data file, a key filter or a sample, on local disk and over S3: every read
route (query, scan, to_batches, the Arrow stream, DuckDB through Arrow, compaction, dump) gives
the right answer or CorruptDataError naming the table and the file, never a wrong answer
(issue 38, part C).

Data files are written with page CRCs here by a test-local writer option (``page_crcs``), as
every writer does once the files carry their sums. The tables are uncompressed, so a flipped
byte of a value is known (``v-001000`` becomes ``v-001001``) and a read that checked nothing
would return it as an answer.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
import sediment.files.writer as writer_module
from faultproxy import ProxiedS3
from sediment.errors import CorruptDataError
from sediment.files.keyfilter import FilterLayout
from sediment.files.samples_io import SampleReader
from sediment.files.sidecars import KEYS, SAMPLE, sidecar_name
from sediment.files.verified import footer_crc

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string())])
N = 2000
PROPS = {"state.cache.refresh_seconds": 0, "parquet.compression": "none",
         "parquet.row_group_rows": 256}


def _rows(n: int = N, start: int = 0) -> pa.Table:
    return pa.table({"key": [f"k{i:05d}" for i in range(start, start + n)],
                     "ts": list(range(start, start + n)),
                     "value": [f"v-{i:06d}" for i in range(start, start + n)]},
                    schema=SCHEMA.to_arrow())


@pytest.fixture
def page_crcs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sediment's data files written with page CRCs (what the writer does with part B)."""
    plain = writer_module.writer_options

    def with_crcs(*args: Any, **kw: Any) -> dict[str, Any]:
        return {**plain(*args, **kw), "write_page_checksum": True}

    monkeypatch.setattr(writer_module, "writer_options", with_crcs)


def _flip(path: Path, needle: bytes, at: int = 7, *, last: bool = False) -> None:
    raw = bytearray(path.read_bytes())
    i = (raw.rindex(needle) if last else raw.index(needle)) + at
    raw[i] ^= 0x01
    path.write_bytes(bytes(raw))


def _table(tmp_path: Path, **props: Any) -> sd.Table:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties={**PROPS, **props})
    table.ingest(_rows(N // 2))
    table.ingest(_rows(N // 2, N // 2))
    return table


def _damaged_file(table: sd.Table) -> tuple[str, Path]:
    """Flip a byte of ``v-000700`` in the data file holding it."""
    for ref in table.files():
        path = Path(table._handle.objects.local_path(ref.filename) or "")
        if b"v-000700" in path.read_bytes():
            _flip(path, b"v-000700")
            return ref.filename, path
    raise AssertionError("no file holds v-000700")


def _refused(e: BaseException, filename: str) -> None:
    text = str(e)
    assert "table t" in text and filename in text, text


def test_flipped_page_is_refused_by_every_read_route(tmp_path: Path, page_crcs: None) -> None:
    table = _table(tmp_path)
    expected = _rows().sort_by("key")
    assert table.query().sort_by("key").equals(expected)
    filename, _ = _damaged_file(table)
    fresh = sd.Store.open(str(tmp_path / "s")).table("t")
    with pytest.raises(CorruptDataError) as err:
        fresh.query()
    _refused(err.value, filename)
    assert err.value.table == "t" and err.value.key == filename
    # a lookup of a key in the damaged row group, and one elsewhere (the right answer)
    with pytest.raises(CorruptDataError):
        fresh.query(keys=["k00700"])
    assert fresh.query(keys=["k01500"]).column("value").to_pylist() == ["v-001500"]
    # streams: what was yielded before the damage is followed by the error, not by an end
    seen = 0
    with pytest.raises(CorruptDataError):
        for b in fresh.prepare().to_batches():  # noqa: B007 (counted)
            seen += b.num_rows
    assert seen < N
    # through the C stream (PyCapsule) the class is lost, never the error nor its message
    with pytest.raises(pa.ArrowException, match=f"CorruptDataError|{filename}"):
        pa.RecordBatchReader.from_stream(fresh.prepare()).read_all()
    # DuckDB reads the scan through Arrow: the error, never the flipped value
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    fresh.prepare().to_duckdb(con, "t")
    with pytest.raises(Exception, match=filename):
        con.execute("select * from t").fetch_arrow_table()


def test_flipped_page_fails_compaction_and_dump(tmp_path: Path, page_crcs: None) -> None:
    table = _table(tmp_path)
    filename, _ = _damaged_file(table)
    before = {r.filename for r in table.files()}
    result = table.compact(full=True)
    assert result.jobs_failed == 1 and result.jobs_committed == 0
    assert {r.filename for r in table.files()} == before  # nothing committed
    assert filename in str(result.errors) and "CorruptDataError" in str(result.errors), \
        result.errors
    with pytest.raises(CorruptDataError) as err:
        table.dump(str(tmp_path / "dump"))
    _refused(err.value, filename)


def test_whole_file_dump_verifies_before_it_hashes(tmp_path: Path, page_crcs: None) -> None:
    """A one-file leaf is dumped by copying its bytes: the copy is verified first, so the
    damaged file never becomes a dump whose manifest vouches for it."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties=PROPS)
    table.ingest(_rows())
    (ref,) = table.files()
    _flip(Path(table._handle.objects.local_path(ref.filename) or ""), b"v-000700")
    with pytest.raises(CorruptDataError) as err:
        table.dump(str(tmp_path / "dump"))
    _refused(err.value, ref.filename)


def test_files_without_page_crcs_still_read(tmp_path: Path) -> None:
    table = _table(tmp_path)
    assert table.query().sort_by("key").equals(_rows().sort_by("key"))
    assert not table.compact(full=True).errors
    assert table.query().sort_by("key").equals(_rows().sort_by("key"))


@pytest.mark.parametrize("damage", ["header", "block"])
def test_damaged_key_filter_is_bypassed(tmp_path: Path, damage: str,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """A flipped bit of a key filter would clear a bit and hide a row (a false negative):
    its CRC finds it, and the filter is bypassed with a warning: the right answer."""
    table = _table(tmp_path)
    objects = table._handle.objects
    for ref in table.files():
        path = Path(objects.local_path(sidecar_name(ref.filename, KEYS)) or "")
        raw = bytearray(path.read_bytes())
        layout = FilterLayout.parse(bytes(raw), "keys")
        assert layout.format == 2
        at = 9 if damage == "header" else layout.block_range(2)[0] + 3
        for bit in range(8):  # clear every bit of the byte: a false negative were it trusted
            raw[at] &= ~(1 << bit) & 0xFF
        path.write_bytes(bytes(raw))
    fresh = sd.Store.open(str(tmp_path / "s")).table("t")
    with caplog.at_level(logging.WARNING):
        for k in ("k00520", "k00600", "k01530", "k01999"):
            got = fresh.query(keys=[k]).column("value").to_pylist()
            assert got == [f"v-{int(k[1:]):06d}"], (k, got)
    assert any("key filter" in r.getMessage() for r in caplog.records)


def test_key_filter_format_1_still_reads(tmp_path: Path) -> None:
    """Filters written before format 2 (no CRCs) are read as before."""
    table = _table(tmp_path)
    objects = table._handle.objects
    for ref in table.files():
        path = Path(objects.local_path(sidecar_name(ref.filename, KEYS)) or "")
        raw = path.read_bytes()
        v2 = FilterLayout.parse(raw, "keys")
        v1 = FilterLayout(v2.probes, v2.block_bytes, v2.group_rows, 1)
        groups = (len(raw) - v2.header_bytes) // v2.stride
        blocks = [raw[s:s + v2.block_bytes] for s, _ in map(v2.block_range, range(groups))]
        path.write_bytes(v1.header() + b"".join(blocks))
        assert FilterLayout.parse(path.read_bytes(), "keys") == v1
    fresh = sd.Store.open(str(tmp_path / "s")).table("t")
    for k in ("k00001", "k01234", "nope"):
        want = [] if k == "nope" else [f"v-{int(k[1:]):06d}"]
        assert fresh.query(keys=[k]).column("value").to_pylist() == want


def test_damaged_sample_is_rebuilt_from_the_data_file(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties=PROPS)
    table.ingest(_rows())
    (ref,) = table.files()
    objects = table._handle.objects
    good = SampleReader(objects).sample(ref.filename)
    path = Path(objects.local_path(sidecar_name(ref.filename, SAMPLE)) or "")
    path.write_bytes(path.read_bytes()[:40] + b"damaged" + path.read_bytes()[47:])
    fresh = sd.Store.open(str(tmp_path / "s")).table("t")
    with caplog.at_level(logging.WARNING):
        rebuilt = fresh._handle.samples.sample(ref.filename)
    assert rebuilt.equals(good)
    assert any("rebuilt" in r.getMessage() for r in caplog.records)
    assert path.read_bytes()[40:47] == b"damaged"  # a read never writes
    # a sample whose sums disagree (a byte flipped in a value: it decodes) is rebuilt too
    path.write_bytes(objects.get(sidecar_name(ref.filename, SAMPLE)))

    class Sums:
        size, footer, crc, sample = 0, 0, 0, 1

    assert SampleReader(objects, table="t", key_schema=lambda: good.schema.remove(1),
                        sample_size=lambda: 1024).sample(ref.filename, Sums()).equals(good)


def test_footer_sums_are_checked(tmp_path: Path) -> None:
    """With a file's sums known, a footer that differs from the one written (a flipped
    statistic decodes fine) is CorruptDataError before any page is read."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties=PROPS)
    table.ingest(_rows())
    (ref,) = table.files()
    objects = table._handle.objects
    raw = objects.get(ref.filename)

    class Sums:
        size, footer, crc, sample = len(raw), footer_crc(raw), 0, None

    executor = table._handle.executors.get(table._handle.read_head().state)
    executor.footers.open(ref.filename, Sums())  # agrees
    path = Path(objects.local_path(ref.filename) or "")
    _flip(path, b"k00000", 3, last=True)  # a min statistic of the footer
    fresh = sd.Store.open(str(tmp_path / "s")).table("t")
    footers = fresh._handle.executors.get(fresh._handle.read_head().state).footers
    with pytest.raises(CorruptDataError, match="footer CRC-32"):
        footers.open(ref.filename, Sums())


def test_a_flipped_footer_statistic_is_refused_by_queries_compaction_and_dump(
        tmp_path: Path) -> None:
    """The table's own sums reach every reader: a footer whose first minimum reads
    ``k00001`` for ``k00000`` decodes fine and, unchecked, prunes the row group that holds
    ``k00000`` (an empty answer for a key that is there); checked against the sums the log
    recorded, it is CorruptDataError naming the table and the file, on every route."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties=PROPS)
    table.ingest(_rows())
    table.ingest(_rows(10, N))  # a second file, so compaction has a job
    first = next(r for r in table.files() if r.records == N)
    assert table._handle.read_head().state.file_sums(first.filename) is not None
    _flip(Path(table._handle.objects.local_path(first.filename) or ""), b"k00000", 5,
          last=True)
    fresh = sd.Store.open(str(tmp_path / "s")).table("t")
    for read in (lambda: fresh.query(keys=["k00000"]), fresh.query,
                 lambda: fresh.prepare().to_batches().read_all()):
        with pytest.raises(CorruptDataError, match="footer") as err:
            read()
        _refused(err.value, first.filename)
    result = fresh.compact(full=True)
    assert result.jobs_failed == 1 and result.jobs_committed == 0
    assert "CorruptDataError" in str(result.errors) and first.filename in str(result.errors)
    with pytest.raises(CorruptDataError):
        fresh.dump(str(tmp_path / "dump"))


def _ingested(s3: ProxiedS3, **props: Any) -> tuple[sd.Table, bytes, str]:
    table = s3.open().create_table("t", SCHEMA, properties={**PROPS, **props})
    table.ingest(_rows())
    (ref,) = table.files()
    return table, table._handle.objects.get(ref.filename), ref.filename


@pytest.mark.s3
@pytest.mark.faults
def test_flipped_range_over_s3_is_read_again(proxied_s3: ProxiedS3, page_crcs: None) -> None:
    """One ranged GET of the data file has a byte of a page flipped (the fault proxy's
    ``corrupt``): the page's CRC fails, the run is read again, and the answer is whole."""
    _, data, _ = _ingested(proxied_s3)
    at = data.index(b"v-001000") + 7
    rule = proxied_s3.proxy.add_rule("corrupt", path=r"/data/.*\.parquet$", ranged=True,
                                     offset=at, count=1)
    got = proxied_s3.open().table("t").query()
    assert rule.fired == 1
    assert got.sort_by("key").equals(_rows().sort_by("key"))


@pytest.mark.s3
@pytest.mark.faults
def test_flipped_ranges_over_s3_are_refused(proxied_s3: ProxiedS3, page_crcs: None) -> None:
    """Every ranged GET flipped at the same byte (damage at rest, as the store hands it
    over): CorruptDataError naming the table and the file, from a query and from a
    compaction read in place (its ranged reads), which commits nothing."""
    table, data, filename = _ingested(proxied_s3, **{"compaction.local_disk_bytes": 0})
    table.ingest(_rows(10, N))
    at = data.index(b"v-001000") + 7
    rule = proxied_s3.proxy.add_rule("corrupt", path=r"/data/.*\.parquet$", ranged=True,
                                     offset=at)
    with pytest.raises(CorruptDataError) as err:
        proxied_s3.open().table("t").query()
    _refused(err.value, filename)
    faulted = proxied_s3.open().table("t")
    before = {r.filename for r in faulted.files()}
    result = faulted.compact(full=True)
    assert result.jobs_committed == 0 and {r.filename for r in faulted.files()} == before
    assert filename in str(result.errors) and "CorruptDataError" in str(result.errors)
    assert rule.fired >= 2
