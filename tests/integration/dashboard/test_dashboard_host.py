"""DNS rebinding: the dashboard answers only the ``Host`` names it is reached by (the bound
address, ``localhost``, ``127.0.0.1``, ``[::1]`` and ``--allowed-host`` names), with 421 and
before any work otherwise, token or not. Requests go to a real ``sediment dashboard`` process
as raw HTTP (``http.client`` and a socket), so the forged headers reach it as sent."""

from __future__ import annotations

import asyncio
import http.client
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from dashboard_helpers import TOKEN, Server, start, stop
from typer.testing import CliRunner

import sediment as sd
from helpers import SCHEMA, rows

ALLOWED = ("dash.example", "192.0.2.7", "2001:db8::7")
PATHS = ("/api/store", "/api/health", "/", "/tables/events", "/tables/events/query?keys=k1",
         "/api/tables/events", "/api/tables/events/query?keys=k1", "/static/plotly.min.js",
         "/login", "/no-such-page")


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    store = sd.Store.open(str(tmp_path_factory.mktemp("host-store")), create=True)
    store.create_table("events", SCHEMA).ingest(rows(20, seed=1))
    return store.uri


def _args() -> tuple[str, ...]:
    return tuple(a for name in ALLOWED for a in ("--allowed-host", name))


@pytest.fixture(scope="module")
def open_dash(small_store: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """No token: the default on loopback, the case DNS rebinding attacks."""
    proc, srv = start(small_store, tmp_path_factory.mktemp("host") / "open.log", args=_args())
    yield srv
    stop(proc)


@pytest.fixture(scope="module")
def token_dash(small_store: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    proc, srv = start(small_store, tmp_path_factory.mktemp("host") / "token.log", token=TOKEN,
                      args=_args())
    yield srv
    stop(proc)


def _port(server: Server) -> int:
    port = urlsplit(server.url).port
    assert port is not None
    return port


def request(server: Server, path: str, hosts: list[str], *, method: str = "GET",
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """``method path`` with exactly the ``Host`` headers given (none, one or several)."""
    conn = http.client.HTTPConnection("127.0.0.1", _port(server), timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for host in hosts:
            conn.putheader("Host", host)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.putheader("Content-Length", "0")
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def forged(port: int) -> list[str]:
    """Host headers a page re-pointed at the machine sends, and malformed ones."""
    return ["evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}",
            f"localhost.evil.example:{port}", "dash.example.evil.example", "xdash.example",
            "127.0.0.2", f"0.0.0.0:{port}", f"[::2]:{port}", f"[::ffff:127.0.0.1]:{port}",
            "[2001:db8::8]", f"::1:{port}", "[::1", f"localhost:{port}x", "localhost:",
            "localhost:-1", f"user@localhost:{port}", "localhost/x", "*", "%6cocalhost"]


def accepted(port: int) -> list[str]:
    """The names the dashboard answers, with and without ports, in any case."""
    return [f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", "LocalHost", "localhost.",
            f"[::1]:{port}", "[::1]", f"[0:0:0:0:0:0:0:1]:{port}", "dash.example",
            f"DASH.Example:{port}", "192.0.2.7:80", "[2001:db8::7]", "[2001:DB8:0::7]:8443"]


def test_forged_hosts_get_421_on_every_route(open_dash: Server) -> None:
    port = _port(open_dash)
    for host in forged(port):
        for path in PATHS:
            status, headers, body = request(open_dash, path, [host])
            assert status == 421, (host, path, status, body[:200])
            assert b"events" not in body and b"misdirected request" in body, (host, path)
            assert headers["content-type"].startswith("text/plain")
        status, _, body = request(open_dash, "/login", [host], method="POST")
        assert status == 421 and b"events" not in body


def test_allowed_hosts_are_answered(open_dash: Server) -> None:
    for host in accepted(_port(open_dash)):
        status, _, body = request(open_dash, "/api/store", [host])
        assert status == 200 and b'"events"' in body, (host, status, body[:200])
        status, _, body = request(open_dash, "/api/tables/events/query?keys=k1", [host])
        assert status == 200, (host, status, body[:200])


def test_missing_or_repeated_host_is_refused(open_dash: Server) -> None:
    port = _port(open_dash)
    status, _, body = request(open_dash, "/api/store",
                              [f"127.0.0.1:{port}", f"evil.example:{port}"])
    assert status in (400, 421) and b"events" not in body  # the server or the check refuses
    status, _, body = request(open_dash, "/api/store", [f"localhost:{port}", "localhost"])
    assert status in (400, 421) and b"events" not in body
    # HTTP/1.0 needs no Host: a request without one is refused all the same
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET /api/store HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.split(b"\r\n", 1)[0].split()[1] == b"421" and b"events" not in answer


def test_the_host_check_comes_before_the_token(token_dash: Server) -> None:
    port = _port(token_dash)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/api/store", "/", f"/?token={TOKEN}", "/login"):
        status, headers, body = request(token_dash, path, [f"evil.example:{port}"],
                                        headers=bearer)
        assert status == 421 and "set-cookie" not in headers and b"events" not in body
    status, _, body = request(token_dash, "/api/store", [f"dash.example:{port}"], headers=bearer)
    assert status == 200 and b'"events"' in body
    assert request(token_dash, "/api/store", [f"dash.example:{port}"])[0] == 401
    # the token kept from a URL is a SameSite=Strict cookie, as before
    status, headers, _ = request(token_dash, f"/?token={TOKEN}", [f"localhost:{port}"])
    assert status == 303
    attributes = [a.strip().lower() for a in headers["set-cookie"].split(";")]
    assert "samesite=strict" in attributes and "httponly" in attributes


@pytest.mark.parametrize("name", ["dash.example:8050", "http://dash.example", "*", "",
                                  "dash example", "[::1", "dash.example/x"])
def test_a_malformed_allowed_host_is_refused_before_anything(small_store: str, name: str,
                                                              tmp_path: Path) -> None:
    from sediment.cli.app import app

    result = CliRunner().invoke(app, ["dashboard", "--store", str(tmp_path / "none"),
                                      "--allowed-host", name])
    assert result.exit_code == 1, result.output
    assert "--allowed-host" in result.output and "is not a host name" in result.output
    assert not (tmp_path / "none").exists()  # the store was not even opened


async def _asgi_get(app: Any, host: bytes) -> int:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": "/api/health", "raw_path": b"/api/health",
             "query_string": b"", "root_path": "", "headers": [(b"host", host)],
             "client": ("127.0.0.1", 5), "server": ("127.0.0.1", 8050)}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])


def test_the_python_entry_point_takes_allowed_hosts(small_store: str) -> None:
    from sediment.dashboard.app import create_app
    from sediment.dashboard.security import DashboardSecurityError

    store = sd.Store.open(small_store)
    app = create_app(store, host="10.1.2.3", allowed_hosts=["dash.example"])
    for host, status in ((b"dash.example:8050", 200), (b"10.1.2.3", 200), (b"[::1]", 200),
                         (b"evil.example", 421), (b"10.1.2.4", 421)):
        assert asyncio.run(_asgi_get(app, host)) == status, host
    assert asyncio.run(_asgi_get(create_app(store), b"dash.example")) == 421
    with pytest.raises(DashboardSecurityError, match="--allowed-host.*not a host name"):
        create_app(store, allowed_hosts=["dash.example:80"])
