"""``sediment.spark.read_table``: a table at a pinned version as a Spark DataFrame in which Spark
reads what it can with its own Parquet reader.

Spark 4.3.0 gives a Python data source no column pruning, and every column of every row crosses
from the Python worker to the JVM: ``spark.read.format("sediment")`` reads at the speed of any
Python data source (``benchmarks/spark_read.py``: 0.49x of ``spark.read.parquet`` over the
same rows for a group-by on two of four columns). A leaf whose answer is one file's rows as they
are (one reference, no iterators), on local disk, with the file's keys inside the leaf's region
(its footer says so: the usual case once compaction ran), needs no Sediment code at all:
``spark.read.parquet`` of those files, with only the table's columns, is exactly that leaf's
answer, and Spark prunes columns and row groups and splits the files itself. Every other leaf
(several files to merge, iterators, a file shared with another leaf, an object store Spark's
Hadoop cannot reach; every leaf of a table with a nanosecond timestamp field, which Spark's
Parquet reader refuses) is read through the ``sediment`` data source restricted to those leaves
(its ``leaves`` option). The two parts are one ``unionByName``, equal to ``table.query()`` at
the version (row order aside, as with any Spark read).

``sediment.spark.register_view`` registers that DataFrame as a temp view: the fastest correct
view of a table for Spark SQL. Measured (``benchmarks/spark_views.py``, figures in
docs/howto/spark.md): a view of ``spark.read.format("sediment")`` reads every column of every
leaf through Python for every query, a key filter included (pushdown is unsafe on a view, see
:mod:`sediment.spark.datasource`), while over ``read_table`` Spark prunes files, row groups and
columns itself; for a table whose answer needs Sediment's merge (iterators, several files in a
leaf) the two are the same reads, as ``read_table`` sends those leaves through the data source.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sediment.handle import handle_of
from sediment.iterators.trust import trusted_iterator_modules
from sediment.query.request import ReadRequest
from sediment.spark.sparktypes import parquet_readable, spark_struct

_HADOOP_SPECIAL = set("*?[]{}\\:%,")
"""Characters Hadoop's paths take for globs, URI syntax or lists: a file at such a path goes
through the data source rather than risk Spark reading another file, or none."""


def _inside(footer: Any, region: Any) -> bool:
    """Whether every row of the file lies in the region, by the first key field's statistics
    (strictly, so that a multi-field key equal on it is never taken for inside)."""
    if not footer.mins:
        return True  # no row group: nothing to read
    lo, hi = footer.mins[0], footer.maxs[-1]
    if lo is None or hi is None or any(m is None for m in footer.mins):
        return False
    return (region.min is None or lo > region.min[0] or
            (len(region.min) == 1 and lo >= region.min[0])) and \
        (region.max is None or hi < region.max[0])


def read_table(spark: Any, table: Any, *, version: int | str | None = None,
               columns: Sequence[str] | None = None) -> Any:
    """``table`` at ``version`` (a number or a tag; None: the head now, pinned) as a Spark
    DataFrame with ``columns`` (default: all), equal to ``table.query()`` there: Spark's own
    Parquet reader for the leaves that need no merge, the ``sediment`` data source for the
    others (see the module docstring). Raises as ``Table.prepare``."""
    import pyarrow as pa
    from pyspark.sql import functions as F  # noqa: N812 (Spark's own spelling)

    from sediment.spark.datasource import TRUST_OPTION
    from sediment.spark.session import register_data_source

    v = table.resolve_version(version)
    v = table.version if v is None else v
    prepared = table.prepare(columns=columns, version=v)
    handle = handle_of(table)
    footers = prepared.executor.footers
    native: list[str] = []
    through_source: list[str] = []
    # a file holds every field: one Spark's reader refuses (nanoseconds) sends all through
    readable = all(parquet_readable(f.type) for f in prepared.schema.to_arrow())
    for sub in prepared.plan.subqueries:
        ref = sub.references[0]
        # (a file written under another schema than the version's: through the data
        # source, which maps its columns by field id)
        path = handle.objects.local_path(ref.filename) if sub.as_stored and \
            not prepared.iterators and readable and \
            prepared.executor.file_map(ref, sub).identity else None
        if path is not None and not set(str(path)) & _HADOOP_SPECIAL and \
                _inside(footers.open(ref.filename)[1], sub.region):
            native.append(str(path))
        else:
            through_source.append(sub.leaf_id)
    wanted = list(prepared.wanted)
    arrow = prepared.schema.to_arrow()
    # the data source's Spark types: the native part is cast to them, so both parts agree
    types = spark_struct(pa.schema([arrow.field(c) for c in wanted]))
    frames = []
    if native:
        frames.append(spark.read.parquet(*native).select(
            *[F.col(_quoted(f.name)).cast(f.dataType).alias(f.name) for f in types.fields]))
    if through_source or not frames:
        register_data_source(spark)
        spec = table.store.spec()
        # the read as a request's JSON: its version pinned, its columns whatever their names
        read = ReadRequest(columns=wanted, version=v)
        options = {"store": str(spec["uri"]), "table": table.name,
                   "request": read.to_json_text()}
        options.update({k: str(x) for k, x in spec.items() if k != "uri" and x is not None})
        trusted = trusted_iterator_modules()
        if trusted:  # the source's workers may have started before the driver trusted them
            options[TRUST_OPTION] = ",".join(trusted)
        if native:
            options["leaves"] = ",".join(through_source)
        source = spark.read.format("sediment").options(**options).load()
        frames.append(source.select(*[F.col(_quoted(c)) for c in wanted]))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def _quoted(name: str) -> str:
    """A column name as Spark parses it (backticks, doubled inside): names with dots too."""
    return "`" + name.replace("`", "``") + "`"


def register_view(spark: Any, table: Any, name: str, version: int | str | None = None) -> Any:
    """Register ``name`` in ``spark`` as a temp view of ``table`` at ``version`` (a number or
    a tag; None: the head now), pinned there: every query on the view answers as
    ``table.query()`` at that version, however the table changes meanwhile (register it again
    to see a newer version). The view is :func:`read_table`'s DataFrame, the fastest correct
    route (see the module docstring); returns that DataFrame.

    Raises as ``Table.prepare`` (a version or tag the table does not have, an expired version),
    before anything is registered.
    """
    frame = read_table(spark, table, version=version)
    frame.createOrReplaceTempView(name)
    return frame
