"""The catalog of partition schemes: ``scheme-catalog/<name>.json`` names a scheme's id, and
``schemes/<id>/`` holds its log (the partition tree, as a table's log holds a table's).

A member table's catalog entry records the scheme's id (``scheme_id``), so the members of a
scheme are found by reading the table catalog, and its state records the id and the scheme
version its tree matches (properties ``partition.scheme`` and ``partition.scheme.version``).

Creating a member and dropping its scheme race safely without a lock: ``drop_scheme`` writes
the scheme's ``dropped`` marker, then reads the member list; ``create_table`` writes its
catalog entry, then reads the marker. Whichever goes second sees the other, so a scheme is
never dropped under a member: the drop is undone (SchemeInUseError) or the table is
(SchemeNotFoundError).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sediment.core.model import Partition
from sediment.core.names import validate_name
from sediment.core.state import TableState, build_partition_tree
from sediment.core.transactions import InitialiseTable
from sediment.errors import (
    CorruptMetadataError,
    ObjectNotFoundError,
    PropertyError,
    SchemaError,
    SchemeExistsError,
    SchemeInUseError,
    SchemeMismatchError,
    SchemeNotFoundError,
)
from sediment.properties import validate_properties
from sediment.schema import Schema
from sediment.state.documents import read_sealed, sealed
from sediment.state.log import BASE_FORMAT, check_format
from sediment.state.schemes import (
    SCHEMES_PREFIX,
    THRESHOLD,
    scheme_members,
    set_scheme_threshold,
)
from sediment.state.schemes import scheme_states as root_scheme_states
from sediment.state.store import DROPPED_MARKER, StateStore
from sediment.storage.base import ObjectStore
from sediment.storage.clock import object_store_time
from sediment.storage.conditional import create_once

if TYPE_CHECKING:
    from sediment.table import Table

SCHEME_CATALOG_PREFIX = "scheme-catalog/"


class CatalogStore(Protocol):
    """What the scheme catalog needs of a ``Store`` (which this layer does not import)."""

    objects: ObjectStore

    @property
    def uri(self) -> str: ...

    @property
    def properties(self) -> dict[str, Any]: ...

    def table(self, name: str) -> Table: ...

    def spec(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class SchemeInfo:
    """What ``store.describe_scheme`` returns."""

    name: str
    scheme_id: str
    row_keys: tuple[tuple[str, str], ...]
    """(field name, Arrow type) of each row-key field: member tables have these types."""
    version: int
    """The scheme log's head: the version of its partition tree (and split threshold)."""
    leaves: int
    members: tuple[str, ...]
    split_threshold: int
    """Records (summed over every member table) above which a leaf splits."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "scheme_id": self.scheme_id,
                "row_keys": [list(k) for k in self.row_keys], "version": self.version,
                "leaves": self.leaves, "members": list(self.members),
                "split_threshold": self.split_threshold}




def validate_scheme_name(name: object) -> str:
    """Scheme names follow the rules of table names (they become object keys)."""
    return validate_name(name, "scheme")


def _entry_key(name: str) -> str:
    return f"{SCHEME_CATALOG_PREFIX}{validate_scheme_name(name)}.json"


def scheme_states(store: CatalogStore, scheme_id: str, name: str) -> StateStore:
    """The log of a scheme (see ``sediment.state.schemes``)."""
    return root_scheme_states(store.objects, scheme_id, name)


def create_scheme(store: CatalogStore, name: str, row_keys: Sequence[Any],
                  split_points: Sequence[Any] | None = None,
                  properties: dict[str, Any] | None = None) -> SchemeInfo:
    """Create a scheme: its first log entry (the tree cut at ``split_points``), then its
    catalog entry, so it appears whole or not at all."""
    key = _entry_key(name)
    try:
        schema = Schema(row_keys=row_keys)
    except SchemaError as e:
        raise SchemaError(f"scheme {name}: {e}") from None
    props = _scheme_properties(name, {THRESHOLD: store.properties[THRESHOLD],
                                      **(properties or {})})
    if store.objects.exists(key):
        raise SchemeExistsError(f"partition scheme {name!r} already exists in {store.uri}")
    partitions = build_partition_tree(schema, split_points)
    scheme_id = uuid.uuid4().hex
    states = scheme_states(store, scheme_id, name)
    states.commit(InitialiseTable(schema, props, partitions))
    entry = {"format": BASE_FORMAT, "name": name, "scheme_id": scheme_id,
             "created": time.time()}
    if not create_once(store.objects, key, sealed(entry)):
        _delete_folder(store, scheme_id)
        raise SchemeExistsError(f"partition scheme {name!r} already exists in {store.uri}")
    return describe_scheme(store, name)


def _scheme_properties(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    """A scheme's properties, checked: only the split threshold exists."""
    unknown = set(properties) - {THRESHOLD}
    if unknown:
        raise PropertyError(f"scheme {name}: only {THRESHOLD} can be set on a "
                            f"scheme (not {', '.join(sorted(unknown))})")
    return validate_properties(properties, context=f"scheme {name}")


