"""Every read route over a real (moto) S3 server, through the fault proxy on 127.0.0.1, given a
flipped byte in a GET answer (issue 38): a transient flip (one answer: ``count=1``) is read
again and the answer is right; a persistent one (every answer) is refused by the right error,
CorruptDataError for a data file, CorruptMetadataError for metadata, while a damaged key filter
or sample is bypassed with a warning and the answer is still right. Never a wrong answer:
every answer is compared with the pyarrow table ingested.

Which layer catches what: the proxy strips ``x-amz-checksum-*`` headers (its default), so
Sediment's own checks see the flipped bytes: page CRCs and the footer's CRC-32 for data files
(pyarrow's S3 filesystem, ranged reads), the key filter's block CRCs (ranged), the sample's and
the whole file's CRC-32 recorded in the log (whole GETs), the seal of every JSON object and the
SHA-256 names of snapshot objects. ``keep_checksums=True`` leaves moto's
``x-amz-checksum-crc32`` on whole GETs, so botocore's check (``FlexibleChecksumError``) is the
layer that catches them, and ``S3ObjectStore.get`` reads again, then raises a
ChecksumMismatch the callers name the object by.

One proxy, one bucket and one table (three files, a snapshot, a tag) serve the module; tests
that commit (compaction, load) make small tables of their own.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sediment as sd
from faultproxy import FaultProxy, ProxiedS3, Rule
from sediment.errors import CorruptDataError, CorruptionError, CorruptMetadataError
from sediment.files.keyfilter import FilterLayout
from sediment.files.sidecars import KEYS, SAMPLE, sidecar_name
from sediment.storage.checksums import ChecksumMismatch
from sediment.storage.s3 import S3ObjectStore
from support.races import as_another_process
from support.s3 import DUMMY_AWS_ENV, S3_CREDENTIALS, S3_REGION, UNSET_AWS_ENV, s3_client

pytestmark = [pytest.mark.s3, pytest.mark.faults]

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string())])
PROPS = {"state.cache.refresh_seconds": 0, "parquet.compression": "none",
         "parquet.row_group_rows": 128, "state.snapshot.interval": 3,
         # every read goes to the (damaged) bytes: a page the block cache kept from an
         # earlier, clean read would answer without them (and so would the disk cache's
         # verified copy of its bytes)
         "query.block_cache_bytes": 0, "query.disk_cache_bytes": 0}
PERSISTENT, TRANSIENT = None, 1
"""A rule's ``count``: every matching answer flipped (damage at rest), or only the first
(a byte changed on the way: the re-read is whole)."""


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"key": [f"k{i:05d}" for i in range(start, start + n)],
                     "ts": list(range(start, start + n)),
                     "value": [f"v-{i:06d}" for i in range(start, start + n)]},
                    schema=SCHEMA.to_arrow())


BATCHES = (_rows(500), _rows(500, 500), _rows(10, 1000))
REFERENCE = pa.concat_tables(BATCHES)
"""What was ingested: the independent reference of every answer."""


def _sorted(t: pa.Table) -> list[tuple[Any, ...]]:
    t = t.select(["key", "ts", "value"])
    return sorted(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))


WANT = _sorted(REFERENCE)


class World:
    """The module's proxy, bucket and table ``t`` (versions: 1 created, 2-4 ingests, a
    snapshot at 3, tag ``two`` at 3), with what the tests flip: its files' bytes."""

    def __init__(self, s3: ProxiedS3) -> None:
        self.s3 = s3
        self.proxy = s3.proxy
        self.store = s3.open()  # one S3 client each (making one takes ~0.3 s)
        self.direct_store = s3.open_direct()
        table = self.store.create_table("t", SCHEMA, properties=PROPS)
        for batch in BATCHES:
            table.ingest(batch)
        table.tag("two", 3)
        self.direct = self.direct_store.table("t")
        objects = self.direct._handle.objects
        files = {ref.filename: objects.get(ref.filename) for ref in self.direct.files()}
        self.page_file = next(f for f, raw in files.items() if b"v-000300" in raw)
        self.page_bytes = files[self.page_file]

    def open(self, name: str = "t") -> sd.Table:
        """A fresh handle through the proxy (its catalog entry read again, its own state,
        footer, key filter and sample caches): nothing of an earlier read is reused."""
        return as_another_process(self.store.table(name))

    def unfaulted(self, name: str) -> sd.Table:
        """A fresh handle that reads without the proxy: for checks that must see no fault."""
        return self.direct_store.table(name)

    def rule(self, path: str, offset: int | None, count: int | None, **kw: Any) -> Rule:
        return self.proxy.add_rule("corrupt", path=path, offset=offset, count=count, **kw)


