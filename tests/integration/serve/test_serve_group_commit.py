"""Group commit in ``sediment serve``: concurrent puts (threads and processes) against a pandas
reference, committed in fewer transactions than puts; one bad put fails alone; a flood is
refused as busy with a hint; ``--group-commit-ms 0`` commits each put alone; a server killed
after a group commit landed, before its answers: retries with keys land every record once."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd
from sediment.errors import DataError, ServerBusyError

HERE = Path(__file__).resolve().parent
FRESH = {"state.cache.refresh_seconds": 0.0}


@pytest.fixture
def store(tmp_path: Path) -> sd.Store:
    return sd.Store.open(str(tmp_path / "s"), create=True)


def client_rows(client: int, put: int, n: int = 10) -> pa.Table:
    """Put ``put`` of client ``client``: keys shared by every client (equal record keys:
    ts 0), values telling who wrote them and when."""
    return pa.table({"key": [f"k{j}" for j in range(n)], "ts": [0] * n,
                     "value": [client * 1000 + put] * n,
                     "note": [f"c{client}"] * n}, schema=SCHEMA.to_arrow())


def own_rows(client: int, put: int, n: int = 5) -> pa.Table:
    """Records of keys only client ``client`` writes (its upserts: the last put wins)."""
    return pa.table({"key": [f"c{client}-{j}" for j in range(n)], "ts": [0] * n,
                     "value": [put] * n, "note": [f"c{client}"] * n},
                    schema=SCHEMA.to_arrow())


def check_against_reference(got_table: pa.Table, sent: list[pa.Table]) -> None:
    """``got_table`` holds exactly the records sent (a multiset), and the records of one key
    from one client are in the order that client put them (each put answered before its
    next)."""
    got = got_table.to_pandas()
    expected = pa.concat_tables(sent).to_pandas()
    cols = ["key", "ts", "value", "note"]
    pd.testing.assert_frame_equal(
        got.sort_values(cols).reset_index(drop=True)[cols],
        expected.sort_values(cols).reset_index(drop=True)[cols], check_dtype=False)
    for _, values in got.groupby(["key", "note"], sort=False)["value"]:
        assert list(values) == sorted(values)  # stored order of equal keys = put order


def test_concurrent_clients_lose_nothing_and_share_commits(
        store: sd.Store, start_server: Callable[..., Server]) -> None:
    """8 client threads, each 6 ingests (of keys every client writes) then 3 upserts (of its
    own keys), at once: every record once, equal keys in each client's order, the last
    upsert winning, and fewer commits than puts; the server's stats count every put in
    where the time went."""
    table = store.create_table("events", SCHEMA, split_points=["k5"], properties=FRESH)
    server = start_server(store.uri)
    start = table.version
    clients, ingests, upserts = 8, 6, 3
    sent: list[pa.Table] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def work(c: int) -> None:
        remote = server.connect().table("events")
        barrier.wait()
        for i in range(ingests):
            data = client_rows(c, i)
            remote.ingest(data)
            with lock:
                sent.append(data)
        for i in range(upserts):
            remote.upsert(own_rows(c, i))

    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(work, c) for c in range(clients)]:
            f.result()
    shared = table.query(ranges=[sd.Range("k", "l")])
    check_against_reference(shared, sent)
    owned = table.query(ranges=[sd.Range("c", "d")]).to_pandas()
    assert len(owned) == clients * 5 and set(owned["value"]) == {upserts - 1}
    puts = clients * (ingests + upserts)
    commits = table.version - start
    assert commits < puts, (commits, puts)
    stats = server.connect().stats()["group_commit"]
    assert stats["groups"] == commits and stats["held_bytes"] == 0
    # where the puts' time went: every put counted once, each phase taking some time
    spent = stats["seconds"]["events"]
    assert spent["puts"] == puts
    assert all(spent[k] > 0 for k in ("answered_after_cut", "staging", "committing"))
    assert spent["waited"] >= 0


CLIENT_SCRIPT = """
import json, sys
import pyarrow as pa
import sediment as sd
from sediment.errors import DataError, ServerBusyError
uri, proc, puts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
schema = pa.schema([("key", pa.string()), ("ts", pa.int64()), ("value", pa.int64()),
                    ("note", pa.string())])
