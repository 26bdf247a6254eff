"""``sediment.spark.co_join``: a co-located join of two member tables of one partition scheme
as a Spark DataFrame, computed with one task per piece of the scheme's leaves (a leaf, or a key
sub-range of a big one) and no shuffle.

A Python data source (``format("sediment_cojoin")``) plans the join's pieces on the driver
(``sediment.schemes.join.plan_pieces``: the leaves of both tables' trees, pinned at the
versions read when the DataFrame is loaded); each input partition carries its piece (the
region and both tables' file references there), and its task reads both tables' records of
the piece, merged with their iterators, and joins them with Arrow. Spark sees one scan whose
partitions are already joined, so its physical plan holds no Exchange: nothing is shuffled.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from sediment.iterators.trust import trusted_iterator_modules
from sediment.query.blocks import use_worker_bound
from sediment.schemes.join import JoinPiece, PreparedJoin, prepare_join
from sediment.spark import tasks
from sediment.spark.sparktypes import batch_schema, cast_for_spark, spark_struct

FORMAT = "sediment_cojoin"
_STORE_OPTIONS = ("endpoint_url", "region", "access_key_id", "secret_access_key",
                  "session_token")


def _spec(options: dict[str, str]) -> dict[str, Any]:
    return {"uri": options["store"], **{k: options[k] for k in _STORE_OPTIONS if k in options}}


def _plan(options: dict[str, str]) -> PreparedJoin:
    tasks.trust_options(options)
    spec = _spec(options)
    left = tasks.open_table(spec, options["left"])
    right = tasks.open_table(spec, options["right"])
    columns = json.loads(options["columns"]) if "columns" in options else None
    version: Any = None
    if "left_version" in options:
        version = (int(options["left_version"]), int(options["right_version"]))
    return prepare_join(left, right, on=json.loads(options["on"]) if "on" in options
                        else None, how=options.get("how", "inner"), columns=columns,
                        version=version)


class CoJoinDataSource(DataSource):
    """The ``sediment_cojoin`` format (see the module's docstring)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return spark_struct(_plan(dict(self.options)).schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return CoJoinReader(dict(self.options), schema)


@dataclass
class PiecePartition(InputPartition):
    """One piece of the join: its region and both tables' references there."""

    piece: JoinPiece | None


class CoJoinReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = options
        self.arrow_schema = batch_schema(schema)

    def partitions(self) -> list[InputPartition]:
        """One partition per piece of the join (each leaf of the scheme's tree)."""
        pieces = _plan(self.options).pieces
        return [PiecePartition(p) for p in pieces] or [PiecePartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PiecePartition)
        if partition.piece is None:
            return
        use_worker_bound()  # a Python worker among many: a small block cache
        data = _plan(self.options).read_piece(partition.piece)
        yield from cast_for_spark(data, self.arrow_schema).to_batches(max_chunksize=100_000)


def co_join(spark: SparkSession, left: Any, right: Any, on: str | Sequence[str] | None = None,
            *, how: str = "inner", columns: Sequence[str] | None = None,
            version: Any = None) -> DataFrame:
    """Join two member tables of one partition scheme on their row keys, one Spark task per
    leaf, without a shuffle (no Exchange in the physical plan).

    Arguments as ``sediment.join``; the versions read are pinned now (the heads, a tag both
    tables carry, or a pair), so every action on the DataFrame reads the same records.

    Raises NotCoShardedError: the tables are not members of one scheme (use Spark's own join
    of two ``format("sediment")`` reads); QueryError: a bad ``on``, ``how`` or version."""
    from sediment.spark.session import register_data_source

    register_data_source(spark)
    spark.dataSource.register(CoJoinDataSource)
    prepared = prepare_join(left, right, on=on, how=how, columns=columns, version=version)
    spec = left.store.spec()
    options = {"store": str(spec["uri"]), "left": left.name, "right": right.name,
               "how": how, "left_version": str(prepared.left.plan.version),
               "right_version": str(prepared.right.plan.version)}
    if on is not None:
        options["on"] = json.dumps([on] if isinstance(on, str) else list(on))
    if columns is not None:
        options["columns"] = json.dumps(list(columns))
    options.update({k: str(x) for k, x in spec.items() if k != "uri" and x is not None})
    trusted = trusted_iterator_modules()
    if trusted:  # the source's workers may have started before the driver trusted them
        options[tasks.TRUST_OPTION] = ",".join(trusted)
    return spark.read.format(FORMAT).options(**options).load()