@pytest.fixture(scope="module")
def world(s3_server: str) -> Iterator[World]:
    mp = pytest.MonkeyPatch()
    for k in UNSET_AWS_ENV:
        mp.delenv(k, raising=False)
    for k, v in DUMMY_AWS_ENV.items():
        mp.setenv(k, v)
    proxy = FaultProxy(s3_server, seed=int(os.environ.get("SEDIMENT_FAULT_SEED", "0"))).start()
    bucket = f"sediment-routes-{uuid.uuid4().hex[:16]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    try:
        yield World(ProxiedS3(proxy, s3_server, f"s3://{bucket}/store", region=S3_REGION,
                              **S3_CREDENTIALS))
    finally:
        from sediment.state import pending

        proxy.clear()
        pending.flush()
        proxy.stop()
        mp.undo()


@pytest.fixture(autouse=True)
def _no_rules_left(world: World) -> Iterator[None]:
    yield
    world.proxy.clear()


def _key(name: str) -> str:
    return re.escape(name) + "$"


def _right(got: pa.Table, want: list[tuple[Any, ...]] = WANT) -> None:
    rows = _sorted(got)
    assert rows == want, f"a wrong answer: {len(rows)} rows, {len(want)} expected"


def _caused_by(error: BaseException, cls: type[BaseException]) -> bool:
    while error.__cause__ is not None:
        error = error.__cause__
        if isinstance(error, cls):
            return True
    return False


def _refused(call: Callable[[], Any], cls: type[BaseException], *names: str) -> BaseException:
    """``call`` raises ``cls`` whose message names every one of ``names``; never an answer."""
    with pytest.raises(cls) as err:
        got = call()
        if isinstance(got, pa.Table):
            pytest.fail(f"an answer ({got.num_rows} rows) where {cls.__name__} was due")
    for name in names:
        assert name in str(err.value), (name, str(err.value))
    return err.value


# ---- the read routes over a damaged data page ---------------------------------------------
def _duckdb(t: sd.Table) -> pa.Table:
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    t.to_duckdb(con, "t")  # on S3 every leaf is read through Sediment (SedimentSource)
    return pa.table(con.sql("select * from t").arrow())  # a reader or a table


def _datafusion(t: sd.Table) -> pa.Table:
    datafusion = pytest.importorskip("datafusion")
    ctx = datafusion.SessionContext()
    t.register_datafusion(ctx, "t")
    return ctx.sql("select * from t").to_arrow_table()


def _polars(lazy: bool) -> Callable[[sd.Table], pa.Table]:
    def read(t: sd.Table) -> pa.Table:
        pytest.importorskip("polars")
        frame = t.to_polars(lazy=lazy)
        return (frame.collect() if lazy else frame).to_arrow()
    return read


ROUTES: dict[str, tuple[Callable[[sd.Table], pa.Table], type[BaseException]]] = {
    # route: (read, what persistent damage raises: engines that read an Arrow C stream give
    # the error their own class, with Sediment's message)
    "query": (lambda t: t.query(), CorruptDataError),
    "query exact key": (lambda t: t.query(keys=["k00300", "k00900"]), CorruptDataError),
    "query range": (lambda t: t.query(ranges=[sd.Range("k00250", "k00950")]), CorruptDataError),
    "scan to_batches": (lambda t: t.scan().read_all(), CorruptDataError),
    "scan to_arrow": (lambda t: t.prepare().to_arrow(), CorruptDataError),
    "pycapsule": (lambda t: pa.RecordBatchReader.from_stream(t.prepare()).read_all(),
                  pa.ArrowException),
    "duckdb": (_duckdb, Exception),
    "polars": (_polars(False), CorruptDataError),
    "polars lazy": (_polars(True), Exception),
    "datafusion": (_datafusion, CorruptDataError),
}
_SUBSET = {"query exact key": {"k00300", "k00900"}}


