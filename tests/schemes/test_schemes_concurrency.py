"""Concurrent ingest into two member tables of one scheme while the scheme splits and the
tables compact: nothing lost, nothing doubled (separate processes, which split the scheme
too, racing each other; local disk and S3)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd

INGESTS = 12
INGESTS_S3 = 6
"""On moto S3 each commit costs some 10x local disk's: half the ingests still race four scheme
splits (two per writer) against the test's own splits and compactions."""
ROWS = 40

_WORKER = r"""
import json, sys, time
from pathlib import Path
import pyarrow as pa
import sediment as sd

args = json.loads(sys.argv[1])
store = sd.Store.open(args["uri"], **args["options"])
table = store.table(args["table"])
key = args["key"]
sync = Path(args["sync"])
(sync / f"ready-{args['table']}").touch()
while not (sync / "go").exists():
    time.sleep(0.005)
for i in range(args["ingests"]):
    keys = [f"k{(i * args['rows'] + j) * 7 % 1000:04d}" for j in range(args["rows"])]
    table.ingest(pa.table({key: keys, "n": [i] * len(keys)}))
    if i % 3 == 2:  # the writers split the scheme too, racing each other and the test
        store.split_scheme("users")
        table.compact()
print(json.dumps({"table": args["table"], "version": table.version}))
"""


def schema(key: str) -> sd.Schema:
    return sd.Schema(row_keys=[(key, pa.string())], values=[("n", pa.int64())])


def expected_keys(ingests: int = INGESTS) -> Counter[str]:
    return Counter(f"k{(i * ROWS + j) * 7 % 1000:04d}" for i in range(ingests)
                   for j in range(ROWS))


@pytest.mark.slow  # processes racing for a minute: a proof, not an edit-loop check
def test_ingest_into_two_members_while_the_scheme_splits(
        store_uri: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    uri, options = store_uri
    ingests = INGESTS_S3 if uri.startswith("s3://") else INGESTS
    store = sd.Store.open(uri, create=True, **options)
    store.create_scheme("users", row_keys=[("key", pa.string())],
                        properties={"partition.split.threshold": 60})
    props = {"state.cache.refresh_seconds": 0}
    u = store.create_table("u", schema("key"), scheme="users", properties=props)
    o = store.create_table("o", schema("user"), scheme="users", properties=props)
    sync = tmp_path / "sync"
    sync.mkdir()
    procs = []
    for name, key in (("u", "key"), ("o", "user")):
        args = {"uri": uri, "options": options, "table": name, "key": key,
                "sync": str(sync), "ingests": ingests, "rows": ROWS}
        procs.append(subprocess.Popen([sys.executable, "-c", _WORKER, json.dumps(args)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    try:
        deadline = time.monotonic() + 60
        while len(list(sync.glob("ready-*"))) < 2:
            assert time.monotonic() < deadline, "workers did not start"
            assert all(p.poll() is None for p in procs), [p.stderr.read() for p in procs
                                                          if p.stderr]
            time.sleep(0.02)
        (sync / "go").touch()
        splits = 0
        while any(p.poll() is None for p in procs):
            splits += store.split_scheme("users").splits
            u.compact()
            o.compact()
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    store.maintain()
    assert splits + store.describe_scheme("users").leaves > 2
    want = expected_keys(ingests)
    for t, key in ((u, "key"), (o, "user")):
        got = t.query()
        assert got.num_rows == ingests * ROWS
        assert Counter(got.column(key).to_pylist()) == want
        leaves = {p.id for p in t.partitions() if p.is_leaf}
        assert leaves == {p.id for p in u.partitions() if p.is_leaf}
    j = sd.join(u, o)
    assert j.num_rows == sum(c * c for c in want.values())