remote = sd.connect(uri).table("events")
versions = []
for i in range(puts):
    data = pa.table({"key": [f"k{j}" for j in range(10)], "ts": [0] * 10,
                     "value": [proc * 1000 + i] * 10, "note": [f"p{proc}"] * 10}, schema=schema)
    versions.append(remote.ingest(data, idempotency_key=f"p{proc}-{i}").version)
print(json.dumps(versions))
"""


@pytest.mark.slow
def test_client_processes_putting_at_once(store: sd.Store,
                                          start_server: Callable[..., Server]) -> None:
    """Three client processes with keyed puts, beside client threads: every record once,
    each process's equal keys in its order."""
    table = store.create_table("events", SCHEMA, properties=FRESH)
    server = start_server(store.uri)
    procs = [subprocess.Popen([sys.executable, "-c", CLIENT_SCRIPT, server.uri, str(p), "8"],
                              stdout=subprocess.PIPE) for p in range(3)]
    sent = []
    remote = server.connect().table("events")
    for i in range(8):
        data = client_rows(9, i)
        remote.ingest(data)
        sent.append(data)
    for p, proc in enumerate(procs):
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        for i in range(8):
            t = client_rows(p, i)
            sent.append(t.set_column(3, "note", pa.array([f"p{p}"] * 10)))
        assert len(out.splitlines()) == 1
    check_against_reference(table.query(), sent)
    assert table.version - 1 < 4 * 8


def test_one_bad_put_in_a_group_fails_alone(store: sd.Store,
                                            start_server: Callable[..., Server]) -> None:
    """Puts arriving within one window (the table's write.group_commit_ms: 400 ms, over the
    server's default): the one with a record its schema refuses fails with the row named;
    the others commit together, in one transaction."""
    table = store.create_table("events", SCHEMA,
                               properties={**FRESH, "write.group_commit_ms": 400})
    server = start_server(store.uri)
    start = table.version
    barrier = threading.Barrier(5)
    bad = pa.table({"key": ["x", None], "ts": [1, 2], "value": [1, 2], "note": ["a", "b"]})

    def put(i: int) -> Any:
        remote = server.connect().table("events")
        barrier.wait()
        if i == 4:
            with pytest.raises(DataError, match="key") as caught:
                remote.ingest(bad)
            return caught.value
        return remote.ingest(rows([f"g{i}-{j}" for j in range(3)], i * 10))

    with ThreadPoolExecutor(5) as pool:
        results = [f.result() for f in [pool.submit(put, i) for i in range(5)]]
    good = results[:4]
    assert {r.version for r in good} == {start + 1} and table.version == start + 1
    assert all(r.rows == 3 for r in good)
    assert sorted(table.query().column("key").to_pylist()) == \
        sorted(f"g{i}-{j}" for i in range(4) for j in range(3))


def test_a_flood_is_refused_as_busy_with_a_hint(store: sd.Store,
                                                start_server: Callable[..., Server]) -> None:
    """A server holding at most 32 KiB of puts for group commits (groups of 8 KiB), a long
    window, and 12 clients each putting ~6 KB at once: some are refused with ServerBusyError and a
    retry-after hint (nothing of them committed), the rest commit; nothing is held after."""
    table = store.create_table("events", SCHEMA,
                               properties={**FRESH, "write.group_commit_ms": 500})
    server = start_server(store.uri, "--group-commit-max-bytes", str(32 << 10))
    barrier = threading.Barrier(12)

    def put(i: int) -> Any:
        remote = server.connect().table("events")
        barrier.wait()
        try:
            return remote.ingest(rows([f"f{i:02d}-{j:04d}" for j in range(150)]))
        except ServerBusyError as e:
            return e

    with ThreadPoolExecutor(12) as pool:
        answers = [f.result() for f in [pool.submit(put, i) for i in range(12)]]
    busy = [a for a in answers if isinstance(a, ServerBusyError)]
    done = [i for i, a in enumerate(answers) if not isinstance(a, ServerBusyError)]
    assert busy and done
    assert all(b.retry_after is not None and b.retry_after > 0 for b in busy)
    assert all("--group-commit-max-bytes" in str(b) and "retry after" in str(b) for b in busy)
    keys = table.query(columns=["key"]).column("key").to_pylist()
    assert sorted({k.split("-")[0] for k in keys}) == sorted(f"f{i:02d}" for i in done)
    assert len(keys) == 150 * len(done)
    assert server.connect().stats()["group_commit"]["held_bytes"] == 0