def _want(route: str) -> list[tuple[Any, ...]]:
    if route == "query exact key":
        return [r for r in WANT if r[0] in _SUBSET[route]]
    if route == "query range":
        return [r for r in WANT if "k00250" <= r[0] < "k00950"]
    return WANT


DAMAGE = [("page", r) for r in ROUTES] + \
    [("footer", r) for r in ("query", "query exact key", "scan to_batches", "duckdb")]
"""Every route over a damaged page; the footer (checked once, by the footer cache every route
opens files through) by a few."""


@pytest.mark.parametrize(("where", "route"), DAMAGE)
def test_a_damaged_data_file_read_is_read_again_or_refused(world: World, route: str,
                                                           where: str) -> None:
    """A byte of a data page (``v-000300``'s last digit, so an unchecked read would answer
    ``v-000301`` twice) or of the footer's metadata, in every ranged GET of the file. Once: the
    page CRC (or the footer CRC-32 the log recorded) fails, the file is read again and the
    answer is whole. Every time: CorruptDataError naming the table and the file."""
    read, cls = ROUTES[route]
    raw = world.page_bytes
    at = raw.index(b"v-000300") + 7 if where == "page" else len(raw) - 40
    rule = world.rule(_key(world.page_file), at, TRANSIENT, ranged=True)
    _right(read(world.open()), _want(route))
    assert rule.fired == 1
    world.proxy.clear()
    rule = world.rule(_key(world.page_file), at, PERSISTENT, ranged=True)
    error = _refused(lambda: read(world.open()), cls, world.page_file)
    assert "CorruptDataError" in f"{type(error).__name__} {error}" and "table t" in str(error)
    assert rule.fired >= 2  # read again before refusing


