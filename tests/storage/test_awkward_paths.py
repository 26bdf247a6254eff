"""Stores at paths holding a space, ``%``, a literal ``%20``, ``#``, ``?`` and non-ASCII letters.

``store.uri`` percent-encodes such a path (``Path.as_uri``) and every route that reopens a store
by its URI (a Spark task, ``Store.from_spec``, a dump's destination) decodes it exactly once
(``sediment.storage.file_uri_to_path``): a plain path, the encoded ``file://`` URI and
``store.uri`` open the same store, and a folder really named ``a%20b`` is not taken for ``a b``.
Each test runs the route end to end (Python API, CLI, dump and load, Spark bulk import) and
checks that nothing was written to a second, wrongly decoded folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner, Result

import sediment as sd
from sediment.cli import app
from sediment.errors import StorageError, StoreNotFoundError
from sediment.storage import file_uri_to_path, open_object_store

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string())])

NAMES = ["with space", "per%cent", "a%20b", "hash#tag", "what?now", "données ü 数据",
         "all of it %41 %2F #1 ?q=1 ü"]
"""Folder names: ``a%20b`` and ``%41``/``%2F`` are literal (a second decoding would make them
``a b``, ``A`` and ``/``)."""


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"key": [f"k{i:03d}" for i in range(start, start + n)],
                     "ts": pa.array(range(start, start + n), pa.int64()),
                     "value": [f"v{i}" for i in range(start, start + n)]})


@pytest.fixture(params=NAMES)
def odd_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A folder with an awkward name; afterwards nothing may exist beside it (a store opened
    at a wrongly decoded path would have made a sibling)."""
    path = tmp_path / request.param
    path.mkdir()
    yield path
    assert sorted(p.name for p in tmp_path.iterdir()) == [request.param]


# ---- the decoder -----------------------------------------------------------------------------
def test_file_uri_to_path_decodes_once() -> None:
    for name in NAMES:
        path = f"/data/{name}/store"
        assert file_uri_to_path(Path(path).as_uri()) == path
    assert file_uri_to_path("file:///data/a%2520b") == "/data/a%20b"  # one decoding only
    assert file_uri_to_path("file://localhost/data/x%20y") == "/data/x y"
    assert file_uri_to_path("file:/data/x") == "/data/x"
    # a hand-written URI: an unencoded # or ? is part of the path, not a fragment or query
    assert file_uri_to_path("file:///data/run#1/q?x") == "/data/run#1/q?x"
    if os.name != "nt":  # a name that is not UTF-8 comes back as the same bytes
        odd = os.fsdecode(b"/data/latin-1 caf\xe9")
        assert os.fsencode(file_uri_to_path(Path(odd).as_uri())) == b"/data/latin-1 caf\xe9"


@pytest.mark.skipif(os.name == "nt", reason="a host is a UNC share on Windows")
def test_a_file_uri_with_a_host_is_refused() -> None:
    """``file://data/store`` would otherwise silently name ``/store``."""
    with pytest.raises(StorageError, match="names host 'data'"):
        open_object_store("file://data/store")


# ---- Python API ------------------------------------------------------------------------------
def test_every_spelling_opens_the_same_store(odd_dir: Path) -> None:
    root = odd_dir / "store"
    store = sd.Store.open(str(root), create=True)
    assert store.uri == root.as_uri()
    assert not any(c in store.uri for c in " #?üé数")
    assert ("%" in odd_dir.name) == ("%25" in store.uri)  # a literal % is encoded
    store.create_table("events", SCHEMA).ingest(_rows(0, 10))
    for spelling in (str(root), root.as_uri(), store.uri,
                     store.uri.replace("file://", "file://localhost", 1)):
        again = sd.Store.open(spelling)  # without create: a wrong path fails here
        assert again.uri == store.uri
        assert again.tables() == ["events"]
        assert again.table("events").query().num_rows == 10
    assert sd.Store.from_spec(store.spec()).table("events").query().num_rows == 10
    # the filesystem views name the real folder
    objects = store.objects
    assert objects.local_path("store.json") == str(root / "store.json")
    fs, base = objects.arrow_filesystem()
    assert base == str(root)
    assert fs.get_file_info(f"{base}/store.json").size > 0


