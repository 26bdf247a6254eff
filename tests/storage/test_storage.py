"""Conformance of every ObjectStore implementation (memory, local disk, S3 via moto, and S3
through the fault proxy with and without transient faults: the ``object_store`` fixture)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sediment.errors import ObjectNotFoundError, StorageError
from sediment.storage import LocalObjectStore, MemoryObjectStore, ObjectStore, open_object_store
from sediment.storage.s3 import S3ObjectStore


def keys(store: ObjectStore, prefix: str = "", start_after: str | None = None) -> list[str]:
    return [o.key for o in store.list(prefix, start_after=start_after)]


# ---- get / put ------------------------------------------------------------------------------
def test_put_then_get_whole_object(object_store: ObjectStore) -> None:
    object_store.put("a/b.bin", b"hello world")
    assert object_store.get("a/b.bin") == b"hello world"


def test_put_empty_object(object_store: ObjectStore) -> None:
    object_store.put("empty", b"")
    assert object_store.get("empty") == b""
    info = object_store.head("empty")
    assert info is not None and info.size == 0


def test_put_overwrites(object_store: ObjectStore) -> None:
    object_store.put("k", b"first version")
    object_store.put("k", b"second")
    assert object_store.get("k") == b"second"
    assert keys(object_store) == ["k"]
    info = object_store.head("k")
    assert info is not None and info.size == len(b"second")


def test_binary_content_round_trips(object_store: ObjectStore) -> None:
    data = bytes(range(256)) * 64
    object_store.put("bin", data)
    assert object_store.get("bin") == data


@pytest.mark.parametrize(("start", "end", "expected"), [
    (0, 5, b"01234"),
    (3, 7, b"3456"),
    (0, 10, b"0123456789"),
    (8, 20, b"89"),       # range running past the end: truncated
    (10, 20, b""),        # starting at the end
    (15, 30, b""),        # starting past the end
    (4, 4, b""),          # empty range
    (6, 2, b""),          # inverted range
])
def test_get_range(object_store: ObjectStore, start: int, end: int, expected: bytes) -> None:
    object_store.put("digits", b"0123456789")
    assert object_store.get_range("digits", start, end) == expected


def test_get_missing_raises_object_not_found(object_store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFoundError):
        object_store.get("no/such/key")
    object_store.put("present", b"x")
    with pytest.raises(ObjectNotFoundError):
        object_store.get("presen")
    assert issubclass(ObjectNotFoundError, StorageError)


def test_get_range_missing_raises_object_not_found(object_store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFoundError):
        object_store.get_range("no/such/key", 0, 10)


# ---- put_if_absent --------------------------------------------------------------------------
def test_put_if_absent_first_wins(object_store: ObjectStore) -> None:
    assert object_store.put_if_absent("log/1", b"first") is True
    assert object_store.put_if_absent("log/1", b"second") is False
    assert object_store.get("log/1") == b"first"
    assert keys(object_store) == ["log/1"]


def test_put_if_absent_after_put_and_after_delete(object_store: ObjectStore) -> None:
    object_store.put("k", b"plain")
    assert object_store.put_if_absent("k", b"cond") is False
    assert object_store.get("k") == b"plain"
    object_store.delete_many(["k"])
    assert object_store.put_if_absent("k", b"cond") is True
    assert object_store.get("k") == b"cond"


def test_put_if_absent_concurrent_exactly_one_winner(object_store: ObjectStore) -> None:
    n = 20
    for round_ in range(3):
        key = f"race/{round_}"
        barrier = threading.Barrier(n, timeout=30)

        def attempt(i: int, key: str = key, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return object_store.put_if_absent(key, f"writer-{i}".encode() * 100)

        with ThreadPoolExecutor(n) as pool:
            results = list(pool.map(attempt, range(n)))
        assert sum(results) == 1, results
        winner = results.index(True)
        assert object_store.get(key) == f"writer-{winner}".encode() * 100


# ---- list -----------------------------------------------------------------------------------
def test_list_sorted_by_key_with_sizes(object_store: ObjectStore) -> None:
    # no key is also a "folder" of another key: local disk cannot hold both "a" and "a/b"
    names = ["b", "a0", "c/2", "c/10", "c/1", "aa", "a-b", "a/b"]
    for i, k in enumerate(names):
        object_store.put(k, b"x" * i)
    listed = list(object_store.list(""))
    assert [o.key for o in listed] == sorted(names)
    sizes = {o.key: o.size for o in listed}
    assert sizes == {k: i for i, k in enumerate(names)}
    assert all(o.mtime > 0 for o in listed)


def test_list_by_prefix(object_store: ObjectStore) -> None:
    for k in ["log/00001.json", "log/00002.json", "logs/x", "lo", "snapshots/1.json", "l"]:
        object_store.put(k, b"{}")
    assert keys(object_store, "log/") == ["log/00001.json", "log/00002.json"]
    assert keys(object_store, "log") == ["log/00001.json", "log/00002.json", "logs/x"]
    assert keys(object_store, "lo") == ["lo", "log/00001.json", "log/00002.json", "logs/x"]
    assert keys(object_store, "snap") == ["snapshots/1.json"]
    assert keys(object_store, "nothing/") == []
    assert keys(object_store, "nothing") == []


def test_list_nested_prefixes(object_store: ObjectStore) -> None:
    # '-' (0x2d) sorts before '/' (0x2f): a store must sort by full key, not walk folder by folder
    names = ["t/a/b/c/d.parquet", "t/a/b/c.parquet", "t/a/b-x", "t/a/b/0", "t/a/bz", "t/a0",
             "t/a/b/c/e/f"]
    for k in names:
        object_store.put(k, b"1")
    assert keys(object_store, "t/") == sorted(names)
    assert keys(object_store, "t/a/") == sorted(k for k in names if k.startswith("t/a/"))
    assert keys(object_store, "t/a/b") == sorted(k for k in names if k.startswith("t/a/b"))
    assert keys(object_store, "t/a/b/") == ["t/a/b/0", "t/a/b/c.parquet", "t/a/b/c/d.parquet",
                                            "t/a/b/c/e/f"]
    assert keys(object_store, "t/a/b/c/") == ["t/a/b/c/d.parquet", "t/a/b/c/e/f"]


def test_list_start_after(object_store: ObjectStore) -> None:
    names = [f"log/{v:020d}.json" for v in range(1, 8)]
    for k in names:
        object_store.put(k, b"{}")
    object_store.put("other", b"")
    assert keys(object_store, "log/", start_after=names[2]) == names[3:]
    assert keys(object_store, "log/", start_after=names[-1]) == []
    # start_after need not be an existing key, and may sort before the prefix
    assert keys(object_store, "log/", start_after="log/00000000000000000004") == names[3:]
    assert keys(object_store, "log/", start_after="a") == names
    assert keys(object_store, "", start_after=names[5]) == names[6:] + ["other"]


@pytest.mark.slow_on_s3  # 1,005 puts: seconds on moto, the full lane
def _small_pages(store: ObjectStore) -> int:
    """Keys enough for several pages: an S3 store asks for pages of 10 keys (moto pages as S3
    does, so a few dozen keys prove the paging that 1000 keys per page would need a thousand
    puts for); the other stores have no pages."""
    if hasattr(store, "list_page_size"):
        store.list_page_size = store.delete_batch_size = 10  # type: ignore[attr-defined]
        return 25
    return 1005


def test_list_many_keys_paginates(object_store: ObjectStore) -> None:
    n = _small_pages(object_store)
    names = [f"p/{i:05d}" for i in range(n)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: object_store.put(k, b"."), names))
    assert keys(object_store, "p/") == names
    assert keys(object_store, "p/", start_after=names[n - 11]) == names[n - 10:]


# ---- delete / head / exists -----------------------------------------------------------------
def test_delete_many(object_store: ObjectStore) -> None:
    for k in ["a", "b", "c/d", "c/e"]:
        object_store.put(k, b"1")
    object_store.delete_many(["a", "c/d", "missing", "c/zzz"])
    assert keys(object_store) == ["b", "c/e"]
    object_store.delete_many([])
    object_store.delete_many(iter(["b"]))
    assert keys(object_store) == ["c/e"]


def test_delete_many_more_than_one_batch(object_store: ObjectStore) -> None:
    names = [f"gc/{i:05d}" for i in range(_small_pages(object_store))]  # several batches
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: object_store.put(k, b"."), names))
    object_store.put("keep/me", b"1")
    object_store.delete_many(k for k in names)  # a generator, consumed once
    assert keys(object_store, "gc/") == []
    assert keys(object_store) == ["keep/me"]


def test_head_and_exists(object_store: ObjectStore) -> None:
    assert object_store.head("x/y") is None
    assert not object_store.exists("x/y")
    object_store.put("x/y", b"12345")
    info = object_store.head("x/y")
    assert info is not None
    assert (info.key, info.size) == ("x/y", 5)
    assert info.mtime > 0
    assert object_store.exists("x/y")
    assert not object_store.exists("x")  # a "folder" is not an object
    object_store.delete_many(["x/y"])
    assert not object_store.exists("x/y")


def test_folders_are_not_objects(object_store: ObjectStore) -> None:
    object_store.put("x/y", b"1")
    for missing in ["x", "x/y/z"]:
        assert object_store.head(missing) is None
    assert not object_store.exists("x")
    assert not object_store.exists("x/y/z")
    with pytest.raises(ObjectNotFoundError):
        object_store.get("x")
    with pytest.raises(ObjectNotFoundError):
        object_store.get_range("x", 0, 1)
    with pytest.raises(ObjectNotFoundError):
        object_store.get("x/y/z")
    object_store.delete_many(["x", "x/y/z"])  # not objects: ignored like missing keys
    assert object_store.get("x/y") == b"1"


# ---- child (prefixed) views -----------------------------------------------------------------
def test_child_store_is_a_prefixed_view(object_store: ObjectStore) -> None:
    child = object_store.child("tables/t1")
    assert child.uri == object_store.uri.rstrip("/") + "/tables/t1"
    child.put("log/1", b"one")
    assert child.put_if_absent("log/2", b"two") is True
    assert child.put_if_absent("log/2", b"again") is False
    object_store.put("tables/t10/log/1", b"neighbour")  # shares the text prefix "tables/t1"
    assert object_store.get("tables/t1/log/1") == b"one"
    assert keys(child, "log/") == ["log/1", "log/2"]
    assert keys(child, "") == ["log/1", "log/2"]
    assert keys(child, "log/", start_after="log/1") == ["log/2"]
    assert child.get_range("log/2", 1, 3) == b"wo"
    info = child.head("log/2")
    assert info is not None and info.key == "log/2" and info.size == 3
    child.delete_many(["log/1"])
    assert keys(object_store) == ["tables/t1/log/2", "tables/t10/log/1"]


# ---- arrow filesystem -----------------------------------------------------------------------
def test_arrow_filesystem_parquet_round_trip(object_store: ObjectStore) -> None:
    table = pa.table({"key": ["a", "b", "c"], "value": [1, 2, 3]})
    fs, _base = object_store.arrow_filesystem()
    object_store.put("data/marker", b"")  # local disk needs the folder to exist
    pq.write_table(table, object_store.path("data/part.parquet"), filesystem=fs)
    # visible through the object store...
    assert object_store.exists("data/part.parquet")
    assert "data/part.parquet" in keys(object_store, "data/")
    raw = object_store.get("data/part.parquet")
    assert raw[:4] == b"PAR1" and raw[-4:] == b"PAR1"
    assert object_store.get_range("data/part.parquet", len(raw) - 4, len(raw)) == b"PAR1"
    # ...and readable back through pyarrow
    assert pq.read_table(object_store.path("data/part.parquet"), filesystem=fs).equals(table)
    # bytes written by the store are readable through pyarrow too
    object_store.put("data/copy.parquet", raw)
    assert pq.read_table(object_store.path("data/copy.parquet"), filesystem=fs).equals(table)
    # and so through a child view
    child = object_store.child("data")
    cfs, _ = child.arrow_filesystem()
    assert pq.read_table(child.path("copy.parquet"), filesystem=cfs).equals(table)


# ---- local specifics ------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/etc/passwd", "a/./b", "", ".", "a//b/.."])
def test_local_rejects_invalid_keys(tmp_path: Path, bad: str) -> None:
    store = LocalObjectStore(tmp_path / "root")
    with pytest.raises(StorageError):
        store.put(bad, b"x")
    with pytest.raises(StorageError):
        store.put_if_absent(bad, b"x")
    with pytest.raises(StorageError):
        store.get(bad)
    assert not (tmp_path / "x").exists()


def test_local_key_that_is_also_a_folder_is_a_storage_error(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("a/b", b"1")
    with pytest.raises(StorageError):
        store.put("a", b"2")
    assert store.put_if_absent("a", b"2") is False  # the name is taken, by a folder
    assert store.get("a/b") == b"1"


def test_local_put_if_absent_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    assert store.put_if_absent("d/k", b"1")
    assert not store.put_if_absent("d/k", b"2")
    store.put("d/k2", b"3")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["k", "k2"]


def test_local_uri_is_normalised(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "a" / ".." / "b")
    assert store.uri == (tmp_path / "b").resolve().as_uri()


# ---- open_object_store ----------------------------------------------------------------------
def test_open_object_store_plain_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_object_store(str(tmp_path / "s"))
    assert isinstance(store, LocalObjectStore)
    assert store.directory == (tmp_path / "s").resolve()
    assert store.uri == (tmp_path / "s").resolve().as_uri()
    monkeypatch.chdir(tmp_path)
    rel = open_object_store("rel/dir")
    assert isinstance(rel, LocalObjectStore)
    assert rel.directory == (tmp_path / "rel" / "dir").resolve()


def test_open_object_store_file_uri(tmp_path: Path) -> None:
    uri = (tmp_path / "f").as_uri()
    store = open_object_store(uri)
    assert isinstance(store, LocalObjectStore)
    assert store.directory == (tmp_path / "f").resolve()
    assert store.uri == uri
    store.put("k", b"v")
    assert (tmp_path / "f" / "k").read_bytes() == b"v"


def test_open_object_store_s3_uri(aws_test_env: None) -> None:
    # building a client contacts nothing; the endpoint is loopback anyway
    opts = {"endpoint_url": "http://127.0.0.1:9", "region": "eu-west-2",
            "access_key_id": "testing", "secret_access_key": "testing"}
    store = open_object_store("s3://my-bucket/some/prefix/", **opts)
    assert isinstance(store, S3ObjectStore)
    assert (store.bucket, store.prefix) == ("my-bucket", "some/prefix")
    assert store.uri == "s3://my-bucket/some/prefix"
    assert store.endpoint_url == "http://127.0.0.1:9"
    assert store.region == "eu-west-2"
    assert store.reopen_options()["access_key_id"] == "testing"
    bare = open_object_store("s3://my-bucket", **opts)
    assert isinstance(bare, S3ObjectStore)
    assert (bare.prefix, bare.uri) == ("", "s3://my-bucket")
    assert bare.path("k/x") == "my-bucket/k/x"
    assert store.path("k/x") == "my-bucket/some/prefix/k/x"


def test_open_object_store_memory_is_shared_by_name() -> None:
    a = open_object_store("memory://shared-test-store")
    b = open_object_store("memory://shared-test-store")
    c = open_object_store("memory://another-test-store")
    assert isinstance(a, MemoryObjectStore)
    assert a is b and a is not c
    a.put("k", b"v")
    assert b.get("k") == b"v"
    assert not c.exists("k")


@pytest.mark.parametrize("uri", ["ftp://host/path", "http://127.0.0.1/x", "gs://bucket/p",
                                 "hdfs://nn/path", "s3a://bucket/x"])
def test_open_object_store_rejects_unknown_schemes(uri: str) -> None:
    with pytest.raises(StorageError, match="scheme"):
        open_object_store(uri)


def test_open_object_store_rejects_s3_without_bucket() -> None:
    with pytest.raises(StorageError, match="bucket"):
        open_object_store("s3:///prefix")


@pytest.mark.parametrize("uri", ["PLAIN", "FILE", "memory://options-test"])
def test_local_and_memory_stores_refuse_every_option(uri: str, tmp_path: Path) -> None:
    uri = {"PLAIN": str(tmp_path / "s"), "FILE": (tmp_path / "s").as_uri()}.get(uri, uri)
    with pytest.raises(StorageError, match="'endpoint_url'.*takes none"):
        open_object_store(uri, endpoint_url="http://127.0.0.1:9")


def test_s3_refuses_an_unknown_option_naming_it(aws_test_env: None) -> None:
    with pytest.raises(StorageError, match="'endpoint'.*'regoin'.*takes access_key_id"):
        open_object_store("s3://my-bucket/p", region="eu-west-2", regoin="eu-west-1",
                          endpoint="http://127.0.0.1:9")


def test_s3_retries_follow_aws_max_attempts(aws_test_env: None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """$AWS_MAX_ATTEMPTS (tries in all, as the AWS SDKs read it) sets the retries of the
    client and of pyarrow's filesystem; unset, five retries; not a whole number >= 1 refused
    naming the variable."""
    from sediment.errors import PropertyError
    from sediment.storage import s3

    def retries() -> int:
        store = open_object_store("s3://my-bucket/p", endpoint_url="http://127.0.0.1:9")
        assert isinstance(store, S3ObjectStore)
        got = store._client.meta.config.retries  # (botocore counts the first try in)
        assert got["mode"] == "legacy"
        return int(got["total_max_attempts"]) - 1

    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    assert retries() == s3.RETRIES == 5
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    assert retries() == 1 and s3.request_retries() == 1
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    assert retries() == 0
    for bad in ("0", "two", "-3"):
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", bad)
        with pytest.raises(PropertyError, match=rf"\$AWS_MAX_ATTEMPTS .*'{bad}'"):
            open_object_store("s3://my-bucket/p", endpoint_url="http://127.0.0.1:9")


def test_store_open_refuses_an_unknown_storage_option(tmp_path: Path) -> None:
    import sediment as sd

    with pytest.raises(StorageError, match="'acess_key_id'"):
        sd.Store.open(str(tmp_path / "s"), acess_key_id="x")
    assert not (tmp_path / "s").exists()  # refused before anything was written


def test_registered_scheme_opens_with_its_factory(tmp_path: Path) -> None:
    from sediment.storage import registry

    opened: list[tuple[str, dict[str, Any]]] = []

    def factory(uri: str, **options: Any) -> ObjectStore:
        opened.append((uri, options))
        return LocalObjectStore(tmp_path / "x")

    registry.register_scheme("testfs", factory)
    try:
        store = open_object_store("testfs://somewhere", flavour="x")
        assert isinstance(store, LocalObjectStore) and opened == [("testfs://somewhere",
                                                                   {"flavour": "x"})]
    finally:
        registry._FACTORIES.pop("testfs")
    with pytest.raises(StorageError, match="scheme 'testfs'"):
        open_object_store("testfs://somewhere")


def test_local_path_is_the_file_of_a_local_store_only(tmp_path: Path) -> None:
    local = LocalObjectStore(tmp_path / "s")
    local.put("a/b.bin", b"x")
    assert local.local_path("a/b.bin") == str(tmp_path / "s" / "a" / "b.bin")
    assert Path(local.child("a").local_path("b.bin") or "").read_bytes() == b"x"
    assert MemoryObjectStore().local_path("a/b.bin") is None
    assert MemoryObjectStore().child("a").local_path("b.bin") is None


def test_local_path_of_s3_is_none(aws_test_env: None) -> None:
    store = open_object_store("s3://my-bucket/p", endpoint_url="http://127.0.0.1:9")
    assert store.local_path("k") is None and store.child("t").local_path("k") is None


def test_reopen_options_round_trip(tmp_path: Path, aws_test_env: None) -> None:
    opts = {"endpoint_url": "http://127.0.0.1:9", "region": "eu-west-2",
            "access_key_id": "AKIDTEST", "secret_access_key": "secret", "session_token": "tok"}
    s3 = open_object_store("s3://my-bucket/some/prefix", **opts).child("tables/t")
    assert s3.reopen_options() == opts
    again = open_object_store(s3.uri, **s3.reopen_options())
    assert again.uri == s3.uri and again.reopen_options() == opts
    base = "my-bucket/some/prefix/tables/t"
    assert again.arrow_filesystem()[1] == s3.arrow_filesystem()[1] == base
    for store in (LocalObjectStore(tmp_path / "s").child("t"),
                  open_object_store("memory://reopen-test")):
        assert store.reopen_options() == {}
        assert open_object_store(store.uri, **store.reopen_options()).uri == store.uri


def test_store_spec_reopens_the_store(tmp_path: Path) -> None:
    import sediment as sd

    local = sd.Store.open(str(tmp_path / "s"), create=True)
    assert local.spec() == {"uri": local.uri}
    assert sd.Store.open(**local.spec()).uri == local.uri


# ---- S3 specifics ---------------------------------------------------------------------------
@pytest.mark.s3
def test_s3_missing_bucket_is_a_storage_error(s3_server: str, aws_test_env: None) -> None:
    store = open_object_store("s3://no-such-bucket-sediment/x", endpoint_url=s3_server,
                              region="us-east-1", access_key_id="testing",
                              secret_access_key="testing")
    with pytest.raises(StorageError):
        store.put("k", b"v")
    with pytest.raises(StorageError):
        list(store.list(""))


@pytest.mark.s3
def test_s3_stores_under_prefix(s3_store_uri: tuple[str, dict[str, str]]) -> None:
    import boto3

    def s3_client(endpoint: str) -> Any:
        return boto3.session.Session().client(
            "s3", endpoint_url=endpoint, region_name=options["region"],
            aws_access_key_id=options["access_key_id"],
            aws_secret_access_key=options["secret_access_key"])

    uri, options = s3_store_uri
    store = open_object_store(uri, **options)
    store.put("a/b", b"1")
    bucket = uri.removeprefix("s3://").split("/")[0]
    listed = s3_client(options["endpoint_url"]).list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in listed["Contents"]] == ["store/a/b"]


def test_s3_stores_share_the_parsed_service_model_never_credentials(
        aws_test_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every S3 store of a process reuses the service model botocore parsed once (a store
    opened in ~16 ms, not ~170), while each resolves its own credentials: given, or from the
    environment as it is when the store is opened."""
    def key(store: S3ObjectStore) -> str:
        return str(store._client._request_signer._credentials.access_key)

    a = S3ObjectStore("b1", endpoint_url="http://127.0.0.1:9", access_key_id="ka",
                      secret_access_key="sa")
    b = S3ObjectStore("b2", endpoint_url="http://127.0.0.1:9", access_key_id="kb",
                      secret_access_key="sb")
    assert a._client._loader is b._client._loader
    assert (key(a), key(b)) == ("ka", "kb")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env-1")
    c = S3ObjectStore("b3", endpoint_url="http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env-2")
    d = S3ObjectStore("b3", endpoint_url="http://127.0.0.1:9")
    assert (key(c), key(d)) == ("from-env-1", "from-env-2")
    assert c._client._loader is a._client._loader


