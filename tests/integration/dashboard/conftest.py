"""Fixtures of the dashboard tests: the store (built once per module) and the dashboard
servers over it, real processes on 127.0.0.1 stopped at the end of the module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dashboard_helpers import TOKEN, Server, build_store, start, stop


@pytest.fixture(scope="module")
def dash_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_store(tmp_path_factory.mktemp("dash-store"))


@pytest.fixture(scope="module")
def server(dash_store: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("dash-log") / "dashboard.log"
    proc, srv = start(dash_store, log)
    yield srv
    stop(proc)


@pytest.fixture(scope="module")
def token_server(dash_store: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("dash-log") / "dashboard-token.log"
    proc, srv = start(dash_store, log, token=TOKEN)
    yield srv
    stop(proc)
