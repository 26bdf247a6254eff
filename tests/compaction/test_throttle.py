"""The compaction I/O throttle (``compaction.max_bytes_per_second``): a token bucket per table
per process, charged with the bytes a job reads and writes as its stream goes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import helpers
import sediment as sd
from helpers import rows
from reference import Reference, assert_matches
from sediment.compaction import job as job_module
from sediment.compaction.throttle import ByteThrottle, throttle_for, throttled
from sediment.errors import PropertyError


class FakeClock:
    """A clock that moves only when the throttle sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_bucket_lets_one_second_through_then_holds_the_rate() -> None:
    clock = FakeClock()
    bucket = ByteThrottle(1000, clock=clock, sleep=clock.sleep)
    assert bucket.charge(1000) == 0  # the burst: one second's worth
    assert bucket.charge(500) == pytest.approx(0.5)
    assert bucket.charge(2000) == pytest.approx(2.0)
    assert clock.now == pytest.approx(2.5)  # 3,500 bytes at 1,000/s after a 1,000 burst
    clock.now += 10  # idle: the bucket refills to one second, never more
    assert bucket.charge(1000) == 0
    assert bucket.charge(1) > 0
    assert bucket.charge(0) == 0


def test_concurrent_callers_share_the_rate() -> None:
    bucket = ByteThrottle(1_000_000)
    waits: list[float] = []

    def take() -> None:
        waits.append(sum(bucket.charge(50_000) for _ in range(10)))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 2 MB at 1 MB/s with a 1 MB burst: about one second of waiting in all, shared
    assert sum(waits) >= 0.9


def test_one_bucket_per_table_and_rate() -> None:
    assert throttle_for("t", 0) is None
    a = throttle_for("t", 100)
    assert a is not None and throttle_for("t", 100) is a
    assert throttle_for("u", 100) is not a
    b = throttle_for("t", 200)
    assert b is not None and b is not a and b.rate == 200


def test_throttled_charges_rows_read_and_bytes_written() -> None:
    clock = FakeClock()
    bucket = ByteThrottle(100, clock=clock, sleep=clock.sleep)
    charged: list[float] = []
    real = bucket.charge
    bucket.charge = lambda n: (charged.append(n), real(n))[1]  # type: ignore[method-assign]
    read = iter([10, 30, 30, 60])
    written = iter([0, 100, 100, 250])
    batches = [rows(n, seed=0).to_batches()[0] for n in (5, 5, 5, 5)]
    out = list(throttled(iter(batches), bucket, input_bytes_per_row=2.0,
                         rows_read=lambda: next(read), written=lambda: next(written)))
    assert len(out) == 4
    assert charged == [20, 40 + 100, 0, 60 + 150]
    assert list(throttled(iter(batches), None, input_bytes_per_row=1, rows_read=lambda: 0,
                          written=lambda: 0)) == batches


def test_a_throttled_compaction_moves_its_bytes_at_the_rate(tmp_path: Path,
                                                             monkeypatch: Any) -> None:
    table = helpers.make_table(tmp_path, **{"compaction.strategy": "basic",
                                            "compaction.batch_size": 4,
                                            "compaction.batch_rows": 1024,
                                            "compaction.max_bytes_per_second": 50_000})
    ref = Reference(table.schema)
    for i in range(4):
        data = rows(3000, seed=i)
        table.ingest(data)
        ref.add(data)
    inputs = sum(table.state().sums[f.filename].size for f in table.files())
    clock = FakeClock()
    bucket = ByteThrottle(50_000, clock=clock, sleep=clock.sleep)
    charged: list[float] = []
    real = bucket.charge
    bucket.charge = lambda n: (charged.append(n), real(n))[1]  # type: ignore[method-assign]
    asked: list[tuple[str | None, float]] = []

    def fake_throttle_for(name: str | None, rate: float) -> ByteThrottle:
        asked.append((name, rate))
        return bucket

    monkeypatch.setattr(job_module, "throttle_for", fake_throttle_for)
    result = table.compact()
    assert result.jobs_committed == 1
    assert asked == [(table.name, 50_000)]
    assert len(charged) > 5  # charged as the stream goes, not once at the end
    # every input byte is charged (rows read x bytes per row); the output's bytes up to its
    # last batch (the footer and last pages are written after the stream ends)
    assert inputs <= sum(charged) <= 2 * inputs
    assert clock.now == pytest.approx(sum(charged) / 50_000 - 1, rel=0.02)
    assert_matches(table.query(), ref)


def test_the_property_is_validated() -> None:
    with pytest.raises(PropertyError, match="compaction.max_bytes_per_second"):
        sd.properties.validate_properties({"compaction.max_bytes_per_second": -1})
