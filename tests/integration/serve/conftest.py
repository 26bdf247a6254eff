"""Fixtures of the Flight service tests: servers started and stopped per test module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from serve_helpers import Server

import sediment as sd


@pytest.fixture(scope="module")
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Server]]:
    """``start_server(store_uri, *args, env=..., ...)``: a server, stopped at module end."""
    started: list[Server] = []

    def start(store: str, *args: str, env: dict[str, str] | None = None,
              **kwargs: Any) -> Server:
        log = tmp_path_factory.mktemp("serve") / "server.log"
        s = Server(store, list(args), log, env, **kwargs)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> sd.Store:
    """A store of the module's own (a module needing another kind defines its own)."""
    return sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)


@pytest.fixture(scope="module")
def server(store: sd.Store, start_server: Callable[..., Server]) -> Server:
    """A server on the module's ``store``, stopped at module end."""
    return start_server(store.uri)
