"""The store: a root URI with a catalog of tables (``catalog/<name>.json``) and store defaults.

A table's objects live under ``tables/<table id>/``; only the catalog names a folder. Dropping
a table first writes the marker ``tables/<id>/dropped`` (``StateStore.commit`` refuses every
later commit to the table), then removes the catalog entry, then deletes the folder's other
objects. Folders that no catalog entry names (dropped tables, with whatever late writers left;
a load or create killed before its catalog entry) are removed by
:meth:`Store.collect_unnamed_tables`, which ``sediment maintain`` runs once per pass, once their
newest object is older than a timeout by the object store's own clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from sediment.core.names import validate_name
from sediment.core.state import build_partition_tree
from sediment.core.transactions import AddFiles, InitialiseTable
from sediment.errors import (
    CorruptMetadataError,
    ObjectNotFoundError,
    SchemaError,
    SchemeNotFoundError,
    SedimentError,
    StoreNotFoundError,
    TableExistsError,
    TableNotFoundError,
    did_you_mean,
)
from sediment.maintenance.unnamed import (
    CATALOG_PREFIX,
    UnnamedTablesResult,
    collect_unnamed_tables,
)
from sediment.properties import check_combined, defaults, validate_properties
from sediment.schema import Schema, schema_difference
from sediment.schemes.catalog import check_scheme_alive, collect_unnamed_schemes, member_tree
from sediment.schemes.methods import SchemeMethods
from sediment.settings import as_settings
from sediment.state.documents import read_sealed, sealed
from sediment.state.log import BASE_FORMAT, check_format
from sediment.state.schemes import THRESHOLD, set_scheme_threshold
from sediment.state.store import DROPPED_MARKER, StateStore
from sediment.storage import (
    ObjectStore,
    open_object_store,
    open_object_store_beside,
    spec_options,
)
from sediment.storage.conditional import create_once

if TYPE_CHECKING:
    from sediment.dump.load import Loaded
    from sediment.files.staging import Staging
    from sediment.handle import TableHandle
    from sediment.maintenance.orchestrator import StoreMaintenance
    from sediment.maintenance.passes import MaintenanceResult
    from sediment.maintenance.usage import StoreUsage
    from sediment.table import Table

STORE_FILE = "store.json"
UNNAMED_TABLE_TIMEOUT_SECONDS = 3600.0
"""A table folder no catalog entry names is removed once its newest object is this old (or
``gc.orphan_timeout_seconds`` of the store, if longer): a table being created or loaded has no
catalog entry until it is complete, and its writers keep writing (data files, leases)."""


def validate_table_name(name: object) -> str:
    """Table names become object keys: no separators, no traversal, no empty names."""
    return validate_name(name, "table")


class Store(SchemeMethods):
    """A Sediment store: ``Store.open("./data")``, ``Store.open("s3://bucket/prefix")``
    (``create=True`` to make a new one).

    Every error raised is a :class:`~sediment.errors.SedimentError`; each method's docstring
    lists the ones it raises on purpose. Any method may also raise ``StorageError`` when the
    object store fails (I/O, permissions, network).
    """

    def __init__(self, objects: ObjectStore, properties: Mapping[str, Any],
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.objects = objects
        self._properties = dict(properties)
        self.storage_options = dict(storage_options or {})

    def spec(self) -> dict[str, Any]:
        """What reopens this store in another process (a Spark task): ``Store.open(**spec)``
        with the URI and the storage options (S3 endpoint, region, credentials).

        Raises: nothing."""
        root = self.objects.root()
        opts = {**root.reopen_options(), **self.storage_options}
        return {"uri": self.uri, **{k: v for k, v in opts.items() if v is not None}}

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Store:
        """The store a :meth:`spec` describes (opened in another process: a Spark task).

        Raises: what :meth:`open` raises (StoreNotFoundError when the store is gone)."""
        return cls.open(str(spec["uri"]), **spec_options(spec))

    def object_store_at(self, root: str) -> ObjectStore:
        """An object store at ``root`` (a dump's folder): on S3 with this store's storage
        options (endpoint, region, credentials), elsewhere with none.

        Raises:
            StorageError: an unsupported URI scheme or an S3 URI without a bucket."""
        return open_object_store_beside(root, self.spec())

    @property
    def uri(self) -> str:
        """The root URI, normalised: ``file:///abs/path`` percent-encoded (a space is ``%20``,
        a ``%`` is ``%25``) or ``s3://bucket/prefix`` as written; ``Store.open(store.uri)``
        reopens this store whatever characters its path holds."""
        return self.objects.uri

    @property
    def properties(self) -> dict[str, Any]:
        """Store-level property defaults for new tables (built-in defaults included)."""
        return {**defaults(), **self._properties}

    @classmethod
    def open(cls, uri: str, *, create: bool = False,
             properties: Mapping[str, Any] | None = None, **storage_options: Any) -> Store:
        """Open the store at ``uri``; with ``create=True``, create it when missing.

        Opening only reads (``store.json``): a user with read-only access to the store (a
        read-only mount, a read-only S3 role) can open it and query it. Without ``create`` a
        missing store is an error, so a typo in a URI never makes a new, empty store.

        ``properties`` become the store's defaults for new tables when the store is created,
        or update them when it exists (the one case where opening writes: only when they
        change something). ``storage_options`` go to the object store (S3: ``endpoint_url``,
        ``region``, ``access_key_id``, ``secret_access_key``, ``session_token``).

        Raises:
            StoreNotFoundError: no store at ``uri`` and ``create`` is false (names the URI).
            StorageError: an unknown scheme or storage option (named), or the object store
                failed (I/O, permissions, network).
            PropertyError: an unknown property or an invalid value.
            CorruptMetadataError: ``store.json`` is unreadable (UnsupportedFormatError when a
                newer Sediment wrote it).
            WriteOutcomeUnknownError: creating, the store never said whether ``store.json``
                was written.
        """
        objects = open_object_store(str(uri), **storage_options)
        props = validate_properties(properties or {}, context=f"store {objects.uri}")
        check_combined(props, context=f"store {objects.uri}")
        try:
            doc = cls._read_store_file(objects)
        except ObjectNotFoundError:
            if not create:
                raise StoreNotFoundError(
                    f"no Sediment store at {objects.uri}: run `sediment init` or open it "
                    "with create=True to make one") from None
            doc = {"format": BASE_FORMAT, "created": time.time(), "properties": props,
                   "id": uuid.uuid4().hex}  # the id makes the bytes ours (create_once)
            if not create_once(objects, STORE_FILE, sealed(doc)):
                doc = cls._read_store_file(objects)  # created meanwhile by another process
            else:
                props = {}
        if props:
            stored = doc.get("properties", {})
            merged = {**stored, **props}
            check_combined(merged, context=f"store {objects.uri}")
            if merged != stored:
                doc["properties"] = merged
                objects.put(STORE_FILE, sealed(doc))
        return cls(objects, validate_properties(doc.get("properties", {}),
                                                context=f"store {objects.uri}", stored=True),
                   storage_options)

    @staticmethod
    def _read_store_file(objects: ObjectStore) -> dict[str, Any]:
        where = f"{STORE_FILE} of store {objects.uri}"
        doc = read_sealed(objects, STORE_FILE, where)
        check_format(doc, where)
        return doc

    # ---- catalog -----------------------------------------------------------------------
    def _catalog_key(self, name: str) -> str:
        return f"{CATALOG_PREFIX}{validate_table_name(name)}.json"

    def table_objects(self, table_id: str) -> ObjectStore:
        """The objects of the table with internal id ``table_id`` (its folder).

        Raises: nothing (nothing is read)."""
        return self.objects.child(f"tables/{table_id}")

    def create_table(self, name: str, schema: Schema, *, split_points: Sequence[Any] | None = None,
                     properties: Mapping[str, Any] | None = None,
                     initial_files: Callable[[TableHandle], tuple[AddFiles, Staging]]
                     | None = None, scheme: str | None = None,
                     exist_ok: bool = False, online: bool = True) -> Table:
        """Create a table (one partition, or a tree cut at ``split_points``).

        ``exist_ok``: when the store has a table of that name already, return it if its
        schema is ``schema`` (its split points and properties are left as they are), and
        raise TableExistsError naming the first differing field if not: a script that
        creates its table on every run can run again.

        ``scheme``: the name of a partition scheme (:meth:`create_scheme`) the table joins
        for good: it follows the scheme's partition tree, which splits on the records of all
        its members (co-sharding; SchemeMismatchError when the row-key types differ from the
        scheme's, SchemeNotFoundError when there is no such scheme). Its
        ``partition.split.threshold`` is the scheme's: given in ``properties``, it sets the
        scheme's (for every member), before the table is made.

        ``online=False``: the table is created offline (Sleeper's ``sleeper.table.online``):
        its first version says so, so no maintainer acts on it until ``table.set_online(True)``
        (``sediment online``), not even between its creation and a later ``offline``.

        ``initial_files`` (used by bulk load) writes files into the new table and returns the
        AddFiles of them (with their checksums) and the staging holding them; they are
        committed before the catalog entry, so the table appears with its data or not at all.

        Raises:
            InvalidTableNameError: ``name`` cannot be a table name (nothing is written).
            TableExistsError: the store has a table of that name (with ``exist_ok``: one
                of another schema, naming the first differing field).
            SchemaError: ``schema`` is not a :class:`~sediment.Schema`, or ``split_points``
                do not fit its first row key (unsorted, duplicated, wrong type).
            PropertyError: an unknown property or an invalid value (names it).
            CommitOutcomeUnknownError: the store never said whether the table's first log
                entry landed (no catalog entry is written: the table does not appear).
            StorageError: the object store failed.
        """
        from sediment.table import Table

        key = self._catalog_key(name)
        if not isinstance(schema, Schema):
            raise SchemaError(f"table {name}: schema must be a sediment.Schema")
        props = {**self._properties,
                 **validate_properties(properties or {}, context=f"table {name}",
                                       schema=schema)}
        check_combined(props, context=f"table {name}")
        if self.objects.exists(key):
            return self._existing(name, schema, exist_ok)
        scheme_id = None
        if scheme is not None:
            scheme_id, partitions, scheme_props = member_tree(
                self, scheme, name, schema, split_points, dict(properties or {}))
            props.update(scheme_props)
            # one threshold per scheme, in its log: a member's sets the scheme's
            own = props.pop(THRESHOLD, None)
            if THRESHOLD in (properties or {}):
                set_scheme_threshold(self.objects, scheme_id, int(own), scheme)
        else:
            partitions = build_partition_tree(schema, split_points,
                                              str(props.get("partitioning", "lexicographic")))
        table_id = uuid.uuid4().hex
        states = StateStore(self.table_objects(table_id), table_id, name, shared=True)
        states.commit(InitialiseTable(schema, props, partitions, online))
        if initial_files is not None:
            try:
                add, staging = initial_files(Table(self, name, table_id, states)._handle)
                staging.commit(states, add)
            except BaseException:
                self._delete_prefix(f"tables/{table_id}/")
                raise
        entry = {"format": BASE_FORMAT, "name": name, "table_id": table_id,
                 "created": time.time(), **({"scheme_id": scheme_id} if scheme_id else {})}
        if not create_once(self.objects, key, sealed(entry)):
            self._delete_prefix(f"tables/{table_id}/")
            return self._existing(name, schema, exist_ok)
        if scheme_id is not None and scheme is not None:
            try:
                check_scheme_alive(self, scheme_id, scheme, name)
            except SchemeNotFoundError:
                self.drop_table(name)
                raise
        return Table(self, name, table_id, states)

    def _existing(self, name: str, schema: Schema, exist_ok: bool) -> Table:
        """The table ``name`` that ``create_table`` found, when ``exist_ok`` and its schema
        is ``schema``; TableExistsError otherwise."""
        if not exist_ok:
            raise TableExistsError(f"table {name!r} already exists in {self.uri}")
        table = self.table(name)
        diff = schema_difference(table.schema, schema)
        if diff is not None:
            raise TableExistsError(f"table {name!r} already exists in {self.uri} with another "
                                   f"schema: {diff}")
        return table

    def table(self, name: str) -> Table:
        """Open an existing table (reads its catalog entry only).

        Raises:
            InvalidTableNameError: ``name`` cannot be a table name.
            TableNotFoundError: the store has no table of that name.
            CorruptMetadataError: its catalog entry is unreadable (UnsupportedFormatError when
                a newer Sediment wrote it).
            StorageError: the object store failed.
        """
        from sediment.table import Table

        key = self._catalog_key(name)
        where = f"catalog entry {key} (table {name}) of store {self.uri}"
        try:
            doc = read_sealed(self.objects, key, where)
        except ObjectNotFoundError:
            raise TableNotFoundError(f"no table {name!r} in {self.uri}"
                                     f"{did_you_mean(name, self._names_or_none())}") from None
        check_format(doc, where)
        try:
            table_id = str(doc["table_id"])
        except KeyError as e:
            raise CorruptMetadataError(f"{where} is corrupt: {e!r}") from e
        return Table(self, name, table_id,
                     StateStore(self.table_objects(table_id), table_id, name, shared=True))

    def tables(self) -> list[str]:
        """Names of the tables in the store, sorted.

        Raises:
            StorageError: the object store failed (listing the catalog)."""
        return [o.key[len(CATALOG_PREFIX):-len(".json")]
                for o in self.objects.list(CATALOG_PREFIX) if o.key.endswith(".json")]

    def _names_or_none(self) -> list[str]:
        """The table names, or none when the catalog cannot be listed (for a suggestion in
        an error message, which must not hide the error it adds to)."""
        try:
            return self.tables()
        except SedimentError:
            return []

    def drop_table(self, name: str) -> None:
        """Drop a table: mark its folder dropped (every later commit to it is refused,
        whichever process makes it), remove the catalog entry, then delete the folder's
        objects except the marker (:meth:`collect_unnamed_tables` removes the rest later,
        with anything a writer that was running still wrote).

        Raises:
            InvalidTableNameError: ``name`` cannot be a table name.
            TableNotFoundError: the store has no table of that name.
            CorruptMetadataError: its catalog entry is unreadable.
            StorageError: the object store failed (the table may be dropped in part: the
                marker makes it refuse commits; dropping it again finishes the job only while
                its catalog entry remains).
        """
        table = self.table(name)
        objects = self.table_objects(table.table_id)
        marker = {"format": BASE_FORMAT, "name": name, "table_id": table.table_id,
                  "dropped": time.time()}
        objects.put(DROPPED_MARKER, sealed(marker))
        self.objects.delete_many([self._catalog_key(name)])
        objects.delete_many(o.key for o in objects.list("") if o.key != DROPPED_MARKER)

    def collect_unnamed_tables(self, *, timeout: float | None = None) -> UnnamedTablesResult:
        """Delete the folders ``tables/<id>/`` that no catalog entry names, once their newest
        object (temporaries included) is older than ``timeout`` seconds by the object store's
        clock (default: ``UNNAMED_TABLE_TIMEOUT_SECONDS`` or the store's
        ``gc.orphan_timeout_seconds``, whichever is longer; only tests should go lower).

        The folders are listed before the catalog is read, so a table created meanwhile is
        seen as named. A folder whose writer is still active is never old enough.

        Raises:
            StorageError: the object store failed. (A corrupt catalog entry or an unreadable
            clock is not raised: nothing is collected, and the result's ``note`` says why.)
        """
        if timeout is None:
            timeout = max(UNNAMED_TABLE_TIMEOUT_SECONDS,
                          as_settings(self.properties).gc_orphan_timeout_seconds)
        return collect_unnamed_tables(self.objects, self.uri, timeout)

    def _delete_prefix(self, prefix: str) -> None:
        self.objects.delete_many(o.key for o in self.objects.list(prefix))

    def usage(self) -> StoreUsage:
        """Where the store's bytes go: each table's :meth:`Table.usage`, their sum, the
        catalogs (tables, schemes, the store file) and the folders no catalog entry names
        (dropped tables, killed creates: the store's maintenance removes them).

        Raises StorageError: the object store failed; CorruptMetadataError: a catalog entry
        is unreadable."""
        from sediment.handle import handle_of
        from sediment.maintenance.usage import store_usage

        tables = {n: handle_of(self.table(n)) for n in self.tables()}
        return store_usage(self.objects, tables, root_files=(STORE_FILE,))

    def maintain(self, *, table: str | None = None, runner: Literal["local", "spark"] = "local",
                 orphan_timeout: float | None = None) -> dict[str, MaintenanceResult]:
        """Maintain one table or every table of the store (``Table.maintain``); a whole-store
        pass also removes the folders of tables no catalog entry names
        (:meth:`collect_unnamed_tables`, with ``orphan_timeout`` as its timeout when given).

        Raises:
            InvalidTableNameError, TableNotFoundError: ``table`` names no table of the store.
            MissingDependencyError: ``runner="spark"`` without pyspark installed.
            JobError: a maintenance job failed.
            TransactionError, CorruptMetadataError, StorageError: as ``Table.maintain``.
        """
        return store_maintenance(self, runner=runner, orphan_timeout=orphan_timeout).maintain(
            [table] if table else None)

    def load(self, job_manifest_uri: str, table_name: str, *,
             progress: Callable[[int, int], None] | None = None) -> Table:
        """Bulk load a dump (``<root>/<job>/job-manifest.json``) into a new or existing table,
        after verifying every checksum and range; one transaction. A new table is created
        with the dump's partition boundaries and the source table's properties (its
        iterators too: it answers as the source did) and appears whole or not at all; an
        existing table keeps its own properties.
        ``progress(done, total)``: bytes copied of the dump's total, ``(0, total)`` first.

        Raises:
            CorruptMetadataError: the dump is incomplete, damaged or hostile (a manifest path
                outside its root, a checksum that fails, keys outside a task's range, unsorted
                files, a property unknown or refused); nothing is created or committed.
            InvalidTableNameError: ``table_name`` cannot be a table name.
            SchemaError: the dump's schema does not match an existing table's.
            TableExistsError: another process created ``table_name`` meanwhile.
            TransactionError: the load's commit was refused or its outcome is unknown
                (CommitOutcomeUnknownError).
            StorageError: the object store failed.
        """
        return self._load(job_manifest_uri, table_name, progress=progress)[0]

    def _load(self, job_manifest_uri: str, table_name: str, *,
              progress: Callable[[int, int], None] | None = None) -> tuple[Table, Loaded]:
        """:meth:`load`, and what it did (the CLI's summary: the dump's records, and
        whether the table already held them)."""
        from sediment.dump.load import KeyedLoad, open_dump

        load = KeyedLoad(open_dump(job_manifest_uri, self.object_store_at), progress)
        dump = load.dump
        try:
            table = self.table(table_name)
        except TableNotFoundError:
            table = self.create_table(table_name, dump.schema, split_points=dump.boundaries,
                                      properties={**dump.properties,
                                                  "partitioning": dump.partitioning},
                                      initial_files=load.into_new)
            return table, load.created(table._handle)
        return table, load.into(table._handle)

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"


def store_maintenance(store: Store, *, runner: Literal["local", "spark"] = "local",
                      orphan_timeout: float | None = None) -> StoreMaintenance:
    """The maintenance of ``store`` (:mod:`sediment.maintenance.orchestrator`), with its store
    steps: the folders of tables, then of partition schemes, that no catalog entry names.
    ``Store.maintain``, ``sediment maintain`` and ``maintain --loop`` all run it."""
    from sediment.maintenance.orchestrator import StoreMaintenance, StoreStepResult

    def unnamed_tables(timeout: float | None) -> StoreStepResult:
        r = store.collect_unnamed_tables(timeout=timeout)
        return StoreStepResult("unnamed tables", len(r.removed), r.objects_deleted, r.note)

    def unnamed_schemes(timeout: float | None) -> StoreStepResult:
        removed = collect_unnamed_schemes(
            store, UNNAMED_TABLE_TIMEOUT_SECONDS if timeout is None else timeout)
        return StoreStepResult("unnamed schemes", len(removed))

    return StoreMaintenance(store, runner=runner, orphan_timeout=orphan_timeout,
                            store_steps=(unnamed_tables, unnamed_schemes))
