"""Query preparation: from a state and a read request to the scan the executor runs.

One :class:`~sediment.query.scan.Scan` serves every reader of a table (``Table.query``/
``scan``/``plan`` and the conversions, the Spark data source's per-leaf reads, the Flight
service, dumps), so they check columns, pick iterators and choose the columns to read the
same way. Preparing is a function of the state, the request and an executor; it reads
nothing, except where a filter pins a column with bloom filters: then the files' filters (and,
on merged tables, the rows they keep) are read to narrow the plan (sediment.query.skipindex).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sediment.core.state import TableState
from sediment.errors import QueryError
from sediment.iterators.base import RecordIterator
from sediment.properties import defaults
from sediment.query.blocks import configure
from sediment.query.executor import Executor
from sediment.query.filters import compile_filter, region_meets
from sediment.query.footers import FooterCache
from sediment.query.planner import QueryPlan, normalise_ranges, plan_query
from sediment.query.request import ReadRequest
from sediment.query.scan import Scan, ScanSource
from sediment.query.skipindex import narrow_plan
from sediment.query.state_plans import StatePlans
from sediment.query.wire import from_wire
from sediment.storage import diskcache
from sediment.storage.base import ObjectStore


def table_iterators(state: TableState, table: str) -> list[RecordIterator]:
    """The iterators every read of the table applies: the merge rule (``merge``), then the
    compaction iterators (both also run by compaction, so answers do not depend on how far
    it got), then the query-time ones."""
    from sediment.iterators import iterators_from_property
    from sediment.iterators.merge_rules import merge_rule_of

    assert state.schema is not None
    props = {**defaults(), **state.properties}
    rule = merge_rule_of(props, state.schema, table)
    its = [rule] if rule is not None else []
    its += iterators_from_property(str(props["compaction.iterators"]), state.schema,
                                   where=f"table {table} property compaction.iterators")
    its += iterators_from_property(str(props["query.iterators"]), state.schema,
                                   where=f"table {table} property query.iterators")
    return its


PreparedQuery = Scan
"""The scan object's name before it owned its outputs (kept for callers of that name)."""


def check_columns_once(columns: Sequence[str], where: str) -> None:
    """QueryError after ``where`` when ``columns`` names one twice: an answer's columns are
    unique by name, as an ingest's fields are."""
    for i, c in enumerate(columns):
        if c in columns[:i]:
            raise QueryError(f"{where}: column {c!r} is asked for twice "
                             f"(columns={list(columns)!r}): name each column once")


def prepare_query(state: TableState, executor: Executor, table: str, request: ReadRequest, *,
                  on_missing: Callable[[], None] | None = None,
                  source: ScanSource | None = None,
                  iterators: list[RecordIterator] | None = None,
                  plans: StatePlans | None = None) -> Scan:
    """Check the columns, gather the iterators (the table's, merge rule included, unless the
    request is raw: a raw read is the records as stored, every write of a key that compaction
    has not merged yet; then the request's) and plan. ``on_missing``: see
    :attr:`Scan.on_missing`; ``source``: see :attr:`Scan.source`. The request's ``filter``
    (an expression, ``--where`` text or a wire tree) is applied to the merged records after
    the iterators; its row-key constraints narrow the plan, and with record-by-record
    iterators its other constraints prune row groups by statistics (see
    sediment.query.filters). ``iterators``: the table's iterators when the caller keeps
    them (:meth:`ExecutorCache.iterators`), else they are built from ``state``;
    ``plans``: what the caller keeps of ``state`` for its reads (:meth:`ExecutorCache.plans`:
    exact keys are planned from it, and the columns a plain read takes)."""
    from sediment.iterators import iterator_from_config
    from sediment.iterators.base import AgeOff, RowFilter

    schema = state.schema
    assert schema is not None
    columns, filter = request.columns, request.filter  # noqa: A001 (the public name)
    wanted = list(columns) if columns is not None else schema.field_names
    # a read without a filter or extra iterators reads the same columns for the same ones
    # asked, on a state: kept (checked when first asked)
    plain = plans is not None and filter is None and not request.iterators and \
        iterators is not None
    memo = (request.columns, request.raw) if plain else None
    read = plans.columns(memo) if plans is not None and memo is not None else None
    for c in wanted if read is None else ():
        if c not in schema.field_names:
            raise QueryError(f"table {table} has no column {c!r} "
                             f"(columns: {', '.join(schema.field_names)})")
    if read is None:
        check_columns_once(wanted, f"table {table}")
    its = [] if request.raw else list(table_iterators(state, table) if iterators is None
                                      else iterators)
    for it in request.iterators or ():
        its.append(it if isinstance(it, RecordIterator) else iterator_from_config(it, schema))
    extra = set().union(*(it.fields() for it in its)) if its else set()
    query_filter = None
    if filter is not None:
        if isinstance(filter, Mapping):  # the wire form's tree, typed by the table's schema
            filter = from_wire(dict(filter), schema.to_arrow())  # noqa: A001
        query_filter = compile_filter(
            filter, schema, table,
            record_by_record=all(isinstance(it, AgeOff | RowFilter) for it in its))
        extra |= set(query_filter.fields)
    asked = normalise_ranges(state, request.keys, request.ranges, table)
    narrow = query_filter.key_ranges if query_filter is not None else None
    plan = plans.plan(asked) if plans is not None and asked is not None and \
        narrow is None else None
    if plan is None:
        plan = plan_query(state, narrow if asked is None and narrow is not None else asked)
    if asked is not None and narrow is not None:
        # both: the asked ranges drive the reads; the filter's drop the leaves it rules out
        plan = QueryPlan(plan.version, tuple(s for s in plan.subqueries
                                             if region_meets(s.region, narrow)))
    if query_filter is not None and query_filter.keys_only and asked is None:
        # the plan reads exactly the rows the filter passes (row keys are never null, and
        # iterators keep every record's row key): applying it again would change nothing
        query_filter = None
    if query_filter is not None:  # the filter's skip index (query/skipindex.py)
        plan, query_filter = narrow_plan(state, plan, executor, query_filter, its, table)
    if read is None:
        if state.deletions:  # what they delete is judged on the keys and their filters' fields
            extra |= executor.deletes.fields(state.deletions)
        read = [c for c in schema.field_names
                if c in wanted or c in schema.key_names or c in extra]
        if plans is not None and memo is not None:
            plans.keep_columns(memo, read)
    return Scan(executor, plan, schema, read, wanted, its, on_missing, query_filter, request,
                source)


