"""A slow writer racing ``sediment maintain --loop`` with an orphan timeout of zero: the
collector sees the writer's files long before they are committed, yet never deletes them,
because the writer's lease names them (sediment.state.pending). Success implies every file
present, on local disk and on moto's S3 server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from reference import Reference, assert_matches
from sediment.ingest.standard import commit_staged, stage_batches
from sediment.workload import benchmark_schema, generate

SCHEMA = benchmark_schema()
pytestmark = pytest.mark.slow


def _maintainer(uri: str, options: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if options:
        env.update({"AWS_ENDPOINT_URL": options["endpoint_url"],
                    "AWS_ACCESS_KEY_ID": options["access_key_id"],
                    "AWS_SECRET_ACCESS_KEY": options["secret_access_key"],
                    "AWS_REGION": options["region"]})
    cli = Path(sys.executable).with_name("sediment")
    return subprocess.Popen(
        [str(cli), "maintain", "--store", uri, "--loop", "--interval", "0.2",
         "--orphan-timeout", "0", "--json"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)


def _gc_passes(log: Path) -> int:
    return log.read_text().count('"table"')


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_slow_writer_never_loses_files_to_the_collector(
        where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if where == "local":
        uri, options = str(tmp_path / "store"), {}
    else:
        uri, options = request.getfixturevalue("s3_store_uri")
    store = sd.Store.open(uri, **options, create=True)
    table = store.create_table("events", SCHEMA, split_points=["g", "p"],
                               properties={"gc.delay_seconds": 0,
                                           "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    ref = Reference(SCHEMA)
    log = tmp_path / "maintain.log"
    proc = _maintainer(uri, options, log)
    try:
        deadline = time.monotonic() + 60
        while _gc_passes(log) < 2:  # the collector is running before the writers start
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "maintain --loop reported nothing"
            time.sleep(0.1)
        for i in range(3):
            data = pa.Table.from_batches(list(generate(3000, seed=i, batch_rows=3000)))
            staged = stage_batches(table._handle, table._handle.states.head(),
                                   (("input", b) for b in data.to_batches()))
            assert len(staged.written) == 3  # one file per leaf, written, not committed
            seen = _gc_passes(log)
            while _gc_passes(log) < seen + 3:  # several collector passes see them
                assert time.monotonic() < deadline + 60, "the collector stopped reporting"
                time.sleep(0.1)
            for w in staged.written:
                assert table._handle.objects.exists(w.filename), f"{w.filename} was collected"
            result = commit_staged(table._handle, staged, time.perf_counter())
            ref.add(data)
            assert result.rows == 3000
            for f in table.state().refcount:  # success implies every file present
                assert table._handle.objects.exists(f), f
    finally:
        proc.terminate()
        proc.wait(30)
    fresh = sd.Store.open(uri, **options).table("events")
    assert_matches(fresh.query(), ref)
    assert "error" not in log.read_text()
