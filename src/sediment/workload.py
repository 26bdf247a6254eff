"""The benchmark workload (Sleeper's system-test schema), generated vectorised.

Row key ``key`` (10 random lowercase letters), sort key ``timestamp`` (int64), values ``value``
(10 random letters) and ``nullable_value`` (10 random letters, 10% null). Used by the demo, the
benchmarks and tests, so figures compare with Sleeper's published ones.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.schema import Schema

KEY_LENGTH = 10


def benchmark_schema() -> Schema:
    return Schema(
        row_keys=[("key", pa.string())],
        sort_keys=[("timestamp", pa.int64())],
        values=[("value", pa.string()), ("nullable_value", pa.string())],
    )


def random_strings(rng: np.random.Generator, n: int, length: int = KEY_LENGTH) -> pa.Array:
    """``n`` random lowercase strings of ``length`` chars, built without a Python loop."""
    chars = rng.integers(ord("a"), ord("z") + 1, size=n * length, dtype=np.uint8)
    offsets = np.arange(0, (n + 1) * length, length, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))


def generate(rows: int, *, seed: int = 0, batch_rows: int = 1_000_000,
             start_time_ms: int = 1_700_000_000_000) -> Iterator[pa.RecordBatch]:
    """``rows`` records of the benchmark schema in batches of ``batch_rows``."""
    rng = np.random.default_rng(seed)
    schema = benchmark_schema().to_arrow()
    done = 0
    while done < rows:
        n = min(batch_rows, rows - done)
        ts = start_time_ms + rng.integers(0, 86_400_000, size=n, dtype=np.int64)
        nulls = rng.random(n) < 0.1
        nullable = random_strings(rng, n)
        nullable = pc.if_else(pa.array(nulls), pa.scalar(None, pa.string()), nullable)
        yield pa.RecordBatch.from_arrays(
            [random_strings(rng, n), pa.array(ts), random_strings(rng, n), nullable],
            schema=schema)
        done += n
