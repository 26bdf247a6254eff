"""Real faults on every commit path: a proxy (tests/faultproxy.py) between Sediment and the S3
server drops responses, resets connections, delays and answers 503.

The central fault: the conditional PUT of the next log entry (``log/<20 digits>.json``) reaches
the server and is written, but its response is lost. botocore retries the PUT and gets 412.
The committer must recognise the entry as its own: the call succeeds and commits exactly once.
(A call may also fail with a SedimentError, but only when its entry truly is absent; with this
fault the entry is always written, so a failure is a defect.)

After every fault a fresh handle opened directly on the server (no proxy) must load the table,
find every file referenced by every committed version it checks, and read back exactly the
records of an independent reference (pyarrow tables concatenated, compared as sorted pandas
frames): nothing lost, nothing duplicated. The handle that saw the fault must read the same.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sediment as sd
from faultproxy import FaultProxy, ProxiedS3, Rule
from sediment.errors import SedimentError, TableNotFoundError
from sediment.ingest import batcher

pytestmark = [pytest.mark.s3, pytest.mark.slow]

LOG_PUT = r"/log/\d{20}\.json$"
"""The path of a log entry: the PUT of the next one is the commit point."""
DATA = r"/data/.*\.parquet$"
SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string())])
COLUMNS = ["key", "ts", "value"]
PROPERTIES = {
    "state.cache.refresh_seconds": 0,
    "compaction.strategy": "basic",
    "compaction.batch_size": 2,
    "parquet.row_group_rows": 128,
}


def kind_body(kind: str) -> str:
    """A body pattern matching only the log entry of one transaction kind."""
    return f'"kind":"{kind}"'


def batch(seed: int, rows: int = 120) -> pa.Table:
    """Rows with unique values (``<seed>-<i>``) spread over the key space."""
    keys = [f"{chr(97 + (seed * 7 + i * 13) % 26)}{i % 10}" for i in range(rows)]
    return pa.table({"key": pa.array(keys, pa.string()),
                     "ts": pa.array([seed * 1000 + i for i in range(rows)], pa.int64()),
                     "value": pa.array([f"{seed}-{i}" for i in range(rows)], pa.string())})


def frame(t: pa.Table) -> pd.DataFrame:
    return (t.select(COLUMNS).to_pandas().sort_values(COLUMNS, kind="stable")
            .reset_index(drop=True))


def assert_same_records(got: pa.Table, expected: list[pa.Table], where: str) -> None:
    want = pa.concat_tables(expected) if expected else SCHEMA.to_arrow().empty_table()
    g, w = Counter(got.column("value").to_pylist()), Counter(want.column("value").to_pylist())
    lost, extra = w - g, g - w
    assert not lost and not extra, (
        f"{where}: {sum(lost.values())} records lost (e.g. {sorted(lost)[:3]}), "
        f"{sum(extra.values())} duplicated or unexpected (e.g. {sorted(extra)[:3]})")
    pd.testing.assert_frame_equal(frame(got), frame(want), check_dtype=False)


class Harness:
    """A table opened through the proxy, its expected records, and the checks."""

    def __init__(self, s3: ProxiedS3, name: str = "t", *, split_points: list[str] | None = None,
                 properties: dict[str, Any] | None = None) -> None:
        self.s3 = s3
        self.proxy: FaultProxy = s3.proxy
        self.store = s3.open()
        self.name = name
        self.table = self.store.create_table(name, SCHEMA, split_points=split_points,
                                             properties={**PROPERTIES, **(properties or {})})
        self.expected: list[pa.Table] = []
        self.seed = 0

    def ingest(self, n: int = 1) -> None:
        """Ingest ``n`` batches without faults."""
        for _ in range(n):
            self.seed += 1
            b = batch(self.seed)
            self.table.ingest(b)
            self.expected.append(b)

    def next_batch(self) -> pa.Table:
        self.seed += 1
        return batch(self.seed)

    # ---- faults ---------------------------------------------------------------------------
    def drop_next(self, *, path: str = LOG_PUT, body: str | None = None,
                  skip: int = 0) -> Rule:
        """Drop the response of the next PUT of ``path`` (after ``skip`` such PUTs)."""
        return self.proxy.add_rule("drop_response", method="PUT", path=path, body=body,
                                   count=1, skip=skip)

    def entries(self, after: int, name: str | None = None) -> list[tuple[int, str, str]]:
        """(version, kind, summary) of the log entries after ``after``, read without the
        proxy (none when the table is not in the catalog)."""
        try:
            t = self.s3.open_direct().table(name or self.name)
        except TableNotFoundError:
            return []
        return [(e.version, e.kind, e.summary) for e in t.history() if e.version > after]

    def attempt(self, call: Callable[[], Any], rule: Rule, *, kind: str, before: int,
                name: str | None = None, landed: int | None = 1) -> tuple[bool, Any]:
        """Run ``call`` with ``rule`` armed: it must succeed with exactly ``landed`` entries
        of ``kind`` after ``before`` (None: at least one, no two alike), or fail with a
        SedimentError while none landed."""
        try:
            result, ok = call(), True
        except SedimentError as e:
            result, ok = e, False
        finally:
            self.proxy.remove_rule(rule)
        assert rule.fired == 1, f"the fault was never injected ({rule})"
        found = [(v, s) for v, k, s in self.entries(before, name) if k == kind]
        new = [v for v, _ in found]
        if ok and landed is None:
            summaries = Counter(s for _, s in found)
            assert new and max(summaries.values()) == 1, (
                f"the call succeeded but its {kind} entries after version {before} are "
                f"{found}: one was committed twice instead of recognised as its own")
        elif ok:
            assert len(new) == landed, (
                f"the call succeeded but the log holds {len(new)} {kind} entries after "
                f"version {before} (versions {new}), not {landed}: an ambiguous commit was "
                f"committed again instead of recognised as its own")
        else:
            assert not new, (
                f"the call failed with {type(result).__name__}: {result} -- but its {kind} "
                f"entry landed at version {new}: a committed change reported as failed")
        return ok, result

    # ---- checks ---------------------------------------------------------------------------
    def check(self, *, name: str | None = None, expected: list[pa.Table] | None = None,
              from_version: int = 1) -> sd.Table:
        """A fresh direct handle loads the table, every file of every version from
        ``from_version`` to the head exists, and the records equal ``expected``."""
        name = name or self.name
        expected = self.expected if expected is None else expected
        fresh = self.s3.open_direct().table(name)
        head = fresh.version
        present = {o.key for o in fresh._handle.objects.list("data/")}
        missing: dict[int, list[str]] = {}
        for v in range(max(from_version, fresh._handle.states.earliest_version()), head + 1):
            gone = [r.filename for r in fresh.files(version=v) if r.filename not in present]
            if gone:
                missing[v] = gone
        assert not missing, f"files referenced by committed versions are missing: {missing}"
        assert_same_records(fresh.query(), expected, f"fresh handle at version {head}")
        if name == self.name:  # the handle that saw the fault reads the same
            assert_same_records(self.table.query(), expected, "the faulted handle")
        return fresh


@pytest.fixture
def h(proxied_s3: ProxiedS3) -> Harness:
    return Harness(proxied_s3)


# ---- the proxy itself --------------------------------------------------------------------------
def test_proxy_forwards_keep_alive_chunked_and_expect_continue(
        fault_proxy: FaultProxy, s3_server: str, s3_client_at: Callable[[str], Any]) -> None:
    """Raw HTTP/1.1 through the proxy: requests on one connection, a chunked body, an
    ``Expect: 100-continue`` body; then each action on a request that matches. (moto refuses
    unsigned GETs with 403: reads go through a signed boto3 client, also via the proxy.)"""
    import http.client
    import time
    import uuid

    bucket = f"proxy-{uuid.uuid4().hex[:12]}"
    host, port = fault_proxy.url.removeprefix("http://").split(":")
    client = s3_client_at(fault_proxy.url)

    def body(key: str) -> bytes:
        return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())

    def request(conn: http.client.HTTPConnection, method: str, path: str,
                **kwargs: Any) -> tuple[int, bytes]:
        conn.request(method, f"/{bucket}{path}", **kwargs)
        r = conn.getresponse()
        return r.status, r.read()

    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    assert request(conn, "PUT", "")[0] == 200
    assert request(conn, "PUT", "/chunked", body=iter([b"hello ", b"world"]),
                   encode_chunked=True, headers={"Transfer-Encoding": "chunked"})[0] == 200
    # http.client does not wait for 100 Continue; the proxy answers it, strips the header
    assert request(conn, "PUT", "/expect", body=b"x" * 5000,
                   headers={"Expect": "100-continue"})[0] == 200
    assert body("chunked") == b"hello world" and body("expect") == b"x" * 5000
    assert client.head_object(Bucket=bucket, Key="expect")["ContentLength"] == 5000
    assert fault_proxy.counts["upstream_errors"] == 0

    fault_proxy.add_rule("status", method="GET", path="/expect$", count=1, status=503)
    status, text = request(conn, "GET", "/expect")
    assert status == 503 and b"SlowDown" in text
    assert request(conn, "PUT", "/after", body=b"1")[0] == 200  # the connection still serves

    drop = fault_proxy.add_rule("drop_response", method="PUT", path="/dropped$", count=1)
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        request(conn, "PUT", "/dropped", body=b"written")
    conn.close()
    assert body("dropped") == b"written" and drop.fired == 1  # the write happened

    fault_proxy.add_rule("reset", method="PUT", path="/reset$", count=1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        request(conn, "PUT", "/reset", body=b"never")
    conn.close()
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix="reset")

    slow = fault_proxy.add_rule("delay", method="GET", path="/chunked$", count=1, delay=0.3)
    t0 = time.monotonic()
    assert body("chunked") == b"hello world"
    assert time.monotonic() - t0 >= 0.3 and slow.fired == 1
    c = fault_proxy.counts
    assert (c["status"], c["drop_response"], c["reset"], c["delay"]) == (1, 1, 1, 1)
    assert c["upstream_errors"] == 0


def test_proxy_rules_skip_probability_and_body(fault_proxy: FaultProxy) -> None:
    from faultproxy import Request

    def req(path: str, body: bytes = b"") -> Request:
        return Request("PUT", path, "HTTP/1.1", [], body)

    r = fault_proxy.add_rule("reset", method="PUT", path=LOG_PUT, body=kind_body("add_files"),
                             skip=1, count=1)
    entry = b'{"kind":"add_files"}'
    assert fault_proxy._decide(req("/b/log/00000000000000000002.json", entry)) == []  # skipped
    assert fault_proxy._decide(req("/b/log/00000000000000000003.json", b'{"kind":"x"}')) == []
    assert fault_proxy._decide(req("/b/log/00000000000000000003.json", entry)) == [r]
    assert fault_proxy._decide(req("/b/log/00000000000000000004.json", entry)) == []  # count
    fault_proxy.clear()
    p = fault_proxy.add_rule("status", path="/x", probability=0.25)
    fired = sum(bool(fault_proxy._decide(req("/x"))) for _ in range(2000))
    assert 400 < fired < 600 and p.fired == fired


def test_proxy_hangs_up_on_garbage_and_stops_cleanly(s3_server: str) -> None:
    import socket
    import threading
    import time

    def hung_up(sock: socket.socket) -> bool:
        """Closed without an answer: an orderly close or a reset, as the kernel reports it."""
        try:
            return sock.recv(100) == b""
        except ConnectionResetError:
            return True

    proxy = FaultProxy(s3_server).start()
    host, port = proxy.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"NOT HTTP AT ALL\r\nContent-Length: x\r\n\r\n")
        assert hung_up(s)
    idle = socket.create_connection((host, int(port)), timeout=5)  # an idle keep-alive peer

    def serving() -> int:
        return sum(t.name.startswith("faultproxy") and t.is_alive()
                   for t in threading.enumerate())

    deadline = time.monotonic() + 5
    while serving() < 2 and time.monotonic() < deadline:  # accept loop + the idle peer's
        time.sleep(0.01)
    assert serving() >= 2
    proxy.stop(timeout=5)
    assert proxy.counts["protocol_errors"] == 1
    assert serving() == 0  # every thread ended, the idle connection's too
    assert hung_up(idle)
    idle.close()


# ---- ambiguous commits: the response of the log PUT is lost -------------------------------------
def test_ingest(h: Harness) -> None:
    h.ingest(2)
    b = h.next_batch()
    before = h.table.version
    ok, _ = h.attempt(lambda: h.table.ingest(b), h.drop_next(), kind="add_files",
                      before=before)
    if ok:
        h.expected.append(b)
    h.check()
    h.ingest()  # the table takes commits afterwards
    h.check()


def test_ingest_files(h: Harness, tmp_path: Path) -> None:
    h.ingest()
    b1, b2 = h.next_batch(), h.next_batch()
    pq.write_table(b1, tmp_path / "one.parquet")
    pq.write_table(b2, tmp_path / "two.parquet")
    before = h.table.version
    ok, _ = h.attempt(lambda: h.table.ingest_files([str(tmp_path / "*.parquet")]),
                      h.drop_next(), kind="add_files", before=before)
    if ok:
        h.expected += [b1, b2]
    h.check()


def test_batcher(h: Harness, tmp_path: Path) -> None:
    h.ingest()
    h.table.set_properties({"batcher.max_age_seconds": 0})
    b = h.next_batch()
    pq.write_table(b, tmp_path / "in.parquet")
    batcher.submit(h.table, [str(tmp_path / "in.parquet")])
    before = h.table.version
    rule = h.drop_next(body=kind_body("add_files"))
    ok, result = h.attempt(lambda: batcher.run(h.table), rule, kind="add_files", before=before)
    assert ok, result  # run() reports job failures in its outcomes, it does not raise
    outcomes = result.jobs
    assert len(outcomes) == 1
    landed = [v for v, k, _ in h.entries(before) if k == "add_files"]
    if outcomes[0].state == "committed":
        assert outcomes[0].version in landed, (outcomes[0], landed)
        h.expected.append(b)
    else:  # re-queued: the commit must truly be absent, and a later run ingests it once
        assert not landed, f"job {outcomes[0]} re-queued although version {landed} landed"
        again = batcher.run(h.table)
        assert [o.state for o in again.jobs] == ["committed"], again
        h.expected.append(b)
    h.check()
    jobs = batcher.jobs(h.table)
    committed = [j for j in jobs if j["state"] == "committed"]
    assert len(committed) == 1 and not batcher.pending(h.table)


@pytest.mark.parametrize("kind", ["assign_job_ids", "replace_file_references"])
def test_compaction(h: Harness, kind: str) -> None:
    h.ingest(3)
    before = h.table.version
    ok, result = h.attempt(h.table.compact, h.drop_next(body=kind_body(kind)), kind=kind,
                           before=before)
    if ok:
        assert result.jobs_failed == 0, f"compaction reported failed jobs: {result.errors}"
        assert result.jobs_committed >= 1
    h.check()
    h.table.compact()
    h.check()


def test_split(proxied_s3: ProxiedS3) -> None:
    h = Harness(proxied_s3, properties={"partition.split.threshold": 100})
    h.ingest(3)
    before = h.table.version
    ok, result = h.attempt(h.table.split, h.drop_next(body=kind_body("split_partition")),
                           kind="split_partition", before=before, landed=None)
    if ok:
        assert result.splits >= 1, (
            f"split() reports {result.splits} splits although its split_partition landed: "
            f"its own commit was not recognised")
    h.check()
    h.ingest()
    h.check()


def test_gc_delete_files(proxied_s3: ProxiedS3) -> None:
    h = Harness(proxied_s3, properties={"gc.delay_seconds": 0,
                                        "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    h.ingest(4)
    assert h.table.compact().jobs_committed >= 1
    ready = sorted(h.table.state().unreferenced)
    assert ready
    before = h.table.version
    ok, result = h.attempt(h.table.gc, h.drop_next(body=kind_body("delete_files")),
                           kind="delete_files", before=before)
    if ok:
        assert result.deleted == len(ready), (
            f"gc recorded the deletion of {len(ready)} files but reports {result.deleted} "
            f"deleted: its own DeleteFiles was not recognised")
    # versions before the DeleteFiles may lack files: GC ran with no delay
    fresh = h.check(from_version=before + 1)
    assert not fresh.state().unreferenced
    h.ingest()
    h.check(from_version=before + 1)


def test_restore(h: Harness) -> None:
    h.ingest()
    v1, content = h.table.version, list(h.expected)
    h.ingest(2)
    before = h.table.version
    ok, _ = h.attempt(lambda: h.table.restore(v1), h.drop_next(body=kind_body("restore")),
                      kind="restore", before=before)
    if ok:
        h.expected = content
    h.check()
    h.ingest()
    h.check()


def test_set_properties(h: Harness) -> None:
    h.ingest()
    before = h.table.version
    ok, _ = h.attempt(lambda: h.table.set_properties({"compaction.batch_size": 7}),
                      h.drop_next(), kind="set_properties", before=before)
    fresh = h.check()
    assert (fresh.properties["compaction.batch_size"] == 7) == ok


@pytest.mark.parametrize("target", ["new table: initialise", "new table: add_files",
                                    "existing table: add_files"])
def test_load(h: Harness, target: str) -> None:
    h.ingest(3)
    root = h.s3.uri.rsplit("/", 1)[0] + "/dumps/1"
    job = h.table.dump(root)
    if target.startswith("existing"):
        h.store.create_table("copy", SCHEMA, properties=PROPERTIES)
    before = 0 if target.startswith("new") else h.s3.open_direct().table("copy").version
    kind = target.split(": ")[1]
    ok, _ = h.attempt(lambda: h.store.load(job.manifest_uri, "copy"),
                      h.drop_next(body=kind_body(kind)), kind=kind, before=before, name="copy")
    if ok:
        h.check(name="copy")
    else:  # the load did not happen: the table is absent or empty, and loading again works
        try:
            copy = h.s3.open_direct().table("copy")
            assert copy.query().num_rows == 0
        except TableNotFoundError:
            pass
        h.store.load(job.manifest_uri, "copy")
        h.check(name="copy")


@pytest.mark.parametrize("target", ["tag", "lock"])
def test_dump(h: Harness, target: str) -> None:
    """The dump's own conditional PUTs (its version tag, its lock) with the answer lost."""
    h.ingest(2)
    path = r"/tags/dump-[0-9a-f]+\.json$" if target == "tag" else r"/dumps/lock\.json$"
    rule = h.proxy.add_rule("drop_response", method="PUT", path=path, count=1)
    root = h.s3.uri.rsplit("/", 1)[0] + "/dumps/d"
    try:
        job, error = h.table.dump(root), None
    except SedimentError as e:
        job, error = None, e
    finally:
        h.proxy.remove_rule(rule)
    assert rule.fired == 1
    fresh = h.s3.open_direct().table(h.name)
    left = [t.name for t in fresh.tags()]
    locked = fresh._handle.objects.exists("dumps/lock.json")
    assert not left and not locked, (
        f"after the dump {'failed: ' + repr(error) if error else 'succeeded'}, the table "
        f"still holds dump tags {left} / its dump lock ({locked}): the dump's own write "
        f"was not recognised")
    if job is None:
        job = h.table.dump(root + "-again")
    copy = h.store.load(job.manifest_uri, "copy")
    assert_same_records(copy.query(), h.expected, "the loaded dump")
    h.check()


