"""A table's metadata as Arrow tables (``table.inspect``), in the style of pyiceberg's
``inspect``: ``files()``, ``partitions()``, ``history()`` and ``jobs()``.

Built on the table's state at a version and its job events; nothing here reads data files
except ``files(statistics=True)`` (one Parquet footer per file, through the query footer
cache). Regions are given in the row key's own type when the row key has one field, else as
text (the tuple's repr); an open end is null. Times are ``timestamp[us, UTC]``.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

import pyarrow as pa

from sediment.core.keys import Key
from sediment.types import region_text

TIME = pa.timestamp("us", tz="UTC")


def _times(seconds: list[float]) -> pa.Array:
    return pa.array([round(s * 1_000_000) for s in seconds], pa.int64()).cast(TIME)


class TableInspector:
    """``table.inspect``: metadata tables of one :class:`~sediment.table.Table` (typed ``Any``
    here: the façade is a layer above)."""

    def __init__(self, table: Any) -> None:
        self._table = table

    # ---- helpers ---------------------------------------------------------------------------
    def _key_type(self, state: Any) -> pa.DataType:
        keys = state.schema.row_keys
        return keys[0].type if len(keys) == 1 else pa.string()

    def _keys(self, values: list[Key | None], state: Any) -> pa.Array:
        """Region ends as an array: the key's type for a one-field key, else text."""
        typ = self._key_type(state)
        if len(state.schema.row_keys) == 1:
            firsts = [None if k is None else k[0] for k in values]
            try:
                return pa.array(firsts, typ)
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # temporal keys held as integers
                return pa.array(firsts, pa.int64()).cast(typ)
        return pa.array([None if k is None else repr(k) for k in values], pa.string())

    # ---- tables ----------------------------------------------------------------------------
    def files(self, version: int | str | None = None, *, statistics: bool = False
              ) -> pa.Table:
        """One row per file reference at ``version`` (None: the head): the file, its URI,
        the partition holding the reference, whether that is a leaf, the partition's region
        (``region_min``, ``region_max``), records (``approximate`` when estimated), the job
        it is assigned to, its sequence, whether it carries per-record sequences, and
        ``file_size_bytes`` (from one listing per data folder; null for a file no longer
        there). A file referenced from several partitions has a row per reference.
        ``statistics``: also ``row_groups``, ``file_rows`` (physical rows, all references
        together) and ``key_min``/``key_max`` (first row-key field) from the Parquet footers.
        """
        t = self._table
        state = t.state(version)
        refs = list(state.all_references())
        objects = t._handle.objects
        sizes: dict[str, int] = {}
        for folder in sorted({posixpath.dirname(r.filename) for r in refs}):
            for o in objects.list(folder + "/" if folder else ""):
                sizes[o.key] = o.size
        parts = state.partitions
        base = objects.uri.rstrip("/")
        cols: dict[str, pa.Array] = {
            "file": pa.array([r.filename for r in refs], pa.string()),
            "uri": pa.array([f"{base}/{r.filename}" for r in refs], pa.string()),
            "partition_id": pa.array([r.partition_id for r in refs], pa.string()),
            "leaf": pa.array([parts[r.partition_id].is_leaf for r in refs], pa.bool_()),
            "region_min": self._keys([parts[r.partition_id].region.min for r in refs], state),
            "region_max": self._keys([parts[r.partition_id].region.max for r in refs], state),
            "records": pa.array([r.records for r in refs], pa.int64()),
            "approximate": pa.array([r.approximate for r in refs], pa.bool_()),
            "job_id": pa.array([r.job_id for r in refs], pa.string()),
            "sequence": pa.array([r.sequence for r in refs], pa.int64()),
            "sequenced": pa.array([r.sequenced for r in refs], pa.bool_()),
            "file_size_bytes": pa.array([sizes.get(r.filename) for r in refs], pa.int64()),
        }
        if statistics:
            footers = t._handle.executors.get(state).footers
            first = state.schema.row_keys[0].type
            groups, rows, lo, hi = [], [], [], []
            for r in refs:
                footer = footers.cached(r.filename) or footers.open(r.filename)[1]
                groups.append(footer.metadata.num_row_groups)
                rows.append(footer.metadata.num_rows)
                mins = [m for m in footer.mins if m is not None]
                maxs = [m for m in footer.maxs if m is not None]
                lo.append(min(mins) if mins else None)
                hi.append(max(maxs) if maxs else None)
            cols["row_groups"] = pa.array(groups, pa.int64())
            cols["file_rows"] = pa.array(rows, pa.int64())
            for name, vals in (("key_min", lo), ("key_max", hi)):
                try:
                    cols[name] = pa.array(vals, first)
                except (pa.ArrowInvalid, pa.ArrowTypeError):
                    cols[name] = pa.array(vals, pa.int64()).cast(first)
        return pa.table(cols)

    def partitions(self, version: int | str | None = None) -> pa.Table:
        """One row per partition at ``version``, parents before children: id, parent,
        ``leaf``, ``depth``, region, split key, and the references held directly
        (``files``, ``records``, ``approximate`` when any count is estimated), and the
        region as text (``region``: a box partition's range on every field)."""
        t = self._table
        state = t.state(version)
        ps = sorted(state.partitions.values(),
                    key=lambda p: (len(state.ancestors(p.id)), p.region.min or ()))
        files, records, approx = [], [], []
        for p in ps:
            refs = list(state.references(p.id).values())
            files.append(len(refs))
            records.append(sum(r.records for r in refs))
            approx.append(any(r.approximate for r in refs))
        key_types = [f.type for f in state.schema.row_keys]
        return pa.table({
            "partition_id": pa.array([p.id for p in ps], pa.string()),
            "parent_id": pa.array([p.parent_id for p in ps], pa.string()),
            "leaf": pa.array([p.is_leaf for p in ps], pa.bool_()),
            "depth": pa.array([len(state.ancestors(p.id)) for p in ps], pa.int32()),
            "region_min": self._keys([p.region.min for p in ps], state),
            "region_max": self._keys([p.region.max for p in ps], state),
            "split_key": self._keys([p.split_key for p in ps], state),
            "files": pa.array(files, pa.int64()),
            "records": pa.array(records, pa.int64()),
            "approximate": pa.array(approx, pa.bool_()),
            # the whole region as text: a box partition's (partitioning=dimensions) bounds
            # every field, which region_min and region_max (first-field bounds) cannot show
            "region": pa.array([region_text(p.region, key_types) for p in ps], pa.string()),
        })

    def history(self, limit: int | None = None) -> pa.Table:
        """One row per committed transaction still in the log: version, ``committed_at``
        (timestamp[us, UTC]), kind, summary, and ``is_current`` for the head. ``limit``:
        only the ``limit`` newest rows, read without the rest of the log
        (``Table.history``)."""
        entries = self._table.history(limit)
        head = max((e.version for e in entries), default=0)
        return pa.table({
            "version": pa.array([e.version for e in entries], pa.int64()),
            "committed_at": _times([e.time for e in entries]),
            "kind": pa.array([e.kind for e in entries], pa.string()),
            "summary": pa.array([e.summary for e in entries], pa.string()),
            "is_current": pa.array([e.version == head for e in entries], pa.bool_()),
        })

    def jobs(self, kind: str | None = None) -> pa.Table:
        """The job and task status events (all kinds, or ``kind``), oldest first: ``time``
        (timestamp[us, UTC]), kind, job id, status, partition, and the event's details as a
        JSON text (rows, bytes, seconds, reasons: what was known then)."""
        events = list(self._table._handle.status.events(kind))
        return pa.table({
            "time": _times([e.time for e in events]),
            "kind": pa.array([e.kind for e in events], pa.string()),
            "job_id": pa.array([e.job_id for e in events], pa.string()),
            "status": pa.array([e.status for e in events], pa.string()),
            "partition_id": pa.array([e.partition_id for e in events], pa.string()),
            "details": pa.array([json.dumps(e.details, default=str, sort_keys=True)
                                 for e in events], pa.string()),
        })

    def __repr__(self) -> str:
        return f"TableInspector({self._table.name!r})"
