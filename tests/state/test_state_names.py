"""The table's name travels with its state: errors raised from a state (the pure core's
validation included) name the table as its users know it, with no rewriting of messages, and
the name is never stored (it comes from the catalog each time the table is opened, so the same
stored table opened under another name is named so)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sediment.core.model import FileReference, Partition, Region
from sediment.core.state import ROOT_PARTITION_ID
from sediment.core.transactions import AddFiles, InitialiseTable, SetProperties
from sediment.errors import PropertyError, TransactionInvalidError
from sediment.schema import Schema
from sediment.state.snapshot import snapshot_versions
from sediment.state.store import StateStore
from sediment.storage import MemoryObjectStore

TABLE_ID = "0f3c9a7e"
SCHEMA = Schema(row_keys=[("key", pa.string())], values=[("value", pa.int64())])


def _store(objects: MemoryObjectStore, name: str) -> StateStore:
    return StateStore(objects, TABLE_ID, name)


def _initialised() -> MemoryObjectStore:
    objects = MemoryObjectStore()
    _store(objects, "events").commit(InitialiseTable(
        SCHEMA, {"state.snapshot.interval": 2}, [Partition(ROOT_PARTITION_ID, None, Region())]))
    return objects


def test_validation_errors_name_the_table_by_its_name() -> None:
    states = _store(_initialised(), "events")
    with pytest.raises(TransactionInvalidError, match="^table events at version 1: ") as e:
        states.commit(AddFiles([FileReference("data/x.parquet", "no-such-leaf", 1)]))
    assert TABLE_ID not in str(e.value)
    with pytest.raises(PropertyError, match="table events") as p:
        states.commit(SetProperties({"state.snapshot.interval": "often"}))
    assert TABLE_ID not in str(p.value)


def test_every_state_carries_the_name_and_none_stores_it() -> None:
    objects = _initialised()
    states = _store(objects, "events")
    states.commit(SetProperties({"compaction.batch_size": 3}))  # version 2: a snapshot
    assert snapshot_versions(objects) == [2]
    assert states.head().name == "events" and states.head().copy().name == "events"
    assert states.load(1).name == "events"  # replayed from the log
    assert _store(objects, "events").head().name == "events"  # from the snapshot
    stored = b"".join(objects.get(o.key) for o in objects.list(""))
    assert b"events" not in stored and TABLE_ID.encode() in stored


def test_the_same_table_opened_under_another_name_is_named_so() -> None:
    """What a rename gives: the catalog hands the store a new name; the log and snapshots,
    which never held the old one, are read as they are."""
    objects = _initialised()
    renamed = _store(objects, "clicks")
    assert renamed.head().name == "clicks"
    with pytest.raises(TransactionInvalidError, match="^table clicks at version 1: "):
        renamed.commit(AddFiles([FileReference("data/x.parquet", "no-such-leaf", 1)]))
