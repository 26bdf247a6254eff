"""Arrow types as Spark holds them.

Spark has no unsigned integers. Reading Parquet, it takes ``UINT_8``/``UINT_16``/``UINT_32`` as
the next wider signed type and ``UINT_64`` as ``DECIMAL(20, 0)``; every route of Sediment's
into Spark does the same (the data source's schema, batches handed to ``mapInArrow``), so a
table with unsigned fields reads and imports through Spark with every value kept. Batches coming
back from Spark are conformed to the table's own types (``ingest.sources.conform``, which
refuses a value out of range, naming field and row).

Timestamps: Spark holds microseconds, and a ``TimestampType`` is an instant (UTC inside, shown
in the session's zone); a zoned Arrow timestamp (any zone, any unit) reads as one, the same
instants, and an unzoned one as ``TimestampNTZType``, the same wall-clock values. A value
finer than a microsecond is refused, naming field and value, never truncated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa

from sediment.errors import DataError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

_WIDER = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64(),
          pa.uint64(): pa.decimal128(20, 0)}


def spark_arrow_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every unsigned integer (also inside lists, maps and structs) widened, and
    every timestamp in microseconds (Spark's only unit), a zoned one in UTC (the same
    instants: Spark's ``TimestampType`` holds an instant, shown in the session's zone)."""
    if t in _WIDER:
        return _WIDER[t]
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz is not None else None)
    if pa.types.is_map(t):
        return pa.map_(spark_arrow_type(t.key_type), spark_arrow_type(t.item_type))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(spark_arrow_type(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(spark_arrow_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(spark_arrow_type(f.type)) for f in t])
    return t


def parquet_readable(t: pa.DataType) -> bool:
    """Whether Spark's own Parquet reader reads a column of type ``t``: it refuses
    nanosecond timestamps (``PARQUET_TYPE_ILLEGAL``: ``INT64 (TIMESTAMP(NANOS,...))``), which
    only a Python route (cast to microseconds, as the data source does) brings into Spark."""
    if pa.types.is_timestamp(t):
        return t.unit != "ns"
    if pa.types.is_map(t):
        return parquet_readable(t.key_type) and parquet_readable(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return parquet_readable(t.value_type)
    if pa.types.is_struct(t):
        return all(parquet_readable(f.type) for f in t)
    return True


def spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """The schema with the types Spark can hold (see the module docstring)."""
    return pa.schema([f.with_type(spark_arrow_type(f.type)) for f in schema])


def spark_struct(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema, unsigned fields widened."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(spark_arrow_schema(schema))


def batch_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema a Python data source's batches must have for the Spark ``schema``.

    Spark's worker checks each batch against ``to_arrow_schema(schema, timezone="UTC")``
    (``pyspark.sql.worker.plan_data_source_read``): a ``TimestampType`` is an instant, held
    as microseconds since the epoch in UTC. A time-zone-aware Arrow timestamp holds the same
    instant whatever its zone, so a cast to ``tz="UTC"`` changes no value (and without a zone
    ``to_arrow_schema`` asserts: the reader could not be made at all)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def for_spark(batch: pa.RecordBatch, schema: pa.Schema, table: str = "") -> pa.RecordBatch:
    """A batch of ``schema`` (names as Spark will see them) cast to the types Spark holds
    (DataError for a value Spark cannot hold: see :func:`cast_for_spark`)."""
    wanted = spark_arrow_schema(schema)
    return batch if batch.schema.equals(wanted) else cast_for_spark(batch, wanted, table)


Data = TypeVar("Data", pa.RecordBatch, pa.Table)


def cast_for_spark(data: Data, schema: pa.Schema, table: str = "") -> Data:
    """``data`` cast to ``schema`` (the types Spark holds), every value kept: a timestamp
    finer than a microsecond (a nanosecond field's ``...000000005``), which Spark cannot
    hold, is refused with a DataError naming the table, the field and the value rather than
    truncated (a read through Spark would answer otherwise than ``table.query()``)."""
    try:
        return data.cast(schema)
    except pa.ArrowInvalid as e:
        for i, f in enumerate(schema):
            try:
                data.column(i).cast(f.type)
            except pa.ArrowInvalid as bad:
                whose = f"table {table}: " if table else ""
                raise DataError(f"{whose}field {data.schema.field(i).name!r} "
                                f"({data.schema.field(i).type}) holds a value Spark cannot "
                                f"hold as {f.type}: {bad}") from None
        raise DataError(f"{'table ' + table + ': ' if table else ''}{e}") from None
