"""Arrow types as Spark holds them.

Spark has no unsigned integers. Reading Parquet, it takes ``UINT_8``/``UINT_16``/``UINT_32`` as
the next wider signed type and ``UINT_64`` as ``DECIMAL(20, 0)``; every route of Sediment's
into Spark does the same (the data source's schema, batches handed to ``mapInArrow``), so a
table with unsigned fields reads and imports through Spark with every value kept. Batches coming
back from Spark are conformed to the table's own types (``ingest.sources.conform``, which
refuses a value out of range, naming field and row).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

_WIDER = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64(),
          pa.uint64(): pa.decimal128(20, 0)}


def spark_arrow_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every unsigned integer (also inside lists, maps and structs) widened."""
    if t in _WIDER:
        return _WIDER[t]
    if pa.types.is_map(t):
        return pa.map_(spark_arrow_type(t.key_type), spark_arrow_type(t.item_type))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(spark_arrow_type(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(spark_arrow_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(spark_arrow_type(f.type)) for f in t])
    return t


def spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """The schema with the types Spark can hold (see the module docstring)."""
    return pa.schema([f.with_type(spark_arrow_type(f.type)) for f in schema])


def spark_struct(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema, unsigned fields widened."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(spark_arrow_schema(schema))


def for_spark(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch of ``schema`` (names as Spark will see them) cast to the types Spark holds."""
    wanted = spark_arrow_schema(schema)
    return batch if batch.schema.equals(wanted) else batch.cast(wanted)