def test_tag(h: Harness) -> None:
    h.ingest()
    rule = h.proxy.add_rule("drop_response", method="PUT", path=r"/tags/v1\.json$", count=1)
    try:
        h.table.tag("v1")
        ok = True
    except SedimentError as e:
        ok, error = False, e
    finally:
        h.proxy.remove_rule(rule)
    assert rule.fired == 1
    tags = [t.name for t in h.s3.open_direct().table(h.name).tags()]
    assert ok or not tags, f"tag() failed ({error}) but the tag {tags} exists"
    assert tags == ["v1"] or not ok


@pytest.mark.parametrize("target", ["log", "catalog"])
def test_create_table(proxied_s3: ProxiedS3, target: str) -> None:
    s3 = proxied_s3
    store = s3.open()
    path = LOG_PUT if target == "log" else r"/catalog/new\.json$"
    rule = s3.proxy.add_rule("drop_response", method="PUT", path=path, count=1)
    try:
        store.create_table("new", SCHEMA, properties=PROPERTIES)
        ok, error = True, None
    except SedimentError as e:
        ok, error = False, e
    finally:
        s3.proxy.remove_rule(rule)
    assert rule.fired == 1
    direct = s3.open_direct()
    if ok:
        t = direct.table("new")
        assert t.version >= 1 and t.query().num_rows == 0
        assert [e.kind for e in t.history()] == ["initialise"]
    else:  # refused: the catalog must not name the table (else it names a broken one)
        assert "new" not in direct.tables(), (
            f"create_table failed ({error}) but the catalog names the table: "
            f"version {direct.table('new').version}, "
            f"{len(list(direct.table('new')._handle.objects.list('')))} objects in its folder")
        store.create_table("new", SCHEMA, properties=PROPERTIES)
    t = store.table("new")
    t.ingest(batch(1))
    assert_same_records(direct.table("new").query(), [batch(1)], "the new table")


