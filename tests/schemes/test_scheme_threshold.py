"""A partition scheme has one split threshold (issue 34): ``partition.split.threshold`` set on
a member (``set_properties``, ``create_table``, ``sediment set-properties``) sets the scheme's,
which then splits at it; every member's ``describe`` and ``describe-scheme`` show it; it can be
changed (on any member, ``store.set_scheme_properties``, ``sediment set-scheme-properties``) and
the next split uses the new value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli.app import app
from sediment.errors import PropertyError

USERS = sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())])
ORDERS = sd.Schema(row_keys=[("user", pa.string())], values=[("item", pa.string())])
NO_CACHE = {"state.cache.refresh_seconds": 0}
THRESHOLD = "partition.split.threshold"


def _users(lo: int, hi: int) -> pa.Table:
    return pa.table({"key": [f"k{i:05d}" for i in range(lo, hi)], "v": list(range(lo, hi))})


def _orders(lo: int, hi: int) -> pa.Table:
    return pa.table({"user": [f"k{i:05d}" for i in range(lo, hi)],
                     "item": [f"i{i}" for i in range(lo, hi)]})


def _cli(store: sd.Store, *args: str) -> Any:
    run = CliRunner().invoke(app, [*args, "--store", store.uri, "--json"])
    assert run.exit_code == 0, run.output
    return json.loads(run.stdout)


def _shown(store: sd.Store, *members: sd.Table) -> set[int]:
    """Every place the threshold is shown: describe (API and CLI) of each member, the
    members' properties, describe-scheme (API and CLI)."""
    out = {store.describe_scheme("sc").split_threshold,
           _cli(store, "describe-scheme", "sc")["split_threshold"]}
    for t in members:
        out.add(t.describe()["properties"][THRESHOLD])
        out.add(t.properties[THRESHOLD])
        out.add(_cli(store, "describe", t.name)["properties"][THRESHOLD])
    return out


@pytest.fixture
def store(tmp_path: Path) -> sd.Store:
    return sd.Store.open(str(tmp_path / "s"), create=True)


def test_a_members_threshold_is_the_schemes(store: sd.Store) -> None:
    store.create_scheme("sc", [("key", pa.string())])  # the default: 1e9
    u = store.create_table("u", USERS, scheme="sc", properties=NO_CACHE)
    o = store.create_table("o", ORDERS, scheme="sc", properties=NO_CACHE)
    u.ingest(_users(0, 200))
    o.ingest(_orders(0, 200))
    assert u.split().splits == 0  # 400 records: far below 1e9

    before = u.version
    u.set_properties({THRESHOLD: 300})
    assert u.version == before  # the scheme's log took it, not the member's
    assert _shown(store, u, o) == {300}
    assert u.split().splits == 1  # 400 > 300: the scheme splits, on both members' records
    assert store.describe_scheme("sc").leaves == 2
    assert len([p for p in o.partitions() if p.is_leaf]) == 2

    # changed on the other member: the value every place shows, and the next split uses it
    o.set_properties({THRESHOLD: 10_000})
    assert _shown(store, u, o) == {10_000}
    u.ingest(_users(200, 1200))
    assert u.split().splits == 0  # 1400 over both leaves: neither above 10,000
    # changed on the scheme itself, by the API and the command line
    assert store.set_scheme_properties("sc", {THRESHOLD: 500}).split_threshold == 500
    assert _shown(store, u, o) == {500}
    assert o.split().splits >= 1
    store.maintain()  # splits until no leaf holds more than 500 of both members' records
    assert store.describe_scheme("sc").leaves >= 3
    assert max(_leaf_records(u, o)) <= 500
    shown = _cli(store, "set-scheme-properties", "sc", f"{THRESHOLD}=2000")
    assert shown["split_threshold"] == 2000
    assert _shown(store, u, o) == {2000}
    run = CliRunner().invoke(app, ["set-properties", "o", f"{THRESHOLD}=700",
                                   "--store", store.uri])
    assert run.exit_code == 0, run.output
    assert _shown(store, u, o) == {700}
    # reset on a member: the store's default, for the scheme
    u.set_properties(remove=[THRESHOLD])
    assert _shown(store, u, o) == {1_000_000_000}
    # no member's own log holds a threshold
    for t in (u, o):
        assert THRESHOLD not in t.state().properties
    assert u.query().num_rows == 1200 and o.query().num_rows == 200


def _leaf_records(*members: sd.Table) -> list[int]:
    """Records of all members in each leaf of the scheme's tree."""
    counts: dict[str, int] = {}
    for t in members:
        for r in t.files():
            counts[r.partition_id] = counts.get(r.partition_id, 0) + r.records
    return list(counts.values())


def test_create_table_with_a_threshold_sets_the_schemes(store: sd.Store) -> None:
    store.create_scheme("sc", [("key", pa.string())],
                        properties={THRESHOLD: 5000})
    u = store.create_table("u", USERS, scheme="sc",
                           properties={**NO_CACHE, THRESHOLD: 250})
    o = store.create_table("o", ORDERS, scheme="sc", properties=NO_CACHE)
    assert _shown(store, u, o) == {250}
    assert THRESHOLD not in u.state().properties
    u.ingest(_users(0, 150))
    o.ingest(_orders(0, 150))
    assert o.maintain().splits >= 1
    assert store.describe_scheme("sc").leaves >= 2


def test_bad_scheme_thresholds_are_refused(store: sd.Store) -> None:
    store.create_scheme("sc", [("key", pa.string())], properties={THRESHOLD: 100})
    u = store.create_table("u", USERS, scheme="sc", properties=NO_CACHE)
    for bad in (0, -5, "many", 2**70):
        with pytest.raises(PropertyError, match=THRESHOLD):
            u.set_properties({THRESHOLD: bad})
        with pytest.raises(PropertyError, match=THRESHOLD):
            store.set_scheme_properties("sc", {THRESHOLD: bad})
        with pytest.raises(PropertyError, match=THRESHOLD):
            store.create_scheme("other", [("key", pa.string())], properties={THRESHOLD: bad})
    with pytest.raises(PropertyError, match="only partition.split.threshold"):
        store.set_scheme_properties("sc", {"compaction.batch_size": 4})
    assert store.describe_scheme("sc").split_threshold == 100
    assert store.schemes() == ["sc"]
    run = CliRunner().invoke(app, ["set-scheme-properties", "sc", f"{THRESHOLD}=0",
                                   "--store", store.uri])
    assert run.exit_code == 1 and "below 1" in run.output
    assert "Traceback" not in run.output
