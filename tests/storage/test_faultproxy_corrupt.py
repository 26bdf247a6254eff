"""The fault proxy's ``corrupt`` action (tests/faultproxy.py), against the moto server, and what
Sediment does today with a corrupted GET answer (issue 38).

Every read is checked against the object's bytes as written (read directly, without the
proxy): a corrupted answer differs from them in exactly one byte, where the rule says, by its
``xor``, and in nothing else (length, ``Content-Length``). The layer that catches a flip is
named in each test: botocore (its CRC check of whole GETs, when the proxy keeps the
``x-amz-checksum-*`` headers), or nobody (pyarrow's S3 filesystem, which reads Sediment's
data files, checks nothing).
"""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import BotoCoreError, ClientError, FlexibleChecksumError

import sediment as sd
from faultproxy import (
    FaultProxy,
    ProxiedS3,
    Request,
    chaos_fault_specs,
    corruption_fault_specs,
)
from sediment.errors import CorruptMetadataError, SedimentError, StorageError
from sediment.storage import open_object_store
from sediment.storage.checksums import ChecksumMismatch
from sediment.storage.s3 import CHECKSUM_READS
from support.races import as_another_process
from support.s3 import s3_client

pytestmark = [pytest.mark.s3, pytest.mark.faults]

LOG_ENTRY = r"/log/\d{20}\.json$"
DATA = r"/data/.*\.parquet$"
BODY = bytes(range(256)) * 16  # 4 KiB, every byte value: any flip is visible
SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string())])


class Bucket:
    """A fresh bucket, its boto3 clients through the proxy and direct, and the proxy."""

    def __init__(self, s3: ProxiedS3) -> None:
        self.s3 = s3
        self.proxy: FaultProxy = s3.proxy
        self.name = s3.uri.removeprefix("s3://").split("/", 1)[0]
        self.via = s3_client(s3.proxy.url)
        self.direct = s3_client(s3.direct_endpoint)

    def put(self, key: str, data: bytes = BODY) -> None:
        self.direct.put_object(Bucket=self.name, Key=key, Body=data)

    def get(self, key: str, rng: str | None = None) -> tuple[bytes, dict[str, str]]:
        """The body and headers of a GET through the proxy (``rng``: a Range header)."""
        kw = {"Range": rng} if rng else {}
        r = self.via.get_object(Bucket=self.name, Key=key, **kw)
        return r["Body"].read(), r["ResponseMetadata"]["HTTPHeaders"]


@pytest.fixture
def b(proxied_s3: ProxiedS3) -> Bucket:
    return Bucket(proxied_s3)


def flips(got: bytes, want: bytes) -> list[tuple[int, int]]:
    """(position, xor) of every byte where ``got`` differs from ``want`` (same length)."""
    assert len(got) == len(want), f"{len(got)} bytes, not {len(want)}"
    return [(i, g ^ w) for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]


# ---- the action -----------------------------------------------------------------------------
def test_whole_get_has_one_byte_flipped_at_the_offset(b: Bucket) -> None:
    """keep_checksums=False: boto3 hands over the flipped body (its CRC header is gone), of the
    object's length, flipped at ``offset`` by ``xor`` only."""
    b.put("obj")
    _, clean = b.get("obj")
    assert "x-amz-checksum-crc32" in clean  # moto sends it: botocore would check it
    rule = b.proxy.add_rule("corrupt", path="/obj$", offset=1000, xor=0x40)
    body, headers = b.get("obj")
    assert flips(body, BODY) == [(1000, 0x40)]
    assert int(headers["content-length"]) == len(BODY)
    assert not any(h.startswith("x-amz-checksum-") for h in headers)
    assert rule.fired == 1 and b.proxy.counts["corrupt"] == 1
    assert b.proxy.events[-1][1:] == ("corrupt", "GET", f"/{b.name}/obj")


