"""The store: a root URI with a catalog of tables (``catalog/<name>.json``) and store defaults."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sediment.core.model import FileReference, Partition, Region
from sediment.core.state import ROOT_PARTITION_ID
from sediment.core.transactions import AddFiles, InitialiseTable
from sediment.errors import (
    CorruptMetadataError,
    InvalidTableNameError,
    ObjectNotFoundError,
    SchemaError,
    TableExistsError,
    TableNotFoundError,
)
from sediment.properties import defaults, validate_properties
from sediment.schema import Schema
from sediment.state.log import FORMAT_VERSION, check_format
from sediment.state.store import StateStore
from sediment.storage.base import ObjectStore, open_object_store

if TYPE_CHECKING:
    from sediment.table import Table

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
STORE_FILE = "store.json"
CATALOG_PREFIX = "catalog/"


def validate_table_name(name: object) -> str:
    """Table names become object keys: no separators, no traversal, no empty names."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidTableNameError(
            f"invalid table name {name!r}: use 1-128 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit (no '/', no '..')")
    return name


def build_partition_tree(schema: Schema, split_points: Sequence[Any] | None) -> list[Partition]:
    """A balanced partition tree whose leaves are cut at the given split points."""
    keys = [schema.check_row_key(k, what="split point") for k in (split_points or [])]
    for a, b in zip(keys, keys[1:], strict=False):
        if not a < b:
            raise SchemaError(f"split points must be strictly increasing: {a!r} >= {b!r}")
    out: list[Partition] = []

    def build(pid: str, parent: str | None, region: Region, cuts: list[tuple[Any, ...]]) -> None:
        if not cuts:
            out.append(Partition(pid, parent, region))
            return
        mid = len(cuts) // 2
        key = cuts[mid]
        left, right = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
        out.append(Partition(pid, parent, region, (left, right), key))
        build(left, pid, Region(region.min, key), cuts[:mid])
        build(right, pid, Region(key, region.max), cuts[mid + 1 :])

    build(ROOT_PARTITION_ID, None, Region(), keys)
    return out