def set_scheme_properties(store: CatalogStore, name: str,
                          properties: dict[str, Any]) -> SchemeInfo:
    """Change a scheme's threshold in its log (see ``SchemeMethods.set_scheme_properties``)."""
    props = _scheme_properties(name, properties)
    sid = scheme_id_of(store, name)
    if props:
        set_scheme_threshold(store.objects, sid, int(props[THRESHOLD]), name)
    return describe_scheme(store, name)


def scheme_id_of(store: CatalogStore, name: str) -> str:
    """The id of the scheme called ``name`` (SchemeNotFoundError when there is none)."""
    key = _entry_key(name)
    try:
        doc = read_sealed(store.objects, key, f"scheme catalog entry {key} (scheme {name})")
    except ObjectNotFoundError:
        raise SchemeNotFoundError(f"no partition scheme {name!r} in {store.uri} "
                                  f"(create it with store.create_scheme)") from None
    check_format(doc, f"scheme catalog entry {key}")
    try:
        return str(doc["scheme_id"])
    except KeyError as e:
        raise CorruptMetadataError(f"scheme catalog entry {key} lacks {e}") from None


def scheme_names(store: CatalogStore) -> list[str]:
    """Names of the schemes of the store, sorted."""
    return [o.key[len(SCHEME_CATALOG_PREFIX):-len(".json")]
            for o in store.objects.list(SCHEME_CATALOG_PREFIX) if o.key.endswith(".json")]


def scheme_name_of(store: CatalogStore, scheme_id: str) -> str:
    """The name of the scheme with id ``scheme_id`` (its id when no entry names it)."""
    for name in scheme_names(store):
        try:
            if scheme_id_of(store, name) == scheme_id:
                return name
        except SchemeNotFoundError:
            continue
    return scheme_id


def members_of(store: CatalogStore, scheme_id: str) -> list[str]:
    """Names of the tables that follow the scheme, sorted."""
    return list(scheme_members(store.objects, scheme_id))


def describe_scheme(store: CatalogStore, name: str) -> SchemeInfo:
    """The scheme's row keys, tree version, leaves and member tables."""
    sid = scheme_id_of(store, name)
    state = scheme_states(store, sid, name).head()
    assert state.schema is not None
    return SchemeInfo(name, sid, tuple((f.name, str(f.type)) for f in state.schema.row_keys),
                      state.version, sum(p.is_leaf for p in state.partitions.values()),
                      tuple(members_of(store, sid)),
                      int(state.properties["partition.split.threshold"]))


def drop_scheme(store: CatalogStore, name: str) -> None:
    """Drop a scheme no table uses (SchemeInUseError naming them otherwise)."""
    sid = scheme_id_of(store, name)
    objects = store.objects.child(f"{SCHEMES_PREFIX}{sid}")
    marker = {"format": BASE_FORMAT, "name": name, "scheme_id": sid,
              "dropped": time.time()}
    objects.put(DROPPED_MARKER, sealed(marker))
    members = members_of(store, sid)
    if members:
        objects.delete_many([DROPPED_MARKER])
        raise SchemeInUseError(
            f"partition scheme {name!r} is used by {len(members)} tables "
            f"({', '.join(members)}): drop them first (a table never leaves its scheme)")
    store.objects.delete_many([_entry_key(name)])
    objects.delete_many(o.key for o in objects.list("") if o.key != DROPPED_MARKER)


