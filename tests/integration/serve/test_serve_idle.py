"""Idle clients cannot hold ``sediment serve``: with ``--max-concurrency 1``, a ``do_get`` whose
client stops reading and a ``do_put`` whose client sends nothing hold the one slot only until
``--idle-timeout``; meanwhile ``health`` and ``stats`` answer at once. A real server process,
raw Flight clients."""

from __future__ import annotations

import json
import time
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd
from sediment.errors import ServerBusyError

IDLE = 2.0
NOTE_BYTES = 10_000
BIG_ROWS = 1_500
"""15 MB of answer in 12 leaves (a batch each): more than gRPC buffers (about 7 MB) for a
client that stops reading."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> sd.Store:
    s = sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)
    keys = [f"k{i:05d}" for i in range(BIG_ROWS)]
    big = s.create_table("big", SCHEMA, split_points=keys[125::125],
                         properties={"state.cache.refresh_seconds": 0})
    table = rows(keys)
    big.ingest(table.set_column(3, "note", pa.array(["x" * NOTE_BYTES] * BIG_ROWS)))
    return s


@pytest.fixture(scope="module")
def server(store: sd.Store, start_server: Any) -> Server:
    return start_server(store.uri, "--max-concurrency", "1", "--idle-timeout", str(IDLE))


def health_at_once(server: Server) -> None:
    """``health`` and ``stats`` answer well within the idle timeout, slot or not."""
    with server.connect() as c:
        started = time.monotonic()
        assert c.health()["status"] == "ok"
        stats = c.stats()
        assert time.monotonic() - started < IDLE / 2
    assert stats["max_concurrency"] == 1


def wait_for_the_slot(server: Server, method: str) -> float:
    """Seconds until a data call is admitted again (busy until then), the idle line logged."""
    started = time.monotonic()
    while True:
        try:
            with server.connect() as c:
                c.table("big").describe()
            break
        except ServerBusyError:
            assert time.monotonic() - started < IDLE + 10, "the slot was never freed"
            time.sleep(0.05)
    waited = time.monotonic() - started
    log = server.log.read_text()
    assert f"idle method={method} table=big: waited on its client for more than" in log
    return waited


def test_a_do_get_that_stops_reading_frees_its_slot(server: Server, store: sd.Store) -> None:
    client = fl.FlightClient(server.uri)
    # the whole query in one call, a batch per leaf
    reader = client.do_get(fl.Ticket(b'{"query": {"table": "big"}, "leaf": null}'))
    reader.read_chunk()  # one batch, then nothing more is read
    try:
        health_at_once(server)
        with pytest.raises(ServerBusyError, match="--max-concurrency 1"):
            server.connect().table("big").describe()
        health_at_once(server)
        assert wait_for_the_slot(server, "do_get") > IDLE / 2
        health_at_once(server)
    finally:
        reader.cancel()
    assert server.connect().table("big").query(keys=["k00007"]).num_rows == 1


def test_a_do_put_that_sends_nothing_frees_its_slot(server: Server, store: sd.Store) -> None:
    before = store.table("big").version
    client = fl.FlightClient(server.uri)
    descriptor = fl.FlightDescriptor.for_command(b'{"table": "big", "end_marker": true}')
    writer, _meta = client.do_put(descriptor, SCHEMA.to_arrow())
    try:
        health_at_once(server)
        with pytest.raises(ServerBusyError, match="--max-concurrency 1"):
            server.connect().table("big").describe()
        assert wait_for_the_slot(server, "do_put") > IDLE / 2
        health_at_once(server)
        # the abandoned put refuses what comes late, and commits nothing
        with pytest.raises(fl.FlightError, match="idle-timeout.*abandoned"):
            writer.write_table(rows(["late"]))
            writer.write_metadata(pa.py_buffer(b"sediment:end-of-stream"))
            writer.done_writing()
            writer.close()
    finally:
        try:
            writer.close()
        except fl.FlightError:
            pass
    assert store.table("big").version == before
    assert store.table("big").query(keys=["late"]).num_rows == 0


def test_a_slow_but_steady_client_is_not_idle(server: Server, store: sd.Store) -> None:
    """Idle is time without progress, not a call's length: a put sending a batch every
    IDLE/3 seconds for longer than IDLE commits."""
    client = fl.FlightClient(server.uri)
    descriptor = fl.FlightDescriptor.for_command(b'{"table": "big", "end_marker": true}')
    writer, meta = client.do_put(descriptor, SCHEMA.to_arrow())
    for i in range(5):
        writer.write_table(rows([f"steady-{i}"], 100 + i))
        time.sleep(IDLE / 3)
    writer.write_metadata(pa.py_buffer(b"sediment:end-of-stream"))
    writer.done_writing()
    answer = json.loads(meta.read().to_pybytes())
    writer.close()
    assert answer["rows"] == 5
    assert store.table("big").query(ranges=[sd.Range("steady-", "steady.")]).num_rows == 5


def test_the_idle_timeout_is_checked_on_the_command_line() -> None:
    from typer.testing import CliRunner

    from sediment.cli.app import app

    for value in ("0", "-1", "nan", "1e9"):
        result = CliRunner().invoke(app, ["serve", "--store", "/nonexistent/x",
                                          "--idle-timeout", value])
        assert result.exit_code != 0, value
        assert "--idle-timeout" in result.output, (value, result.output)