# ---- data files: resets and 503s on PUT and GET ------------------------------------------------
def test_data_file_put_faults(h: Harness) -> None:
    """Resets and 503s on the PUTs of data files (and their samples and filters): an ingest
    retries or fails cleanly with nothing committed; never a partial or wrong table."""
    h.ingest()
    rules = [h.proxy.add_rule("reset", method="PUT", path="/data/", count=2),
             h.proxy.add_rule("status", method="PUT", path="/data/", count=2, status=503),
             h.proxy.add_rule("status", method="PUT", path="/data/", count=1, status=500,
                              skip=3)]
    failed = 0
    for _ in range(4):
        b = h.next_batch()
        before = h.table.version
        try:
            h.table.ingest(b)
            h.expected.append(b)
        except SedimentError:
            failed += 1
            assert not h.entries(before), "a failed ingest committed"
    assert sum(r.fired for r in rules) == 5
    h.proxy.clear()
    h.check()
    assert failed <= 2, f"{failed} of 4 ingests failed: retries did not absorb the faults"


def test_data_file_get_faults(h: Harness) -> None:
    """Resets, lost responses and 503s on the GETs of data files during queries: each query
    answers exactly right (after retries) or raises; never a wrong answer."""
    h.ingest(3)
    h.table.compact()
    want = frame(pa.concat_tables(h.expected))
    h.proxy.add_rule("reset", method="GET", path=DATA, probability=0.2, count=3)
    h.proxy.add_rule("status", method="GET", path=DATA, probability=0.2, status=503, count=2)
    h.proxy.add_rule("drop_response", method="GET", path=DATA, probability=0.2, count=2)
    fresh = h.s3.open().table(h.name)  # cold caches: every query reads files
    answered = errors = 0
    for i in range(9):
        t = h.table if i % 2 else fresh
        try:
            if i % 3 == 0:
                got = t.query()
                pd.testing.assert_frame_equal(frame(got), want, check_dtype=False)
            elif i % 3 == 1:
                key = h.expected[0].column("key")[i].as_py()
                got = t.query(keys=[key])
                assert sorted(got.column("value").to_pylist()) == sorted(
                    v for k, v in zip(want["key"], want["value"], strict=True) if k == key)
            else:
                got = t.scan(ranges=[sd.Range("c", "q")]).read_all()
                sub = want[(want["key"] >= "c") & (want["key"] < "q")].reset_index(drop=True)
                pd.testing.assert_frame_equal(frame(got), sub, check_dtype=False)
            answered += 1
        except SedimentError:
            errors += 1
        except OSError:  # pyarrow's own I/O error surfaced past Sediment: still not wrong
            errors += 1
    counts = h.proxy.counts
    h.proxy.clear()
    assert counts["reset"] + counts["status"] + counts["drop_response"] > 0
    assert answered >= 5, f"only {answered} of 9 queries answered ({errors} errors)"
    h.check()


