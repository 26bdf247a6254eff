"""The store and its catalog: open; create, open, list and drop tables; names; split points."""

from __future__ import annotations

import datetime
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from sediment.core.model import Partition
from sediment.core.state import build_partition_tree
from sediment.errors import (
    CorruptMetadataError,
    InvalidTableNameError,
    PropertyError,
    SchemaError,
    TableExistsError,
    TableNotFoundError,
)
from sediment.properties import defaults
from sediment.store import validate_table_name
from support.internals import leaf_for_key

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string())])


def memory_store(**kw: Any) -> sd.Store:
    return sd.Store.open(f"memory://catalog-{uuid.uuid4().hex}", **{"create": True, **kw})


def assert_leaves_tile(partitions: list[Partition], boundaries: list[tuple[Any, ...]]) -> None:
    """Leaves, in key order, are contiguous from -inf to +inf and cut exactly at ``boundaries``."""
    by_id = {p.id: p for p in partitions}
    roots = [p for p in partitions if p.parent_id is None]
    assert len(roots) == 1 and roots[0].id == "root"
    for p in partitions:
        if p.is_leaf:
            assert p.split_key is None
            continue
        left, right = (by_id[c] for c in p.children)
        assert left.parent_id == p.id == right.parent_id
        assert left.region.min == p.region.min and left.region.max == p.split_key
        assert right.region.min == p.split_key and right.region.max == p.region.max
    leaves = sorted((p for p in partitions if p.is_leaf),
                    key=lambda p: (p.region.min is not None, p.region.min or ()))
    assert leaves[0].region.min is None and leaves[-1].region.max is None
    for a, b in zip(leaves, leaves[1:], strict=False):
        assert a.region.max == b.region.min
    assert [p.region.max for p in leaves[:-1]] == boundaries
    assert len(leaves) == len(boundaries) + 1


# ---- opening ---------------------------------------------------------------------------------

def test_open_a_path_creates_the_store(tmp_path: Path) -> None:
    root = tmp_path / "data"
    store = sd.Store.open(str(root), create=True)
    assert store.uri == root.resolve().as_uri()
    assert store.uri.startswith("file:///")
    assert (root / "store.json").is_file()
    assert store.tables() == []


def test_open_a_file_uri_and_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "data"
    a = sd.Store.open(root.as_uri(), create=True)
    assert a.uri == root.resolve().as_uri()
    a.create_table("t", SCHEMA)
    monkeypatch.chdir(tmp_path)
    b = sd.Store.open("data", create=True)
    assert b.uri == a.uri
    assert b.tables() == ["t"]
    c = sd.Store.open(root, create=True)  # a PathLike
    assert c.uri == a.uri and c.tables() == ["t"]


def test_store_properties_are_table_defaults(tmp_path: Path) -> None:
    uri = str(tmp_path / "s")
    store = sd.Store.open(uri, properties={"compaction.batch_size": "5"}, create=True)
    assert store.properties["compaction.batch_size"] == 5
    assert store.properties["gc.delay_seconds"] == defaults()["gc.delay_seconds"]
    t = store.create_table("t", SCHEMA)
    assert t.properties["compaction.batch_size"] == 5
    u = store.create_table("u", SCHEMA, properties={"compaction.batch_size": 7})
    assert u.properties["compaction.batch_size"] == 7
    # reopening keeps the store defaults; new ones update them
    again = sd.Store.open(uri)
    assert again.properties["compaction.batch_size"] == 5
    again = sd.Store.open(uri, properties={"gc.delay_seconds": 1})
    assert again.properties["compaction.batch_size"] == 5
    assert again.properties["gc.delay_seconds"] == 1.0
    assert sd.Store.open(uri).create_table("v", SCHEMA).properties["gc.delay_seconds"] == 1.0
    # existing tables are unaffected
    assert store.table("t").properties["gc.delay_seconds"] == defaults()["gc.delay_seconds"]


def test_store_properties_are_validated(tmp_path: Path) -> None:
    with pytest.raises(PropertyError, match="unknown property 'nope'"):
        sd.Store.open(str(tmp_path / "s"), properties={"nope": 1}, create=True)
    with pytest.raises(PropertyError, match="compaction.batch_size"):
        sd.Store.open(str(tmp_path / "s"), properties={"compaction.batch_size": 0}, create=True)


def test_corrupt_store_file(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "store.json").write_text("{nope")
    with pytest.raises(CorruptMetadataError, match="store.json of store .* not valid JSON"):
        sd.Store.open(str(tmp_path / "s"))


# ---- tables ----------------------------------------------------------------------------------

