"""Flight puts and deletes with an idempotency key: a retry after a server restart (or to
another server over the same store) commits nothing again."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd


@pytest.mark.slow
def test_a_keyed_put_retried_across_a_server_restart_commits_once(
        store: sd.Store, start_server: Callable[..., Server]) -> None:
    table = store.create_table("keyed", SCHEMA)
    data = rows(["a", "b", "c"])
    first = start_server(store.uri)
    with first.connect() as c:
        put = c.table("keyed").ingest(data, idempotency_key="put-1")
        deleted = c.table("keyed").delete(keys=["a"], idempotency_key="del-1")
    first.stop()  # the answers may have been lost: the client retries elsewhere
    second = start_server(store.uri)
    with second.connect() as c:
        remote = c.table("keyed")
        again = remote.ingest(data, idempotency_key="put-1")
        assert again.version == put.version and again.replayed and not put.replayed
        assert remote.delete(keys=["a"], idempotency_key="del-1") == deleted
        with pytest.raises(sd.IdempotencyKeyReusedError, match="put-1"):
            remote.ingest(rows(["z"]), idempotency_key="put-1")
        with pytest.raises(sd.IdempotencyKeyReusedError, match="del-1"):
            remote.delete(keys=["b"], idempotency_key="del-1")
    assert table.version == deleted
    assert sorted(store.table("keyed").query().column("key").to_pylist()) == ["b", "c"]