def test_random_faults_everywhere(h: Harness) -> None:
    """Seeded random lost responses, resets, 503s and delays on every request while the table
    ingests, compacts, splits and collects: afterwards it loads, every file of every version
    exists and the records are exactly those of the calls that succeeded."""
    h.table.set_properties({"partition.split.threshold": 250})
    h.proxy.add_rule("drop_response", method="PUT", path=LOG_PUT, probability=0.3)
    # bounded counts: each reset or 503 costs botocore a backoff sleep (~0.5 s on average)
    h.proxy.add_rule("drop_response", method="PUT", probability=0.03, count=2)
    h.proxy.add_rule("reset", probability=0.03, count=3)
    h.proxy.add_rule("status", probability=0.02, status=503, count=2)
    h.proxy.add_rule("delay", probability=0.03, delay=0.02)
    outcomes: Counter[str] = Counter()
    for i in range(5):
        b = h.next_batch()
        before = h.table.version
        try:
            h.table.ingest(b)
            h.expected.append(b)
            outcomes["ingest ok"] += 1
        except SedimentError as e:
            outcomes["ingest failed"] += 1
            assert not [v for v, k, _ in h.entries(before) if k == "add_files"], \
                f"ingest failed ({e}) but committed"
        try:
            if i % 3 == 2:
                h.table.maintain()
            elif i % 3 == 1:
                h.table.compact()
            outcomes["maintenance ok"] += 1
        except SedimentError:
            outcomes["maintenance failed"] += 1
    faults = {k: h.proxy.counts[k] for k in ("drop_response", "reset", "status", "delay")}
    h.proxy.clear()
    print(json.dumps({"outcomes": outcomes, "faults": faults}))
    assert sum(faults.values()) > 0
    h.check()