def test_ranged_get_flips_inside_the_range(b: Bucket) -> None:
    """``offset`` is a byte of the object, found through Content-Range; a range without it
    passes untouched (not fired); None draws a byte of the range; negative counts from the
    object's end."""
    b.put("obj")
    rule = b.proxy.add_rule("corrupt", offset=1500)
    body, headers = b.get("obj", "bytes=1000-1999")
    assert headers["content-range"] == f"bytes 1000-1999/{len(BODY)}"
    assert flips(body, BODY[1000:2000]) == [(500, 0x01)] and rule.fired == 1
    body, _ = b.get("obj", "bytes=0-999")
    assert body == BODY[:1000] and rule.fired == 1  # the offset is not in this answer
    b.proxy.clear()

    tail = b.proxy.add_rule("corrupt", offset=-1)
    body, _ = b.get("obj", f"bytes={len(BODY) - 10}-")
    assert flips(body, BODY[-10:]) == [(9, 0x01)] and tail.fired == 1
    b.proxy.clear()

    seeded = b.proxy.add_rule("corrupt")
    spots = set()
    for _ in range(5):
        body, _ = b.get("obj", "bytes=3000-3099")
        (spot,) = flips(body, BODY[3000:3100])
        spots.add(spot[0])
    assert seeded.fired == 5 and len(spots) > 1  # drawn anew each time, always inside


def test_ranged_selects_ranged_or_whole_gets(b: Bucket) -> None:
    b.put("obj")
    ranged = b.proxy.add_rule("corrupt", ranged=True, offset=10)
    assert b.get("obj")[0] == BODY and ranged.fired == 0
    assert flips(b.get("obj", "bytes=0-99")[0], BODY[:100]) == [(10, 1)] and ranged.fired == 1
    b.proxy.clear()
    whole = b.proxy.add_rule("corrupt", ranged=False, offset=10)
    assert b.get("obj", "bytes=0-99")[0] == BODY[:100] and whole.fired == 0
    assert flips(b.get("obj")[0], BODY) == [(10, 1)] and whole.fired == 1


def test_count_fires_once_then_passes_bytes_through(b: Bucket) -> None:
    """``fired`` counts flips only: a 404, an empty object and HEAD are not flipped and do not
    use up the count."""
    b.put("obj")
    b.put("empty", b"")
    rule = b.proxy.add_rule("corrupt", count=1, offset=7)
    with pytest.raises(b.via.exceptions.NoSuchKey):
        b.get("missing")
    assert b.get("empty")[0] == b""
    b.via.head_object(Bucket=b.name, Key="obj")
    assert rule.fired == 0 and rule.matched == 2  # HEAD is not a GET
    assert flips(b.get("obj")[0], BODY) == [(7, 1)]
    assert [b.get("obj")[0] == BODY for _ in range(3)] == [True] * 3
    assert rule.fired == 1 and b.proxy.counts["corrupt"] == 1


def test_kept_checksums_let_botocore_catch_a_whole_get(b: Bucket) -> None:
    """keep_checksums=True: botocore's CRC check of a whole GET raises FlexibleChecksumError
    (a BotoCoreError) while the body is read, after its retry layer: boto3 does not retry it.
    Sediment's S3 store reads again (a flip once is gone), and a mismatch in every read is
    ChecksumMismatch (a CorruptionError the callers name the object by), not a StorageError.
    A ranged GET carries no checksum header, so nothing in boto3 catches its flip."""
    b.put("obj")
    b.proxy.add_rule("corrupt", count=1, offset=3, keep_checksums=True)
    with pytest.raises(FlexibleChecksumError):
        b.get("obj")
    assert b.get("obj")[0] == BODY
    b.proxy.clear()

    store = open_object_store(f"s3://{b.name}", **b.s3.options)
    rule = b.proxy.add_rule("corrupt", count=1, offset=3, keep_checksums=True)
    assert store.get("obj") == BODY and rule.fired == 1  # read again: whole
    b.proxy.clear()
    rule = b.proxy.add_rule("corrupt", offset=3, keep_checksums=True)
    with pytest.raises(ChecksumMismatch, match="did not match calculated checksum") as caught:
        store.get("obj")
    assert not isinstance(caught.value, StorageError) and rule.fired == CHECKSUM_READS
    assert isinstance(caught.value.__cause__, BotoCoreError)
    b.proxy.clear()

    b.proxy.add_rule("corrupt", offset=3, keep_checksums=True)
    assert flips(store.get_range("obj", 0, 100), BODY[:100]) == [(3, 1)]


