"""TableState: everything the transaction log says about a table at one version.

The state is mutated only by ``Transaction.apply``. ``copy()`` is cheap (copy-on-write per
partition), so a reader can pin a version while the writer moves on. File references loaded from a
snapshot stay as Arrow tables per partition until a partition is first touched: a state of a
million references loads in a fraction of a second.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sediment.core import references as references_module
from sediment.core.deletions import Deletion
from sediment.core.keys import Key
from sediment.core.model import FileReference, FileSums, Partition
from sediment.core.references import (
    CowDict,
    LazyReferences,
    SnapshotReferences,
    SnapshotSums,
    cow,
)
from sediment.core.regions import Cell, Region
from sediment.errors import SchemaError
from sediment.schema import Schema

ROOT_PARTITION_ID = "root"


class TableState:
    """Schema, properties, partition tree, file references, reference counts and jobs."""

    def __init__(self, table_id: str = "", name: str | None = None) -> None:
        self.table_id = table_id
        self.name = name or table_id
        """The table's name, for errors (its id when not given). Never stored: it comes from
        the catalog each time the table is opened, so it follows a rename."""
        self.version = 0
        self.schema: Schema | None = None
        self.schemas: tuple[tuple[int, Schema], ...] = ()
        """(version, schema) of every schema the table has had, oldest first: the version
        each took effect (1: the table's creation). A file without field ids is read by name
        as of the schema in force when it was added (sediment.files.columns)."""
        self.properties: dict[str, Any] = {}
        self.online = True
        self.partitions: dict[str, Partition] = {}
        self.refcount: CowDict[int] = CowDict()
        """Filename -> number of references; files with no reference are in ``unreferenced``."""
        self.unreferenced: CowDict[float] = CowDict()
        """Filename -> time its last reference went away (for the GC delay)."""
        self.jobs: dict[str, tuple[str, float]] = {}
        """Compaction job id -> (partition id, time assigned), until the job commits."""
        self.expired_leases: Mapping[str, float] = {}
        """Pending-file lease id -> time garbage collection recorded it expired (ExpireLeases):
        a writer whose files such a lease protected refuses to commit them. Replaced, never
        changed in place, so copies share it."""
        self.sums: CowDict[FileSums] = CowDict()
        """Filename -> its checksums, as the transactions that added it recorded them (and
        a snapshot's unreferenced files'); a referenced file's sums loaded from a snapshot
        stay in its Arrow reference table until asked for (see ``file_sums``). Entries of
        files no longer in the table may linger: ``file_sums`` answers for live files only."""
        self._snapshot_sums: SnapshotSums | None = None
        self.streams: Mapping[str, tuple[int, float]] = {}
        """Stream id -> (last committed batch id, time of that commit): what a streaming
        writer's replayed batch is recognised by (sediment.core.transactions.streams).
        Replaced, never changed in place, so copies share it."""
        self.deletions: tuple[Deletion, ...] = ()
        """Records deleted by key, range or predicate and not yet settled everywhere
        (sediment.core.deletions), oldest first. Replaced, never changed in place."""
        self._refs: dict[str, dict[str, FileReference]] = {}
        self._lazy: dict[str, LazyReferences] = {}
        self._owned: set[str] = set()
        self.last_update = 0.0

    # ---- schemas -----------------------------------------------------------------------
    def set_schema(self, schema: Schema) -> None:
        """Make ``schema`` the table's, from the version being applied on."""
        self.schema = schema
        self.schemas = (*self.schemas, (self.version + 1, schema))

    # ---- copying ---------------------------------------------------------------------
    def copy(self) -> TableState:
        """An independent state sharing unchanged per-partition maps (copy-on-write)."""
        c = TableState.__new__(TableState)
        c.table_id = self.table_id
        c.name = self.name
        c.version = self.version
        c.schema = self.schema
        c.schemas = self.schemas
        c.properties = dict(self.properties)
        c.online = self.online
        c.partitions = dict(self.partitions)
        c.refcount = cow(self.refcount)
        c.unreferenced = cow(self.unreferenced)
        c.sums = cow(self.sums)
        c._snapshot_sums = self._snapshot_sums
        c.jobs = dict(self.jobs)
        c.expired_leases = self.expired_leases
        c.streams = self.streams
        c.deletions = self.deletions
        # _lazy before _refs: a reader materialising a partition meanwhile (see _materialise)
        # leaves it in one of the two copies, never in neither
        c._lazy = dict(self._lazy)
        c._refs = dict(self._refs)
        c._owned = set()
        self._owned = set()  # our maps are now shared too
        c.last_update = self.last_update
        return c

    def only(self, filenames: Collection[str]) -> TableState:
        """A copy whose references are only those of ``filenames`` (their partitions kept),
        with no deletions: the records those files hold, read alone (the change feed reads a
        commit's new files this way; deletions made before the commit never cover them)."""
        c = self.copy()
        keep = set(filenames)
        refs: dict[str, dict[str, FileReference]] = {}
        for pid in self.partitions_with_references():
            mine = {f: r for f, r in self.references(pid).items() if f in keep}
            if mine:
                refs[pid] = mine
        c._refs, c._lazy, c._owned = refs, {}, set(refs)
        c.refcount = CowDict()
        for pid_refs in refs.values():
            for f in pid_refs:
                c.refcount[f] = c.refcount.get(f, 0) + 1
        c.deletions = ()
        return c

    # ---- file references ---------------------------------------------------------------
    def references(self, partition_id: str) -> Mapping[str, FileReference]:
        """The references in one partition, by filename (read-only view)."""
        self._materialise(partition_id)
        return self._refs.get(partition_id, {})

    def _materialise(self, partition_id: str) -> None:
        """Decode a partition's lazily loaded references. A published head is read by many
        threads at once, so the decoded map is in ``_refs`` before the partition leaves
        ``_lazy``: a reader (or a ``copy``) meanwhile finds it in one or the other, never
        missing (two readers may both decode it, to equal maps)."""
        lazy = self._lazy.get(partition_id)
        if lazy is not None:
            # Decoded once and shared with every copy of this state: not owned (see _writable).
            self._refs[partition_id] = lazy.decode()
            self._lazy.pop(partition_id, None)

    def _writable(self, partition_id: str) -> dict[str, FileReference]:
        self._materialise(partition_id)
        if partition_id not in self._owned:
            self._refs[partition_id] = dict(self._refs.get(partition_id, {}))
            self._owned.add(partition_id)
        return self._refs[partition_id]

    def put_reference(self, ref: FileReference) -> None:
        """Add or replace a reference; keeps reference counts right."""
        refs = self._writable(ref.partition_id)
        if ref.filename not in refs:
            self.refcount[ref.filename] = self.refcount.get(ref.filename, 0) + 1
            self.unreferenced.pop(ref.filename, None)
        refs[ref.filename] = ref

    def remove_reference(self, partition_id: str, filename: str, time: float) -> None:
        refs = self._writable(partition_id)
        del refs[filename]
        if not refs:
            del self._refs[partition_id]
            self._owned.discard(partition_id)
        n = self.refcount[filename] - 1
        if n:
            self.refcount[filename] = n
        else:
            # an unreferenced file keeps its sums: found now through the partition it leaves
            # (a snapshot's rows), later with no partition to look in
            sums = self.file_sums(filename, partition_id)
            if sums is not None and filename not in self.sums:
                self.sums[filename] = sums
            del self.refcount[filename]
            self.unreferenced[filename] = time

    def file_sums(self, filename: str, partition_id: str | None = None) -> FileSums | None:
        """The checksums of a file of this table (referenced, or unreferenced and not yet
        deleted), or None when the table has none for it (written before checksums, or not
        in the table). ``partition_id``, a partition referencing the file, lets a sum loaded
        from a snapshot be found by decoding that partition's rows only."""
        if filename not in self.refcount and filename not in self.unreferenced:
            return None
        s = self.sums.get(filename)
        if s is None and self._snapshot_sums is not None:
            s = self._snapshot_sums.lookup(filename, partition_id)
        return s

    def partition_sums(self, partition_id: str, filenames: Sequence[str]
                       ) -> list[FileSums | None]:
        """The sums of files referenced in one partition (``file_sums`` of each, without its
        liveness check: a referenced file is live), for writing a snapshot."""
        get, snap = self.sums.get, self._snapshot_sums
        if snap is None:
            return [get(n) for n in filenames]
        return [get(n) or snap.lookup(n, partition_id) for n in filenames]

    def put_sums(self, checksums: Mapping[str, FileSums]) -> None:
        """Record files' checksums (a transaction adding or moving them)."""
        for name, s in checksums.items():
            self.sums[name] = s

    def drop_sums(self, filename: str) -> None:
        """Forget a deleted file's checksums."""
        self.sums.pop(filename, None)

    def all_file_sums(self) -> dict[str, FileSums]:
        """Every live file's checksums, by filename (decodes a snapshot's: for comparisons
        and for writing a snapshot, not for reads)."""
        out = {}
        for name in sorted({*self.refcount, *self.unreferenced}):
            s = self.file_sums(name)
            if s is not None:
                out[name] = s
        return out

    def partitions_with_references(self) -> list[str]:
        return sorted(set(self._refs) | set(self._lazy))

    def all_references(self) -> Iterator[FileReference]:
        """Every reference, partition by partition, filenames in order."""
        for pid in self.partitions_with_references():
            refs = self.references(pid)
            for name in sorted(refs):
                yield refs[name]

    def decode_all_references(self) -> None:
        """Decode every partition's references still in a snapshot's Arrow form, a whole
        snapshot table at a time: for plans that read every leaf."""
        if len(self._lazy) < references_module.WHOLE_DECODE_MIN_PARTITIONS:
            return
        for lazy in tuple(self._lazy.values()):  # a snapshot: readers may pop meanwhile
            if lazy.source is not None:
                lazy.source.decode()

    def partition_totals(self) -> dict[str, tuple[int, int]]:
        """(references, records) per partition holding any, read from a snapshot's Arrow
        slices where they are not yet decoded: a view of 10,000 partitions then builds no
        FileReference (decoding 100,000 of them takes ~0.4 s)."""
        out = {pid: (len(refs), sum(r.records for r in refs.values()))
               for pid, refs in tuple(self._refs.items())}
        for pid, lazy in tuple(self._lazy.items()):  # as a reader may materialise meanwhile
            if lazy.refs is not None:
                out[pid] = (len(lazy.refs), sum(r.records for r in lazy.refs.values()))
            else:
                records = lazy.table.column("records").to_numpy()
                out[pid] = (lazy.table.num_rows, int(records.sum()))
        return out

    def reference_count(self) -> int:
        refs = dict(self._refs)  # one snapshot each: a reader may materialise meanwhile
        n = sum(len(r) for r in refs.values())
        return n + sum(t.table.num_rows for pid, t in tuple(self._lazy.items())
                       if pid not in refs)

    def load_references(self, table: pa.Table) -> None:
        """Take references from a snapshot table sorted by partition (kept lazily)."""
        if table.num_rows == 0:
            return
        source = SnapshotReferences(table)
        runs = partition_runs(table)
        for pid, start, end in runs:
            self._lazy[pid] = LazyReferences(table.slice(start, end - start), source, start)
        self._snapshot_sums = SnapshotSums.of(table, runs)
        names, counts = _value_counts(table.column("filename"))
        if not self.refcount:
            self.refcount = CowDict(zip(names, counts, strict=True))
            return
        for name, count in zip(names, counts, strict=True):
            self.refcount[name] = self.refcount.get(name, 0) + count

    # ---- partitions --------------------------------------------------------------------
    @property
    def partitioning(self) -> str:
        """The partitioning of the tree (``lexicographic`` or ``dimensions``), read off its
        root's region, never off a property: a tree and its kind cannot disagree. The
        strategy that works on it is ``sediment.partitioning.partitioning_of(state)``."""
        for p in self.partitions.values():
            if p.parent_id is None:
                return p.region.partitioning
        return Region.partitioning

    def leaf_partitions(self) -> list[Partition]:
        """Leaves in key order."""
        leaves = [p for p in self.partitions.values() if p.is_leaf]
        return sorted(leaves, key=_region_sort_key)

    def ancestors(self, partition_id: str) -> list[Partition]:
        out = []
        p = self.partitions[partition_id]
        while p.parent_id is not None:
            p = self.partitions[p.parent_id]
            out.append(p)
        return out

    def is_descendant(self, partition_id: str, ancestor_id: str) -> bool:
        return any(a.id == ancestor_id for a in self.ancestors(partition_id))

    # ---- job ids -------------------------------------------------------------------------
    def job_ids(self) -> set[str]:
        return set(self.jobs)

    def job_inputs(self, job_id: str) -> list[FileReference]:
        """The references still assigned to a job."""
        pid = self.jobs[job_id][0]
        return [r for r in self.references(pid).values() if r.job_id == job_id]

    # ---- comparison ----------------------------------------------------------------------
    def canonical(self) -> dict[str, Any]:
        """A plain-data form of the state; equal states (e.g. replayed and loaded from a
        snapshot) have equal forms, which is what ``==`` compares."""
        return {
            "table_id": self.table_id,
            "version": self.version,
            "schema": None if self.schema is None else self.schema.to_json(),
            "schemas": [(v, s.to_json()) for v, s in self.schemas],
            "properties": dict(sorted(self.properties.items())),
            "online": self.online,
            "partitions": {k: v.to_json() for k, v in sorted(self.partitions.items())},
            "references": [tuple(r) for r in self.all_references()],
            "refcount": dict(sorted(self.refcount.items())),
            "unreferenced": dict(sorted(self.unreferenced.items())),
            "jobs": dict(sorted(self.jobs.items())),
            "sums": {k: tuple(v) for k, v in self.all_file_sums().items()},
            "deletions": [d.to_json() for d in self.deletions],
            "streams": {k: list(v) for k, v in sorted(self.streams.items())},
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TableState) and self.canonical() == other.canonical()

    __hash__ = None  # type: ignore[assignment]


def schema_in_force(schemas: Sequence[tuple[int, Schema]], version: int) -> Schema | None:
    """Of a (version, schema) history, oldest first, the schema in force at ``version`` (the
    first one for a version before them all; None for no history)."""
    found = schemas[0][1] if schemas else None
    for v, s in schemas:
        if v > version:
            break
        found = s
    return found


def _region_sort_key(p: Partition) -> tuple[int, Key]:
    r: Region = p.region
    return (0, ()) if r.min is None else (1, r.min)


def _value_counts(col: pa.ChunkedArray) -> tuple[list[str], list[int]]:
    vc = pc.value_counts(col)
    return vc.field("values").to_pylist(), vc.field("counts").to_pylist()


def partition_runs(table: pa.Table) -> list[tuple[str, int, int]]:
    """(partition id, start, end) of each run of equal ``partition_id`` values in a table."""
    pids = table.column("partition_id").combine_chunks()
    if len(pids) == 0:
        return []
    change = pc.not_equal(pids.slice(1), pids.slice(0, len(pids) - 1))
    starts = [0, *(pc.indices_nonzero(change).to_numpy() + 1).tolist()]
    ends = [*starts[1:], len(pids)]
    return [(pids[s].as_py(), s, e) for s, e in zip(starts, ends, strict=True)]


def build_partition_tree(schema: Schema, split_points: Sequence[Any] | None,
                         partitioning: str = "lexicographic") -> list[Partition]:
    """A balanced partition tree of ``partitioning`` (the property's value: see
    sediment.partitioning) whose leaves are cut at the given split points."""
    if partitioning == Cell.partitioning:
        return _box_tree(schema, split_points)
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


def _box_tree(schema: Schema, split_points: Sequence[Any] | None) -> list[Partition]:
    """A balanced tree of box partitions cut on the first row-key field at ``split_points``
    (values of that field, or keys whose first value is taken)."""
    name = schema.row_key_names[0]
    values = []
    for k in split_points or ():
        v = k[0] if isinstance(k, tuple | list) else k
        if isinstance(k, tuple | list) and len(k) != 1:
            raise SchemaError(f"split point {k!r}: a table with partitioning=dimensions is "
                              f"split on its first row-key field {name!r}: give its values")
        values.append(schema.check_key_field(name, v, what="split point"))
    for a, b in zip(values, values[1:], strict=False):
        if not a < b:
            raise SchemaError(f"split points must be strictly increasing: {a!r} >= {b!r}")
    out: list[Partition] = []

    def build(pid: str, parent: str | None, cell: Cell, cuts: list[Any]) -> None:
        if not cuts:
            out.append(Partition(pid, parent, cell))
            return
        mid = len(cuts) // 2
        left, right = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
        out.append(Partition(pid, parent, cell, (left, right), (cuts[mid],)))
        low, high = cell.cut(0, cuts[mid])
        build(left, pid, low, cuts[:mid])
        build(right, pid, high, cuts[mid + 1 :])

    build(ROOT_PARTITION_ID, None, Cell.whole(len(schema.row_keys)), values)
    return out
