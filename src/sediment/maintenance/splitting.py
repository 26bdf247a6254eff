"""Partition splitting: leaves over the threshold split where the table's partitioning
chooses from their samples (``sediment.partitioning``: the median key, or a field's median).

Planning is pure (``plan_splits`` over a TableState and a sample lookup); the split is committed
as a SplitPartition transaction that only validates while the partition is still a leaf. A leaf
whose records all share one row key cannot split; it is reported, not retried forever.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sediment.core.keys import Key
from sediment.core.model import Partition
from sediment.core.state import TableState
from sediment.core.transactions import SplitPartition
from sediment.errors import SedimentError, TransactionInvalidError
from sediment.partitioning import partitioning_of
from sediment.settings import as_settings

if TYPE_CHECKING:
    from sediment.core.head import Head
    from sediment.handle import TableHandle

SampleLookup = Callable[[str], pa.Table]


@dataclass(frozen=True, slots=True)
class SplitDecision:
    """A leaf to split at ``split_key``, or (``split_key`` None) one that cannot split."""

    partition_id: str
    records: int
    split_key: Key | None
    reason: str = ""
    dimension: int | None = None
    """Box partitions: the row-key field cut (``split_key`` is its one value)."""


@dataclass(frozen=True, slots=True)
class SplitResult:
    splits: int = 0
    unsplittable: tuple[str, ...] = field(default=())
    seconds: float = 0.0
    errors: tuple[str, ...] = field(default=())
    """Members of a partition scheme the split went past (a damaged log entry, storage that
    failed), each ``table T: <error>``: the scheme and its other members are split and
    maintained; the named one is caught up by a later pass once it reads again."""

    @property
    def did_work(self) -> bool:
        return self.splits > 0


def leaf_records(state: TableState, leaf: Partition) -> int:
    """Records known to lie in a leaf: the counts of its exact references.

    As in Sleeper (``PartitionSplitCheck``), a reference whose count is an estimate (one pushed
    down from a parent, to a file spanning several leaves) does not count: an estimate alone
    never makes a leaf split. Once compaction rewrites it into a file of the leaf's own, its
    exact count does. Ancestors' references are not counted (they are pushed down first).
    """
    return sum(r.records for r in state.references(leaf.id).values() if not r.approximate)


SplitReady = Callable[[TableState, Partition], bool]
"""Whether a leaf over the threshold is to split now (the continuous maintainer waits for a
leaf to hold few files: see sediment.maintenance.continuous)."""


def plan_splits(state: TableState, properties: Mapping[str, Any],
                sample_of: SampleLookup, ready: SplitReady | None = None
                ) -> list[SplitDecision]:
    """Leaves with more than ``partition.split.threshold`` known records (``leaf_records``)
    that ``ready`` accepts (all by default), with their split keys.

    "More than", as Sleeper documents its threshold (its code compares with ``>=``): a leaf
    holding exactly the threshold does not split.
    """
    if not state.online:
        return []
    assert state.schema is not None
    names = state.schema.row_key_names
    settings = as_settings(properties)
    threshold = settings.partition_split_threshold
    partitioning = partitioning_of(state)
    out = []
    for leaf in state.leaf_partitions():
        n = leaf_records(state, leaf)
        if n <= threshold or (ready is not None and not ready(state, leaf)):
            continue
        try:
            samples = [sample_of(f) for f in state.references(leaf.id)]
        except SedimentError as e:  # a damaged sample holds back this leaf, not the others
            out.append(SplitDecision(leaf.id, n, None, f"cannot read a sample: {e}"))
            continue
        choice = partitioning.choose_split(state, leaf, samples, names, settings)
        out.append(SplitDecision(leaf.id, n, choice.key, choice.reason, choice.dimension))
    return out


def split(table: TableHandle, *, limit: int = 0, ready: SplitReady | None = None,
          head: Head | None = None) -> SplitResult:
    """Split every leaf over the threshold once (one transaction per split); with ``limit``,
    at most that many, the fullest leaves first; with ``ready``, only the leaves it accepts.
    Planned on ``head`` (else on the table's head read now)."""
    started = time.perf_counter()
    head = table.read_head() if head is None else head
    decisions = plan_splits(head.state, head.settings, table.samples.sample, ready)
    if limit:
        decisions = sorted(decisions, key=lambda d: -d.records)[:limit]
    done, stuck = 0, []
    for d in decisions:
        if d.split_key is None:
            stuck.append(d.partition_id)
            table.status.record("split", d.partition_id, "unsplittable",
                                partition_id=d.partition_id, records=d.records, reason=d.reason)
            continue
        left, right = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
        try:
            table.states.commit(SplitPartition(d.partition_id, d.split_key, left, right,
                                               d.dimension))
        except TransactionInvalidError as e:  # split by someone else meanwhile
            table.status.record("split", d.partition_id, "failed",
                                partition_id=d.partition_id, reason=str(e))
            continue
        done += 1
        table.status.record("split", d.partition_id, "committed", partition_id=d.partition_id,
                            records=d.records, split_key=list(d.split_key), left=left,
                            right=right)
    return SplitResult(done, tuple(stuck), time.perf_counter() - started)
