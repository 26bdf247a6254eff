"""How many records a planned query will read, estimated from the files' samples.

Flight's ``get_flight_info`` reports it as the flight's ``total_records``: a client sizing
its buffers or choosing a plan wants the answer's size, not that of the whole leaves the query
touches. A reference read whole (no ranges, in its own leaf) counts its exact records; one read
in part (ranges, or an ancestor's reference seen from one leaf) counts the sampled records
inside the leaf's region and the ranges (every k-th key stands for the k records from it on:
``sediment.files.sample``), at most the reference's records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from sediment.errors import SedimentError
from sediment.files.keys import rows_in
from sediment.files.sample import COUNT
from sediment.query.planner import QueryPlan

UNKNOWN = -1
"""What Flight says for an estimate it does not have."""


def estimate_records(plan: QueryPlan, sample_of: Callable[[str], pa.Table],
                     names: Sequence[str]) -> int:
    """Estimated records ``plan`` reads (before query iterators and row filters), or
    ``UNKNOWN`` when a sample it needs cannot be read. ``sample_of``: a file's sample;
    ``names``: the row-key fields."""
    total = 0
    for s in plan.subqueries:
        for r in s.references:
            if s.ranges is None and r.partition_id == s.leaf_id:
                total += r.records
                continue
            try:
                sample = sample_of(r.filename)
            except SedimentError:
                return UNKNOWN
            inside = rows_in(sample, names, s.region, s.ranges)
            total += min(r.records, int(pc.sum(inside.column(COUNT)).as_py() or 0))
    return total