class _NotBotocore(RuntimeError):
    pass


def test_s3_does_not_turn_other_exceptions_into_storage_errors(aws_test_env: None) -> None:
    """Only botocore's errors are storage failures; anything else (a bug) propagates as is."""
    store = open_object_store("s3://my-bucket/p", endpoint_url="http://127.0.0.1:9")
    assert isinstance(store, S3ObjectStore)

    def broken(*_: Any, **__: Any) -> Any:
        raise _NotBotocore("a bug")

    for name in ("get_object", "put_object", "head_object", "delete_objects", "get_paginator"):
        setattr(store._client, name, broken)
    calls = [lambda: store.get("k"), lambda: store.get_range("k", 0, 4),
             lambda: store.put("k", b"v"), lambda: store.put_if_absent("k", b"v"),
             lambda: store.head("k"), lambda: store.delete_many(["k"]),
             lambda: list(store.list("")), lambda: store.list_folders("")]
    for call in calls:
        with pytest.raises(_NotBotocore):
            call()


def test_s3_botocore_failures_are_storage_errors(aws_test_env: None) -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError

    store = open_object_store("s3://my-bucket/p", endpoint_url="http://127.0.0.1:9")
    assert isinstance(store, S3ObjectStore)

    def unreachable(*_: Any, **__: Any) -> Any:
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    def missing(*_: Any, **__: Any) -> Any:
        raise ClientError({"Error": {"Code": "NoSuchKey", "Message": "gone"}}, "GetObject")

    store._client.get_object = unreachable
    with pytest.raises(StorageError, match="S3 get of 'k'.*Could not connect"):
        store.get("k")
    store._client.get_object = missing
    with pytest.raises(ObjectNotFoundError):
        store.get("k")
    store._client.head_object = missing
    assert store.head("k") is None


