"""The order of records with equal keys: a hidden sequence column.

Every record has a sequence: the sequence of the commit that first added its file
(``FileReference.sequence``, given by the state: ``version << 24 | rank`` of the file in its
transaction) and, within one file, its position. Readers merge by (row keys, sort keys,
sequence), each input's own order kept for ties (every merge is stable per input), so records
with equal keys come out in commit order, the later commit last, and within one write in input
order: ``last`` aggregation and keep-latest resolve them the same way for every reader of a
version, whatever compaction did.

Files written by ingest, bulk import and load have no sequence column: all their records take
their reference's sequence. Compaction merges records of several files into one, so it writes
each record's resolved sequence into the column :data:`SEQ` (a name outside the user's namespace:
``Schema`` refuses fields starting with ``__sediment``); a null there, or a file without the
column, means "the reference's sequence". Readers hide the column from users.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.model import RANK_BITS, file_sequence
from sediment.schema import RESERVED_PREFIX

__all__ = ["RANK_BITS", "RESERVED_PREFIX", "SEQ", "SEQ_FIELD", "file_sequence", "has_sequence",
           "merge_names", "with_sequence", "without_sequence"]

SEQ = "__sediment_seq"
"""The hidden column of resolved record sequences (int64) in compacted files."""
SEQ_FIELD = pa.field(SEQ, pa.int64())


def has_sequence(schema: pa.Schema) -> bool:
    return SEQ in schema.names


def with_sequence(data: pa.Table | pa.RecordBatch, sequence: int
                  ) -> pa.Table | pa.RecordBatch:
    """``data`` with its :data:`SEQ` column resolved: the column's values where it has them,
    ``sequence`` (the file reference's) elsewhere; the column is appended when missing."""
    if SEQ in data.schema.names:
        i = data.schema.get_field_index(SEQ)
        col = data.column(i)
        if col.null_count == 0:
            return data
        return data.set_column(i, SEQ_FIELD, pc.fill_null(col, pa.scalar(sequence, pa.int64())))
    values = pa.array(np.full(data.num_rows, sequence, dtype=np.int64))
    return data.append_column(SEQ_FIELD, values)


def without_sequence(data: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
    """``data`` without the :data:`SEQ` column (what users see)."""
    if SEQ not in data.schema.names:
        return data
    return data.drop_columns([SEQ])


def merge_names(key_names: Sequence[str]) -> list[str]:
    """The fields a merge orders by: the keys, then the sequence."""
    return [*key_names, SEQ]
