"""``spark.read.format("sediment")`` and ``df.write.format("sediment")``: a Python data source.

Reading: options ``store`` (URI), ``table``, optional ``version`` or ``tag``, ``columns``
(comma-separated: the DataFrame's columns, all by default), ``leaves`` (comma-separated leaf
ids: only those leaves are read; what ``sediment.spark.read_table`` uses for the leaves Spark
does not read natively), ``pushdown`` (default ``false``,
see below) and S3 options (``endpoint_url``, ``region``, ``access_key_id``,
``secret_access_key``). One Spark partition per piece of each leaf with data: a leaf holding
more than the table property ``spark.read.target_partition_rows`` records is cut into key
sub-ranges at whole row keys from its files' exact samples (:func:`cut_keys`), so a heavy read
of a one-leaf table uses every core. Each partition carries its leaf and ranges, and a task
reads that leaf restricted to them as ``table.query`` would. With ``.option("pushdown",
"true")`` filters on the first row-key field (=, <, <=, >, >=, IN) are pushed down and become
query ranges, so a one-key query reads one sub-range of one leaf. The version is pinned when the
DataFrame is loaded (``load()``): every action on it, and every task, reads that one state (the
``version`` or ``tag`` option's, checked there: :func:`pinned_version`).

Pushdown is off by default because of Spark 4.3.0, not of this reader: ``PythonScanBuilder.
pushFilters`` stores the pushdown worker's result (the pickled read function, holding the
pickled reader, and the pickled partition list) on the ``PythonDataSourceV2`` shared by every
scan of the loaded relation (``ds.setReadInfo``), and a later scan that sends Python no filter
takes it from ``ds.getOrCreateReadInfo`` without calling Python at all. So after
``df.filter("key = 'a'").count()``, ``df.count()`` (or a query on a temp view of ``df``, or
``df.cache()``) reads only key ``a``'s partitions with the first scan's reader. Nothing in the
reused bytes tells the two scans apart, so no reader design fixes it: pushdown is for a
DataFrame loaded for one query. docs/howto/spark.md has the details.

Writing: each task validates, sorts and writes its rows as files cut at leaf boundaries; the
driver commits all files in one AddFiles transaction (abort deletes them). ``.mode("append")``
adds the records; ``.mode("overwrite")`` replaces every record of the table with them in that
one commit (an empty DataFrame leaves the table empty). Option ``write`` (:data:`WRITES`):
``append`` (the default) or ``upsert``: each record replaces every older record of its record
key, as ``Table.upsert`` does. Among the DataFrame's records of one key the last in the order
``collect()`` returns them wins: within a Spark partition by position (a task's sort is
stable), across partitions by partition index (the files' order in the commit, which is
the partitions' order, gives their sequences). The writer lives in ``sediment.spark.writer``;
``df.writeStream.format("sediment")``, the streaming sink, in ``sediment.spark.sink``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from sediment.core.regions import Range
from sediment.files.sample import cut_keys
from sediment.properties import bloom_columns, defaults
from sediment.query.blocks import use_worker_bound
from sediment.query.request import ReadRequest
from sediment.spark import tasks
from sediment.spark.option_names import check_option_names
from sediment.spark.pushdown import bloom_filter, bloom_point, other_field, with_other_fields
from sediment.spark.sparktypes import batch_schema, cast_for_spark, spark_struct
from sediment.spark.tasks import TRUST_OPTION, trust_options
from sediment.spark.tasks import options_spec as _spec
from sediment.spark.writer import (
    WRITES,
    SedimentWriter,
    StagedMessage,
    check_fields,
    write_kind,
)

TARGET_ROWS = "spark.read.target_partition_rows"
__all__ = ["WRITES", "LeafPartition", "SedimentDataSource", "SedimentReader", "SedimentWriter",
           "StagedMessage", "TRUST_OPTION", "base_request", "check_fields", "intersect",
           "pinned_version", "write_kind"]
"""(The writer's names live in ``sediment.spark.writer``; they are importable from here.)"""


def _columns(options: Mapping[str, str], names: list[str]) -> list[str]:
    """The ``columns`` option: the comma-separated columns the DataFrame has.

    Spark 4.3.0 asks a Python data source for every column of its schema whatever a query
    uses (no column pruning), and every column read crosses from the Python worker to the
    JVM, most of a read's cost: naming the columns a job needs is the pruning Spark does not
    do."""
    from sediment.errors import QueryError

    wanted = [c.strip() for c in options["columns"].split(",") if c.strip()]
    unknown = [c for c in wanted if c not in names]
    if unknown or not wanted or len(set(wanted)) != len(wanted):
        raise QueryError(f"option columns={options['columns']!r}: name each column once, "
                         f"from {', '.join(names)}"
                         + (f" (no column {unknown[0]!r})" if unknown else ""))
    return wanted


def base_request(options: Mapping[str, str]) -> ReadRequest:
    """The read the options ask for, its version not yet pinned: option ``request`` (a
    :class:`~sediment.query.request.ReadRequest`'s JSON: keys, ranges, columns, version or
    tag, filter, iterators), or options ``columns``, ``version`` and ``tag`` (a request of
    those). QueryError naming the table for both kinds at once; BadRequestError (a
    QueryError) for a request that is not one, naming the field."""
    from sediment.errors import QueryError

    if "request" not in options:
        return ReadRequest()
    clash = [k for k in ("version", "tag", "columns") if k in options]
    if clash:
        raise QueryError(f"the sediment data source reading table {options.get('table')}: "
                         f"give option request or option {clash[0]}, not both (the request "
                         f"holds its version and columns)")
    return ReadRequest.from_json(options["request"])


def pinned_version(options: Mapping[str, str], table: Any) -> int:
    """The version a read of ``table`` pins: option ``version`` (a version number), option
    ``tag`` (a tag name), the version or tag of option ``request``, or the head now.
    QueryError (naming the table and the option) for both options at once, a version that is
    no number, or one the table does not have; TagNotFoundError for an unknown tag: never a
    raw ``ValueError``."""
    from sediment.errors import QueryError

    name = options.get("table", table.name)
    asked = base_request(options).version
    if isinstance(asked, str):
        return int(table.tag_version(asked))
    if asked is not None:
        table.state(asked)  # QueryError naming the table for a version it does not have
        return int(asked)
    if "version" in options and "tag" in options:
        raise QueryError(f"the sediment data source reading table {name}: give option "
                         f"version or option tag, not both")
    if "tag" in options:
        return int(table.tag_version(options["tag"]))
    if "version" not in options:
        return int(table.version)
    text = options["version"].strip()
    if not text.isdigit():
        raise QueryError(f"the sediment data source reading table {name}: option "
                         f"version={options['version']!r} is not a version number (a tag goes "
                         f"in option tag)")
    table.state(int(text))  # QueryError naming the table for a version it does not have
    return int(text)


class SedimentDataSource(DataSource):
    """The ``sediment`` format."""

    @classmethod
    def name(cls) -> str:
        return "sediment"

    def schema(self) -> StructType:
        check_option_names(self.options, "read")
        trust_options(self.options)
        table = tasks.open_table(_spec(self.options), self.options["table"])
        # Spark keeps this instance (pickled after schema()) for the DataFrame's lifetime:
        # every action on the DataFrame reads the version current at load() (or the one its
        # options name, checked here so that load() refuses a bad one).
        self.pinned_version = pinned_version(self.options, table)
        arrow = table.schema.to_arrow()
        asked = base_request(self.options).columns
        if "columns" in self.options:
            arrow = pa.schema([arrow.field(c) for c in _columns(self.options, arrow.names)])
        if "request" in self.options:  # checked as a query checks it, at load()
            table.prepare(base_request(self.options).replace(version=self.pinned_version))
        if asked is not None:
            arrow = pa.schema([arrow.field(c) for c in asked])
        from sediment.spark.stream_source import stream_arrow_schema

        return spark_struct(stream_arrow_schema(self.options, table, arrow))

    def reader(self, schema: StructType) -> DataSourceReader:
        from sediment.spark.stream_source import refuse_stream_options

        refuse_stream_options(self.options)
        trust_options(self.options)
        options = dict(self.options)
        pinned = getattr(self, "pinned_version", None)
        if pinned is not None and "request" in options:
            options["request"] = base_request(options).replace(
                version=pinned).to_json_text()
        elif pinned is not None:
            options.pop("tag", None)
            options["version"] = str(pinned)
        return SedimentReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's)
        """``spark.readStream.format("sediment")``: sediment.spark.stream_source."""
        from sediment.spark.stream_source import SedimentStreamReader

        return SedimentStreamReader(dict(self.options), schema, _spec(self.options),
                                    SedimentReader)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        from sediment.ingest.standard import verb_of

        check_option_names(self.options, "write")
        writer = SedimentWriter(dict(self.options), overwrite=overwrite)
        check_fields(tasks.open_table(writer.spec, writer.name, writer.table_id), schema,
                     verb_of(writer.upsert))
        return writer

    def streamWriter(self, schema: StructType, overwrite: bool  # noqa: N802 (Spark API)
                     ) -> DataSourceStreamArrowWriter:
        from sediment.ingest.standard import verb_of
        from sediment.spark.sink import SedimentStreamWriter

        check_option_names(self.options, "stream write")
        writer = SedimentStreamWriter(dict(self.options), overwrite=overwrite)
        check_fields(tasks.open_table(writer.spec, writer.name, writer.table_id), schema,
                     verb_of(writer.upsert))
        return writer


@dataclass
class LeafPartition(InputPartition):
    """One leaf's records of the read ``request`` (a ReadRequest's JSON: the reader's read,
    its keys and ranges replaced by the ranges of this piece of the leaf; empty ``leaf_id``:
    nothing).

    The request travels with the partition so that ``read`` depends on nothing but it."""

    leaf_id: str
    request: str = ""


def _tighter(a: Range, b: Range, lower: bool) -> tuple[Any, bool]:
    """The tighter of two ranges' lower (or upper) bounds, as (key, inclusive).

    Bounds are prefixes: an inclusive bound shorter than the other, equal on its length,
    admits everything the longer one does (and more), so the longer is tighter; an exclusive
    shorter bound excludes the whole prefix, so it is the tighter one."""
    x = (a.start, a.start_inclusive) if lower else (a.end, a.end_inclusive)
    y = (b.start, b.start_inclusive) if lower else (b.end, b.end_inclusive)
    if x[0] is None or y[0] is None:  # an open end: the other one (open too, or tighter)
        return y if x[0] is None else x
    n = min(len(x[0]), len(y[0]))
    if x[0][:n] != y[0][:n]:
        return x if (x[0][:n] > y[0][:n]) == lower else y
    if len(x[0]) == len(y[0]):
        return x if not x[1] else y
    short, long_ = (x, y) if len(x[0]) < len(y[0]) else (y, x)
    return long_ if short[1] else short


def intersect(a: Range, b: Range) -> Range | None:
    """The keys in both ranges (None when that is provably empty)."""
    lo, hi = _tighter(a, b, True), _tighter(a, b, False)
    r = Range(lo[0], hi[0], start_inclusive=lo[1], end_inclusive=hi[1])
    return None if r.is_empty() else r


class SedimentReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = options
        self.spec = _spec(options)
        self.name = options["table"]
        self.columns = [f.name for f in schema.fields]
        # what Spark checks each batch against (timestamps in microseconds, say): the rows
        # are cast to it, never left to differ in a unit
        self.arrow_schema = batch_schema(schema)
        table = tasks.open_table(self.spec, self.name)
        self.table_id = table.table_id
        self.version = pinned_version(self.options, table)
        self.request = base_request(options).replace(columns=self.columns,
                                                     version=self.version)
        """The read of every partition (before pushed filters narrow it)."""
        self.first_key = table.schema.row_key_names[0]
        self.key_names = list(table.schema.row_key_names)
        self.ranges: list[Range] | None = None
        self.blooms = set(bloom_columns(table.schema,
                                        table.properties["parquet.bloom_columns"]))
        """Columns with bloom filters: = and IN on them are pushed as the read's filter."""
        self.points: dict[str, list[Any]] = {}

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 (Spark API)
        """Take filters on the first row-key field; return the others to Spark."""
        self.ranges = None  # a reader may be asked again for another scan
        self.points = {}
        if self.options.get("pushdown", "false").strip().lower() not in ("true", "1", "yes") \
                or self.request.keys is not None or self.request.ranges is not None:
            # (a request's own keys or ranges: Spark applies its filters to what they read)
            yield from filters
            return
        lo: tuple[Any, bool] | None = None
        hi: tuple[Any, bool] | None = None
        keys: set[Any] | None = None
        others: dict[str, list[Filter]] = {}
        for f in filters:
            attr = getattr(f, "attribute", None)
            if (other := other_field(f, self.key_names)) is not None:
                others.setdefault(other, []).append(f)
                continue
            if attr != (self.first_key,):
                if self.request.filter is None and \
                        (point := bloom_point(f, self.blooms)) is not None:
                    # (Spark still applies it: the read skips what the blooms rule out)
                    column, values = point
                    old = self.points.get(column)
                    self.points[column] = values if old is None else \
                        [v for v in old if v in values]
                yield f
                continue
            if isinstance(f, EqualTo) and f.value is not None:
                keys = {f.value} if keys is None else keys & {f.value}
            elif isinstance(f, In):
                vals = {v for v in f.value if v is not None}
                keys = vals if keys is None else keys & vals
            elif isinstance(f, GreaterThan | GreaterThanOrEqual) and f.value is not None:
                cand = (f.value, isinstance(f, GreaterThanOrEqual))
                if lo is None or cand[0] > lo[0] or (cand[0] == lo[0] and not cand[1]):
                    lo = cand
            elif isinstance(f, LessThan | LessThanOrEqual) and f.value is not None:
                cand = (f.value, isinstance(f, LessThanOrEqual))
                if hi is None or cand[0] < hi[0] or (cand[0] == hi[0] and not cand[1]):
                    hi = cand
            else:
                yield f
        if keys is not None:
            rng = Range(None if lo is None else lo[0], None if hi is None else hi[0],
                        start_inclusive=True if lo is None else lo[1],
                        end_inclusive=True if hi is None else hi[1])
            self.ranges = [Range.exact(k) for k in sorted(keys) if rng.contains((k,))]
        elif lo is not None or hi is not None:
            self.ranges = [Range(None if lo is None else lo[0], None if hi is None else hi[0],
                                 start_inclusive=True if lo is None else lo[1],
                                 end_inclusive=True if hi is None else hi[1])]
        if others:  # the other row-key fields: per-field regions (spark/pushdown.py)
            self.ranges = with_other_fields(self.ranges, others, self.first_key)

    def partitions(self) -> list[InputPartition]:
        """One partition per piece of each leaf the query touches (see :func:`cut_keys`)."""
        from sediment.handle import handle_of

        table = tasks.open_table(self.spec, self.name, self.table_id)
        handle = handle_of(table)
        read = self.request if self.ranges is None else self.request.replace(ranges=self.ranges)
        if (pushed := bloom_filter(self.points)) is not None:
            read = read.replace(filter=pushed)
        plan = table.prepare(read).plan
        if "leaves" in self.options:  # read_table reads the other leaves natively
            keep = {x for x in self.options["leaves"].split(",") if x}
            plan = dataclasses.replace(plan, subqueries=tuple(
                s for s in plan.subqueries if s.leaf_id in keep))
        state = handle.state(self.version)
        target = int({**defaults(), **state.properties}[TARGET_ROWS])
        names = state.schema.row_key_names if state.schema is not None else []
        # the references' counts (exact, or estimates for files spanning several leaves)
        # size a leaf: one under the target needs no sample read; the others' samples (a GET
        # per file) are fetched in parallel, as many leaves on object storage need many
        big = {s.leaf_id for s in plan.subqueries if sum(r.records for r in s.references) > target}
        files = sorted({r.filename for s in plan.subqueries if s.leaf_id in big
                        for r in s.references})
        samples: dict[str, pa.Table] = {}
        if files:
            with ThreadPoolExecutor(min(16, len(files))) as pool:
                samples = dict(zip(files, pool.map(handle.samples.sample, files), strict=True))
        parts: list[InputPartition] = []
        for sub in plan.subqueries:
            cuts: list[Any] = []
            if sub.leaf_id in big and all(r.per_field is None for r in sub.ranges or ()):
                # (a per-field region is not cut: a lexicographic piece of it is no region)
                cuts = cut_keys([samples[r.filename] for r in sub.references], names,
                                sub.region, target)
            if not cuts:
                parts.append(self._part(read, sub.leaf_id, sub.ranges))
                continue
            bounds = [None, *cuts, None]
            for lo, hi in zip(bounds, bounds[1:], strict=False):
                piece = Range(lo, hi, start_inclusive=True, end_inclusive=False)
                if sub.ranges is None:
                    parts.append(self._part(read, sub.leaf_id, (piece,)))
                    continue
                hit = tuple(r for r in (intersect(piece, q) for q in sub.ranges)
                            if r is not None)
                if hit:
                    parts.append(self._part(read, sub.leaf_id, hit))
        return parts or [LeafPartition("")]

    @staticmethod
    def _part(read: ReadRequest, leaf_id: str,
              ranges: tuple[Range, ...] | None) -> LeafPartition:
        """The partition reading ``ranges`` of one leaf (the plan's ranges hold the read's
        keys and ranges already; None: the whole leaf)."""
        return LeafPartition(leaf_id, read.replace(keys=None, ranges=ranges).to_json_text())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LeafPartition)
        if not partition.leaf_id:
            return
        use_worker_bound()  # a Python worker among many: a small block cache
        trust_options(self.options)
        table = tasks.open_table(self.spec, self.name, self.table_id)
        # as table.query prepares it, restricted to this partition's ranges
        prepared = table.prepare(ReadRequest.from_json(partition.request))
        for sub in prepared.plan.subqueries:
            if sub.leaf_id == partition.leaf_id:
                data = prepared.read_subquery(sub)
                yield from cast_for_spark(data, self.arrow_schema, self.name).to_batches(
                    max_chunksize=100_000)
