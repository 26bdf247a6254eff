"""The scan object: one planned read of a table, and every way to take its records.

``Table.prepare(request)`` returns a :class:`Scan`: the plan at one pinned version, the
columns to read and to return, the iterators and the filter. Its outputs are defined here
once, so each gives exactly the same records: Arrow (``to_arrow``, ``to_batches``, the Arrow
PyCapsule stream protocol, so ``pa.table(scan)``, Polars and DuckDB read a scan as it is),
pandas, Polars, DuckDB views, DataFusion tables and a file plan for engines that read
Parquet themselves (the engine glue is in :mod:`sediment.query.engines`). The ``Table``
methods of the same names are forwards to these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sediment.errors import ObjectNotFoundError
from sediment.iterators.base import RecordIterator
from sediment.metrics import traces
from sediment.query.executor import Executor
from sediment.query.filters import QueryFilter
from sediment.query.planner import QueryPlan, SubQuery
from sediment.query.request import ReadRequest
from sediment.schema import Schema
from sediment.storage.base import ObjectStore

if TYPE_CHECKING:
    import pandas as pd

    from sediment.query.engines import PlannedFile


@dataclass(frozen=True, slots=True)
class ScanSource:
    """What a scan needs of its table to read again at its version (a DuckDB view, a lazy
    Polars frame and a file plan do): the table's name, its object store, and the table's
    ``prepare`` (never the table: the query room sits below it)."""

    name: str
    objects: ObjectStore
    prepare: Callable[[ReadRequest], Scan]


@dataclass(frozen=True, slots=True)
class Scan:
    """A planned read (see the module docstring). Obtain one with ``table.prepare(...)``.

    Planning errors were raised by ``prepare``; each output raises what reading raises:
    ObjectNotFoundError for a missing data file (VersionExpiredError when GC collected an old
    version's files), CorruptMetadataError for a damaged one, StorageError for the store.
    A streaming output (``to_batches``, the PyCapsule stream) raises them when the batch that
    needs the file is read.
    """

    executor: Executor
    plan: QueryPlan
    """The leaves and files read, at the pinned version (``plan.version``)."""
    schema: Schema
    read: list[str]
    """Columns read from files: the wanted ones, the keys, and what iterators need."""
    wanted: list[str]
    """Columns returned, in the caller's order."""
    iterators: list[RecordIterator]
    on_missing: Callable[[], None] | None = None
    """Called when a data file is missing, before the missing-file error is raised: raises a
    better error instead when it knows why (an old version's files collected by GC: see
    ``sediment.query.expiry``)."""
    query_filter: QueryFilter | None = None
    """The request's filter, compiled, applied after the iterators (its columns are in
    ``read``); None when there is none or the plan already reads exactly what it passes."""
    request: ReadRequest = field(default_factory=ReadRequest)
    """The request planned (its version as asked: ``plan.version`` is the one pinned)."""
    source: ScanSource | None = None
    """The table, for the outputs that read again (None: a scan made without one)."""

    # ---- the plan ---------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """The version the scan reads."""
        return self.plan.version

    @property
    def arrow_schema(self) -> pa.Schema:
        """The schema of the records returned (the wanted columns, in order)."""
        return pa.schema([self.schema.field(c) for c in self.wanted])

    def pinned(self) -> ReadRequest:
        """The request with its version pinned to the one this scan reads."""
        return self.request.replace(version=self.plan.version)

    def only_leaves(self, leaves: set[str] | frozenset[str]) -> Scan:
        """The same scan restricted to the sub-queries of ``leaves`` (leaf ids)."""
        subs = tuple(s for s in self.plan.subqueries if s.leaf_id in leaves)
        return replace(self, plan=QueryPlan(self.plan.version, subs))

    def explain_missing(self) -> None:
        """Raise the better error for a missing data file, if any (see ``on_missing``)."""
        if self.on_missing is not None:
            self.on_missing()

    @property
    def name(self) -> str:
        """The table's name ("" for a scan made without its source)."""
        return self.source.name if self.source is not None else ""

    # ---- Arrow ------------------------------------------------------------------------------
    def to_arrow(self) -> pa.Table:
        """Every record as one ``pyarrow.Table``, sorted by key (``Table.query``'s answer).
        Holds the whole answer in memory: :meth:`to_batches` streams it."""
        try:
            with traces.span("sediment.query", self.name):
                return self._wanted(self.executor.run(self.plan, self.read, self.iterators,
                                                      self.query_filter,
                                                      self.request.block_cache))
        except ObjectNotFoundError:
            self.explain_missing()
            raise

    def _wanted(self, data: pa.Table) -> pa.Table:
        """``data`` (the columns read) as the columns asked for, in their order (no new
        table when they are the same: building one costs a lookup more than it should)."""
        return data if self.read == self.wanted else data.select(self.wanted)

    def to_batches(self) -> pa.RecordBatchReader:
        """The records as a ``pyarrow.RecordBatchReader``, streamed leaf by leaf in key order
        in bounded memory (``Table.scan``'s answer). Errors of reading are raised when the
        batch that needs the file is read."""
        def batches() -> Iterator[pa.RecordBatch]:
            try:
                with traces.span("sediment.query", self.name):
                    for b in self.executor.stream(self.plan, self.read, self.iterators,
                                                  self.query_filter, self.request.block_cache):
                        yield b.select(self.wanted)
            except ObjectNotFoundError:
                self.explain_missing()
                raise

        return pa.RecordBatchReader.from_batches(self.arrow_schema, batches())

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The Arrow PyCapsule stream protocol: a fresh stream of the records (as
        :meth:`to_batches`), so ``pa.table(scan)``, ``pa.RecordBatchReader.from_stream(scan)``,
        ``polars.from_arrow(scan)`` and DuckDB's ``FROM scan`` read it without glue.
        ``requested_schema``: a schema capsule the stream is cast to, if Arrow can."""
        return self.to_batches().__arrow_c_stream__(requested_schema)

    def read_subquery(self, sub: SubQuery) -> pa.Table:
        """The records of one leaf's sub-query (the Spark reader reads one per task)."""
        try:
            return self._wanted(self.executor.read_subquery(
                sub, self.read, self.iterators, self.query_filter, self.request.block_cache))
        except ObjectNotFoundError:
            self.explain_missing()
            raise

    run = to_arrow
    """The name of :meth:`to_arrow` before the scan object (``PreparedQuery.run``)."""
    reader = to_batches
    """The name of :meth:`to_batches` before the scan object (``PreparedQuery.reader``)."""

    # ---- containers ---------------------------------------------------------------------------
    def to_pandas(self) -> pd.DataFrame:
        """The records as a pandas DataFrame (a default RangeIndex, rows in key order). Needs
        pandas (``ImportError`` from pyarrow without it)."""
        return self.to_arrow().to_pandas()

    def to_polars(self, lazy: bool = False) -> Any:
        """The records as a Polars DataFrame; with ``lazy``, a LazyFrame over this scan's
        version (a Polars IO plugin: projection, row-key predicates and row limits reach
        Sediment; each ``collect`` reads afresh from that version). Raises
        MissingDependencyError without polars (the ``polars`` extra)."""
        from sediment.query.engines import polars_frame

        return polars_frame(self, lazy)

    def to_duckdb(self, con: Any, name: str) -> Any:
        """Register ``name`` in the DuckDB connection ``con``: a view of this scan's records
        at its version, re-queryable, reading nothing until queried; each DuckDB query reads
        only the columns it needs and its key filters narrow the leaves, files and row groups
        read (see :mod:`sediment.query.duckdb_view`). Returns ``con``."""
        from sediment.query.duckdb_view import register_view

        register_view(self, con, name)
        return con

    def register_datafusion(self, ctx: Any, name: str) -> Any:
        """Register ``name`` in the DataFusion ``SessionContext`` ``ctx``: this scan's
        records, read once, here (DataFusion calls no Python per scan), one DataFusion
        partition per group of batches. Returns ``ctx``."""
        from sediment.query.engines import register_datafusion

        register_datafusion(self, ctx, name)
        return ctx

    def plan_files(self) -> list[PlannedFile]:
        """The data files this scan reads, one :class:`~sediment.query.engines.PlannedFile`
        per (leaf, file), in key order: what an engine that reads Parquet itself needs to give
        the same answer (restrict to the region and ranges, merge the flagged leaves, apply
        the iterators, then the filter)."""
        from sediment.query.engines import plan_files

        try:
            return plan_files(self)
        except ObjectNotFoundError:
            self.explain_missing()  # an expired version's files: say so
            raise

    def again(self, request: ReadRequest) -> Scan:
        """A fresh scan of ``request`` through this scan's table (its outputs that read
        again use it). SedimentError when the scan was made without a table."""
        if self.source is None:
            from sediment.errors import SedimentError

            raise SedimentError("this scan was made without its table: it cannot read again "
                                "(make it with Table.prepare)")
        return self.source.prepare(request)

    def __repr__(self) -> str:
        name = self.source.name if self.source is not None else "?"
        return (f"Scan(table={name!r}, version={self.plan.version}, "
                f"leaves={len(self.plan.subqueries)}, columns={self.wanted!r})")