def test_pyarrow_s3_filesystem_returns_the_flipped_byte(b: Bucket) -> None:
    """Sediment reads data files through pyarrow's S3 filesystem (the store's
    ``arrow_filesystem``): its ranged reads are checked by no layer."""
    b.put("data/f.parquet")
    store = open_object_store(f"s3://{b.name}", **b.s3.options)
    fs, base = store.arrow_filesystem()
    rule = b.proxy.add_rule("corrupt", path=DATA, ranged=True, offset=2048, xor=0xFF)
    with fs.open_input_file(f"{base}/data/f.parquet") as f:
        got = f.read_at(100, 2000)
    assert flips(got, BODY[2000:2100]) == [(48, 0xFF)] and rule.fired == 1


def test_path_regexes_select_objects(b: Bucket) -> None:
    for key in ("t/log/00000000000000000001.json", "t/log/00000000000000000001.json.tmp",
                "t/log/1.json", "t/data/root/x.parquet", "t/_ab12.sample", "t/_ab12.keys"):
        b.put(key)
    log = b.proxy.add_rule("corrupt", path=LOG_ENTRY, offset=0)
    side = b.proxy.add_rule("corrupt", path=r"/_[0-9a-f]+\.(sample|keys)$", offset=0)
    hit = {key: b.get(key)[0] != BODY for key in (
        "t/log/00000000000000000001.json", "t/log/00000000000000000001.json.tmp",
        "t/log/1.json", "t/data/root/x.parquet", "t/_ab12.sample", "t/_ab12.keys")}
    assert [k for k, v in hit.items() if v] == [
        "t/log/00000000000000000001.json", "t/_ab12.sample", "t/_ab12.keys"]
    assert (log.fired, side.fired) == (1, 2)


class _Chunked(http.server.BaseHTTPRequestHandler):
    """An upstream answering every GET with a chunked body of three chunks (with an
    extension and a trailer), as a server streaming an object would."""

    protocol_version = "HTTP/1.1"
    chunks = (b"hello", b"-", b"chunked world")

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-amz-checksum-crc32", "AAAAAA==")
        self.end_headers()
        frames = [b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in self.chunks]
        self.wfile.write(b"".join(frames) + b"0\r\nx-trailer: 1\r\n\r\n")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def chunked_proxy() -> Iterator[FaultProxy]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Chunked)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with FaultProxy(f"http://127.0.0.1:{server.server_address[1]}") as proxy:
            yield proxy
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_chunked_body_is_flipped_in_its_data_only(chunked_proxy: FaultProxy) -> None:
    """Every offset of the data, over one keep-alive connection: the framing stays valid
    (http.client decodes each answer) and the data has one flip, at the offset."""
    import http.client

    want = b"".join(_Chunked.chunks)
    host, port = chunked_proxy.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    rule = chunked_proxy.add_rule("corrupt")
    for offset in range(len(want)):
        rule.offset = offset
        conn.request("GET", "/obj")
        r = conn.getresponse()
        assert r.getheader("x-amz-checksum-crc32") is None
        assert flips(r.read(), want) == [(offset, 1)]
    rule.offset = len(want)  # past the end: passed through
    conn.request("GET", "/obj")
    r = conn.getresponse()
    assert r.read() == want and r.getheader("x-amz-checksum-crc32") == "AAAAAA=="
    conn.close()
    assert rule.fired == len(want) and chunked_proxy.counts["upstream_errors"] == 0