class ExecutorCache:
    """One executor (with its footer and key-filter caches) per table handle, rebuilt when the
    properties it is built from change: nobody has to remember to invalidate it."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        self._lock = threading.Lock()
        self._current: tuple[tuple[Any, ...], Executor] | None = None
        self._footers: tuple[tuple[Any, ...], FooterCache] | None = None
        self._last: tuple[TableState, Executor] | None = None
        self._last_iterators: tuple[TableState, str, list[RecordIterator]] | None = None
        self._last_plans: StatePlans | None = None

    def get(self, state: TableState) -> Executor:
        """The executor of ``state`` (the last state's again at once: a head shared by many
        reads is one object)."""
        last = self._last
        if last is not None and last[0] is state:
            return last[1]
        executor = self._get(state)
        self._last = (state, executor)
        return executor

    def iterators(self, state: TableState, table: str) -> list[RecordIterator]:
        """:func:`table_iterators` of ``state``, kept for the last state read (iterators
        hold their configuration only, so reads share them)."""
        last = self._last_iterators
        if last is not None and last[0] is state and last[1] == table:
            return last[2]
        its = table_iterators(state, table)
        self._last_iterators = (state, table, its)
        return its

    def plans(self, state: TableState) -> StatePlans:
        """What the reads of ``state`` keep of it (:class:`StatePlans`), for the last state
        read (the head, shared by every reader until it is re-read)."""
        last = self._last_plans
        if last is not None and last.state is state:
            return last
        made = StatePlans(state)
        self._last_plans = made
        return made

    def _get(self, state: TableState) -> Executor:
        assert state.schema is not None
        props = {**defaults(), **state.properties}
        fkey = (state.schema.row_key_names[0], int(props["query.footer_cache_files"]),
                int(props["query.key_filter_cache_bytes"]), state.name)
        # the schema and its history decide how files are read (a version before a schema
        # change reads with its own): an executor per schema, one footer cache for them all
        key = (fkey, state.schema, state.schemas, int(props["query.threads"]))
        blocks = configure(int(props["query.block_cache_bytes"]))
        disk = diskcache.configure(int(props["query.disk_cache_bytes"])) \
            if self.objects.cache_name("") is not None else None
        with self._lock:
            if self._footers is not None:
                self._footers[1].disk = disk  # the last state read sets it, as for blocks
            if self._current is not None and self._current[0] == key and \
                    self._current[1].blocks is blocks:
                return self._current[1]
            if self._footers is None or self._footers[0] != fkey:
                self._footers = (fkey, FooterCache(self.objects, *fkey))
            footers = self._footers[1]
            footers.disk = disk
        executor = Executor(self.objects, state.schema, footers, key[3], state.schemas, blocks)
        with self._lock:
            if self._current is None or self._current[0] != key or \
                    self._current[1].blocks is not blocks:
                self._current = (key, executor)
            return self._current[1]