def test_a_literal_percent_name_is_not_decoded_twice(tmp_path: Path) -> None:
    """``a%20b`` and ``a b`` side by side are two stores; each URI reopens its own."""
    literal = sd.Store.open(str(tmp_path / "a%20b"), create=True)
    spaced = sd.Store.open(str(tmp_path / "a b"), create=True)
    literal.create_table("literal", SCHEMA)
    spaced.create_table("spaced", SCHEMA)
    assert sd.Store.open(literal.uri).tables() == ["literal"]
    assert sd.Store.open(spaced.uri).tables() == ["spaced"]
    with pytest.raises(StoreNotFoundError):
        sd.Store.open(str(tmp_path / "a%2520b"))


def test_ingest_query_compact_reopen(odd_dir: Path) -> None:
    store = sd.Store.open(str(odd_dir / "store"), create=True)
    table = store.create_table("events", SCHEMA, split_points=["k050"])
    table.ingest(_rows(0, 60))
    inputs = odd_dir / "in put"
    inputs.mkdir()
    pq.write_table(_rows(60, 40), inputs / "a.parquet")
    pq.write_table(_rows(100, 20), inputs / "b ü.parquet")
    table.ingest_files([str(inputs / "a.parquet"), str(inputs / "b ü.parquet")])
    table.compact(full=True)
    reopened = sd.Store.open(store.uri).table("events")
    out = reopened.query()
    assert out.column("key").to_pylist() == [f"k{i:03d}" for i in range(120)]
    assert reopened.query(keys=["k007"]).column("value").to_pylist() == ["v7"]
    assert reopened.version == table.version


def test_ingest_files_by_file_uri(tmp_path: Path) -> None:
    """An input file named by its encoded ``file://`` URI is the file at the decoded path."""
    folder = tmp_path / NAMES[-1]
    folder.mkdir()
    table = sd.Store.open(str(folder / "store"), create=True).create_table("events", SCHEMA)
    pq.write_table(_rows(0, 10), folder / "in ü.parquet")
    table.ingest_files([(folder / "in ü.parquet").as_uri()])
    assert table.query().num_rows == 10


def test_plan_files_and_duckdb_read_the_real_files(odd_dir: Path) -> None:
    """``plan_files()[i].path`` and the DuckDB view read the data files where they are."""
    duckdb = pytest.importorskip("duckdb")
    table = sd.Store.open(str(odd_dir / "store"), create=True).create_table("events", SCHEMA)
    table.ingest(_rows(0, 30))
    table.ingest(_rows(30, 30))
    plan = sd.Store.open(table.store.uri).table("events").plan_files()
    assert plan
    for planned in plan:
        assert Path(planned.path).is_file(), planned.path
        assert planned.path.startswith(str(odd_dir))
        assert file_uri_to_path(planned.uri) == planned.path
    assert sum(pq.read_metadata(p.path).num_rows for p in plan) == 60
    con = duckdb.connect()
    table.to_duckdb(con, "events")
    assert con.execute("SELECT count(*), min(key), max(key) FROM events").fetchone() == \
        (60, "k000", "k059")


@pytest.mark.s3
def test_s3_prefix_with_odd_characters(s3_store_uri: tuple[str, dict[str, Any]]) -> None:
    """An S3 URI is taken as written: ``#`` and ``?`` stay in the prefix (not a fragment or
    query), ``%20`` is not decoded, and ``store.uri`` reopens the same prefix."""
    base, options = s3_store_uri
    uri = f"{base}/{NAMES[-1]}"
    store = sd.Store.open(uri, create=True, **options)
    assert store.uri == uri
    store.create_table("events", SCHEMA).ingest(_rows(0, 20))
    again = sd.Store.open(store.uri, **options)
    assert again.table("events").query().num_rows == 20
    assert sd.Store.from_spec(store.spec()).tables() == ["events"]
    with pytest.raises(StoreNotFoundError):  # the prefix cut at '#' is another place
        sd.Store.open(uri.split("#")[0], **options)


