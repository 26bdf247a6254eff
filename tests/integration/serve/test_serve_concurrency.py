"""``sediment serve`` under load and when stopped: concurrent clients see committed versions
only and lose nothing; SIGTERM lets a running put commit; kill -9 mid-put leaves nothing."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd

FRESH = {"state.cache.refresh_seconds": 0.0}


@pytest.fixture
def store(tmp_path: Any) -> sd.Store:
    return sd.Store.open(str(tmp_path / "s"), create=True)


@pytest.mark.slow
def test_eight_clients_mixing_ingest_and_queries(store: sd.Store, start_server: Any) -> None:
    local = store.table("events") if "events" in store.tables() else \
        store.create_table("events", SCHEMA, split_points=["w2", "w5"], properties=FRESH)
    server = start_server(store.uri)
    writers, batches, per_batch = 4, 6, 50
    answers: list[frozenset[str]] = []
    stop = threading.Event()

    def write(w: int) -> list[int]:
        table = server.connect().table("events")
        versions = []
        for b in range(batches):
            keys = [f"w{w}-{b:02d}-{i:03d}" for i in range(per_batch)]
            versions.append(table.ingest(rows(keys, b * per_batch)).version)
        return versions

    def read(r: int) -> None:
        table = server.connect().table("events")
        while not stop.is_set():
            got = table.query(columns=["key"]) if r % 2 else table.scan(columns=["key"]
                                                                         ).read_all()
            keys = got.column("key").to_pylist()
            assert keys == sorted(keys)
            answers.append(frozenset(keys))
            assert len(keys) == len(answers[-1])  # no record twice

    with ThreadPoolExecutor(8) as pool:
        readers = [pool.submit(read, r) for r in range(8 - writers)]
        committed = [v for f in [pool.submit(write, w) for w in range(writers)]
                     for v in f.result()]
        stop.set()
        for f in readers:
            f.result()
    final = local.query()
    keys = final.column("key").to_pylist()
    assert len(keys) == len(set(keys)) == writers * batches * per_batch
    # every answer equals the table at some committed version
    versions = {frozenset(local.query(columns=["key"], version=v).column("key").to_pylist())
                for v in range(1, local.version + 1)}
    assert len(answers) > 0 and all(a in versions for a in answers)
    # puts committed together (group commit) share a version; every version is some put's
    assert sorted(set(committed)) == list(range(2, local.version + 1))


def _put_running(server: Server) -> None:
    """Wait until the server is serving the put (its first batch may be taken from the
    generator before the call reaches the server): the put holds a slot (stats takes none)."""
    deadline = time.monotonic() + 20
    while server.connect().stats()["active_calls"] < 1:
        assert time.monotonic() < deadline, "the put never reached the server"
        time.sleep(0.02)


def _slow_batches(first: threading.Event, go_on: threading.Event, n: int
                  ) -> Iterator[pa.RecordBatch]:
    for i in range(n):
        yield rows([f"slow-{i:03d}"], i).to_batches()[0]
        if i == 0:
            first.set()
            go_on.wait(20)


@pytest.mark.slow
def test_sigterm_lets_a_running_put_commit_then_exits_zero(store: sd.Store,
                                                          start_server: Any) -> None:
    local = store.create_table("events", SCHEMA, properties=FRESH)
    server: Server = start_server(store.uri)
    first, go_on = threading.Event(), threading.Event()
    result: list[Any] = []
    putter = threading.Thread(target=lambda: result.append(
        server.connect().table("events").ingest(_slow_batches(first, go_on, 5))))
    putter.start()
    assert first.wait(20)
    _put_running(server)
    server.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while True:  # new calls are refused while the put runs on
        try:
            server.connect().health()
        except sd.SedimentError:
            break
        assert time.monotonic() < deadline, "calls still accepted after SIGTERM"
        time.sleep(0.05)
    assert server.proc.poll() is None and not result
    go_on.set()
    putter.join(30)
    assert result and result[0].rows == 5
    assert server.proc.wait(30) == 0
    assert local.version == result[0].version and local.query().num_rows == 5


@pytest.mark.slow
def test_a_put_held_open_past_the_shutdown_grace_commits_nothing(store: sd.Store,
                                                                 start_server: Any) -> None:
    local = store.create_table("events", SCHEMA, properties=FRESH)
    server: Server = start_server(store.uri, "--shutdown-grace", "1")
    first, never = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def put() -> None:
        try:
            server.connect().table("events").ingest(_slow_batches(first, never, 5))
        except BaseException as e:  # noqa: BLE001 - the server went away under it
            errors.append(e)

    putter = threading.Thread(target=put, daemon=True)
    putter.start()
    assert first.wait(20)
    _put_running(server)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(30) == 1  # gave up on the put after its grace
    assert time.monotonic() - started < 15
    never.set()
    putter.join(30)
    assert errors, "the put reported success from a server that exited"
    assert local.version == 1 and local.query().num_rows == 0
    assert "exiting without them" in server.log.read_text()


@pytest.mark.slow
def test_kill_9_during_a_put_leaves_nothing_partial(store: sd.Store, start_server: Any) -> None:
    local = store.create_table("events", SCHEMA, properties=FRESH)
    local.ingest(rows(["before"]))
    expected = local.query()
    server: Server = start_server(store.uri)
    first, go_on = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def put() -> None:
        try:
            server.connect().table("events").ingest(_slow_batches(first, go_on, 5))
        except BaseException as e:  # noqa: BLE001 (the dead server's error is expected)
            errors.append(e)

    putter = threading.Thread(target=put)
    putter.start()
    assert first.wait(20)
    time.sleep(0.2)  # the first batch reaches the server
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    go_on.set()
    putter.join(30)
    assert errors and isinstance(errors[0], sd.SedimentError)
    fresh = sd.Store.open(store.uri).table("events")
    assert fresh.version == local.version == 2
    assert fresh.query().equals(expected)
    # a new server over the same store serves the same, whole answer
    again = start_server(store.uri)
    assert again.connect().table("events").query().equals(expected)


CLIENT_DIES = """
import sys, time, pyarrow as pa, pyarrow.flight as fl
client = fl.FlightClient(sys.argv[1])
table = pa.table({"key": ["dies-1", "dies-2", "dies-3"], "ts": [1, 2, 3], "value": [1, 2, 3],
                  "note": ["a", "b", "c"]})
writer, _ = client.do_put(fl.FlightDescriptor.for_command(b'{"table": "events"}'),
                          table.schema)
writer.write_table(table)
print("sent", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
def test_a_plain_flight_client_killed_mid_put_commits_nothing(store: sd.Store,
                                                              start_server: Any) -> None:
    """No end marker (a plain Flight client): the stream breaking is what aborts the put."""
    import subprocess
    import sys

    local = store.create_table("events", SCHEMA, properties=FRESH)
    server: Server = start_server(store.uri)
    client = subprocess.Popen([sys.executable, "-c", CLIENT_DIES, server.uri],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "sent"
        time.sleep(0.5)  # the rows reach the server, which waits for more
        assert local.version == 1
    finally:
        client.kill()
        client.wait(10)
    deadline = time.monotonic() + 10
    while "method=do_put" not in server.log.read_text():
        assert time.monotonic() < deadline, server.log.read_text()[-2000:]
        time.sleep(0.05)
    line = next(ln for ln in server.log.read_text().splitlines() if "method=do_put" in ln)
    assert "rows=3 " in line and "outcome=error" in line, line
    assert local.version == 1 and local.query().num_rows == 0
