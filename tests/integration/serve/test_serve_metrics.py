"""``sediment serve --metrics-port``: the real server's endpoint, scraped over HTTP, moves
with the requests it serves: its commits, ingested rows, group commits and request times
match what the client did and what the table's history says."""

from __future__ import annotations

from collections.abc import Callable

from serve_helpers import SCHEMA, Server, free_port, rows

import sediment as sd
from support.scrape import scrape, value, wait_for_scrape


def test_the_servers_metrics_move_with_its_requests(
        store: sd.Store, start_server: Callable[..., Server]) -> None:
    port = free_port()
    server = start_server(store.uri, "--metrics-port", str(port))
    before = wait_for_scrape(port, lambda s: True, what="an answer")
    with server.connect() as client:
        client.create_table("m", SCHEMA)
        table = client.table("m")
        for i in range(3):
            table.ingest(rows([f"k{i}a", f"k{i}b"], start=10 * i))
        assert table.query(keys=["k0a"]).num_rows == 1
    after = scrape(port)
    history = sd.Store.open(store.uri).table("m").history()
    adds = sum(1 for e in history if e.kind == "add_files")
    assert adds >= 1  # group commit may join puts: the log says how many commits landed
    assert value(after, "sediment_commits_total", table="m", kind="add_files") == adds
    assert value(after, "sediment_ingest_rows_total", table="m") == 6
    assert value(after, "sediment_group_commit_puts_sum") - \
        value(before, "sediment_group_commit_puts_sum") == 3
    assert value(after, "sediment_group_commit_puts_count") - \
        value(before, "sediment_group_commit_puts_count") == adds
    puts = value(after, "sediment_request_seconds_count", method="do_put")
    assert puts - value(before, "sediment_request_seconds_count", method="do_put") == 3
    assert value(after, "sediment_request_seconds_count", method="do_get") >= 1
    assert value(after, "sediment_files_per_leaf", table="m") >= 1
    assert value(after, "sediment_queue_depth", queue="group_commit") == 0