def _delete_folder(store: CatalogStore, scheme_id: str) -> None:
    prefix = f"{SCHEMES_PREFIX}{scheme_id}/"
    store.objects.delete_many(o.key for o in store.objects.list(prefix))


# ---- joining a scheme (create_table) -------------------------------------------------------
def member_tree(store: CatalogStore, scheme: str, table: str, schema: Schema,
                split_points: Sequence[Any] | None,
                properties: dict[str, Any]) -> tuple[str, list[Partition], dict[str, Any]]:
    """(scheme id, the scheme's current tree, the member's scheme properties) for a new
    table ``table`` in ``scheme``: its row-key types must be the scheme's."""
    if split_points:
        raise SchemaError(f"table {table}: a member of partition scheme {scheme!r} takes the "
                          "scheme's partition tree; give split points to create_scheme instead")
    if {"partition.scheme", "partition.scheme.version"} & set(properties):
        raise PropertyError(f"table {table}: give the scheme as create_table(..., scheme=...), "
                            "not as a property")
    if properties.get("partitioning", "lexicographic") != "lexicographic":
        raise PropertyError(f"table {table}: a member of partition scheme {scheme!r} follows "
                            "the scheme's lexicographic tree; box partitions (partitioning="
                            f"{properties['partitioning']!r}) need a table of its own")
    sid = scheme_id_of(store, scheme)
    state = scheme_states(store, sid, scheme).head()
    check_row_keys(state, schema, scheme, table)
    return sid, list(state.partitions.values()), {"partition.scheme": sid,
                                                  "partition.scheme.version": state.version}


def check_row_keys(scheme_state: TableState, schema: Schema, scheme: str, table: str) -> None:
    """SchemeMismatchError unless ``schema``'s row keys have the scheme's types, in order."""
    assert scheme_state.schema is not None
    want = [f.type for f in scheme_state.schema.row_keys]
    got = [f.type for f in schema.row_keys]
    if want != got:
        show = ", ".join(f"{f.name} {f.type}" for f in scheme_state.schema.row_keys)
        mine = ", ".join(f"{f.name} {f.type}" for f in schema.row_keys)
        raise SchemeMismatchError(
            f"table {table} cannot join partition scheme {scheme!r}: its row keys ({mine}) "
            f"must have the scheme's types ({show}), in that order")


def check_scheme_alive(store: CatalogStore, scheme_id: str, scheme: str, table: str) -> None:
    """After a member's catalog entry is written: SchemeNotFoundError when the scheme was
    dropped meanwhile (the caller then drops the table)."""
    if store.objects.exists(f"{SCHEMES_PREFIX}{scheme_id}/{DROPPED_MARKER}"):
        raise SchemeNotFoundError(f"partition scheme {scheme!r} was dropped while table "
                                  f"{table} was being created; the table was not created")


def collect_unnamed_schemes(store: CatalogStore, timeout: float) -> list[str]:
    """Delete the folders ``schemes/<id>/`` that no scheme catalog entry names (a dropped
    scheme's marker; a create killed before its entry) once their newest object is older than
    ``timeout`` seconds by the object store's clock; returns the ids removed. The folders are
    listed before the catalog is read, so a scheme created meanwhile is seen as named."""
    folders = store.objects.list_folders(SCHEMES_PREFIX)
    if not folders:
        return []
    named = set()
    for name in scheme_names(store):
        try:
            named.add(scheme_id_of(store, name))
        except SchemeNotFoundError:
            continue
    unnamed = [f for f in folders if f not in named]
    now = object_store_time(store.objects) if unnamed else None
    if now is None:
        return []
    removed = []
    for sid in unnamed:
        prefix = f"{SCHEMES_PREFIX}{sid}/"
        newest = max((o.mtime for o in store.objects.list(prefix)), default=None)
        if newest is not None and now - newest < timeout:
            continue
        store.objects.delete_folder(prefix)
        removed.append(sid)
    return removed
