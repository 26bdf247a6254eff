"""Stream marks: a streaming writer's batch recorded in the same commit as its files.

A streaming sink (Spark Structured Streaming's micro-batches) may hand the same batch over
twice: a driver that committed batch ``n`` and died before writing its own checkpoint runs
batch ``n`` again after a restart. As Delta's ``SetTransaction`` (``txn`` action: an app id
and its last committed version), the commit of a batch carries a :class:`StreamMark` (the
stream's identity and the batch id), and the table state keeps one entry per stream, its last
committed batch (``TableState.streams``). The mark is set atomically with the files (it is a
field of ``AddFiles``), so "the batch is in the table" and "the state records the batch" are
one fact, read from the state, never guessed:

- the batch id equals the stream's recorded one: a replay. A writer building its commit from
  the head (:meth:`StreamMark.committed`) commits nothing and reports success; a transaction
  validated anyway is refused, so nothing is ever added twice;
- the batch id is lower: no replay of a live stream's checkpoint is (Spark re-runs only its
  last batch), so another run reuses the identity with a new sequence (an explicit stream id
  and a deleted checkpoint) and would have its first batches skipped: refused, naming both;
- higher, or no entry: a new batch, committed, and the entry replaced.

Entries stay bounded: one per stream, and a stream commit drops the entries of other streams
that committed nothing for ``stream.retention_seconds`` (a dead stream's). The committing
stream's entry is always kept. A stream idle longer than that and then restarted from its
checkpoint may commit its last batch again; the property's default (30 days) is far past any
restart delay.

Restore and clear change the table's content, not what streams have committed: both keep the
head's entries (a stream replaying its last batch after a restore must still find it
recorded, or the restored-away batch would come back half: only its replay).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sediment.core.state import TableState
from sediment.core.transactions.base import fail
from sediment.properties import PROPERTIES

RETENTION_PROPERTY = "stream.retention_seconds"


@dataclass(frozen=True, slots=True)
class StreamMark:
    """Batch ``batch_id`` of the stream ``stream_id``, committed with the files it brings."""

    stream_id: str
    batch_id: int

    def last(self, state: TableState) -> int | None:
        """The stream's last batch id ``state`` records (None: none)."""
        entry = state.streams.get(self.stream_id)
        return None if entry is None else entry[0]

    def committed(self, state: TableState) -> bool:
        """Whether ``state`` records this very batch as committed (a replay)."""
        return self.last(state) == self.batch_id

    def validate(self, state: TableState) -> None:
        """Refuse a mark ``state`` cannot take: an empty stream id, a negative batch id, the
        batch already committed, or a batch older than the stream's last (see the module)."""
        if not self.stream_id:
            raise fail(state, "a stream batch needs a stream id")
        if self.batch_id < 0:
            raise fail(state, f"stream {self.stream_id}: batch id {self.batch_id} is negative")
        last = self.last(state)
        if last is None or self.batch_id > last:
            return
        if self.batch_id == last:
            raise fail(state, f"stream {self.stream_id}: batch {self.batch_id} is already "
                              f"committed (a replay adds nothing)")
        raise fail(state, f"stream {self.stream_id}: batch {self.batch_id} is older than "
                          f"batch {last}, the stream's last committed one: this is not a "
                          f"replay but a new sequence under a used identity (a checkpoint "
                          f"deleted or replaced while option streamId stayed); give the new "
                          f"run a new streamId, or keep its checkpoint")

    def apply(self, state: TableState, time: float) -> None:
        """Record this batch as the stream's last; drop other streams' entries older than
        the table's ``stream.retention_seconds`` (the state's entries are replaced, never
        changed in place: copies share them)."""
        retention = float(state.properties.get(RETENTION_PROPERTY,
                                               PROPERTIES[RETENTION_PROPERTY].default))
        kept = {k: v for k, v in state.streams.items() if time - v[1] <= retention}
        kept[self.stream_id] = (self.batch_id, time)
        state.streams = kept

    def to_json(self) -> dict[str, Any]:
        return {"id": self.stream_id, "batch": self.batch_id}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StreamMark:
        return cls(str(doc["id"]), int(doc["batch"]))