def test_a_damaged_key_filter_is_bypassed_with_a_warning(world: World,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    """Every ranged GET of the key filter of the file holding ``k00300`` has the block of that
    key's row group flipped (all its bits: cleared bits would hide the key, a false negative):
    its CRC fails, the filter is bypassed with a warning and the lookup reads the row group."""
    keys = sidecar_name(world.page_file, KEYS)
    layout = FilterLayout.parse(world.direct._handle.objects.get(keys), "keys")
    at = layout.block_range(300 // 128)[0] + 1
    for count in (TRANSIENT, PERSISTENT):
        rule = world.rule(_key(keys), at, count, ranged=True, xor=0xFF)
        with caplog.at_level(logging.WARNING):
            got = world.open().query(keys=["k00300", "k00301"])
        assert got.column("value").to_pylist() == ["v-000300", "v-000301"]
        assert rule.fired >= 1
        world.proxy.clear()
    assert any("key filter" in r.getMessage() for r in caplog.records)


# ---- metadata: log entries, snapshots, tags, catalog, store.json ----------------------------
LOG4 = r"/log/0{19}4\.json$"
METADATA: dict[str, tuple[str, Callable[[World], Any], type[BaseException] | None]] = {
    # object: (path, read, what persistent damage raises; None: still the right answer)
    "log entry": (LOG4, lambda w: w.open().query(), CorruptMetadataError),
    "store.json": (r"/store/store\.json$", lambda w: w.s3.open().table("t").query(),
                   CorruptMetadataError),
    "catalog entry": (r"/catalog/t\.json$", lambda w: w.open().query(), CorruptMetadataError),
    "tag": (r"/tags/two\.json$", lambda w: w.open().query(version="two"),
            CorruptMetadataError),
    # a damaged snapshot is passed over: the log below it is replayed
    "snapshot pointer": (r"/snapshots/0+3\.json$", lambda w: w.open().query(), None),
    "snapshot range": (r"/objects/[0-9a-f]{64}\.parquet$", lambda w: w.open().query(), None),
    "snapshot object": (r"/objects/[0-9a-f]{64}\.json$", lambda w: w.open().query(), None),
}


@pytest.mark.parametrize("kind", list(METADATA))
def test_damaged_metadata_is_read_again_or_refused(world: World, kind: str) -> None:
    """A byte near the end of the object (in the sealed document, not its first bytes: a
    snapshot's Parquet footer, a log entry's last reference) in every whole GET of it."""
    path, read, cls = METADATA[kind]
    want = WANT[:1000] if kind == "tag" else WANT
    rule = world.rule(path, -25, TRANSIENT)
    _right(read(world), want)
    assert rule.fired == 1
    world.proxy.clear()
    rule = world.rule(path, -25, PERSISTENT)
    if cls is None:
        _right(read(world), want)
    else:
        error = _refused(lambda: read(world), cls)
        assert "checksum" in str(error) and _caused_by(error, ChecksumMismatch)
    assert rule.fired >= 1


# ---- botocore's own check of whole GETs (x-amz-checksum-crc32 kept) -------------------------
def test_botocore_checksum_error_is_read_again_or_named_corruption(world: World) -> None:
    """moto sends ``x-amz-checksum-crc32`` with whole GETs; kept, botocore finds the flip
    (``FlexibleChecksumError``, raised past its retries) before Sediment sees the bytes.
    ``S3ObjectStore.get`` reads again: once, the answer is right; every time, the log entry's
    reader raises CorruptMetadataError naming it (never a bare StorageError)."""
    from botocore.exceptions import FlexibleChecksumError

    rule = world.rule(LOG4, 5, TRANSIENT, keep_checksums=True)
    _right(world.open().query())
    assert rule.fired == 1
    world.proxy.clear()
    rule = world.rule(LOG4, 5, PERSISTENT, keep_checksums=True)
    error = _refused(lambda: world.open().query(), CorruptMetadataError,
                     "00000000000000000004.json", "table t")
    assert "fails the checksum S3 sent" in str(error)
    assert isinstance(error.__cause__, ChecksumMismatch)
    assert isinstance(error.__cause__.__cause__, FlexibleChecksumError)
    assert rule.fired >= 3
    # the store alone: ChecksumMismatch (a CorruptionError), read three times
    objects = world.open()._handle.objects
    key = next(o.key for o in objects.list("log/") if o.key.endswith("4.json"))
    fired = rule.fired
    with pytest.raises(ChecksumMismatch) as err:
        objects.get(key)
    assert isinstance(err.value, CorruptionError) and rule.fired == fired + 3


# ---- compaction ------------------------------------------------------------------------------
def _table(world: World, name: str, **props: Any) -> tuple[sd.Table, str, bytes]:
    """A fresh table of BATCHES through the proxy; the file holding ``v-000300``."""
    table = world.store.create_table(name, SCHEMA, properties={**PROPS, **props})
    for batch in BATCHES:
        table.ingest(batch)
    objects = world.unfaulted(name)._handle.objects
    for ref in table.files():
        raw = objects.get(ref.filename)
        if b"v-000300" in raw:
            return table, ref.filename, raw
    raise AssertionError("no file holds v-000300")


BATCH = {"compaction.strategy": "basic", "compaction.batch_size": 3}
"""The three files make one job for ``maintain`` too."""
COMPACTIONS = {
    # inputs copied whole (one GET each, checked against the file's CRC-32; botocore's check
    # kept too), and read in place by ranged GETs (page and footer CRCs)
    "copied": (BATCH, {"ranged": False}),
    "copied, botocore's check": (BATCH, {"ranged": False, "keep_checksums": True}),
    "in place": ({**BATCH, "compaction.local_disk_bytes": 0}, {"ranged": True}),
}


@pytest.mark.parametrize("route", list(COMPACTIONS))
def test_compaction_commits_nothing_over_damage_and_retries_a_flip(world: World,
                                                                   route: str) -> None:
    props, rule_kw = COMPACTIONS[route]
    name = "c" + uuid.uuid4().hex[:8]
    table, filename, raw = _table(world, name, **props)
    at = raw.index(b"v-000300") + 7
    before = {r.filename for r in table.files()}
    rule = world.rule(_key(filename), at, PERSISTENT, **rule_kw)
    maintained = world.open(name).maintain()
    assert maintained.jobs_committed == 0 and maintained.jobs_failed == 1, maintained
    assert rule.fired >= 2
    assert {r.filename for r in world.unfaulted(name).files()} == before
    # the failed job is run again by the next pass (at once: its timeout 0), and fails again
    table.set_properties({"compaction.job_timeout_seconds": 0})
    result = world.open(name).compact(full=True)
    assert result.jobs_committed == 0 and result.jobs_failed == 1, result
    assert "CorruptDataError" in str(result.errors) and filename in str(result.errors)
    assert {r.filename for r in world.unfaulted(name).files()} == before
    world.proxy.clear()
    rule = world.rule(_key(filename), at, TRANSIENT, **rule_kw)
    result = world.open(name).compact()
    assert result.jobs_committed == 1 and result.jobs_failed == 0, result
    assert rule.fired == 1
    after = world.unfaulted(name)
    assert filename not in {r.filename for r in after.files()}
    _right(after.query())


SAMPLE_PAGE = 100
"""A byte of a sample's first data page (its pages carry CRCs too)."""


def _column_name(sample: bytes) -> int:
    """A byte of the count column's name in a sample's footer (its schema)."""
    footer = len(sample) - int.from_bytes(sample[-8:-4], "little") - 8
    return sample.index(b"__count", footer) + 2


@pytest.mark.parametrize("where", ["page", "column name"])
def test_a_damaged_sample_is_rebuilt_and_the_split_is_right(world: World, where: str,
                                                           caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    """A split reads its leaf's samples (whole GETs) for the median: every read of one
    flipped, the sample fails its page CRC (``page``) or decodes with a column renamed
    (``column name``: the split failed with a KeyError), is rebuilt from the data file with
    a warning, the split commits and every answer is right."""
    name = "s" + uuid.uuid4().hex[:8]
    table, filename, _ = _table(world, name, **{"partition.split.threshold": 600})
    sample = sidecar_name(filename, SAMPLE)
    at = SAMPLE_PAGE if where == "page" else \
        _column_name(world.unfaulted(name)._handle.objects.get(sample))
    rule = world.rule(_key(sample), at, PERSISTENT, ranged=False)
    with caplog.at_level(logging.WARNING):
        result = world.open(name).split()
    assert rule.fired >= 2 and any("rebuilt" in r.getMessage() for r in caplog.records)
    assert result.splits >= 1, result
    world.proxy.clear()
    fresh = world.unfaulted(name)
    assert len(fresh.leaves()) >= 2
    _right(fresh.query())


# ---- dump and load ---------------------------------------------------------------------------
def test_dump_refuses_a_damaged_file_and_retries_a_flip(world: World) -> None:
    """A dump reads through the query executor (and copies one-file leaves whole): a page
    damaged in every read fails it with CorruptDataError; once, it is read again and the
    dump loads back to the reference."""
    root = f"{world.s3.uri}-dumps/{uuid.uuid4().hex[:8]}"
    rule = world.rule(_key(world.page_file), world.page_bytes.index(b"v-000300") + 7,
                      PERSISTENT)
    _refused(lambda: world.open().dump(root + "/bad"), CorruptDataError, world.page_file)
    assert rule.fired >= 2
    world.proxy.clear()
    world.open().abandon_dump()  # a failed dump holds the table's dump lock until then
    rule = world.rule(_key(world.page_file), world.page_bytes.index(b"v-000300") + 7,
                      TRANSIENT)
    job = world.open().dump(root + "/good")
    assert rule.fired == 1
    loaded = world.store.load(job.manifest_uri, "l" + uuid.uuid4().hex[:8])
    _right(loaded.query())


def test_whole_file_dump_verifies_what_it_copies(world: World,
                                                 caplog: pytest.LogCaptureFixture,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A leaf of one file is dumped by copying its bytes and its sample. Streamed (as to a
    dump root on another service: a copy inside S3 passes no byte through the client, and
    is checked by S3's CRC-32 of the copy instead), a data file flipped every time is
    CorruptDataError (checked against its sums before its checksums enter the manifest); a
    sample flipped every time is rebuilt with a warning; the load is right."""
    name = "w" + uuid.uuid4().hex[:8]
    table = world.store.create_table(name, SCHEMA, properties=PROPS)
    table.ingest(REFERENCE)
    (ref,) = table.files()
    root = f"{world.s3.uri}-dumps/{uuid.uuid4().hex[:8]}"
    raw = world.unfaulted(name)._handle.objects.get(ref.filename)
    rule = world.rule(_key(ref.filename), raw.index(b"v-000300") + 7, PERSISTENT)
    with monkeypatch.context() as streamed:
        streamed.setattr(S3ObjectStore, "copy_from", lambda *a, **k: None)
        _refused(lambda: world.open(name).dump(root + "/bad"), CorruptDataError,
                 ref.filename)
    assert rule.fired >= 2
    world.proxy.clear()
    world.open(name).abandon_dump()
    rule = world.rule(_key(sidecar_name(ref.filename, SAMPLE)), SAMPLE_PAGE, PERSISTENT)
    with caplog.at_level(logging.WARNING):
        job = world.open(name).dump(root + "/good")
    assert rule.fired >= 2 and any("rebuilt" in r.getMessage() for r in caplog.records)
    world.proxy.clear()
    _right(world.store.load(job.manifest_uri, "l" + uuid.uuid4().hex[:8]).query())


@pytest.fixture(scope="module")
def dumped(world: World) -> str:
    """A dump of ``t`` (its job manifest's URI), made with no faults."""
    return world.open().dump(f"{world.s3.uri}-dumps/{uuid.uuid4().hex[:8]}").manifest_uri


LOADS = {
    # object of the dump: (path, a byte of it)
    "job manifest": (r"/job-manifest\.json$", -25),
    "task manifest": (r"/task-\d+/batch-\d+/\d+-manifest\.json$", -25),
    "dumped data file": (r"-data\.parquet$", None),
    "dumped sample": (r"-sample\.parquet$", None),
}


@pytest.mark.parametrize("what", list(LOADS))
def test_load_refuses_a_damaged_dump_and_retries_a_flip(world: World, dumped: str,
                                                        what: str) -> None:
    """Every object of a dump is checked by its manifest (SHA-256) or its seal, and read again
    when it fails: once, the load is right; every time, CorruptMetadataError naming the
    object (a dump is a set of files its manifests vouch for) and no table."""
    path, at = LOADS[what]
    name = "l" + uuid.uuid4().hex[:8]
    rule = world.rule(path, at, PERSISTENT)
    _refused(lambda: world.store.load(dumped, name), CorruptMetadataError, "checksum")
    assert rule.fired >= 2 and name not in world.direct_store.tables()
    world.proxy.clear()
    rule = world.rule(path, at, TRANSIENT)
    _right(world.store.load(dumped, name).query())
    assert rule.fired == 1


# ---- DuckDB's native branch: a documented bypass ---------------------------------------------
def test_duckdb_native_branch_reads_a_damaged_page_unchecked(tmp_path: Any) -> None:
    """On local disk, a leaf of one file is read by DuckDB's own Parquet reader (the view's
    native branch), which checks no page CRC: a flipped value byte is DuckDB's answer
    (docs/guarantees.md lists the bypass); ``Table.query`` of the same file refuses it."""
    duckdb = pytest.importorskip("duckdb")
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties=PROPS)
    table.ingest(REFERENCE)
    (ref,) = table.files()
    path = table._handle.objects.local_path(ref.filename)
    assert path is not None
    raw = bytearray(open(path, "rb").read())
    raw[raw.index(b"v-000300") + 7] ^= 0x01
    with open(path, "wb") as f:
        f.write(bytes(raw))
    assert pq.read_table(path).num_rows == REFERENCE.num_rows  # still decodes, unverified
    fresh = sd.Store.open(str(tmp_path / "s")).table("t")
    con = duckdb.connect()
    fresh.to_duckdb(con, "t")
    got = con.execute("select value from t where key = 'k00300'").fetchall()
    assert got == [("v-000301",)]  # the bypass: the flipped value, unseen
    with pytest.raises(CorruptDataError):
        fresh.query()


def test_load_reads_no_dumped_sample_unchecked(world: World, dumped: str) -> None:
    """Loading into a table whose leaves split a dumped file estimates the file's records per
    leaf from its sample: from the bytes checked and copied, never from a third read (a flip
    there went unchecked: a wrong estimate, or a decoding error of pyarrow's own class)."""
    name = "x" + uuid.uuid4().hex[:8]
    world.store.create_table(name, SCHEMA, split_points=["k00500"], properties=PROPS)
    rule = world.rule(r"-sample\.parquet$", SAMPLE_PAGE, PERSISTENT, skip=2)
    loaded = world.store.load(dumped, name)
    assert rule.matched == 2 and rule.fired == 0  # checked by verify_dump, then by the copy
    _right(loaded.query())
    assert any(r.approximate for r in loaded.files())  # estimated from the checked sample
