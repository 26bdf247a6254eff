"""Partition schemes (co-sharding): the catalog, one tree for every member, splits on the
members' combined records, and clear errors for what a scheme does not allow."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli.app import app
from sediment.core.transactions import SplitPartition
from sediment.errors import (
    InvalidTableNameError,
    PropertyError,
    SchemaError,
    SchemeExistsError,
    SchemeInUseError,
    SchemeMismatchError,
    SchemeNotFoundError,
    TransactionInvalidError,
)
from sediment.state.log import log_key

USERS = sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())])
ORDERS = sd.Schema(row_keys=[("user", pa.string())], values=[("item", pa.string())])
KEYS = [f"k{i:05d}" for i in range(1000)]
NO_CACHE = {"state.cache.refresh_seconds": 0}


@pytest.fixture
def store(tmp_path: Path) -> sd.Store:
    return sd.Store.open(str(tmp_path / "s"), create=True)


def users_rows(keys: list[str]) -> pa.Table:
    return pa.table({"key": keys, "v": list(range(len(keys)))})


def orders_rows(keys: list[str]) -> pa.Table:
    return pa.table({"user": keys, "item": [f"i{i}" for i in range(len(keys))]})


def two_members(store: sd.Store, threshold: int = 1_000_000) -> tuple[sd.Table, sd.Table]:
    store.create_scheme("users", row_keys=[("key", pa.string())],
                        properties={"partition.split.threshold": threshold})
    return (store.create_table("u", USERS, scheme="users", properties=NO_CACHE),
            store.create_table("o", ORDERS, scheme="users", properties=NO_CACHE))


# ---- the catalog ------------------------------------------------------------------------------
def test_create_list_describe_drop(store: sd.Store) -> None:
    info = store.create_scheme("users", row_keys=[("key", pa.string())], split_points=["m"])
    assert info.name == "users" and info.leaves == 2 and info.members == ()
    assert info.row_keys == (("key", "string"),)
    assert store.schemes() == ["users"]
    t = store.create_table("orders", ORDERS, scheme="users")
    assert store.describe_scheme("users").members == ("orders",)
    assert [str(p.region) for p in t.partitions() if p.is_leaf] == \
        [str(p.region) for p in t.partitions() if p.is_leaf]
    assert sorted(str(p.region) for p in t.partitions() if p.is_leaf) == \
        ["'m', +inf)".join(["[", ""]), "[-inf, 'm')"]
    with pytest.raises(SchemeInUseError, match="orders"):
        store.drop_scheme("users")
    assert store.schemes() == ["users"]  # the refused drop left it whole
    store.create_table("more", ORDERS, scheme="users")  # and usable
    store.drop_table("orders")
    store.drop_table("more")
    store.drop_scheme("users")
    assert store.schemes() == []
    with pytest.raises(SchemeNotFoundError):
        store.describe_scheme("users")


def test_clear_errors(store: sd.Store) -> None:
    store.create_scheme("users", row_keys=[("key", pa.string())])
    with pytest.raises(SchemeExistsError):
        store.create_scheme("users", row_keys=[("key", pa.string())])
    with pytest.raises(InvalidTableNameError, match="scheme name"):
        store.create_scheme("../x", row_keys=[("key", pa.string())])
    with pytest.raises(SchemeNotFoundError, match="create_scheme"):
        store.create_table("t", USERS, scheme="nope")
    bad = sd.Schema(row_keys=[("key", pa.int64())])
    with pytest.raises(SchemeMismatchError, match=r"key int64.*key string"):
        store.create_table("t", bad, scheme="users")
    two = sd.Schema(row_keys=[("key", pa.string()), ("k2", pa.string())])
    with pytest.raises(SchemeMismatchError):
        store.create_table("t", two, scheme="users")
    with pytest.raises(SchemaError, match="split points"):
        store.create_table("t", USERS, scheme="users", split_points=["a"])
    with pytest.raises(PropertyError):
        store.create_table("t", USERS, scheme="users", properties={"partition.scheme": "x"})
    assert store.tables() == []


def test_a_member_cannot_have_box_partitions(store: sd.Store) -> None:
    """The scheme's tree is lexicographic: a member asking for box partitions is refused at
    creation, and an empty member cannot switch to them later (that would rebuild its tree
    apart from the scheme's)."""
    store.create_scheme("users", row_keys=[("key", pa.string())], split_points=["m"])
    with pytest.raises(PropertyError, match="box partitions"):
        store.create_table("t", USERS, scheme="users", properties={"partitioning": "dimensions"})
    assert store.tables() == []
    member = store.create_table("t", USERS, scheme="users")
    with pytest.raises(TransactionInvalidError, match="partitioning cannot change"):
        member.set_properties({"partitioning": "dimensions"})
    assert len([p for p in member.partitions() if p.is_leaf]) == 2


def test_a_member_cannot_leave_or_change_its_scheme(store: sd.Store) -> None:
    u, _ = two_members(store)
    store.create_scheme("other", row_keys=[("key", pa.string())])
    u.ingest(users_rows(KEYS[:10]))
    for props in ({"partition.scheme": "other"}, {"partition.scheme": ""},
                  {"partition.scheme.version": 9}):
        with pytest.raises(TransactionInvalidError, match="never leaves or changes"):
            u.set_properties(props)
    with pytest.raises(TransactionInvalidError, match="never leaves or changes"):
        u.set_properties(remove=["partition.scheme"])
    with pytest.raises(TransactionInvalidError, match="split only by its scheme"):
        u._handle.states.commit(SplitPartition("root", ("k00005",), "a1", "b1"))
    u.clear()
    with pytest.raises(TransactionInvalidError, match="scheme's tree"):
        u.reinitialise(["k00005"])


# ---- one tree, split on the combined records -------------------------------------------------
def test_split_on_combined_records_commits_once_in_the_schemes_log(store: sd.Store) -> None:
    u, o = two_members(store, threshold=600)
    u.ingest(users_rows(KEYS[:400]))
    o.ingest(orders_rows(KEYS[::2]))  # 500: neither alone is over 600, together they are
    assert u.split().splits == 1
    info = store.describe_scheme("users")
    assert info.version == 2 and info.leaves == 2
    leaves = [(p.id, p.region) for p in u.partitions() if p.is_leaf]
    assert leaves == [(p.id, p.region) for p in o.partitions() if p.is_leaf]
    split_key = [p for p in u.partitions() if not p.is_leaf][0].split_key
    assert split_key == ("k00300",)  # the median of all 900 records
    for t in (u, o):
        assert t.history()[-1].kind == "follow_scheme"
        assert t.properties["partition.scheme.version"] == 2
    # the references follow through the push-down, no record lost or doubled
    u.maintain()
    o.maintain()
    assert u.query().num_rows == 400 and o.query().num_rows == 500
    assert {r.partition_id for r in o.files()} == {p for p, _ in leaves}
    # every member transaction records the scheme version it was validated against: the
    # one its state followed just before it
    for t in (u, o):
        for h in t.history()[1:]:
            doc = json.loads(t._handle.objects.get(log_key(h.version)))
            before = t.state(h.version - 1).properties["partition.scheme.version"]
            assert doc["scheme_version"] == before, (t.name, h)


def test_reading_an_older_version_uses_its_scheme_version(store: sd.Store) -> None:
    u, o = two_members(store, threshold=300)
    u.ingest(users_rows(KEYS[:500]))
    before = u.version
    store.split_scheme("users")
    assert len(u.state(before).leaf_partitions()) == 1
    assert u.state(before).properties["partition.scheme.version"] == 1
    assert len(u.state().leaf_partitions()) == 2
    assert u.query(version=before).equals(u.query())


def test_a_member_behind_the_scheme_catches_up_and_reads_whole(store: sd.Store) -> None:
    """A crash between the scheme's split and a member's follow leaves the member on the
    older tree: readable, and caught up by the next split pass."""
    from sediment.maintenance.schemes import plan_scheme_splits
    u, o = two_members(store, threshold=300)
    u.ingest(users_rows(KEYS[:500]))
    o.ingest(orders_rows(KEYS[:100]))
    from sediment.schemes.catalog import scheme_id_of, scheme_states
    states = scheme_states(store, scheme_id_of(store, "users"), "users")
    scheme = states.head()
    from sediment.maintenance.schemes import MemberView
    d = plan_scheme_splits(scheme, [MemberView(u.state(), u._handle.samples.sample)])[0]
    assert d.split_key is not None
    states.commit(SplitPartition(d.partition_id, d.split_key, "left", "right"))
    # nobody followed: both members still read on the one-leaf tree
    assert len(o.state().leaf_partitions()) == 1
    assert o.query().num_rows == 100
    assert sd.join(u, o).num_rows == 100
    store.split_scheme("users")
    assert {p.id for p in o.partitions()} >= {"left", "right"}
    o.ingest(orders_rows(KEYS[400:450]))
    o.maintain()
    assert o.query().num_rows == 150


def test_maintenance_splits_the_scheme_and_compacts_each_table(store: sd.Store) -> None:
    u, o = two_members(store, threshold=200)
    for i in range(4):
        u.ingest(users_rows(KEYS[i * 100:(i + 1) * 100]))
        o.ingest(orders_rows(KEYS[i * 50:(i + 1) * 50]))
    result = store.maintain()
    assert set(result) == {"u", "o"}
    info = store.describe_scheme("users")
    assert info.leaves >= 3
    for t, n in ((u, 400), (o, 200)):
        assert t.query().num_rows == n
        leaf_ids = {p.id for p in t.partitions() if p.is_leaf}
        assert {r.partition_id for r in t.files()} <= leaf_ids


def test_dropping_a_member_leaves_the_scheme_consistent(store: sd.Store) -> None:
    u, o = two_members(store, threshold=300)
    u.ingest(users_rows(KEYS[:500]))
    o.ingest(orders_rows(KEYS[:400]))
    store.drop_table("o")
    assert store.describe_scheme("users").members == ("u",)
    assert store.split_scheme("users").splits == 1  # only u's records count now
    u.maintain()
    assert u.query().num_rows == 500
    o2 = store.create_table("o", ORDERS, scheme="users")
    assert [p.region for p in o2.partitions() if p.is_leaf] == \
        [p.region for p in u.partitions() if p.is_leaf]


def test_cli_scheme_commands(store: sd.Store) -> None:
    runner = CliRunner()
    at = ["--store", store.uri]

    def ok(*args: str) -> str:
        r = runner.invoke(app, [*args, *at])
        assert r.exit_code == 0, (r.stdout, r.stderr)
        return r.stdout

    assert "created partition scheme users" in ok("create-scheme", "users", "--row-key",
                                                  "key:string", "--split-point", "m")
    ok("create-table", "orders", "--row-key", "user:string", "--value", "item:string",
       "--scheme", "users")
    assert ok("schemes").strip() == "users: orders"
    assert "orders" in ok("describe-scheme", "users")
    r = runner.invoke(app, ["drop-scheme", "users", "--yes", *at])
    assert r.exit_code == 1 and "used by 1 tables (orders)" in r.stderr
    r = runner.invoke(app, ["create-table", "bad", "--row-key", "k:int64", "--scheme", "users",
                            *at])
    assert r.exit_code == 1 and "must have the scheme's types" in r.stderr
    assert '"splits": 0' in ok("split-scheme", "users", "--json")
    report = ok("report", "schemes")
    assert "users" in report and "orders" in report
    r = runner.invoke(app, ["report", "files", *at])
    assert r.exit_code == 1 and "needs --table" in r.stderr
    ok("drop-table", "orders", "--yes")
    assert "dropped partition scheme users" in ok("drop-scheme", "users", "--yes")


def test_restore_of_a_member_then_catches_up_with_the_scheme(store: sd.Store) -> None:
    u, o = two_members(store, threshold=300)
    u.ingest(users_rows(KEYS[:200]))
    u.tag("small")
    u.ingest(users_rows(KEYS[200:500]))
    store.maintain()
    leaves = {p.id for p in o.partitions() if p.is_leaf}
    assert len(leaves) >= 2
    u.restore("small")  # the tree of that version comes back with its references
    assert u.query().num_rows == 200
    store.split_scheme("users")  # and the member follows the scheme's tree again
    assert {p.id for p in u.partitions() if p.is_leaf} == leaves
    u.maintain()
    assert u.query().num_rows == 200
    assert sd.join(u, o).num_rows == 0


def test_dump_of_a_member_loads_into_a_plain_table(store: sd.Store, tmp_path: Path) -> None:
    u, o = two_members(store, threshold=300)
    u.ingest(users_rows(KEYS[:500]))
    store.maintain()
    job = u.dump(str(tmp_path / "dump"))
    loaded = store.load(job.manifest_uri, "copy")
    assert loaded.query().equals(u.query())
    assert not loaded.properties["partition.scheme"]
    with pytest.raises(sd.SedimentError, match="not a member of a partition scheme"):
        sd.join(u, loaded)


def test_the_continuous_maintainer_splits_schemes(store: sd.Store, monkeypatch:
                                                  pytest.MonkeyPatch) -> None:
    from sediment.maintenance import continuous, split_pacing

    monkeypatch.setattr(split_pacing, "SCHEME_CHECK_SECONDS", 0.0)
    u, o = two_members(store, threshold=300)
    u.ingest(users_rows(KEYS[:400]))
    o.ingest(orders_rows(KEYS[:400]))
    m = continuous.Maintainer(lambda: [u, o], tick_seconds=0.01, gc_every=3600,
                              workers="thread")
    try:
        for _ in range(40):
            m.tick()
        m._settle(threading.Event())
    finally:
        m.close()
    assert store.describe_scheme("users").leaves >= 3
    for t in (u, o):
        assert t.query().num_rows == 400


def test_a_big_leaf_is_joined_in_key_sub_ranges(store: sd.Store) -> None:
    """Bounded memory: a leaf over the target is cut at whole row keys, and the join of the
    pieces is the join of the leaf."""
    from sediment.schemes.join import prepare_join

    u, o = two_members(store)
    keys = KEYS[:300] * 2  # every key twice: a key's rows must stay in one piece
    u.ingest(users_rows(keys))
    o.ingest(orders_rows(KEYS[::2]))
    whole = sd.join(u, o)
    u.set_properties({"spark.read.target_partition_rows": 100})
    prepared = prepare_join(u, o)
    assert len(prepared.pieces) >= 5
    regions = [p.region for p in prepared.pieces]
    assert regions[0].min is None and regions[-1].max is None
    assert all(a.max == b.min for a, b in zip(regions, regions[1:], strict=False))
    cut = sd.join(u, o)
    assert cut.num_rows == whole.num_rows == 300
    assert sorted(cut.column("key").to_pylist()) == sorted(whole.column("key").to_pylist())
    reader = sd.join_reader(u, o, threads=2)
    assert sum(b.num_rows for b in reader) == 300


def test_whole_store_maintenance_removes_a_dropped_schemes_folder(store: sd.Store) -> None:
    store.create_scheme("gone", row_keys=[("key", pa.string())])
    store.create_scheme("kept", row_keys=[("key", pa.string())])
    store.drop_scheme("gone")
    assert len(store.objects.list_folders("schemes/")) == 2  # the dropped marker remains
    store.maintain(orphan_timeout=0.0)
    assert store.objects.list_folders("schemes/") == \
        [store.describe_scheme("kept").scheme_id]


def test_cli_maintain_rows_name_the_scheme(store: sd.Store) -> None:
    u, _ = two_members(store, threshold=100)
    u.ingest(users_rows(KEYS[:300]))
    r = CliRunner().invoke(app, ["maintain", "--json", "--store", store.uri])
    assert r.exit_code == 0, r.stderr
    assert '"scheme": "users"' in r.stdout
