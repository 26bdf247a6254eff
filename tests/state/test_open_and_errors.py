"""Opening never writes and never creates by accident (read-only
access is enough to query, locally and on S3), and errors that name things (the table by its
name, tag errors of their own, no error class nothing raises, the property at fault, documented
``Raises``)."""

from __future__ import annotations

import inspect
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import sediment as sd
import sediment.errors as errors_module
from helpers import make_table, rows
from sediment.cli import app
from sediment.errors import (
    CorruptMetadataError,
    InvalidTagNameError,
    PropertyError,
    QueryError,
    StoreNotFoundError,
    TagError,
    TagExistsError,
    TagNotFoundError,
    TransactionInvalidError,
)
from sediment.state import pending
from sediment.storage import LocalObjectStore, ObjectStore

SRC = Path(sd.__file__).parent
WRITES = ("put", "put_if_absent", "delete_many", "delete_folder")


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)
    monkeypatch.delenv("SEDIMENT_DEBUG", raising=False)


def read_only(monkeypatch: pytest.MonkeyPatch, cls: type[ObjectStore],
              under: str | None = None) -> list[str]:
    """Make every write of ``cls`` fail as a read-only mount would; returns the writes tried.
    With ``under`` (a folder), only writes to stores there: the pending-file heartbeat of
    this process may rewrite other tests' leases meanwhile, which is not the code under test."""
    tried: list[str] = []
    prefix = None if under is None else Path(under).resolve().as_uri()

    def refuse(name: str) -> Any:
        original = getattr(cls, name)

        def write(self: ObjectStore, *args: Any, **kwargs: Any) -> Any:
            if prefix is not None and not str(self.uri).startswith(prefix):
                return original(self, *args, **kwargs)
            tried.append(f"{name} {args[0] if args else ''}")
            raise sd.SedimentError(f"read-only: {name} refused")
        return write

    for name in WRITES:
        monkeypatch.setattr(cls, name, refuse(name))
    return tried


def read_everything(store: sd.Store, name: str = "events") -> None:
    """Every read path a user with read-only access takes."""
    assert name in store.tables()
    assert store.properties
    table = store.table(name)
    assert table.query(ranges=[sd.Range(None, None)]).num_rows == 1000
    assert table.query(keys=["no-such-key"]).num_rows == 0
    assert table.scan().read_all().num_rows == 1000
    assert table.describe()["name"] == name
    assert [h.version for h in table.history()] == [1, 2, 3]
    assert table.files() and table.partitions()
    assert table.version == 3 and table.schema and table.properties
    assert [t.name for t in table.tags()] == ["v1"]
    assert table.tag_version("v1") == 2
    assert table.diff(2).to_version == 3
    assert table.partitions(version=2)


def three_versions(store: sd.Store) -> None:
    table = make_table(store, name="events")
    table.ingest(rows(500, 1))
    table.tag("v1")
    table.ingest(rows(500, 2))


# ---- item 5: opening never creates by accident ------------------------------------------------
@pytest.mark.parametrize("kind", ["path", "file", "memory"])
def test_open_without_create_refuses_a_missing_store(tmp_path: Path, kind: str) -> None:
    uri = {"path": str(tmp_path / "typo"), "file": (tmp_path / "typo").as_uri(),
           "memory": "memory://no-store-here"}[kind]
    with pytest.raises(StoreNotFoundError, match="no Sediment store at .*typo|no-store-here") \
            as caught:
        sd.Store.open(uri)
    assert "create=True" in str(caught.value) and "sediment init" in str(caught.value)
    assert isinstance(caught.value, sd.SedimentError)
    assert not (tmp_path / "typo").exists()


def test_open_refuses_an_existing_folder_without_a_store(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mine.txt").write_text("not a store")
    with pytest.raises(StoreNotFoundError, match=str(tmp_path / "data")):
        sd.Store.open(str(tmp_path / "data"))
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["mine.txt"]


def test_create_true_creates_once_and_reopening_never_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "s")
    store = sd.Store.open(uri, create=True, properties={"compaction.batch_size": 5})
    assert (tmp_path / "s" / "store.json").is_file()
    before = (tmp_path / "s" / "store.json").read_bytes()
    tried = read_only(monkeypatch, LocalObjectStore, under=uri)
    for again in (sd.Store.open(uri), sd.Store.open(uri, create=True),
                  sd.Store.open(uri, properties={"compaction.batch_size": 5})):
        assert again.uri == store.uri
        assert again.properties["compaction.batch_size"] == 5
    assert tried == []
    assert (tmp_path / "s" / "store.json").read_bytes() == before


def test_changing_store_properties_is_the_one_write(tmp_path: Path) -> None:
    uri = str(tmp_path / "s")
    sd.Store.open(uri, create=True)
    assert sd.Store.open(uri, properties={"gc.delay_seconds": 7}).properties[
        "gc.delay_seconds"] == 7
    assert sd.Store.open(uri).properties["gc.delay_seconds"] == 7


