"""Data for the benchmark workload (Sleeper's system-test schema), generated with numpy: the
one workload of the benchmarks and the tests.

Schema (:func:`sediment.workload.benchmark_schema`, the one definition, which the demo uses
too): ``key`` string (10 random lowercase letters), ``timestamp`` int64, ``value`` string
(10 random letters), ``nullable_value`` nullable string (10 random letters, null with
probability ``null_fraction``). Strings are built straight from Arrow buffers (random bytes
mapped to letters, fixed offsets), so 10M rows take a couple of seconds and no Python loop runs
per record.

Run ``python tests/support/workload.py [--rows N]`` to time the generator on its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from sediment.workload import benchmark_schema

KEY_LENGTH = 10
VALUE_LENGTH = 10
ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
BASE = len(ALPHABET)
TIMESTAMP_START = 1_700_000_000_000  # epoch ms
TIMESTAMP_SPAN = 365 * 24 * 3600 * 1000
DEFAULT_CHUNK = 1_000_000


def arrow_schema() -> pa.Schema:
    """The Arrow schema of the generated batches: the benchmark schema's."""
    return benchmark_schema().to_arrow()


def random_strings(rng: np.random.Generator, n: int, length: int,
                   valid: np.ndarray | None = None) -> pa.Array:
    """``n`` strings of ``length`` random lowercase letters (``valid``: optional validity mask)."""
    data = ALPHABET[rng.integers(0, BASE, size=n * length, dtype=np.uint8)]
    offsets = np.arange(0, (n + 1) * length, length, dtype=np.int32)
    bitmap = None
    nulls = 0
    if valid is not None:
        nulls = int(n - np.count_nonzero(valid))
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data), bitmap,
                                       nulls)


def chunk(rng: np.random.Generator, n: int, null_fraction: float = 0.5) -> pa.RecordBatch:
    """One batch of ``n`` random rows."""
    key = random_strings(rng, n, KEY_LENGTH)
    ts = pa.array(TIMESTAMP_START + rng.integers(0, TIMESTAMP_SPAN, size=n, dtype=np.int64))
    value = random_strings(rng, n, VALUE_LENGTH)
    valid = rng.random(n) >= null_fraction
    nullable = random_strings(rng, n, VALUE_LENGTH, valid)
    return pa.RecordBatch.from_arrays([key, ts, value, nullable], schema=arrow_schema())


def batches(rows: int, *, seed: int = 42, chunk_rows: int = DEFAULT_CHUNK,
            null_fraction: float = 0.5) -> Iterator[pa.RecordBatch]:
    """``rows`` random rows as batches of at most ``chunk_rows`` (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    done = 0
    while done < rows:
        n = min(chunk_rows, rows - done)
        yield chunk(rng, n, null_fraction)
        done += n


def generate(rows: int, *, seed: int = 42, chunk_rows: int = DEFAULT_CHUNK,
             null_fraction: float = 0.5) -> pa.Table:
    """``rows`` random rows as one Arrow table of ``chunk_rows``-row chunks."""
    return pa.Table.from_batches(list(batches(rows, seed=seed, chunk_rows=chunk_rows,
                                              null_fraction=null_fraction)),
                                 schema=arrow_schema())


# ---- the key space: random keys are uniform over [a..z]^10 ------------------------------------
def key_to_int(key: str) -> int:
    """Position of a lowercase key in the key space (shorter keys padded with 'a')."""
    k = key.ljust(KEY_LENGTH, "a")[:KEY_LENGTH]
    v = 0
    for ch in k:
        v = v * BASE + (ord(ch) - 97)
    return v


def int_to_key(v: int) -> str:
    """Inverse of :func:`key_to_int` (clamped to the key space)."""
    v = max(0, min(v, BASE**KEY_LENGTH - 1))
    out = []
    for _ in range(KEY_LENGTH):
        v, r = divmod(v, BASE)
        out.append(chr(97 + r))
    return "".join(reversed(out))


def split_points(leaves: int) -> list[str]:
    """``leaves - 1`` keys cutting the (uniform) key space into ``leaves`` equal parts."""
    space = BASE**KEY_LENGTH
    return [int_to_key(space * i // leaves).rstrip("a") or "a" for i in range(1, leaves)]


def key_range_for(start: str, expected_rows: float, total_rows: int) -> tuple[str, str]:
    """[start, end) holding about ``expected_rows`` of ``total_rows`` uniform random keys."""
    width = max(1, round(BASE**KEY_LENGTH * expected_rows / total_rows))
    return start, int_to_key(key_to_int(start) + width)


def pick(values: Sequence[str] | pa.Array, count: int, seed: int = 7) -> list[str]:
    """``count`` values chosen at random (with replacement when there are fewer)."""
    rng = np.random.default_rng(seed)
    n = len(values)
    idx = rng.choice(n, size=count, replace=count > n)
    arr = values if isinstance(values, pa.Array | pa.ChunkedArray) else pa.array(values)
    return arr.take(pa.array(idx)).to_pylist()


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    args = p.parse_args()
    t0 = time.perf_counter()
    t = generate(args.rows)
    dt = time.perf_counter() - t0
    print(f"{t.num_rows:,} rows, {t.nbytes / 2**20:,.0f} MiB in {dt:.2f} s "
          f"({t.num_rows / dt / 1e6:.1f} M rows/s)")
    print(t.slice(0, 5).to_pandas())
    print("nulls in nullable_value:", t.column("nullable_value").null_count)
    print("split points for 16 leaves:", split_points(16))


if __name__ == "__main__":
    main()
