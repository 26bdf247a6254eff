"""Conversions of a query's answer to what engines and DataFrame users hold: Arrow tables and
batches, pandas (``to_arrow``, ``to_pandas``, ``to_batches``).

A mixin of :class:`~sediment.table.Table`: every conversion is ``Table.prepare`` (the one path
every reader takes) followed by a change of container, so each gives exactly ``query()``'s
answer at the same version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    import pandas as pd

    from sediment.query.prepare import PreparedQuery


class Conversions:
    """``Table``'s conversion methods (see the module docstring).

    Each takes ``query``'s arguments: ``keys`` (exact row keys), ``ranges`` (Range values),
    ``columns`` (a subset, in that order), ``version`` (a number or a tag; None: the head) and
    ``filter`` (a pyarrow compute expression on any columns, or the same condition as
    ``--where`` text, applied to the merged records after the iterators). Each raises what
    ``Table.prepare`` raises: QueryError for a bad key, range, column or filter (a filter
    naming an unknown column names it; filter text that does not parse is a WhereError naming
    the table), VersionExpiredError or a version/tag error for a version that cannot be read,
    CorruptMetadataError or ObjectNotFoundError for damaged or missing data files,
    StorageError for the store.
    """

    if TYPE_CHECKING:
        def prepare(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
                    columns: Sequence[str] | None = None, version: int | str | None = None,
                    iterators: Sequence[Any] | None = None,
                    filter: Any = None) -> PreparedQuery:  # noqa: A002
            ...

    def to_arrow(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
                 columns: Sequence[str] | None = None, version: int | str | None = None,
                 filter: Any = None) -> pa.Table:  # noqa: A002 (the public name)
        """The records as one ``pyarrow.Table``, sorted by key: the same answer as
        ``query()``, under the name Arrow users (and deltalake/pyiceberg users) look for.

        Holds the whole answer in memory; use :meth:`to_batches` for large ones. Raises as
        the class docstring says.
        """
        return self.prepare(keys, ranges, columns=columns, version=version,
                            filter=filter).run()

    def to_pandas(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
                  columns: Sequence[str] | None = None, version: int | str | None = None,
                  filter: Any = None) -> pd.DataFrame:  # noqa: A002 (the public name)
        """The records as a pandas DataFrame (a default RangeIndex, rows in key order):
        ``to_arrow(...).to_pandas()`` in one call, so a DataFrame user never goes around
        the merge (reading the data files directly double-counts records).

        Needs pandas (``ImportError`` from pyarrow without it); raises as the class
        docstring says.
        """
        return self.to_arrow(keys, ranges, columns=columns, version=version,
                             filter=filter).to_pandas()

    def to_batches(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
                   columns: Sequence[str] | None = None, version: int | str | None = None,
                   filter: Any = None) -> pa.RecordBatchReader:  # noqa: A002
        """The records as a ``pyarrow.RecordBatchReader`` (iterate it for RecordBatches),
        streamed leaf by leaf in key order in bounded memory: for answers larger than
        memory, or to hand to an engine that reads Arrow streams (DuckDB, Polars,
        DataFusion, ``pq.write_table`` by batches).

        Planning errors (bad arguments, an expired version) are raised here; errors of
        reading (a missing or damaged data file) when the batch that needs it is read.
        """
        return self.prepare(keys, ranges, columns=columns, version=version,
                            filter=filter).reader()