# ---- dump and load ---------------------------------------------------------------------------
def test_dump_and_load(odd_dir: Path) -> None:
    store = sd.Store.open(str(odd_dir / "store"), create=True)
    table = store.create_table("events", SCHEMA, split_points=["k020"])
    table.ingest(_rows(0, 40))
    job = table.dump(str(odd_dir / "dumps here"))
    assert Path(job.manifest_uri).is_file()
    copy = store.load(job.manifest_uri, "copy")
    assert copy.query().equals(table.query())
    # the same dump by its file URI, into a store reopened by its own URI
    by_uri = (odd_dir / "dumps here").as_uri() + f"/{job.job_id}/job-manifest.json"
    again = sd.Store.open(store.uri).load(by_uri, "copy2")
    assert again.query().equals(table.query())


# ---- CLI -------------------------------------------------------------------------------------
def _ok(*args: str) -> Result:
    result = CliRunner().invoke(app, list(args), env={"SEDIMENT_STORE": None})
    assert result.exit_code == 0, (args, result.stdout, result.stderr, result.exception)
    return result


def test_cli_commands(odd_dir: Path) -> None:
    root = odd_dir / "store"
    path, uri = str(root), root.as_uri()
    _ok("init", "--store", path)
    _ok("create-table", "events", "--store", uri, "--row-key", "key:string",
        "--sort-key", "ts:int64", "--value", "value:string")
    (odd_dir / "in").mkdir()
    pq.write_table(_rows(0, 15), odd_dir / "in" / "a ü.parquet")
    pq.write_table(_rows(15, 10), odd_dir / "in" / "b.parquet")
    _ok("ingest", "events", str(odd_dir / "in" / "a ü.parquet"), "--store", path)
    _ok("--store", uri, "ingest", "events", str(odd_dir / "in" / "b*.parquet"))
    _ok("compact", "--full", "--store", uri)
    out = _ok("query", "events", "--store", path, "--format", "json").stdout
    keys = [json.loads(line)["key"] for line in out.splitlines() if line.strip()]
    assert keys == sorted(f"k{i:03d}" for i in range(25))
    assert json.loads(_ok("tables", "--store", uri, "--json").stdout) == ["events"]
    dumped = json.loads(_ok("dump", "events", str(odd_dir / "d #1"), "--store", uri,
                            "--json").stdout)
    _ok("load", dumped["manifest"], "copy", "--store", path)
    assert sd.Store.open(uri).table("copy").query().num_rows == 25


# ---- Spark -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark_session() -> Iterator[Any]:
    """The process's Spark session: the one the Spark tests' manager holds when it is up,
    else a ``local[2,2]`` session of this module, stopped when the module is done."""
    pytest.importorskip("pyspark")
    from pyspark import SparkContext

    from sediment.spark import session

    ours = SparkContext._active_spark_context is None
    spark = session("local[2,2]", app_name="sediment-tests-paths",
                    conf={"spark.sql.shuffle.partitions": "2",
                          "spark.default.parallelism": "2"})
    yield spark
    if ours:
        spark.stop()


@pytest.mark.slow
@pytest.mark.spark
def test_spark_bulk_import(tmp_path: Path, spark_session: Any) -> None:
    """Tasks reopen the store by ``store.uri``: an undecoded URI would be another store."""
    from sediment.spark import bulk_import

    odd = tmp_path / NAMES[-1]
    store = sd.Store.open(str(odd / "store"), create=True)
    table = store.create_table("events", SCHEMA)
    inputs = odd / "in #ü"
    inputs.mkdir()
    pq.write_table(_rows(0, 30), inputs / "a b.parquet")
    result = bulk_import(spark_session, table, [str(inputs / "a b.parquet")])
    assert result.rows == 30
    assert table.query().column("key").to_pylist() == [f"k{i:03d}" for i in range(30)]
    read = spark_session.read.format("sediment").option("store", store.uri) \
        .option("table", "events").load()
    assert read.count() == 30
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAMES[-1]]
