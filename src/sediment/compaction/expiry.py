"""What age-off would drop from each file, estimated from Parquet statistics.

Age-off (a TTL on a time field) runs in compaction, so records past their TTL free storage only
when their file is rewritten; a leaf that no longer receives data is never compacted again,
and its expired records would stay for ever. The planner (``compaction.strategy``) rewrites a
file once at least ``compaction.expired_fraction`` of its records are past the TTL, and this
module tells it how many are: per row group, from the min and max of the age-off field in the
file's footer (no data read), the records below the cutoff are estimated by interpolating
between the two (every record when the max is below it, none when the min is not), and nulls
count as expired (age-off drops them). Where a file's groups carry no statistics, nothing is
estimated (a file is never rewritten for a guess). Right after a rewrite the file's min is at
or above the cutoff of that moment, so its estimate starts near zero: a file is not rewritten
again until enough more of it expires, whatever the shape of its values.

Per file the statistics are kept (a few numbers per row group; files are immutable), so a
maintainer's ticks look up a dict, and read a footer only for a file they have not seen.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.head import Head
from sediment.core.model import FileReference
from sediment.errors import SedimentError
from sediment.iterators.base import AgeOff

if TYPE_CHECKING:
    from sediment.handle import TableHandle

log = logging.getLogger(__name__)

STATS_CACHE_FILES = 100_000
"""Files whose age-field statistics are kept per process (~100 bytes each plus a few per
row group): tens of MB at most, far more files than one maintainer's tables hold."""


@dataclass(frozen=True, slots=True)
class AgeStats:
    """One column's statistics per row group of one file: ``rows``, ``nulls``, ``mins`` and
    ``maxs`` (raw integers in the column's scale), ``known`` (the group has min and max)."""

    rows: np.ndarray
    nulls: np.ndarray
    mins: np.ndarray
    maxs: np.ndarray
    known: np.ndarray
    column_type: pa.DataType

    @classmethod
    def of(cls, md: pq.FileMetaData, field: str) -> AgeStats | None:
        """The statistics of ``field`` in a file's metadata (None: the file lacks it)."""
        schema = md.schema.to_arrow_schema()
        if schema.get_field_index(field) < 0:
            return None
        column_type = schema.field(field).type
        index = next((i for i in range(md.num_columns)
                      if md.schema.column(i).path == field), None)
        if index is None:
            return None
        n = md.num_row_groups
        rows = np.zeros(n, np.int64)
        nulls = np.zeros(n, np.int64)
        mins = np.zeros(n, np.float64)
        maxs = np.zeros(n, np.float64)
        known = np.zeros(n, bool)
        for g in range(n):  # per row group of the footer, not per record
            rg = md.row_group(g)
            rows[g] = rg.num_rows
            st = rg.column(index).statistics
            if st is None:
                continue
            nulls[g] = st.null_count if st.has_null_count else 0
            if st.has_min_max and isinstance(st.min_raw, int) and isinstance(st.max_raw, int):
                mins[g], maxs[g], known[g] = st.min_raw, st.max_raw, True
        return cls(rows, nulls, mins, maxs, known, column_type)

    def expired(self, cutoff: int) -> float:
        """Estimated records below ``cutoff`` or null (only the nulls of a group without
        min and max)."""
        span = np.maximum(self.maxs - self.mins + 1, 1)
        below = np.clip((cutoff - self.mins) / span, 0.0, 1.0)
        valued = self.rows - self.nulls
        estimate = self.nulls + np.where(self.known, valued * below, 0.0)
        return float(estimate.sum())


_LOCK = threading.Lock()
_STATS: OrderedDict[tuple[str, str, str], AgeStats | None] = OrderedDict()


def _stats(table: TableHandle, head: Head, ref: FileReference, field: str
           ) -> AgeStats | None:
    filename = ref.filename
    key = (table.objects.uri, filename, field)
    with _LOCK:
        if key in _STATS:
            _STATS.move_to_end(key)
            return _STATS[key]
    footers = table.executors.get(head.state).footers
    try:
        _, footer = footers.open(filename, head.state.file_sums(filename, ref.partition_id))
        stats = AgeStats.of(footer.metadata, field)
    except SedimentError as e:  # read again next time; compaction meets it in its own way
        log.warning("table %s: no age-off estimate for %s: %s", table.name, filename, e)
        return None
    with _LOCK:
        _STATS[key] = stats
        while len(_STATS) > STATS_CACHE_FILES:
            _STATS.popitem(last=False)
    return stats


def expired_fractions(table: TableHandle, head: Head, refs: Iterable[FileReference]
                      ) -> dict[str, float]:
    """Of the file of each of ``refs``, the fraction of its records that the table's compaction
    age-offs would drop now (empty without an age-off)."""
    if isinstance(head.compaction_iterators, Exception):
        return {}
    ages = [it for it in head.compaction_iterators if isinstance(it, AgeOff)]
    if not ages:
        return {}
    out: dict[str, float] = {}
    for ref in refs:
        if ref.filename in out:
            continue
        best = 0.0
        for age in ages:
            st = _stats(table, head, ref, age.field)
            total = int(st.rows.sum()) if st is not None else 0
            if st is None or not total:
                continue
            best = max(best, st.expired(age.cutoff(st.column_type)) / total)
        out[ref.filename] = best
    return out
