"""Where partition schemes live (co-sharding): ``schemes/<id>/`` holds a scheme's log, as
``tables/<id>/`` holds a table's, and each member table's catalog entry names the scheme id.

Only what the services below the store need: a scheme's StateStore and its members' ids.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sediment.core.transactions import SetProperties
from sediment.errors import ObjectNotFoundError
from sediment.settings import settings_of
from sediment.state.documents import read_sealed
from sediment.state.store import StateStore
from sediment.storage.base import ObjectStore

SCHEMES_PREFIX = "schemes/"
TABLE_CATALOG_PREFIX = "catalog/"


def scheme_states(root: ObjectStore, scheme_id: str, name: str | None = None) -> StateStore:
    """The log of a scheme (a StateStore over ``schemes/<id>/``: its state's tree and
    ``partition.split.threshold`` are the scheme's) in the store whose root is ``root``."""
    return StateStore(root.child(f"{SCHEMES_PREFIX}{scheme_id}"), scheme_id,
                      f"scheme {name or scheme_id}")


def catalog_entries(root: ObjectStore) -> dict[str, dict[str, Any]]:
    """Every table catalog entry by table name (read in parallel; one dropped meanwhile is
    left out)."""
    keys = [o.key for o in root.list(TABLE_CATALOG_PREFIX) if o.key.endswith(".json")]

    def read(key: str) -> tuple[str, dict[str, Any] | None]:
        name = key[len(TABLE_CATALOG_PREFIX):-len(".json")]
        try:
            return name, read_sealed(root, key, f"catalog entry {key} (table {name})")
        except ObjectNotFoundError:
            return name, None

    if not keys:
        return {}
    with ThreadPoolExecutor(min(16, len(keys))) as pool:
        return {n: d for n, d in pool.map(read, keys) if d is not None}


def scheme_members(root: ObjectStore, scheme_id: str) -> dict[str, str]:
    """Table name -> table id of every table that follows the scheme, by name."""
    return {n: str(d["table_id"]) for n, d in sorted(catalog_entries(root).items())
            if d.get("scheme_id") == scheme_id and "table_id" in d}


THRESHOLD = "partition.split.threshold"
"""The one property a scheme has: its members' records in a leaf above it split the leaf."""


def scheme_threshold(root: ObjectStore, scheme_id: str) -> int:
    """The split threshold of a scheme: one value for all its members, kept in the scheme's
    log (a member's own property of that name, which older versions stored, is not read)."""
    return settings_of(scheme_states(root, scheme_id).head()).partition_split_threshold


def set_scheme_threshold(root: ObjectStore, scheme_id: str, value: int,
                         name: str | None = None) -> int:
    """Set a scheme's split threshold (a checked value) in its log; returns the scheme's new
    version. Its next split, whichever member's maintenance runs it, splits at the value."""
    return scheme_states(root, scheme_id, name).commit(SetProperties({THRESHOLD: value})).version


def with_scheme_threshold(root: ObjectStore, properties: dict[str, Any]) -> dict[str, Any]:
    """A table's effective properties with, for a member of a scheme, the scheme's split
    threshold (what ``describe`` shows: the value its splits use)."""
    sid = properties.get("partition.scheme")
    if sid:
        properties[THRESHOLD] = scheme_threshold(root, str(sid))
    return properties