def test_create_open_list_drop(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("events", SCHEMA)
    assert t.name == "events" and t.version == 1
    assert t.schema == SCHEMA
    store.create_table("alpha", SCHEMA)
    store.create_table("b-2.x_y", SCHEMA)
    assert store.tables() == ["alpha", "b-2.x_y", "events"]
    again = store.table("events")
    assert again.table_id == t.table_id and again.schema == SCHEMA
    assert [h.kind for h in again.history()] == ["initialise"]
    store.drop_table("alpha")
    assert store.tables() == ["b-2.x_y", "events"]
    with pytest.raises(TableNotFoundError, match="no table 'alpha'"):
        store.table("alpha")
    with pytest.raises(TableNotFoundError):
        store.drop_table("alpha")
    # the name can be used again, as a new table
    t2 = store.create_table("alpha", SCHEMA)
    assert t2.version == 1


def test_drop_table_deletes_its_objects(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("t", SCHEMA)
    folder = tmp_path / "s" / "tables" / t.table_id
    assert any(folder.rglob("*.json"))
    store.drop_table("t")
    # only the marker that refuses late commits stays (the collector removes it later)
    assert [p.name for p in folder.rglob("*") if p.is_file()] == ["dropped"]
    assert store.tables() == []


def test_table_exists(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("t", SCHEMA)
    with pytest.raises(TableExistsError, match="table 't' already exists"):
        store.create_table("t", SCHEMA, split_points=["m"])
    assert store.table("t").table_id == t.table_id
    assert len(store.table("t").partitions()) == 1
    assert len(list((tmp_path / "s" / "tables").iterdir())) == 1


def test_tables_in_different_stores_are_separate(tmp_path: Path) -> None:
    a = sd.Store.open(str(tmp_path / "a"), create=True)
    b = sd.Store.open(str(tmp_path / "b"), create=True)
    a.create_table("t", SCHEMA)
    assert b.tables() == []
    with pytest.raises(TableNotFoundError):
        b.table("t")


def test_memory_store_catalog() -> None:
    store = memory_store()
    store.create_table("x", SCHEMA)
    assert store.uri.startswith("memory://")
    assert sd.Store.open(store.uri).tables() == ["x"]


def test_schema_must_be_a_sediment_schema(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    with pytest.raises(SchemaError, match="must be a sediment.Schema"):
        store.create_table("t", pa.schema([("k", pa.string())]))  # type: ignore[arg-type]
    assert store.tables() == []


def test_corrupt_catalog_entry(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    store.create_table("t", SCHEMA)
    (tmp_path / "s" / "catalog" / "t.json").write_text(json.dumps({"format": 1}))
    with pytest.raises(CorruptMetadataError, match="catalog entry catalog/t.json"):
        store.table("t")


# ---- names -----------------------------------------------------------------------------------

BAD_NAMES = ["", "../x", "a/b", ".", "..", "x" * 200, "a\\b", "é", "caf\u00e9", "-x", ".hidden",
             "a..b", "a b", "a\nb", "a\x00b", "/abs", "x/", "ok\n", 5, None]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_invalid_table_names(tmp_path: Path, name: Any) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    with pytest.raises(InvalidTableNameError, match="invalid table name"):
        store.create_table(name, SCHEMA)
    with pytest.raises(InvalidTableNameError):
        store.table(name)
    with pytest.raises(InvalidTableNameError):
        store.drop_table(name)
    assert store.tables() == []
    assert not (tmp_path / "s" / "tables").exists() or not any(
        (tmp_path / "s" / "tables").iterdir())
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("name", ["a", "A1", "x" * 128, "a.b", "a-b_c", "0", "v1.2.3"])
def test_valid_table_names(name: str) -> None:
    assert validate_table_name(name) == name


def test_name_of_129_characters_is_too_long() -> None:
    with pytest.raises(InvalidTableNameError):
        validate_table_name("x" * 129)


# ---- split points ----------------------------------------------------------------------------

@pytest.mark.parametrize("points", [[], ["m"], ["d", "m"], ["b", "d", "f", "h", "j"],
                                    [f"k{i:03d}" for i in range(37)]])
def test_split_points_build_a_tiling_tree(points: list[str]) -> None:
    store = memory_store()
    t = store.create_table("t", SCHEMA, split_points=points)
    parts = t.partitions()
    assert_leaves_tile(parts, [(p,) for p in points])
    assert len(parts) == 2 * len(points) + 1
    # parents come before children
    seen: set[str] = set()
    for p in parts:
        assert p.parent_id is None or p.parent_id in seen
        seen.add(p.id)
    # the tree is balanced
    st = t.state()
    depths = [len(st.ancestors(p.id)) for p in parts if p.is_leaf]
    assert max(depths) - min(depths) <= 1
    for p in points:
        leaf = leaf_for_key(st, (p,))
        assert leaf.region.min == (p,)


def test_split_points_of_other_key_types() -> None:
    schema = sd.Schema(row_keys=[("b", pa.binary()), ("n", pa.int64())])
    points = [(b"\x00", 5), (b"\x00", 9), (b"\x01",), (b"\xff", -1)]
    parts = build_partition_tree(schema, points)
    assert_leaves_tile(parts, points)
    store = memory_store()
    t = store.create_table("t", schema, split_points=points)
    assert_leaves_tile(t.partitions(), points)
    # binary keys survive the log's JSON
    assert_leaves_tile(sd.Store.open(store.uri).table("t").partitions(), points)


def test_split_points_of_timestamps_are_stored_as_ints() -> None:
    schema = sd.Schema(row_keys=[("ts", pa.timestamp("ms"))])
    store = memory_store()
    t = store.create_table("t", schema,
                           split_points=[datetime.datetime(2020, 1, 1), 1_600_000_000_000])
    assert_leaves_tile(t.partitions(), [(1_577_836_800_000,), (1_600_000_000_000,)])


@pytest.mark.parametrize("points", [["m", "m"], ["m", "d"], ["a", "c", "b"]])
def test_split_points_must_increase(points: list[str]) -> None:
    store = memory_store()
    with pytest.raises(SchemaError, match="strictly increasing"):
        store.create_table("t", SCHEMA, split_points=points)
    assert store.tables() == []


@pytest.mark.parametrize("points", [[5], ["a", 5], [b"a"], [("a", 1)], [None]])
def test_split_points_must_fit_the_key_type(points: list[Any]) -> None:
    store = memory_store()
    with pytest.raises(SchemaError, match="split point"):
        store.create_table("t", SCHEMA, split_points=points)
    assert store.tables() == []


# ---- table properties and online -------------------------------------------------------------

def test_table_properties_include_defaults() -> None:
    t = memory_store().create_table("t", SCHEMA, properties={"compaction.strategy": "basic"})
    props = t.properties
    assert set(props) == set(defaults())
    assert props["compaction.strategy"] == "basic"
    assert props["partition.split.threshold"] == defaults()["partition.split.threshold"]


def test_create_table_validates_properties() -> None:
    store = memory_store()
    with pytest.raises(PropertyError, match="unknown property 'bogus' for table t"):
        store.create_table("t", SCHEMA, properties={"bogus": 1})
    with pytest.raises(PropertyError, match="compaction.ratio"):
        store.create_table("t", SCHEMA, properties={"compaction.ratio": -1})
    assert store.tables() == []


def test_set_properties_is_one_transaction() -> None:
    store = memory_store()
    t = store.create_table("t", SCHEMA, properties={"gc.delay_seconds": 10})
    v = t.set_properties({"partition.split.threshold": "1000", "compaction.batch_size": 3},
                         remove=["gc.delay_seconds"])
    assert v == 2 == t.version
    assert t.properties["partition.split.threshold"] == 1000
    assert t.properties["compaction.batch_size"] == 3
    assert t.properties["gc.delay_seconds"] == defaults()["gc.delay_seconds"]
    assert [h.kind for h in t.history()] == ["initialise", "set_properties"]
    # other handles see it
    assert store.table("t").properties["compaction.batch_size"] == 3
    # the old version still has the old values
    assert t.state(1).properties["gc.delay_seconds"] == 10.0


@pytest.mark.parametrize("updates, remove", [
    ({"compaction.batch_size": 1}, ()),
    ({"compaction.batch_size": 3, "compaction.strategy": "nope"}, ()),
    ({"no.such": 1}, ()),
    ({}, ("no.such",)),
    ({"compaction.batch_size": 3}, ("no.such",)),
])
def test_invalid_set_properties_changes_nothing(updates: dict[str, Any],
                                                remove: tuple[str, ...]) -> None:
    t = memory_store().create_table("t", SCHEMA)
    before = t.properties
    with pytest.raises(PropertyError):
        t.set_properties(updates, remove=remove)
    assert t.version == 1
    assert t.properties == before


def test_set_online() -> None:
    store = memory_store()
    t = store.create_table("t", SCHEMA)
    assert t.online is True
    assert t.set_online(False) == 2
    assert t.online is False and store.table("t").online is False
    assert t.set_online(True) == 3
    assert t.online is True
    assert t.state(2).online is False
    assert [h.summary for h in t.history()][1:] == ["offline", "online"]


def test_losing_a_create_race_leaves_nothing_behind(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    winner = store.create_table("t", SCHEMA)
    # the loser checked before the winner wrote its catalog entry
    monkeypatch.setattr(store.objects, "exists", lambda key: False)
    with pytest.raises(TableExistsError, match="table 't' already exists"):
        store.create_table("t", SCHEMA)
    monkeypatch.undo()
    assert [p.name for p in (tmp_path / "s" / "tables").iterdir()
            if any(q.is_file() for q in p.rglob("*"))] == [winner.table_id]
    assert store.table("t").table_id == winner.table_id


def test_open_with_create_false_refuses_a_missing_store(tmp_path: Path) -> None:
    with pytest.raises(sd.SedimentError, match="no Sediment store at"):
        sd.Store.open(str(tmp_path / "typo"), create=False)
    assert not (tmp_path / "typo").exists() or not any((tmp_path / "typo").iterdir())
    sd.Store.open(str(tmp_path / "real"), create=True)
    assert sd.Store.open(str(tmp_path / "real"), create=False).tables() == []