def test_head_has_its_content_length_misreported(b: Bucket) -> None:
    """``method="HEAD"``: the answer has no body; its Content-Length (the object's size) is
    xored instead, once; a 404 has nothing to misreport (not fired)."""
    b.put("obj")
    rule = b.proxy.add_rule("corrupt", method="HEAD", path="/obj", xor=0x01)
    with pytest.raises(ClientError):  # a 404: nothing to misreport
        b.via.head_object(Bucket=b.name, Key="objx")
    assert rule.fired == 0
    size = b.via.head_object(Bucket=b.name, Key="obj")["ContentLength"]
    assert size == len(BODY) ^ 0x01 and rule.fired == 1
    assert b.proxy.counts["corrupt"] == 1
    assert b.direct.head_object(Bucket=b.name, Key="obj")["ContentLength"] == len(BODY)


def test_status_rules_send_the_code_given(b: Bucket) -> None:
    """A 503 is S3's ``SlowDown`` unless the rule names another code (``InternalError``)."""
    import boto3
    from botocore.config import Config

    b.put("obj")
    client = boto3.session.Session().client(
        "s3", endpoint_url=b.proxy.url, region_name="us-east-1", aws_access_key_id="testing",
        aws_secret_access_key="testing", config=Config(retries={"total_max_attempts": 1}))
    for code in (None, "InternalError"):
        rule = b.proxy.add_rule("status", status=503, code=code, count=1)
        with pytest.raises(ClientError) as e:
            client.get_object(Bucket=b.name, Key="obj")
        assert e.value.response["Error"]["Code"] == (code or "SlowDown")
        assert rule.fired == 1


def test_chaos_specs_are_foundationdbs_mix() -> None:
    """The shares of ``chaos_fault_specs`` over requests no earlier rule took: 15% errors
    (half 500, half 503 InternalError), 20% SlowDown, 10% delays, 0.5% of each corruption."""
    specs = {s["name"]: s for s in chaos_fault_specs()}
    p = {name: s["probability"] for name, s in specs.items()}
    assert p["delay"] == 0.10 and specs["delay"]["action"] == "delay"
    assert p["500 InternalError"] == pytest.approx(0.075)
    assert (1 - p["500 InternalError"]) * p["503 InternalError"] == pytest.approx(0.075)
    assert 0.85 * p["503 SlowDown"] == pytest.approx(0.20)
    assert specs["503 InternalError"]["code"] == "InternalError"
    assert {p[n] for n in ("corrupt listing", "corrupt whole read", "corrupt ranged read",
                           "corrupt head")} == {0.005}
    proxy = FaultProxy("http://127.0.0.1:9")  # never started: rules only
    proxy.add_rules([s for s in chaos_fault_specs(scale=1000)  # every probability 1
                     if s["action"] == "corrupt"])

    def fired(method: str, target: str, headers: list[tuple[str, str]] | None = None
              ) -> list[str]:
        return [r.name for r in proxy._decide(Request(method, target, "HTTP/1.1",
                                                      headers or [], b""))]

    assert fired("GET", "/bucket?list-type=2&prefix=t/") == ["corrupt listing"]
    assert fired("GET", "/bucket/t/log/1.json") == ["corrupt whole read"]
    assert fired("GET", "/bucket/t/d.parquet", [("Range", "bytes=0-9")]) == \
        ["corrupt ranged read"]
    assert fired("HEAD", "/bucket/t/d.parquet") == ["corrupt head"]
    assert fired("GET", "/bucket?location") == []  # not a listing, not an object


# ---- rules across processes, and the proofs' mix ----------------------------------------------
def test_rules_round_trip_through_json() -> None:
    proxy = FaultProxy("http://127.0.0.1:9")  # never started: rules only
    rule = proxy.add_rule("corrupt", path=LOG_ENTRY, offset=-3, xor=0x80, ranged=False,
                          keep_checksums=True, count=2, name="log flip")
    rule.fired = 1
    assert rule.method == "GET"  # the default for corrupt: only answers are corrupted
    (copy,) = proxy.add_rules(json.loads(json.dumps([rule.to_json()])))
    assert copy.spec() == rule.spec() and copy.fired == 0
    with pytest.raises(ValueError, match="xor"):
        proxy.add_rule("corrupt", xor=0)
    specs = corruption_fault_specs()
    assert {(s["ranged"], s["probability"]) for s in specs} == {(True, 0.005), (False, 0.005)}
    proxy.clear()
    whole, ranged = proxy.add_rules(corruption_fault_specs(1.0, path=DATA))
    get = Request("GET", "/b/t/data/root/x.parquet", "HTTP/1.1", [("Range", "bytes=0-9")], b"")
    assert proxy._decide(get) == [ranged]
    assert proxy._decide(Request("GET", "/b/t/log/1.json", "HTTP/1.1", [], b"")) == []