class Store:
    """A Sediment store: ``Store.open("./data")``, ``Store.open("s3://bucket/prefix")``."""

    def __init__(self, objects: ObjectStore, properties: Mapping[str, Any],
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.objects = objects
        self._properties = dict(properties)
        self.storage_options = dict(storage_options or {})

    def spec(self) -> dict[str, Any]:
        """What reopens this store in another process (a Spark task): ``Store.open(**spec)``
        with the URI and the storage options (S3 endpoint, region, credentials)."""
        root = self.objects.root()
        opts = dict(self.storage_options)
        if hasattr(root, "options"):
            opts = {**root.options(), **opts}
        return {"uri": self.uri, **{k: v for k, v in opts.items() if v is not None}}

    @property
    def uri(self) -> str:
        """The root URI, normalised (``file:///abs/path`` or ``s3://bucket/prefix``)."""
        return self.objects.uri

    @property
    def properties(self) -> dict[str, Any]:
        """Store-level property defaults for new tables (built-in defaults included)."""
        return {**defaults(), **self._properties}

    @classmethod
    def open(cls, uri: str, *, properties: Mapping[str, Any] | None = None,
             **storage_options: Any) -> Store:
        """Open (creating when missing) the store at ``uri``.

        ``properties`` become the store's defaults for new tables when the store is created,
        or update them when it exists. ``storage_options`` go to the object store (S3:
        ``endpoint_url``, ``region``, ``access_key_id``, ``secret_access_key``).
        """
        objects = open_object_store(str(uri), **storage_options)
        props = validate_properties(properties or {}, context=f"store {objects.uri}")
        doc = {"format": FORMAT_VERSION, "created": time.time(), "properties": props}
        if not objects.put_if_absent(STORE_FILE, json.dumps(doc).encode()):
            doc = cls._read_store_file(objects)
            if props:
                doc["properties"] = {**doc.get("properties", {}), **props}
                objects.put(STORE_FILE, json.dumps(doc).encode())
        return cls(objects, validate_properties(doc.get("properties", {}),
                                                context=f"store {objects.uri}"),
                   storage_options)

    @staticmethod
    def _read_store_file(objects: ObjectStore) -> dict[str, Any]:
        where = f"{STORE_FILE} of store {objects.uri}"
        try:
            doc = json.loads(objects.get(STORE_FILE))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CorruptMetadataError(f"{where} is not valid JSON: {e}") from e
        if not isinstance(doc, dict):
            raise CorruptMetadataError(f"{where} is not a JSON object")
        check_format(doc, where)
        return doc

    # ---- catalog -----------------------------------------------------------------------
    def _catalog_key(self, name: str) -> str:
        return f"{CATALOG_PREFIX}{validate_table_name(name)}.json"

    def table_objects(self, table_id: str) -> ObjectStore:
        return self.objects.child(f"tables/{table_id}")

    def create_table(self, name: str, schema: Schema, *, split_points: Sequence[Any] | None = None,
                     properties: Mapping[str, Any] | None = None,
                     initial_files: Callable[[Table], tuple[list[FileReference], list[str]]]
                     | None = None) -> Table:
        """Create a table (one partition, or a tree cut at ``split_points``).

        ``initial_files`` (used by bulk load) writes files into the new table and returns their
        references; they are committed before the catalog entry, so the table appears with its
        data or not at all.
        """
        from sediment.table import Table

        key = self._catalog_key(name)
        if not isinstance(schema, Schema):
            raise SchemaError(f"table {name}: schema must be a sediment.Schema")
        props = {**self._properties,
                 **validate_properties(properties or {}, context=f"table {name}")}
        if self.objects.exists(key):
            raise TableExistsError(f"table {name!r} already exists in {self.uri}")
        partitions = build_partition_tree(schema, split_points)
        table_id = uuid.uuid4().hex
        states = StateStore(self.table_objects(table_id), table_id)
        states.commit(InitialiseTable(schema, props, partitions))
        if initial_files is not None:
            try:
                refs, _ = initial_files(Table(self, name, table_id, states))
                states.commit(AddFiles(refs))
            except BaseException:
                self._delete_prefix(f"tables/{table_id}/")
                raise
        entry = {"format": FORMAT_VERSION, "name": name, "table_id": table_id,
                 "created": time.time()}
        if not self.objects.put_if_absent(key, json.dumps(entry).encode()):
            self._delete_prefix(f"tables/{table_id}/")
            raise TableExistsError(f"table {name!r} already exists in {self.uri}")
        return Table(self, name, table_id, states)

    def table(self, name: str) -> Table:
        """Open an existing table."""
        from sediment.table import Table

        key = self._catalog_key(name)
        try:
            data = self.objects.get(key)
        except ObjectNotFoundError:
            raise TableNotFoundError(f"no table {name!r} in {self.uri}") from None
        where = f"catalog entry {key} of store {self.uri}"
        try:
            doc = json.loads(data)
            check_format(doc, where)
            table_id = str(doc["table_id"])
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"{where} is corrupt: {e!r}") from e
        return Table(self, name, table_id, StateStore(self.table_objects(table_id), table_id))

    def tables(self) -> list[str]:
        """Names of the tables in the store, sorted."""
        return [o.key[len(CATALOG_PREFIX):-len(".json")]
                for o in self.objects.list(CATALOG_PREFIX) if o.key.endswith(".json")]

    def drop_table(self, name: str) -> None:
        """Remove a table from the catalog, then delete its objects."""
        table = self.table(name)
        self.objects.delete_many([self._catalog_key(name)])
        self._delete_prefix(f"tables/{table.table_id}/")

    def _delete_prefix(self, prefix: str) -> None:
        self.objects.delete_many(o.key for o in self.objects.list(prefix))

    def load(self, job_manifest_uri: str, table_name: str) -> Table:
        """Bulk load a dump (``<root>/<job>/job-manifest.json``) into a new or existing table,
        after verifying every checksum and range; one transaction."""
        from sediment.dump.load import load_dump

        return load_dump(self, job_manifest_uri, table_name)

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"
