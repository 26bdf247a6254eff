"""TableState: everything the transaction log says about a table at one version.

The state is mutated only by ``Transaction.apply``. ``copy()`` is cheap (copy-on-write per
partition), so a reader can pin a version while the writer moves on. File references loaded from a
snapshot stay as Arrow tables per partition until a partition is first touched: a state of a
million references loads in a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.keys import Key
from sediment.core.model import FileReference, Partition, Region
from sediment.schema import Schema

ROOT_PARTITION_ID = "root"


class TableState:
    """Schema, properties, partition tree, file references, reference counts and jobs."""

    def __init__(self, table_id: str = "") -> None:
        self.table_id = table_id
        self.version = 0
        self.schema: Schema | None = None
        self.properties: dict[str, Any] = {}
        self.online = True
        self.partitions: dict[str, Partition] = {}
        self.refcount: dict[str, int] = {}
        """Filename -> number of references; files with no reference are in ``unreferenced``."""
        self.unreferenced: dict[str, float] = {}
        """Filename -> time its last reference went away (for the GC delay)."""
        self.jobs: dict[str, tuple[str, float]] = {}
        """Compaction job id -> (partition id, time assigned), until the job commits."""
        self._refs: dict[str, dict[str, FileReference]] = {}
        self._lazy: dict[str, pa.Table] = {}
        self._owned: set[str] = set()
        self.last_update = 0.0

    # ---- copying ---------------------------------------------------------------------
    def copy(self) -> TableState:
        """An independent state sharing unchanged per-partition maps (copy-on-write)."""
        c = TableState.__new__(TableState)
        c.table_id = self.table_id
        c.version = self.version
        c.schema = self.schema
        c.properties = dict(self.properties)
        c.online = self.online
        c.partitions = dict(self.partitions)
        c.refcount = dict(self.refcount)
        c.unreferenced = dict(self.unreferenced)
        c.jobs = dict(self.jobs)
        c._refs = dict(self._refs)
        c._lazy = dict(self._lazy)
        c._owned = set()
        self._owned = set()  # our maps are now shared too
        c.last_update = self.last_update
        return c

    # ---- file references ---------------------------------------------------------------
    def references(self, partition_id: str) -> Mapping[str, FileReference]:
        """The references in one partition, by filename (read-only view)."""
        self._materialise(partition_id)
        return self._refs.get(partition_id, {})

    def _materialise(self, partition_id: str) -> None:
        t = self._lazy.pop(partition_id, None)
        if t is not None:
            cols = [t.column(n).to_pylist() for n in
                    ("filename", "partition_id", "records", "approximate", "job_id")]
            self._refs[partition_id] = {r.filename: r for r in map(FileReference, *cols)}
            self._owned.add(partition_id)

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
            del self.refcount[filename]
            self.unreferenced[filename] = time

    def partitions_with_references(self) -> list[str]:
        return sorted(set(self._refs) | set(self._lazy))

    def all_references(self) -> Iterator[FileReference]:
        """Every reference, partition by partition, filenames in order."""
        for pid in self.partitions_with_references():
            refs = self.references(pid)
            for name in sorted(refs):
                yield refs[name]

    def reference_count(self) -> int:
        n = sum(len(r) for r in self._refs.values())
        return n + sum(t.num_rows for t in self._lazy.values())

    def load_references(self, table: pa.Table) -> None:
        """Take references from a snapshot table sorted by partition (kept lazily)."""
        if table.num_rows == 0:
            return
        for pid, start, end in partition_runs(table):
            self._lazy[pid] = table.slice(start, end - start)
        names, counts = _value_counts(table.column("filename"))
        for name, count in zip(names, counts, strict=True):
            self.refcount[name] = self.refcount.get(name, 0) + count

    # ---- partitions --------------------------------------------------------------------
    def leaf_partitions(self) -> list[Partition]:
        """Leaves in key order."""
        leaves = [p for p in self.partitions.values() if p.is_leaf]
        return sorted(leaves, key=_region_sort_key)

    def partition(self, partition_id: str) -> Partition:
        return self.partitions[partition_id]

    def ancestors(self, partition_id: str) -> list[Partition]:
        out = []
        p = self.partitions[partition_id]
        while p.parent_id is not None:
            p = self.partitions[p.parent_id]
            out.append(p)
        return out

    def is_descendant(self, partition_id: str, ancestor_id: str) -> bool:
        return any(a.id == ancestor_id for a in self.ancestors(partition_id))

    def leaf_for_key(self, key: Key) -> Partition:
        p = self.partitions[ROOT_PARTITION_ID]
        while not p.is_leaf:
            assert p.split_key is not None
            p = self.partitions[p.children[0] if key < p.split_key else p.children[1]]
        return p

    # ---- job ids -------------------------------------------------------------------------
    def job_ids(self) -> set[str]:
        return set(self.jobs)

    def job_inputs(self, job_id: str) -> list[FileReference]:
        """The references still assigned to a job."""
        pid = self.jobs[job_id][0]
        return [r for r in self.references(pid).values() if r.job_id == job_id]

    # ---- comparison ----------------------------------------------------------------------
    def canonical(self) -> dict[str, Any]:
        """A plain-data form used to compare states (replay vs snapshot) in tests."""
        return {
            "table_id": self.table_id,
            "version": self.version,
            "schema": None if self.schema is None else self.schema.to_json(),
            "properties": dict(sorted(self.properties.items())),
            "online": self.online,
            "partitions": {k: v.to_json() for k, v in sorted(self.partitions.items())},
            "references": [tuple(r) for r in self.all_references()],
            "refcount": dict(sorted(self.refcount.items())),
            "unreferenced": dict(sorted(self.unreferenced.items())),
            "jobs": dict(sorted(self.jobs.items())),
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TableState) and self.canonical() == other.canonical()

    __hash__ = None  # type: ignore[assignment]


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
