"""Helpers the test modules share: a fresh table of the benchmark schema, and rows for it."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

import sediment as sd
from sediment.workload import benchmark_schema, generate
from support.s3 import stop

SCHEMA = benchmark_schema()

T = TypeVar("T")
R = TypeVar("R")


def make_table(where: str | Path | sd.Store, options: dict[str, Any] | None = None, *,
               schema: sd.Schema = SCHEMA, name: str | None = None,
               split_points: Any = None, **props: Any) -> sd.Table:
    """A new table (named ``name``, else a fresh name) in ``where``: an open Store, or the
    URI or path of one (opened with storage ``options``). Its state cache is off, so every
    read sees the latest commit; ``props`` are its other properties."""
    store = where if isinstance(where, sd.Store) else \
        sd.Store.open(str(where), **(options or {}), create=True)
    return store.create_table(name or f"t{uuid.uuid4().hex[:8]}", schema,
                              split_points=split_points,
                              properties={"state.cache.refresh_seconds": 0, **props})


def rows(n: int, seed: int, *, keys: list[str] | None = None, prefix: str = "") -> pa.Table:
    """``n`` rows of the benchmark schema; with ``keys``, every row key is one of them (many
    duplicates); with ``prefix``, every key starts with it (same key length)."""
    t = pa.Table.from_batches(list(generate(n, seed=seed, batch_rows=max(1, n))))
    if keys is not None:
        rng = random.Random(seed)
        t = t.set_column(0, "key", pa.array([rng.choice(keys) for _ in range(n)], pa.string()))
    if prefix:
        tail = pc.utf8_slice_codeunits(t.column("key"), len(prefix))
        t = t.set_column(0, t.schema.field("key"),
                         pc.binary_join_element_wise(pa.scalar(prefix), tail, ""))
    return t


def run_together(items: Sequence[T], work: Callable[[T], R], *, timeout: float = 60.0) -> list[R]:
    """``work(item)`` for every item in a thread of its own, all let go at once (a barrier):
    the results in the order of ``items``; fails the test if any thread raised."""
    barrier = threading.Barrier(len(items))
    results: dict[int, R] = {}
    errors: list[BaseException] = []

    def run(i: int, item: T) -> None:
        try:
            barrier.wait()
            results[i] = work(item)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, item)) for i, item in enumerate(items)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    assert not errors, errors
    return [results[i] for i in range(len(items))]


def build_wheel(root: Path, tmp_path: Path) -> Path:
    """The project's wheel built from a copy of the sources under ``root`` (not the work
    tree: no stale build/), in ``tmp_path``."""
    src = tmp_path / "src-copy"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(root / name, src / name)
    shutil.copytree(root / "src" / "sediment", src / "src" / "sediment",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                           str(tmp_path / "dist"), str(src)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("sediment_lsm-*.whl")
    return wheel


stop_process = stop
"""Terminate a server the test started, killing it if it does not exit in 10 s."""