def test_reading_a_local_store_never_writes(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only mount: every write of the local object store fails."""
    three_versions(sd.Store.open(str(tmp_path / "s"), create=True))
    tried = read_only(monkeypatch, LocalObjectStore, under=str(tmp_path / "s"))
    read_everything(sd.Store.open(str(tmp_path / "s")))
    assert tried == []
    # and a write still fails loudly rather than silently
    with pytest.raises(sd.SedimentError, match="read-only"):
        sd.Store.open(str(tmp_path / "s")).table("events").tag("v2")


@pytest.mark.s3
def test_reading_an_s3_store_sends_no_write_request(proxied_s3: Any) -> None:
    """A read-only S3 role: every PUT, POST (multi-object delete) and DELETE is refused with
    403 by the proxy, and none is even tried during open, query, describe, history, files."""
    three_versions(proxied_s3.open())
    # the writes' leases settled now: the heartbeat deleting an empty one is a write of
    # the writing above, not of the reads below
    pending.flush()
    proxy = proxied_s3.proxy
    for method in ("PUT", "POST", "DELETE"):
        proxy.add_rule("status", method=method, status=403)
    requests = proxy.counts["requests"]
    read_everything(proxied_s3.open(create=False))
    assert proxy.counts["requests"] > requests  # it did go through the proxy
    assert proxy.counts["status"] == 0, proxy.events
    with pytest.raises(StoreNotFoundError, match=r"s3://.*/elsewhere"):
        sd.Store.open(proxied_s3.uri + "/elsewhere", **proxied_s3.options)
    assert proxy.counts["status"] == 0, proxy.events
    with pytest.raises(sd.SedimentError):  # the refusal is real: a write fails
        proxied_s3.open(create=False).table("events").tag("v2")
    assert proxy.counts["status"] > 0


# ---- item 5: the CLI ----------------------------------------------------------------------------
def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def one_line_error(result: Any) -> str:
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, \
        result.stderr
    assert "Traceback" not in result.output
    return str(result.stderr)


@pytest.mark.parametrize("command", [
    ["tables"], ["describe", "events"], ["query", "events", "--key", "a"],
    ["history", "events"], ["properties"],
    ["create-table", "events", "--row-key", "key:string"],
    ["ingest", "events", "x.parquet"], ["maintain"], ["tag", "events", "v1"],
])
def test_cli_commands_other_than_init_never_create(tmp_path: Path,
                                                   command: list[str]) -> None:
    where = tmp_path / "typo"
    message = one_line_error(cli(*command, "--store", str(where)))
    assert "no Sediment store at" in message and str(where) in message
    assert "sediment init" in message
    assert not where.exists()


def test_cli_init_creates_then_reads_never_write(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    where = str(tmp_path / "s")
    result = cli("init", "--store", where, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["created"] is True
    assert cli("create-table", "events", "--row-key", "key:string", "--sort-key", "ts:int64",
               "--value", "value:string", "--store", where).exit_code == 0
    tried = read_only(monkeypatch, LocalObjectStore, under=where)
    for command in (["tables"], ["describe", "events"], ["history", "events"],
                    ["query", "events", "--key", "a", "--json"], ["properties"],
                    ["init"]):  # init on an existing store only reads it
        result = cli(*command, "--store", where)
        assert result.exit_code == 0, (command, result.output, result.exception)
    assert tried == []


# ---- item 6: errors name the table, not its id ---------------------------------------------------
@pytest.fixture
def events(tmp_path: Path) -> Iterator[sd.Table]:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    three_versions(store)
    yield store.table("events")


def names_the_table(error: BaseException, table: sd.Table) -> str:
    message = str(error)
    assert "table events" in message, message
    assert table.table_id not in message, message
    return message


def test_version_errors_name_the_table(events: sd.Table) -> None:
    with pytest.raises(QueryError) as caught:
        events.partitions(version=99)
    assert "no version 99" in names_the_table(caught.value, events)
    with pytest.raises(QueryError) as caught:
        events.diff(99)
    assert "no version 99" in names_the_table(caught.value, events)


def test_tag_errors_have_classes_of_their_own(events: sd.Table) -> None:
    for cls in (TagNotFoundError, TagExistsError, InvalidTagNameError):
        assert issubclass(cls, TagError) and issubclass(cls, QueryError)
    with pytest.raises(TagExistsError) as caught:
        events.tag("v1")
    assert "tag 'v1' already exists" in names_the_table(caught.value, events)
    with pytest.raises(TagNotFoundError) as caught:
        events.tag_version("nope")
    assert "no tag 'nope'" in names_the_table(caught.value, events)
    with pytest.raises(TagNotFoundError) as caught:
        events.delete_tag("nope")
    names_the_table(caught.value, events)
    for bad in ("12", "../x", "a/b", ""):
        with pytest.raises(InvalidTagNameError) as caught:
            events.tag(bad)
        assert "invalid tag name" in names_the_table(caught.value, events)
    # existing handlers of QueryError keep catching them
    with pytest.raises(QueryError):
        events.tag("v1")


def test_transaction_errors_name_the_table(events: sd.Table) -> None:
    with pytest.raises(TransactionInvalidError) as caught:
        events.reinitialise(split_points=["m"])  # refused while references remain
    names_the_table(caught.value, events)


def test_damaged_metadata_errors_name_the_table(tmp_path: Path, events: sd.Table) -> None:
    log_entry = next((tmp_path / "s" / "tables" / events.table_id / "log").glob("*3.json"))
    log_entry.write_text("{not json")
    again = sd.Store.open(str(tmp_path / "s")).table("events")
    with pytest.raises(CorruptMetadataError) as caught:
        again.history()
    assert "log entry 3 of table events" in names_the_table(caught.value, events)


def test_corrupt_tag_names_the_table(tmp_path: Path, events: sd.Table) -> None:
    (tmp_path / "s" / "tables" / events.table_id / "tags" / "v1.json").write_text("[]")
    with pytest.raises(CorruptMetadataError) as caught:
        events.tags()
    names_the_table(caught.value, events)


# ---- item 6: every error class is raised somewhere ----------
def _error_classes() -> list[type[BaseException]]:
    return [c for _, c in inspect.getmembers(errors_module, inspect.isclass)
            if issubclass(c, sd.SedimentError) and c.__module__ == errors_module.__name__]


def test_every_error_class_is_raised_or_a_parent() -> None:
    source = "\n".join(p.read_text() for p in SRC.rglob("*.py") if p.name != "errors.py")
    classes = _error_classes()
    parents = {b for c in classes for b in c.__mro__[1:]}
    for cls in classes:
        if cls in parents:
            continue  # a family others catch (SedimentError, StorageError, QueryError, ...)
        assert re.search(rf"\b{cls.__name__}\(", source), f"nothing raises {cls.__name__}"


def test_the_error_tree_in_the_module_docstring_is_complete() -> None:
    doc = errors_module.__doc__ or ""
    names = set(re.findall(r"\b([A-Z][A-Za-z]*Error)\b", doc))
    assert names == {c.__name__ for c in _error_classes()}


# ---- item 6: the property at fault ----------
@pytest.mark.parametrize("name", ["compaction.iterators", "query.iterators"])
def test_a_bad_iterator_property_is_reported_under_its_own_name(tmp_path: Path,
                                                                 name: str) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = make_table(store, name="events")
    bad = json.dumps([{"type": "no-such-iterator"}])
    with pytest.raises(PropertyError) as caught:
        table.set_properties({name: bad})
    assert f"property {name}" in str(caught.value)
    other = ({"compaction.iterators", "query.iterators"} - {name}).pop()
    assert other not in str(caught.value)
    with pytest.raises(PropertyError, match=re.escape(name)):
        store.create_table("other", table.schema, properties={name: bad})


# ---- item 6: documented raises ----------
def test_every_public_store_method_documents_what_it_raises() -> None:
    for name, member in inspect.getmembers(sd.Store):
        if name.startswith("_") or isinstance(member, property):
            continue
        doc = inspect.getdoc(member) or ""
        assert "Raises" in doc, f"Store.{name} does not document what it raises"


def test_an_unreachable_spark_master_is_named_at_once() -> None:
    """A standalone master that accepts no connection is refused before Spark starts (Spark
    itself retries for a minute, then fails later calls without naming the master)."""
    from sediment.errors import JobError
    from sediment.spark.session import session

    started = time.monotonic()
    with pytest.raises(JobError, match=r"could not reach the Spark master "
                                       r"spark://127\.0\.0\.1:1 "):
        session("spark://127.0.0.1:1")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(("master", "loopback"), [
    ("local[*]", True), ("local[2,2]", True), ("spark://127.0.0.1:7077", True),
    ("spark://localhost:7077,127.0.0.2:7077", True), ("spark://[::1]:7077", True),
    ("spark://10.1.2.3:7077", False), ("spark://spark-master:7077", False),
    ("spark://127.0.0.1:7077,10.1.2.3:7077", False), ("yarn", False),
    ("k8s://https://10.0.0.1:6443", False)])
def test_the_driver_binds_to_loopback_only_when_every_executor_runs_here(
        master: str, loopback: bool) -> None:
    """An embedded session opens no port beyond loopback; on a cluster elsewhere the driver
    keeps Spark's own address, which executors on other machines can reach."""
    from sediment.spark.session import session_conf

    conf = session_conf(master)
    assert (conf.get("spark.driver.host") == "127.0.0.1") is loopback
    assert (conf.get("spark.driver.bindAddress") == "127.0.0.1") is loopback
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    # a setting given by the caller wins
    assert session_conf(master, {"spark.driver.host": "10.9.9.9"})["spark.driver.host"] == \
        "10.9.9.9"
