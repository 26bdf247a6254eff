"""The compaction I/O throttle: ``compaction.max_bytes_per_second``, per table per process.

A compaction reads its inputs and writes one output as fast as the machine allows, which can
starve the queries and ingests that share a disk or a network link. The throttle bounds the
bytes a process's compaction jobs of one table move per second: every job of that table in the
process charges one token bucket as it goes, and waits when the bucket is in debt. Charges
come from the job's stream (the input bytes its records stand for, by the inputs' sizes and
record counts, and the output bytes the writer has produced), so the rate holds over the
whole job, not only at its end.

The bucket holds at most one second of tokens: after an idle spell a job may move one
second's worth at once, never more. A charge larger than the balance puts the bucket in
debt and the caller sleeps it off outside the lock, so concurrent jobs share the rate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import pyarrow as pa

from sediment.core.model import FileReference, FileSums


class ByteThrottle:
    """A token bucket of ``rate`` bytes per second (the burst: one second of them)."""

    def __init__(self, rate: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = float(rate)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = self.rate
        self._last = clock()

    def charge(self, nbytes: float) -> float:
        """Take ``nbytes`` from the bucket; sleeps while it is in debt. Returns the wait."""
        if nbytes <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.rate, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= nbytes
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


_LOCK = threading.Lock()
_THROTTLES: dict[str, ByteThrottle] = {}


def throttle_for(table: str | None, rate: float) -> ByteThrottle | None:
    """The process's bucket for ``table``'s compactions at ``rate`` (None: no throttle).

    One bucket per table, so every job of that table in this process shares its rate; a
    changed rate (the property set again) replaces the bucket.
    """
    if rate <= 0:
        return None
    key = table or ""
    with _LOCK:
        bucket = _THROTTLES.get(key)
        if bucket is None or bucket.rate != float(rate):
            bucket = _THROTTLES[key] = ByteThrottle(rate)
        return bucket


def input_bytes_per_row(inputs: Sequence[FileReference],
                        sums: Mapping[str, FileSums] | None) -> float:
    """The inputs' bytes per record, from their sizes in ``sums`` (inputs without sums count
    at the average of those with them; none with sums: 0, the output alone is charged)."""
    sized = [(r.records, sums[r.filename].size) for r in inputs
             if sums is not None and r.filename in sums]
    records = sum(n for n, _ in sized)
    return sum(b for _, b in sized) / records if records else 0.0


def throttled(batches: Iterator[pa.RecordBatch], throttle: ByteThrottle | None, *,
              input_bytes_per_row: float, rows_read: Callable[[], int],
              written: Callable[[], int]) -> Iterator[pa.RecordBatch]:
    """``batches`` (a job's output stream), charging ``throttle`` as each is handed on: the
    input bytes of the rows read since the last charge (``rows_read``: the count so far,
    ``input_bytes_per_row``: the inputs' bytes over their records) plus the output bytes
    written since then (``written``: the writer's byte count so far)."""
    if throttle is None:
        yield from batches
        return
    charged_rows = charged_out = 0
    for b in batches:
        rows, out = rows_read(), written()
        throttle.charge((rows - charged_rows) * input_bytes_per_row + (out - charged_out))
        charged_rows, charged_out = rows, out
        yield b
