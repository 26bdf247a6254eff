"""The dashboard's token: given once (``?token=`` or the login form) and kept in an HttpOnly
cookie, or sent as ``Authorization: Bearer`` to the JSON API; and the command's refusal to
bind beyond loopback without one, before anything is bound."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from dashboard_helpers import TOKEN, Server, fetch, free_port


def cookie_of(headers: dict[str, str]) -> str:
    cookie = headers["set-cookie"]
    attributes = [a.strip().lower() for a in cookie.split(";")]
    assert "httponly" in attributes and "samesite=strict" in attributes and "path=/" in attributes
    return cookie.split(";", 1)[0]


def test_api_needs_the_token(token_server: Server) -> None:
    url = token_server.url + "/api/store"
    code, headers, body = fetch(url)
    assert code == 401 and b"needs its token" in body
    assert headers["www-authenticate"].startswith("Bearer")
    assert fetch(url, headers={"Authorization": "Bearer wrong"})[0] == 401
    assert fetch(url, headers={"Authorization": f"Basic {TOKEN}"})[0] == 401
    code, _, body = fetch(url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert code == 200 and b'"events"' in body
    for path in ("/api/tables/events", "/api/tables/events/partitions",
                 "/api/tables/events/query", "/static/plotly.min.js", "/static/dashboard.js"):
        assert fetch(token_server.url + path)[0] == 401 or path.startswith("/static/")
        assert fetch(token_server.url + path,
                     headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200


def test_pages_send_to_the_login_form(token_server: Server) -> None:
    for path in ("/", "/tables/events", "/static/plotly.min.js"):
        code, headers, _ = fetch(token_server.url + path, follow=False)
        assert code == 303
        assert headers["location"] == "/login?" + urllib.parse.urlencode({"next": path})
    code, _, body = fetch(token_server.url + "/login?next=/tables/events")
    assert code == 200 and b'type="password"' in body
    assert b'value="/tables/events"' in body


def test_token_in_the_url_becomes_a_cookie(token_server: Server) -> None:
    code, headers, _ = fetch(token_server.url + f"/tables/events?token={TOKEN}&x=1",
                             follow=False)
    assert code == 303 and headers["location"] == "/tables/events?x=1"  # the token is gone
    cookie = cookie_of(headers)
    code, _, body = fetch(token_server.url + "/tables/events", headers={"Cookie": cookie})
    assert code == 200 and b'data-view="table"' in body
    assert fetch(token_server.url + "/api/store", headers={"Cookie": cookie})[0] == 200
    assert fetch(token_server.url + "/", headers={"Cookie": "sediment_dashboard=nope"},
                 follow=False)[0] == 303
    code, headers, _ = fetch(token_server.url + "/?token=wrong", follow=False)
    assert code == 303 and "wrong=1" in headers["location"] and "set-cookie" not in headers


def test_login_form(token_server: Server) -> None:
    def post(token: str, next_path: str) -> tuple[int, dict[str, str], bytes]:
        body = urllib.parse.urlencode({"token": token, "next": next_path}).encode()
        return fetch(token_server.url + "/login", data=body, follow=False,
                     headers={"Content-Type": "application/x-www-form-urlencoded"})

    code, headers, body = post("wrong", "/tables/events")
    assert code == 401 and b"not this dashboard" in body and "set-cookie" not in headers
    code, headers, _ = post(TOKEN, "/tables/events")
    assert code == 303 and headers["location"] == "/tables/events"
    cookie = cookie_of(headers)
    assert fetch(token_server.url + "/", headers={"Cookie": cookie})[0] == 200
    for elsewhere in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        code, headers, _ = post(TOKEN, elsewhere)
        assert code == 303 and headers["location"] == "/"  # never another site


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("host", ["0.0.0.0", "example.com"])
def test_non_loopback_bind_without_token_is_refused(dash_store: str, host: str,
                                                    tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SEDIMENT_DASHBOARD_TOKEN"}
    proc = subprocess.run([sys.executable, "-m", "sediment.cli", "dashboard", "--store",
                           dash_store, "--host", host, "--port", str(port)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: refusing to bind the dashboard to")
    assert "needs a token" in proc.stderr and _port_is_free(port)
    empty = tmp_path / "token"
    empty.write_text("\n")
    proc = subprocess.run([sys.executable, "-m", "sediment.cli", "dashboard", "--store",
                           dash_store, "--host", host, "--token-file", str(empty)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1 and "is empty" in proc.stderr


def test_security_rules() -> None:
    from sediment.access import is_loopback, same_token
    from sediment.dashboard.auth import safe_next
    from sediment.dashboard.security import DashboardSecurityError, check_bind

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""))
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", "t")
    with pytest.raises(DashboardSecurityError, match="needs a token"):
        check_bind("0.0.0.0", "")
    assert same_token("abc", "abc") and not same_token("abd", "abc")
    assert not same_token("", "abc") and not same_token(None, "abc")
    assert not same_token("abcd", "abc")
    assert [safe_next(p) for p in ("/t?x=1", "//x", "http://x", None, "x", "/\\x")] == \
        ["/t?x=1", "/", "/", "/", "/", "/"]
