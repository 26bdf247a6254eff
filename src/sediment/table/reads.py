"""Reading a table: every read is ``prepare(...)`` and one output of the scan (part of the
:class:`~sediment.table.Table` façade).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sediment.core.state import TableState
from sediment.errors import QueryError

if TYPE_CHECKING:
    import pandas as pd

    from sediment.query.engines import PlannedFile
    from sediment.query.inspect import TableInspector
    from sediment.query.planner import QueryPlan
    from sediment.query.request import ReadRequest
    from sediment.query.scan import Scan

from sediment.table.base import TableBase


class TableReads(TableBase):
    """prepare and the reads over it: query, scan, plan, the conversions and engines."""

    def _query_state(self, version: int | str | None) -> TableState:
        """The state a query reads: the version asked for, or the head this process shares
        (its own commits at once, others' within ``state.cache.refresh_seconds``).
        VersionExpiredError for a version whose log was pruned."""
        if version is not None:
            return self.state(version)
        return self._handle.states.cached_head()

    def prepare(self, keys: Sequence[Any] | ReadRequest | None = None, ranges: Any = None, *,
                columns: Sequence[str] | None = None, version: int | str | None = None,
                iterators: Sequence[Any] | None = None,
                filter: Any = None) -> Scan:  # noqa: A002 (the public name)
        """A read planned and ready to run: a :class:`~sediment.query.scan.Scan` whose
        outputs (``to_arrow``, ``to_batches``, ``to_pandas``, ``to_polars``, ``to_duckdb``,
        ``register_datafusion``, ``plan_files``, the plan, the Arrow PyCapsule stream) all
        give the same records. Every read of a table goes through here: :meth:`query`,
        :meth:`scan` and the conversions, the Spark reader, the Flight service, dumps.

        Takes a :class:`~sediment.query.request.ReadRequest` (``table.prepare(request)``) or
        the read's arguments, as :meth:`query` takes them (not both: QueryError).
        ``filter``: a pyarrow compute expression (``pc.field("v") > 3``) on any columns, the
        same condition as ``--where`` text (``"v > 3"``, parsed against the table's schema),
        or a request's JSON filter tree, applied to the merged records after the iterators;
        see :meth:`query`.

        Raises QueryError: a bad key, range, column or filter (one naming an unknown column
        names it; WhereError for filter text that does not parse, naming the table and the
        position; FilterError for a malformed filter tree); VersionExpiredError or a
        version/tag error for a version that cannot be read; CorruptMetadataError,
        ObjectNotFoundError: damaged or missing data files.
        """
        from sediment.query.request import request_of

        request = request_of(keys, ranges, columns=columns, version=version,
                             iterators=iterators, filter=filter)
        if request.changes is not None:
            raise QueryError(f"table {self.name}: a changes request is read with "
                             f"table.changes_of(request), not prepared as a scan")
        return self._prepare_at(self._query_state(request.version), request)

    def _prepare_at(self, state: TableState, request: ReadRequest) -> Scan:
        """:meth:`prepare` of ``request`` on ``state`` (the head this process shares, a
        version loaded for it, or a state the change feed replayed)."""
        from sediment.query.expiry import check_files
        from sediment.query.prepare import prepare_query
        from sediment.query.scan import ScanSource

        source = ScanSource(self.name, self._handle.objects, self.prepare)
        executors = self._handle.executors
        # A file found missing on read is judged against the head then (GC may have run
        # since the scan was prepared, at the head of that time too): VersionExpiredError,
        # or the missing-file error when the head still knows the file (lost some other way).
        files: set[str] = set()
        states = self._handle.states

        def on_missing() -> None:
            check_files(states, self.name, state, files)

        if request.version is None:
            scan = prepare_query(state, executors.get(state), self.name, request,
                                 source=source, iterators=executors.iterators(state, self.name),
                                 plans=executors.plans(state), on_missing=on_missing)
            files.update(scan.plan.files)
            return scan
        # An old version: the files the plan reads must not have been collected by GC (one
        # set lookup per file against the head)
        scan = prepare_query(state, self._handle.executors.get(state), self.name, request,
                             on_missing=on_missing, source=source)
        files.update(scan.plan.files)
        check_files(states, self.name, state, files)
        return scan

    def _pin(self, version: int | str | None) -> int:
        """The version an engine route pins: ``version`` resolved, or the head now."""
        v = self.resolve_version(version)
        return self.version if v is None else v

    # Every read below is ``prepare(...)`` and one output of the scan: the arguments are
    # :meth:`query`'s (keys, ranges, columns, version: a number or a tag, filter), and each
    # raises what :meth:`prepare` raises, then what reading raises (see ``Scan``).
    def query(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
              columns: Sequence[str] | None = None, version: int | str | None = None,
              iterators: Sequence[Any] | None = None,
              filter: Any = None) -> pa.Table:  # noqa: A002 (the public name)
        """Records with the given exact row keys and/or in the given ranges, sorted by key.

        ``keys``: row-key values (or tuples; a shorter tuple is a prefix). ``ranges``: Range
        values. Neither: the whole table. ``version``: read an older version (a number or a
        tag); VersionExpiredError when it is past ``retention.seconds`` and GC deleted its
        files or pruning its log (a file lost any other way stays ObjectNotFoundError).
        ``filter``: a pyarrow compute expression on any columns (``pc.field("v") > 3``) or
        ``--where`` text (``"v > 3"``, the syntax of :mod:`sediment.query.where`), kept
        for the merged records after the iterators (the ``filter`` iterator property is the
        configured, compaction-time one). Its constraints on the first row-key field narrow
        the leaves, files and row groups read; with record-by-record iterators (none,
        filters, age-off) its other constraints prune row groups by Parquet statistics. The
        columns it needs are read even when not in ``columns``.

        Raises as :meth:`prepare`.
        """
        return self.prepare(keys, ranges, columns=columns, version=version,
                            iterators=iterators, filter=filter).to_arrow()

    def scan(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
             columns: Sequence[str] | None = None, version: int | str | None = None,
             iterators: Sequence[Any] | None = None,
             filter: Any = None) -> pa.RecordBatchReader:  # noqa: A002 (the public name)
        """Like :meth:`query`, streamed as a RecordBatchReader in bounded memory
        (``prepare(...).to_batches()``). Raises as :meth:`prepare`."""
        return self.prepare(keys, ranges, columns=columns, version=version,
                            iterators=iterators, filter=filter).to_batches()

    def plan(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
             version: int | str | None = None,
             filter: Any = None) -> QueryPlan:  # noqa: A002 (the public name)
        """The query plan (leaves and files a query would read), for inspection; a
        ``filter`` narrows it by its row-key constraints. Raises as :meth:`prepare`."""
        return self.prepare(keys, ranges, version=version, filter=filter).plan

    def to_arrow(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
                 columns: Sequence[str] | None = None, version: int | str | None = None,
                 filter: Any = None) -> pa.Table:  # noqa: A002 (the public name)
        """The records as one ``pyarrow.Table``: :meth:`query`'s answer, under the name
        Arrow users look for (``Scan.to_arrow``)."""
        return self.prepare(keys, ranges, columns=columns, version=version,
                            filter=filter).to_arrow()

    def to_pandas(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
                  columns: Sequence[str] | None = None, version: int | str | None = None,
                  filter: Any = None) -> pd.DataFrame:  # noqa: A002 (the public name)
        """The records as a pandas DataFrame, rows in key order (``Scan.to_pandas``): a
        DataFrame user never goes around the merge (reading the data files directly
        double-counts records). Needs pandas."""
        return self.prepare(keys, ranges, columns=columns, version=version,
                            filter=filter).to_pandas()

    def to_batches(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
                   columns: Sequence[str] | None = None, version: int | str | None = None,
                   filter: Any = None) -> pa.RecordBatchReader:  # noqa: A002
        """The records as a ``pyarrow.RecordBatchReader`` streamed leaf by leaf in key order
        in bounded memory (``Scan.to_batches``), for answers larger than memory or engines
        that read Arrow streams."""
        return self.prepare(keys, ranges, columns=columns, version=version,
                            filter=filter).to_batches()

    def to_polars(self, lazy: bool = False, keys: Sequence[Any] | None = None,
                  ranges: Any = None, columns: Sequence[str] | None = None,
                  version: int | str | None = None,
                  filter: Any = None) -> Any:  # noqa: A002 (the public name)
        """:meth:`query`'s answer as a Polars DataFrame; with ``lazy``, a LazyFrame over the
        version pinned now (``Scan.to_polars``). MissingDependencyError without polars."""
        return self.prepare(keys, ranges, columns=columns, version=self._pin(version),
                            filter=filter).to_polars(lazy)

    def to_duckdb(self, con: Any, name: str, version: int | str | None = None) -> Any:
        """Register ``name`` in the DuckDB connection ``con``: a view of the table at
        ``version`` (None: the head now, pinned), equal to :meth:`query` there, reading
        nothing until queried (``Scan.to_duckdb``). Returns ``con``."""
        return self.prepare(version=self._pin(version)).to_duckdb(con, name)

    def register_datafusion(self, ctx: Any, name: str, version: int | str | None = None, *,
                            keys: Sequence[Any] | None = None, ranges: Any = None,
                            columns: Sequence[str] | None = None,
                            filter: Any = None) -> Any:  # noqa: A002 (the public name)
        """Register ``name`` in the DataFusion ``SessionContext`` ``ctx``: :meth:`query`'s
        answer at ``version`` (None: the head now), read once, here
        (``Scan.register_datafusion``). Returns ``ctx``."""
        return self.prepare(keys, ranges, columns=columns, version=self._pin(version),
                            filter=filter).register_datafusion(ctx, name)

    def plan_files(self, keys: Sequence[Any] | None = None, ranges: Any = None,
                   version: int | str | None = None,
                   filter: Any = None) -> list[PlannedFile]:  # noqa: A002
        """The data files a query reads at ``version`` (None: the head), one
        :class:`~sediment.query.engines.PlannedFile` per (leaf, file), in key order: what an
        engine that reads Parquet itself needs (``Scan.plan_files``)."""
        return self.prepare(keys, ranges, version=self._pin(version),
                            filter=filter).plan_files()

    @property
    def inspect(self) -> TableInspector:
        """Metadata as Arrow tables: ``files()``, ``partitions()``, ``history()``,
        ``jobs()`` (see :class:`~sediment.query.inspect.TableInspector`)."""
        from sediment.query.inspect import TableInspector

        return TableInspector(self)