def test_script_takes_corrupt_rules(b: Bucket, s3_server: str) -> None:
    """``python tests/faultproxy.py UPSTREAM --rules JSON``: a proxy in another process."""
    b.put("obj")
    rules = json.dumps([{"action": "corrupt", "path": "/obj$", "offset": 5, "count": 1}])
    script = Path(__file__).resolve().parents[1] / "faultproxy.py"
    proc = subprocess.Popen([sys.executable, str(script), s3_server, "--rules", rules],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        via = s3_client(url)
        got = [via.get_object(Bucket=b.name, Key="obj")["Body"].read() for _ in range(2)]
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    assert flips(got[0], BODY) == [(5, 1)] and got[1] == BODY
    summary = json.loads(out)
    assert summary["counts"]["corrupt"] == 1 and summary["rules"][0]["fired"] == 1


# ---- what Sediment does today (issue 38) -----------------------------------------------------
def _reference(*tables: pa.Table) -> list[tuple[str, int, str]]:
    rows = pa.concat_tables(tables).to_pylist()
    return sorted((r["key"], r["ts"], r["value"]) for r in rows)


def _rows(t: pa.Table) -> list[tuple[str, int, str]]:
    return _reference(t.select(["key", "ts", "value"]))


def _right_or_refused(call: Any, want: list[tuple[str, int, str]], error: str) -> None:
    """The right answer, or a refusal by the named error class: never a wrong answer."""
    try:
        got = call()
    except SedimentError as e:
        assert type(e).__name__ == error, f"{type(e).__name__}: {e}"
    else:
        assert _rows(got) == want, f"a wrong answer: {len(got)} rows, not {len(want)}"


ABC = pa.table({"key": ["a", "b", "c"], "ts": [1, 2, 3], "value": ["x", "y", "z"]})


@pytest.mark.parametrize("target", ["partition", "file"])
def test_flipped_log_entry_is_never_an_answer(proxied_s3: ProxiedS3, target: str) -> None:
    """One GET of the add_files entry has a byte flipped (once: a re-read is whole). Without
    the entry's seal ``partition`` ("root" read as "soot") silently dropped the file (0 rows of
    3) and ``file`` (a digit of the data file's name) failed as a missing file; the seal's
    mismatch is read again and the answer is whole."""
    store = proxied_s3.open()
    table = store.create_table("t", SCHEMA, properties={"state.cache.refresh_seconds": 0})
    table.ingest(ABC)
    entry = next(o.key for o in table._handle.objects.list("log/")
                 if o.key.endswith("00000000000000000002.json"))
    body = table._handle.objects.get(entry)
    at = {"partition": body.index(b'"partition":"root"') + 13,
          "file": body.index(b'"file":"data/root/') + 18}[target]
    rule = proxied_s3.proxy.add_rule("corrupt", path=r"/log/0+2\.json$", offset=at, count=1)
    # a fresh process's view: its head read from the log
    _right_or_refused(lambda: as_another_process(proxied_s3.open().table("t")).query(),
                      _reference(ABC), "CorruptMetadataError")
    assert rule.fired == 1


def test_flipped_log_read_is_not_persisted_by_a_snapshot(proxied_s3: ProxiedS3) -> None:
    """Without the entry's seal the handle that read the flipped entry (once) saw 0 rows, its
    next commit built on that state, and the snapshot it wrote at version 3 persisted it (a
    fresh handle read 1 row of 4, for good). Sealed, the flip is read again and the snapshot
    holds every row."""
    props = {"state.cache.refresh_seconds": 0, "state.snapshot.interval": 3}
    table = proxied_s3.open().create_table("t", SCHEMA, properties=props)
    table.ingest(ABC)
    entry = next(o.key for o in table._handle.objects.list("log/")
                 if o.key.endswith("00000000000000000002.json"))
    at = table._handle.objects.get(entry).index(b'"partition":"root"') + 13
    proxied_s3.proxy.add_rule("corrupt", path=r"/log/0+2\.json$", offset=at, count=1)
    more = pa.table({"key": ["d"], "ts": [4], "value": ["w"]})
    try:
        faulted = proxied_s3.open().table("t")
        faulted.query()
        faulted.ingest(more)
    except CorruptMetadataError:
        pass  # refused: nothing built on the damaged read
    fresh = proxied_s3.open_direct().table("t")
    assert fresh._handle.objects.head("snapshots/00000000000000000003.json") is not None
    assert _rows(fresh.query()) == _reference(ABC, more)


def test_flipped_data_file_range_is_never_an_answer(proxied_s3: ProxiedS3) -> None:
    """Every ranged GET of the data file that holds one byte of a value (``v-001000``, plain
    and uncompressed, so the flip is known) has it flipped. Without page CRCs the query
    returned 2000 rows with ``v-001001`` twice and no ``v-001000`` (pyarrow's S3 filesystem
    and Parquet reader check nothing else); with them the page is refused, read again, and
    the damage that stays raises CorruptDataError."""
    n = 2000
    rows = pa.table({"key": [f"k{i:05d}" for i in range(n)], "ts": list(range(n)),
                     "value": [f"v-{i:06d}" for i in range(n)]})
    table = proxied_s3.open().create_table(
        "t", SCHEMA, properties={"state.cache.refresh_seconds": 0,
                                 "parquet.compression": "none"})
    table.ingest(rows)
    (ref,) = table.files()
    data = table._handle.objects.get(ref.filename)
    assert pq.read_table(pa.BufferReader(data)).num_rows == n
    at = data.index(b"v-001000") + 7
    rule = proxied_s3.proxy.add_rule("corrupt", path=DATA, ranged=True, offset=at)
    _right_or_refused(lambda: proxied_s3.open().table("t").query(), _reference(rows),
                      "CorruptDataError")
    assert rule.fired >= 1


def test_misreported_data_file_size_is_never_an_answer(proxied_s3: ProxiedS3) -> None:
    """A HEAD of a data file answers a size one byte off, once (pyarrow's S3 filesystem sizes
    the files it opens by a HEAD): the footer is looked for at the wrong end, its recorded sums
    refuse it, and it is read again through a fresh HEAD: the right answer."""
    rows = pa.table({"key": [f"k{i:04d}" for i in range(500)], "ts": list(range(500)),
                     "value": [f"v-{i}" for i in range(500)]})
    table = proxied_s3.open().create_table("t", SCHEMA,
                                           properties={"state.cache.refresh_seconds": 0})
    table.ingest(rows)
    rule = proxied_s3.proxy.add_rule("corrupt", method="HEAD", path=DATA, count=1)
    assert _rows(proxied_s3.open().table("t").query()) == _reference(rows)
    assert rule.fired == 1


def test_garbled_listing_fails_as_a_storage_error(b: Bucket) -> None:
    """A listing whose ``LastModified`` had a byte flipped (``06:14:31`` read as ``06:14;31``,
    as the chaos soak met it) makes botocore's parser raise a bare ValueError: the S3 store
    turns it into a StorageError naming the prefix (a failed request the caller retries),
    never an exception no caller expects; the next listing is whole."""
    import urllib.request

    b.put("obj")
    with urllib.request.urlopen(f"{b.s3.direct_endpoint}/{b.name}?list-type=2") as r:
        xml = r.read()
    at = xml.index(b"<LastModified>") + len(b"<LastModified>2026-11-28T06:14")
    rule = b.proxy.add_rule("corrupt", query="list-type", offset=at, xor=0x01, count=1)
    store = open_object_store(f"s3://{b.name}", **b.s3.options)
    with pytest.raises(StorageError, match="S3 list of '' .* does not parse"):
        list(store.list(""))
    assert rule.fired == 1
    assert [o.key for o in store.list("")] == ["obj"]