# ---- local durability and folder helpers ------------------------------------------------------
def _synced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths that os.fsync is called on, from now on."""
    import os

    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
def test_local_puts_sync_the_new_name_and_new_folders(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A put returns only once its name survives an OS crash: the folder holding it is fsynced
    after the rename/link, and the parent of every folder the put created."""
    store = LocalObjectStore(tmp_path / "s")
    synced = _synced_paths(monkeypatch)
    assert store.put_if_absent("log/a/00001.json", b"1")
    root = str(tmp_path / "s")
    assert synced[-1] == f"{root}/log/a"  # after the link
    # the new folders, each in its parent, before the file's data
    assert [f"{root}", f"{root}/log"] == [p for p in synced if p in (root, f"{root}/log")]
    synced.clear()
    assert not store.put_if_absent("log/a/00001.json", b"2")  # taken: nothing to make durable
    assert synced == [p for p in synced if ".tmp-" in p]
    synced.clear()
    store.put("log/a/00002.json", b"2")
    assert synced[-1] == f"{root}/log/a" and len(synced) == 2  # the temp file, then the folder
    monkeypatch.setattr(LocalObjectStore, "sync_directories", False)
    synced.clear()
    store.put("log/b/x", b"3")
    assert all(".tmp-" in p for p in synced)


def test_list_folders_and_delete_folder(object_store: ObjectStore) -> None:
    store = object_store
    for key in ("tables/a/log/1", "tables/a/x", "tables/b/data/p/f", "tables/c", "other/d/e"):
        store.put(key, b"1")
    assert store.list_folders("tables/") == ["a", "b"]
    assert store.list_folders("nothing/") == []
    assert store.child("tables").list_folders("") == ["a", "b"]
    assert store.child("tables").delete_folder("b/") == 1
    assert store.list_folders("tables/") == ["a"]
    assert store.delete_folder("tables/a/") == 2
    assert store.list_folders("tables/") == []
    assert sorted(o.key for o in store.list("")) == ["other/d/e", "tables/c"]
    if isinstance(store, LocalObjectStore):
        assert sorted(p.name for p in (store.directory / "tables").iterdir()) == ["c"]
