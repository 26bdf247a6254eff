"""Query preparation: from a state and a query's arguments to what the executor runs.

One :class:`PreparedQuery` serves every reader of a table (``Table.query``/``scan``/``plan``,
the Spark data source's per-leaf reads, dumps), so they check columns, pick iterators and
choose the columns to read the same way. Preparing is pure: a function of the state, the
arguments and an executor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sediment.core.state import TableState
from sediment.errors import ObjectNotFoundError, QueryError
from sediment.iterators.base import RecordIterator
from sediment.properties import defaults
from sediment.query.executor import Executor
from sediment.query.filters import QueryFilter, compile_filter, region_meets
from sediment.query.footers import FooterCache
from sediment.query.planner import QueryPlan, SubQuery, normalise_ranges, plan_query
from sediment.schema import Schema
from sediment.storage.base import ObjectStore


def table_iterators(state: TableState, table: str) -> list[RecordIterator]:
    """The iterators every read of the table applies: the compaction iterators (so answers do
    not depend on how far compaction got), then the query-time ones."""
    from sediment.iterators import iterators_from_property

    assert state.schema is not None
    props = {**defaults(), **state.properties}
    its = iterators_from_property(str(props["compaction.iterators"]), state.schema,
                                  where=f"table {table} property compaction.iterators")
    its += iterators_from_property(str(props["query.iterators"]), state.schema,
                                   where=f"table {table} property query.iterators")
    return its


@dataclass(frozen=True, slots=True)
class PreparedQuery:
    """A planned query: the plan, the columns to read and to return, the iterators."""

    executor: Executor
    plan: QueryPlan
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
    """The query-time ``filter=`` expression, applied after the iterators (its columns are
    in ``read``)."""

    def explain_missing(self) -> None:
        """Raise the better error for a missing data file, if any (see ``on_missing``)."""
        if self.on_missing is not None:
            self.on_missing()

    def run(self) -> pa.Table:
        """Every record, sorted by key."""
        try:
            return self.executor.run(self.plan, self.read, self.iterators,
                                     self.query_filter).select(self.wanted)
        except ObjectNotFoundError:
            self.explain_missing()
            raise

    def reader(self) -> pa.RecordBatchReader:
        """The records streamed in bounded memory."""
        out_schema = pa.schema([self.schema.field(c) for c in self.wanted])

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                for b in self.executor.stream(self.plan, self.read, self.iterators,
                                              self.query_filter):
                    yield b.select(self.wanted)
            except ObjectNotFoundError:
                self.explain_missing()
                raise

        return pa.RecordBatchReader.from_batches(out_schema, batches())

    def read_subquery(self, sub: SubQuery) -> pa.Table:
        """The records of one leaf's sub-query (the Spark reader reads one per task)."""
        try:
            return self.executor.read_subquery(sub, self.read, self.iterators,
                                               self.query_filter).select(self.wanted)
        except ObjectNotFoundError:
            self.explain_missing()
            raise


def prepare_query(state: TableState, executor: Executor, table: str, *,
                  keys: Sequence[Any] | None = None, ranges: Any = None,
                  columns: Sequence[str] | None = None,
                  iterators: Sequence[Any] | None = None,
                  on_missing: Callable[[], None] | None = None,
                  filter: Any = None) -> PreparedQuery:  # noqa: A002 (the public name)
    """Check the columns, gather the iterators (the table's, then ``iterators``) and plan.
    ``on_missing``: see :attr:`PreparedQuery.on_missing`. ``filter``: a pyarrow compute
    expression applied to the merged records after the iterators; its row-key constraints
    narrow the plan, and with record-by-record iterators its other constraints prune row
    groups by statistics (see sediment.query.filters)."""
    from sediment.iterators import iterator_from_config
    from sediment.iterators.base import AgeOff, RowFilter

    schema = state.schema
    assert schema is not None
    wanted = list(columns) if columns is not None else schema.field_names
    for c in wanted:
        if c not in schema.field_names:
            raise QueryError(f"table {table} has no column {c!r} "
                             f"(columns: {', '.join(schema.field_names)})")
    its = table_iterators(state, table)
    for it in iterators or ():
        its.append(it if isinstance(it, RecordIterator) else iterator_from_config(it, schema))
    extra = set().union(*(it.fields() for it in its)) if its else set()
    query_filter = None
    if filter is not None:
        query_filter = compile_filter(
            filter, schema, table,
            record_by_record=all(isinstance(it, AgeOff | RowFilter) for it in its))
        extra |= set(query_filter.fields)
    read = [c for c in schema.field_names if c in wanted or c in schema.key_names or c in extra]
    asked = normalise_ranges(state, keys, ranges, table)
    narrow = query_filter.key_ranges if query_filter is not None else None
    plan = plan_query(state, narrow if asked is None and narrow is not None else asked)
    if asked is not None and narrow is not None:
        # both: the asked ranges drive the reads; the filter's drop the leaves it rules out
        plan = QueryPlan(plan.version, tuple(s for s in plan.subqueries
                                             if region_meets(s.region, narrow)))
    if query_filter is not None and query_filter.keys_only and asked is None:
        # the plan reads exactly the rows the filter passes (row keys are never null, and
        # iterators keep every record's row key): applying it again would change nothing
        query_filter = None
    return PreparedQuery(executor, plan, schema, read, wanted, its, on_missing, query_filter)


class ExecutorCache:
    """One executor (with its footer and key-filter caches) per table handle, rebuilt when the
    properties it is built from change: nobody has to remember to invalidate it."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        self._lock = threading.Lock()
        self._current: tuple[tuple[Any, ...], Executor] | None = None

    def get(self, state: TableState) -> Executor:
        assert state.schema is not None
        props = {**defaults(), **state.properties}
        key = (state.schema.row_key_names[0], state.schema.to_arrow(),
               int(props["query.footer_cache_files"]), int(props["query.key_filter_cache_bytes"]),
               int(props["query.threads"]))
        with self._lock:
            if self._current is not None and self._current[0] == key:
                return self._current[1]
        footers = FooterCache(self.objects, key[0], key[2], key[3])
        executor = Executor(self.objects, state.schema, footers, key[4])
        with self._lock:
            if self._current is None or self._current[0] != key:
                self._current = (key, executor)
            return self._current[1]