def test_group_commit_off_commits_each_put_alone(store: sd.Store,
                                                 start_server: Callable[..., Server]) -> None:
    table = store.create_table("events", SCHEMA, properties=FRESH)
    server = start_server(store.uri, "--group-commit-ms", "0")
    start = table.version

    def put(i: int) -> int:
        return int(server.connect().table("events").ingest(rows([f"o{i}"], i)).version)

    with ThreadPoolExecutor(6) as pool:
        versions = [f.result() for f in [pool.submit(put, i) for i in range(6)]]
    assert sorted(versions) == list(range(start + 1, start + 7)) == \
        list(range(start + 1, table.version + 1))
    assert server.connect().stats()["group_commit"]["groups"] == 0


@pytest.mark.slow
def test_a_server_killed_after_a_group_commit_then_keyed_retries_land_once(
        store: sd.Store, start_server: Callable[..., Server]) -> None:
    """The server dies (SIGKILL) right after its first group commit lands, before any put of
    it is answered: every client sees an error; retried with their keys against a new
    server, each put lands exactly once (those of the landed group are answered with its
    version, the others commit now)."""
    table = store.create_table("events", SCHEMA,
                               properties={**FRESH, "write.group_commit_ms": 300})
    start = table.version
    killer = start_server(store.uri, command=[sys.executable,
                                              str(HERE / "group_commit_killer.py")])
    data = [rows([f"r{i}-{j}" for j in range(4)], i * 10) for i in range(5)]
    barrier = threading.Barrier(5)

    def first_try(i: int) -> BaseException | None:
        remote = killer.connect().table("events")
        barrier.wait()
        try:
            remote.ingest(data[i], idempotency_key=f"put-{i}")
        except sd.SedimentError as e:
            return e
        return None

    with ThreadPoolExecutor(5) as pool:
        errors = [f.result() for f in [pool.submit(first_try, i) for i in range(5)]]
    assert killer.proc.wait(10) == -9
    assert all(e is not None for e in errors)  # no put was answered
    landed = sd.Store.open(store.uri).table("events")
    assert landed.version == start + 1  # the group's commit landed
    in_group = set(landed.query(columns=["key"]).column("key").to_pylist())
    assert in_group
    again = start_server(store.uri)
    remote = again.connect().table("events")
    results = [remote.ingest(d, idempotency_key=f"put-{i}") for i, d in enumerate(data)]
    for d, r in zip(data, results, strict=True):
        if d.column("key")[0].as_py() in in_group:
            assert r.version == start + 1  # answered from the key's record: not written again
            assert r.replayed
        else:
            assert r.version > start + 1 and not r.replayed
    final = sd.Store.open(store.uri).table("events").query()
    check_against_reference(final, data)
    assert final.num_rows == 20


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.faults
def test_group_commit_on_s3_through_the_fault_proxy(
        proxied_s3: Any, start_server: Callable[..., Server]) -> None:
    """A short run on moto S3 behind the fault proxy, with transient faults (resets, 503s,
    lost read answers): 6 client threads of keyed puts, each retried with its key on any
    error, land every record exactly once in fewer commits than puts."""
    from faultproxy import transient_fault_specs

    store = proxied_s3.open_direct()
    table = store.create_table("events", SCHEMA, properties=FRESH)
    start = table.version
    server = start_server(proxied_s3.uri, env=proxied_s3.env())
    proxied_s3.proxy.add_rules(transient_fault_specs(0.02))
    clients, puts = 6, 3
    sent: list[pa.Table] = []
    lock = threading.Lock()

    def work(c: int) -> None:
        remote = server.connect().table("events")
        for i in range(puts):
            data = client_rows(c, i)
            for _attempt in range(5):
                try:
                    remote.ingest(data, idempotency_key=f"c{c}-{i}")
                    break
                except sd.SedimentError:
                    continue
            else:
                raise AssertionError(f"put c{c}-{i} never landed")
            with lock:
                sent.append(data)

    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(work, c) for c in range(clients)]:
            f.result()
    proxied_s3.proxy.clear()
    check_against_reference(table.query(), sent)
    assert table.version - start < clients * puts
