"""External engines over a scan (a pinned version of a table): DataFusion tables, Polars
frames, and a file plan for engines that read Parquet themselves; DuckDB views are in
:mod:`sediment.query.duckdb_view`.

Functions of a :class:`~sediment.query.scan.Scan`, behind its ``register_datafusion``,
``to_polars``, ``plan_files`` and ``to_duckdb``: every route gives exactly the scan's answer
at the version it pins, regions and iterators included, because every route reads through
the scan or a fresh one of the same table (``Table.prepare``, the one path every reader
takes). What each engine pushes down:

* DuckDB (``to_duckdb``): a view in which DuckDB reads the leaves that need no merge with its
  own Parquet reader, each restricted to its region, and every other leaf through a source
  that DuckDB scans as a ``pyarrow.dataset.Dataset`` (``scanner(columns=, filter=)`` per
  query: projection and filters reach ``prepare``); see :mod:`sediment.query.duckdb_view`.
* DataFusion (``register_datafusion``): datafusion-python lets Python register a pyarrow
  dataset, record batches or a Rust (FFI) table provider, but calls no Python code per scan
  for a Python-made dataset, so the table is the query's answer at the pinned version, read
  once at registration (projection and row-key narrowing: the ``columns``, ``keys``,
  ``ranges`` and ``filter`` arguments), one DataFusion partition per group of leaves.
* Polars (``to_polars(lazy=True)``): a Polars IO plugin (``register_io_source``): Polars hands
  it the projected columns, the predicate and a row limit; the columns are read, the
  predicate's conjuncts that name only row keys go to ``prepare`` as a filter (narrowing), the
  whole predicate is applied to every frame with Polars' own semantics, reading stops at the
  limit. Without ``register_io_source``, the Arrow answer's ``lazy()``.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.regions import Range, Region
from sediment.errors import MissingDependencyError, install_hint

if TYPE_CHECKING:
    from sediment.iterators.base import RecordIterator
    from sediment.query.executor import Executor
    from sediment.query.filters import QueryFilter
    from sediment.query.planner import QueryPlan
    from sediment.query.request import ReadRequest
    from sediment.schema import Schema
    from sediment.storage.base import ObjectStore

POLARS_INSTALL_HINT = install_hint("polars")


@dataclass(frozen=True, slots=True)
class PlannedFile:
    """One file an engine must read for a query at a version (see ``Table.plan_files``).

    Read the rows of ``uri`` (``path`` in the store's Arrow filesystem) whose row key lies in
    ``region`` (``[min, max)`` of key tuples; None ends open; on a box-partitioned table a
    ``Cell``: ``[lo, hi)`` on each row-key field, ``region.bounds``, ``region.contains(key)``)
    and, when ``ranges`` is not None, in one of ``ranges`` (a per-field region among them, a
    ``Box``, holds a range per field: ``contains(key)``, ``fields``). On a box-partitioned
    table the leaves' answers interleave in key order. When ``merge`` is False, those rows are
    the leaf's answer as they are
    (already sorted). When True, merge the restricted rows of every file of the same ``leaf_id``
    by (row keys, sort keys, sequence) — a row's sequence is the file's hidden
    ``__sediment_seq`` column where it has a value, else ``sequence`` — then apply the table's
    iterators. A ``filter`` given to ``plan_files`` applies after all that.
    """

    leaf_id: str
    partition_id: str
    """The partition holding the reference: the leaf, or an ancestor whose file spans it."""
    filename: str
    uri: str
    path: str
    region: Region
    ranges: tuple[Range, ...] | None
    records: int
    """Records of the reference (the whole partition's part of the file, before ``ranges``)."""
    approximate: bool
    sequence: int
    sequenced: bool
    merge: bool
    """The leaf needs a merge: several files, iterators configured, upserted records to
    settle or ``deletions`` to apply. Then, after merging by (row keys, sort keys,
    sequence), in this order: in each run of equal row keys and sort keys drop the records
    before its last upserted one (a sequence, ``sequence`` or ``__sediment_seq``, with
    ``UPSERT_BIT`` = ``1 << 23`` set); drop what ``deletions`` cover; apply the iterators."""
    files_in_leaf: int
    row_groups: tuple[int, ...]
    """The file's row groups that may hold wanted rows (by the statistics of the first key
    field, the key filters of exact keys, and the filter's statistics where iterators
    allow): reading only these gives the same answer."""
    deletions: tuple[dict[str, Any], ...] = ()
    columns: dict[str, str] | None = None
    """None when the file's columns are the version's fields as they are. Else the file was
    written under another schema (sediment.files.columns): the version's field name -> the
    file's column holding it (matched by Parquet field id, or by name as of the schema the
    file was written under); a field missing here is all nulls in this file, and a column
    whose type differs from the field's is cast to it (a widening: exact)."""
    """Deletes to apply to the leaf's records before its iterators (``Deletion.to_json``):
    drop each record whose sequence is below ``version << 24``, whose row key lies in one of
    ``ranges`` (all keys when absent) and that matches ``filter`` (a wire tree: see
    ``sediment.query.wire.from_wire``; all records when absent; on a table with a merge
    rule, the record the rule makes of the key's records below that sequence must match,
    and then all of them go). A range is ``{"start", "end", "start_inclusive",
    "end_inclusive"}`` with ends as lists of key values (a prefix of the row key; null:
    open; bytes as ``{"b64": ...}``), or ``{"box": [[field, lo, lo_inclusive, hi,
    hi_inclusive], ...]}`` for a per-field region."""


class Source(Protocol):
    """What engine glue reads of a scan's table (``sediment.query.scan.ScanSource``)."""

    @property
    def name(self) -> str: ...

    @property
    def objects(self) -> ObjectStore: ...


class Scan(Protocol):
    """What engine glue reads of a :class:`sediment.query.scan.Scan` (a protocol, so that
    the scan's module may import this one and not the other way round)."""

    @property
    def executor(self) -> Executor: ...

    @property
    def plan(self) -> QueryPlan: ...

    @property
    def schema(self) -> Schema: ...

    @property
    def wanted(self) -> list[str]: ...

    @property
    def iterators(self) -> list[RecordIterator]: ...

    @property
    def query_filter(self) -> QueryFilter | None: ...

    @property
    def request(self) -> ReadRequest: ...

    @property
    def source(self) -> Source | None: ...

    @property
    def arrow_schema(self) -> pa.Schema: ...

    def pinned(self) -> ReadRequest: ...

    def again(self, request: ReadRequest) -> Scan: ...

    def only_leaves(self, leaves: set[str] | frozenset[str]) -> Scan: ...

    def to_arrow(self) -> pa.Table: ...

    def to_batches(self) -> pa.RecordBatchReader: ...


def _conjoin(a: pc.Expression | None, b: pc.Expression | None) -> pc.Expression | None:
    if a is None:
        return b
    return a if b is None else a & b


def register_datafusion(scan: Scan, ctx: Any, name: str) -> None:
    """``Scan.register_datafusion``: the scan's records, read once, as record batches in
    groups (one DataFusion partition per group, as many as cores). A table registered under
    ``name`` before is replaced, as ``to_duckdb`` replaces its view: registering again is how
    a caller reads a newer version under the same name."""
    data = scan.to_arrow()
    batches = data.to_batches()
    if not batches:
        batches = [pa.RecordBatch.from_pylist([], schema=data.schema)]
    parts = max(1, min(len(batches), os.cpu_count() or 2))
    size = -(-len(batches) // parts)
    if ctx.table_exist(name):
        ctx.deregister_table(name)
    ctx.register_record_batches(name, [batches[i:i + size]
                                       for i in range(0, len(batches), size)])


def polars_frame(scan: Scan, lazy: bool) -> Any:
    """``Scan.to_polars``: the records as a DataFrame, or a LazyFrame over the scan's version
    (see the module docstring)."""
    try:
        import polars as pl
    except ImportError as exc:
        raise MissingDependencyError(
            f"Polars is not installed and to_polars needs it: {POLARS_INSTALL_HINT}"
        ) from exc
    if not lazy:
        return pl.from_arrow(scan.to_arrow())
    try:
        from polars.io.plugins import register_io_source
    except ImportError:
        frame = pl.from_arrow(scan.to_arrow())
        assert isinstance(frame, pl.DataFrame)
        return frame.lazy()
    return _polars_lazy(scan, register_io_source)


def plan_files(scan: Scan) -> list[PlannedFile]:
    """``Scan.plan_files``: one :class:`PlannedFile` per (leaf, file) the scan reads."""
    assert scan.source is not None, "a file plan names files in the table's store"
    objects = scan.source.objects
    executor = scan.executor
    iterators = bool(scan.iterators)
    base = objects.uri.rstrip("/")
    out: list[PlannedFile] = []
    for sub in scan.plan.subqueries:
        hashes = executor.point_hashes(sub)
        # a file none of whose row groups can hold a wanted row is left out of the plan
        kept = [(ref, tuple(wanted)) for ref in sub.references
                if (wanted := executor.row_groups(ref, sub, hashes, scan.query_filter)[2])]
        merge = iterators or len(kept) > 1 or bool(sub.deletions) or sub.upserts
        for ref, groups in kept:
            out.append(PlannedFile(
                sub.leaf_id, ref.partition_id, ref.filename, f"{base}/{ref.filename}",
                objects.local_path(ref.filename) or objects.path(ref.filename),
                sub.region, sub.ranges, ref.records, ref.approximate, ref.sequence,
                ref.sequenced, merge, len(kept), groups,
                tuple(d.to_json() for d in sub.deletions),
                None if (cmap := executor.file_map(ref, sub)).identity else dict(cmap.sources)))
    return out


def _key_only_predicate(predicate: Any, keys: Sequence[str], schema: Any
                        ) -> tuple[pc.Expression | None, bool]:
    """The conjuncts of a Polars predicate that name only row keys, as one pyarrow expression
    (None when there are none or Polars cannot convert them): rows they drop are rows the
    whole predicate drops, and row keys are never null, so Polars' and Arrow's semantics
    agree on them. Polars converts (``to_pyarrow_predicate``, what its own pyarrow-dataset
    scan uses) to the text of a pyarrow expression, evaluated here with ``pa`` in scope.
    Also whether that expression is the whole predicate (every conjunct converted).
    """
    parts: list[Any] = []
    whole = True
    todo = [predicate]
    while todo:
        e = todo.pop()
        try:
            top = json.loads(e.meta.serialize(format="json"))
        except Exception:  # noqa: BLE001 (an expression Polars cannot serialise: keep whole)
            top = None
        if isinstance(top, dict) and top.get("BinaryExpr", {}).get("op") in ("And", "LogicalAnd"):
            todo.extend(e.meta.pop())
            continue
        if set(e.meta.root_names()) <= set(keys):
            parts.append(e)
        else:
            whole = False
    out: pc.Expression | None = None
    for e in parts:
        try:
            text = e._pyexpr.to_pyarrow_predicate(schema)
        except Exception:  # noqa: BLE001 (a private Polars API: no narrowing without it)
            text = None
        if not text:
            whole = False
            continue
        try:
            # the text is Polars' rendering of the caller's own predicate, in the caller's
            # process (what Polars' pyarrow-dataset scan evaluates too)
            expr = eval(text, {"pa": pa})  # noqa: S307
        except Exception:  # noqa: BLE001
            whole = False
            continue
        if isinstance(expr, pc.Expression):
            out = _conjoin(out, expr)
        else:
            whole = False
    return out, whole and out is not None


def _polars_lazy(scan: Scan, register_io_source: Any) -> Any:
    import polars as pl

    out = scan.arrow_schema
    version = scan.plan.version
    base = scan.pinned()
    name = scan.source.name if scan.source is not None else "?"
    # the request's own filter (text or a tree too) as an expression the plugin conjoins
    own = base.filter_expression(scan.schema, name)
    empty = pl.from_arrow(out.empty_table())
    assert isinstance(empty, pl.DataFrame)
    pl_schema = empty.schema
    key_names = [n for n in scan.schema.row_key_names if n in out.names]
    narrowed = base.keys is not None or base.ranges is not None

    def source(with_columns: list[str] | None, predicate: Any, n_rows: int | None,
               batch_size: int | None) -> Iterator[Any]:
        wanted = list(with_columns) if with_columns is not None else out.names
        read = list(wanted)
        narrowing: pc.Expression | None = None
        whole = False
        if predicate is not None:
            named = set(predicate.meta.root_names())
            read = [c for c in out.names if c in wanted or c in named]
            if key_names:
                narrowing, whole = _key_only_predicate(predicate, key_names, pl_schema)
        again = scan.again(base.replace(columns=read, filter=_conjoin(own, narrowing)))
        if whole and again.query_filter is None and not narrowed:
            # Sediment reads exactly the rows the predicate passes (its key constraints
            # became the read's ranges): filtering again in Polars would change nothing
            predicate = None
        left = n_rows
        sent = False
        for batch in again.to_batches():
            if left is not None and left <= 0:
                break
            frame = pl.from_arrow(batch)
            assert isinstance(frame, pl.DataFrame)
            if predicate is not None:
                frame = frame.filter(predicate)
            frame = frame.select(wanted)
            if left is not None:
                frame = frame.head(left)
                left -= frame.height
            if frame.height:
                sent = True
                yield frame
        if not sent:  # an empty answer is one empty frame (Polars 1.1x-1.2x panic on none)
            yield empty.select(wanted)

    # what Polars' EXPLAIN names the source (Polars before 1.2x takes no such arguments)
    named = {"explain_name": "sediment", "explain_detail": f"{name} at version {version}"}
    accepted = inspect.signature(register_io_source).parameters
    return register_io_source(source, schema=pl_schema,
                              **{k: v for k, v in named.items() if k in accepted})
