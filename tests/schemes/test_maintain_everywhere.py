"""``sediment maintain`` runs the store's one maintenance, as ``Store.maintain`` does: scheme
members settled after the tables (a later member's split leaves the earlier ones references to
push down) and the folders of dropped partition schemes collected."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli.app import app

USERS = sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())])
ORDERS = sd.Schema(row_keys=[("user", pa.string())], values=[("item", pa.string())])
KEYS = [f"k{i:05d}" for i in range(400)]


def members_to_settle(root: Path) -> sd.Store:
    """Two members of a scheme whose second split comes in the pass of the later table
    ("u", after "o"): only a second round over "o" pushes its references down again. And a
    dropped scheme whose folder is left to collect."""
    store = sd.Store.open(str(root), create=True)
    store.create_scheme("users", row_keys=[("key", pa.string())],
                        properties={"partition.split.threshold": 200})
    u = store.create_table("u", USERS, scheme="users")
    o = store.create_table("o", ORDERS, scheme="users")
    for i in range(4):
        u.ingest(pa.table({"key": KEYS[i * 100:(i + 1) * 100], "v": list(range(100))}))
        o.ingest(pa.table({"user": KEYS[i * 50:(i + 1) * 50],
                           "item": [f"i{j}" for j in range(50)]}))
    store.create_scheme("gone", row_keys=[("key", pa.string())])
    store.drop_scheme("gone")
    return store


def settled(store: sd.Store) -> None:
    for name, n in (("u", 400), ("o", 200)):
        t = store.table(name)
        assert t.query().num_rows == n
        leaves = {p.id for p in t.partitions() if p.is_leaf}
        assert {r.partition_id for r in t.files()} <= leaves, f"{name} left unsettled"
    assert store.objects.list_folders("schemes/") == [store.describe_scheme("users").scheme_id]


@pytest.mark.parametrize("how", ["store", "cli"])
def test_the_cli_maintains_as_the_store_does(tmp_path: Path, how: str) -> None:
    store = members_to_settle(tmp_path / "s")
    if how == "store":
        store.maintain(orphan_timeout=0)
    else:
        r = CliRunner().invoke(app, ["maintain", "--json", "--orphan-timeout", "0",
                                     "--store", store.uri])
        assert r.exit_code == 0, r.stderr
        assert '"(unnamed schemes)"' in r.stdout
    assert store.describe_scheme("users").leaves >= 3
    settled(store)
