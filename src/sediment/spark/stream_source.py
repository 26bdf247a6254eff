"""``spark.readStream.format("sediment")``: a table's change feed as a Structured Streaming
source (``SedimentDataSource.streamReader``).

Offsets are versions (sediment.spark.stream_offsets). Without option ``startingVersion`` the
stream first emits the table's content at the version current when it starts, as inserts,
then the changes of every later version; ``startingVersion`` (a number, a tag or ``latest``)
starts with the changes of that version (``changes(startingVersion - 1, ...)``), ``latest``
with what is committed after the start. ``readChangeFeed`` true emits change rows (the
table's columns, ``_change_type``, ``_commit_version``, ``_commit_timestamp``, as
``Table.changes``); otherwise the records inserted or upserted (``insert`` and
``update_postimage`` rows, without the change columns), and a version that deletes records
fails the query naming it, unless ``ignoreDeletes`` is true (then deletes are left out, by
request). Admission: ``maxRecordsPerTrigger`` (records counted by the files a version adds)
and ``maxVersionsPerTrigger`` take whole versions, at least one per batch (soft limits: the
initial content counts as one version, read whole); ``Trigger.AvailableNow`` reads what
exists when the query starts, then stops.

The source holds an onward pin (``stream-<table>-<stream id>``, option ``pin``, default
true) on the version it has committed, renewed for ``pinTtlSeconds`` (default a week) as
it runs and moved forward in ``commit(end)``: GC and prune keep what a stopped stream still
needs while it is down for less than that. A checkpoint older than what the table keeps
fails with VersionExpiredError saying how to restart.

The driver plans; tasks read. The content at the start is read per leaf (cut into key
pieces as the batch reader cuts big leaves), changes per group of whole versions (several
groups per batch), each task reopening the store from the options as the batch reader does.
The stream's schema is the table's when the query starts: rows of later versions are shaped
by it, matched by field id (a renamed column keeps its stream name, an added one is left out,
a dropped one is null); a query restarted, from its checkpoint or a new one, takes the
schema at its restart (Spark asks a source for its schema before it reads a checkpoint).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sediment.errors import QueryError, VersionExpiredError
from sediment.query.blocks import use_worker_bound
from sediment.query.change_rows import (
    CHANGE_COLUMNS,
    CHANGE_FIELDS,
    CHANGE_TYPE,
    COMMIT_VERSION,
    DELETE,
    INSERT,
    POSTIMAGE,
    labelled,
)
from sediment.query.request import ReadRequest
from sediment.schema_changes import conformed
from sediment.spark import tasks
from sediment.spark.sparktypes import batch_schema, cast_for_spark
from sediment.spark.stream_offsets import (
    DATA_KINDS,
    STREAM_OPTIONS,
    StreamOffset,
    VersionWeight,
    admit,
    given,
    group_versions,
    stream_options,
)

_WINDOW = 256
"""Log entries read at once while admitting versions."""


def stream_arrow_schema(options: Mapping[str, str], table: Any, arrow: pa.Schema) -> pa.Schema:
    """The schema of ``load()`` (``arrow``: the table's columns the options ask for), with
    the change columns when option ``readChangeFeed`` is true. With stream options given,
    they are checked here, at ``load()``: QueryError naming the table and the option (a
    value of the wrong kind, a ``startingVersion`` after the latest version),
    TagNotFoundError for an unknown tag."""
    if not any(k.lower() in given(options) for k in STREAM_OPTIONS):
        return arrow
    how = stream_options(options)
    if isinstance(how.starting, int) and how.starting > table.version + 1:
        raise QueryError(f"the sediment stream source on table {table.name}: option "
                         f"startingVersion={how.starting} is after the table's latest version "
                         f"{table.version} (use latest for only what is committed from now on)")
    if isinstance(how.starting, str) and how.starting != "latest":
        table.tag_version(how.starting)  # TagNotFoundError naming the tag and the table
    return pa.schema([*arrow, *CHANGE_FIELDS]) if how.change_feed else arrow


def refuse_stream_options(options: Mapping[str, str]) -> None:
    """QueryError for stream options given to a batch read (``spark.read``): its changes are
    ``Table.changes``; a batch read reads one version."""
    named = [k for k in STREAM_OPTIONS if k.lower() in given(options)]
    if named:
        raise QueryError(f"the sediment data source reading table {options.get('table')}: "
                         f"option {named[0]} is for spark.readStream (a batch read of changes "
                         f"is Table.changes)")


def expired(error: VersionExpiredError, table: str, version: int) -> VersionExpiredError:
    """``error`` with the way out for a stream whose position the table no longer keeps."""
    return VersionExpiredError(
        f"{error}. The stream on table {table} is at version {version}, which the table no "
        f"longer keeps: restart it with a new checkpoint location and option "
        f"startingVersion=latest (only what is committed from then on), or without "
        f"startingVersion (the current content first). A running stream pins its version "
        f"(option pin, renewed for pinTtlSeconds) so a shorter stop does not lose it")


@dataclass
class SnapshotPartition(InputPartition):
    """One piece of one leaf of the content at ``version`` (committed at ``time``): the
    batch reader's read ``request`` for it (sediment.spark.datasource.LeafPartition)."""

    leaf_id: str
    request: str
    version: int
    time: float


@dataclass
class ChangesPartition(InputPartition):
    """The changes of versions ``(start, end]``."""

    start: int
    end: int


class SedimentStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream source of one table (module docstring). Spark pickles it to the tasks:
    it holds options and schemas; the driver's caches start empty there."""

    def __init__(self, options: dict[str, str], schema: StructType, spec: dict[str, Any],
                 batch_reader: Callable[[dict[str, str], StructType], Any]) -> None:
        self.options = options
        self.spec = spec
        self.batch_reader = batch_reader
        """The batch reader's class (sediment.spark.datasource.SedimentReader): what plans
        the initial content's partitions."""
        self.name = options["table"]
        self.how = stream_options(options)
        self.struct = schema
        self.columns = [f.name for f in schema.fields]
        self.record_columns = [c for c in self.columns if c not in CHANGE_COLUMNS]
        self.arrow_schema = batch_schema(schema)
        table = tasks.open_table(self.spec, self.name)
        self.table_id = table.table_id
        self.start_schema = table.schema
        """The table's schema when the stream started: the shape of every row it emits."""
        self._weights: dict[int, VersionWeight] = {}
        self._until: int | None = None
        self._held: tuple[int, float] | None = None

    # ---- the driver ------------------------------------------------------------------------
    def _table(self) -> Any:
        tasks.trust_options(self.options)
        return tasks.open_table(self.spec, self.name, self.table_id)

    def _states(self) -> Any:
        from sediment.handle import handle_of

        return handle_of(self._table()).states

    def _pin_name(self, stream: str) -> str:
        return f"stream-{self.name[:96]}-{stream}"

    def _hold(self, offset: StreamOffset, *, move: bool = False) -> None:
        """Check the table still keeps ``offset``'s version and pin it (renewed once a
        quarter of the pin's time to live has passed, or moved when ``move``):
        VersionExpiredError with the restart advice when it is gone."""
        now = time.monotonic()
        ttl = self.how.pin_ttl_seconds
        if not move and self._held is not None and self._held[0] == offset.version \
                and now - self._held[1] < ttl / 4:
            return
        table = self._table()
        version = max(offset.version, 1)
        try:
            if self.how.pin:
                table.pin(self._pin_name(offset.stream), version, ttl, onward=True)
            else:
                table.state(version)
        except VersionExpiredError as e:
            raise expired(e, self.name, offset.version) from None
        self._held = (offset.version, now)

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's names)
        table = self._table()
        head = self._states().head().version
        stream = uuid.uuid4().hex[:16]
        start = self.how.starting
        if start is None:
            offset = StreamOffset(stream, head, snapshot=True)
        elif start == "latest":
            offset = StreamOffset(stream, head)
        else:
            v = table.tag_version(start) if isinstance(start, str) else start
            if v > head + 1:
                raise QueryError(f"the sediment stream source on table {self.name}: option "
                                 f"startingVersion={start} is after the table's latest "
                                 f"version {head}")
            offset = StreamOffset(stream, max(v - 1, 0))
        self._hold(offset)
        return offset.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        # Spark passes this back to latestOffset, or ReadAllAvailable when its trigger reads
        # everything: the options themselves hold both limits
        if self.how.max_records is not None:
            return ReadMaxRows(self.how.max_records)
        if self.how.max_versions is not None:
            return ReadMaxFiles(self.how.max_versions)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._until = self._states().head().version

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        begin = StreamOffset.from_json(start, self.name)
        self._hold(begin)  # a restart from a checkpoint: still kept? (and pinned again)
        head = self._states().head().version
        last = head if self._until is None else max(begin.version, min(head, self._until))
        every = isinstance(limit, ReadAllAvailable)
        end = admit(begin, self._weights_after(begin.version, last),
                    self._snapshot_records(begin.version) if begin.snapshot else 0,
                    None if every else self.how.max_records,
                    None if every else self.how.max_versions)
        return (begin if end == begin else end).to_json()

    def _weights_after(self, a: int, b: int) -> Iterator[VersionWeight]:
        """The weights of versions ``(a, b]``, in order, read from the log a window at a
        time as they are asked for (cached: versions never change)."""
        v = a + 1
        while v <= b:
            if v not in self._weights:
                hi = min(b, v - 1 + _WINDOW)
                for entry in self._states().log.read_after(v - 1, upto=hi):
                    t = entry.transaction
                    records = sum(r.records for r in getattr(t, "references", ()))
                    self._weights[entry.version] = VersionWeight(
                        entry.version, records if t.kind.startswith("add_files") else 0,
                        t.kind in DATA_KINDS)
            yield self._weights[v]
            v += 1

    def _snapshot_records(self, version: int) -> int:
        if version < 1:
            return 0
        state = self._states().load(version)
        return sum(records for _, records in state.partition_totals().values())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = StreamOffset.from_json(start, self.name)
        stop = StreamOffset.from_json(end, self.name)
        parts: list[InputPartition] = []
        if begin.snapshot:
            parts.extend(self._snapshot_parts(begin.version))
        weights = list(self._weights_after(begin.version, stop.version))
        target = int(self._table().properties["spark.read.target_partition_rows"])
        parts.extend(ChangesPartition(a, b) for a, b in group_versions(weights, target))
        return parts

    def _snapshot_parts(self, version: int) -> list[InputPartition]:
        """The batch reader's partitions of the content at ``version`` (per leaf, big leaves
        cut into key pieces)."""
        if version < 1:
            return []
        stream = {k.lower() for k in STREAM_OPTIONS}
        options = {k: v for k, v in self.options.items()
                   if k.lower() not in stream and k.lower() != "columns"}
        struct = StructType([f for f in self.struct.fields if f.name not in CHANGE_COLUMNS])
        batch = self.batch_reader({**options, "version": str(version)}, struct)
        committed = self._states().log.read(version).time
        return [SnapshotPartition(p.leaf_id, p.request, version, committed)
                for p in batch.partitions() if p.leaf_id]

    def commit(self, end: dict[str, Any]) -> None:
        done = StreamOffset.from_json(end, self.name)
        self._hold(done, move=True)
        for v in [v for v in self._weights if v <= done.version]:
            del self._weights[v]

    # ---- the tasks -------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        use_worker_bound()  # a Python worker among many: a small block cache
        if isinstance(partition, SnapshotPartition):
            yield from self._out(self._snapshot(partition))
            return
        assert isinstance(partition, ChangesPartition)
        try:
            for batch in self._table().changes(partition.start, partition.end):
                yield from self._out(self._shaped(pa.Table.from_batches([batch]), partition))
        except VersionExpiredError as e:
            raise expired(e, self.name, partition.start) from None

    def _snapshot(self, p: SnapshotPartition) -> pa.Table:
        prepared = self._table().prepare(ReadRequest.from_json(p.request))
        pieces = [prepared.read_subquery(s) for s in prepared.plan.subqueries
                  if s.leaf_id == p.leaf_id]
        if not pieces:
            return pa.table({})
        rows = pa.concat_tables(pieces)
        rows = rows.select(self.record_columns)
        return labelled(rows, 3, p.version, p.time) if self.how.change_feed else rows

    def _shaped(self, rows: pa.Table, p: ChangesPartition) -> pa.Table:
        """Change rows of versions up to ``p.end`` (shaped by its schema) as the stream's
        schema shapes them, then, without ``readChangeFeed``, its inserted and upserted
        records (QueryError for deletes unless ``ignoreDeletes``)."""
        if not set(self.record_columns) <= set(rows.column_names):
            from sediment.core.state import schema_in_force

            changes = rows.select(list(CHANGE_COLUMNS))
            head = self._states().head(refresh=False)
            then = schema_in_force(head.schemas, p.end) or head.schema
            rows = conformed(rows.drop_columns(list(CHANGE_COLUMNS)), then, self.start_schema)
            for f, col in zip(CHANGE_FIELDS, changes.columns, strict=True):
                rows = rows.append_column(f, col)
        if self.how.change_feed:
            return rows
        kind = rows.column(CHANGE_TYPE)
        deletes = pc.equal(kind, DELETE)
        if not self.how.ignore_deletes and pc.any(deletes).as_py():
            version = rows.filter(deletes).column(COMMIT_VERSION)[0].as_py()
            raise QueryError(
                f"the sediment stream source on table {self.name}: version {version} deletes "
                f"records, which a stream without readChangeFeed cannot emit: set option "
                f"readChangeFeed=true to receive them as change rows (_change_type "
                f"'delete'), or ignoreDeletes=true to leave deletes out")
        return rows.filter(pc.is_in(kind, pa.array([INSERT, POSTIMAGE])))

    def _out(self, rows: pa.Table) -> Iterator[pa.RecordBatch]:
        if rows.num_rows:  # (an empty one may have no columns at all)
            yield from cast_for_spark(rows.select(self.columns), self.arrow_schema,
                                      self.name).to_batches(max_chunksize=100_000)
