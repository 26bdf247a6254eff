"""The HTTP endpoint Prometheus scrapes (``--metrics-port`` of ``sediment serve``,
``sediment maintain --loop`` and ``sediment dashboard``): ``GET /metrics`` in a thread of the
process, on the standard library's WSGI server (no web stack needed).

It keeps the rules of every Sediment service (:mod:`sediment.access`): loopback by default;
any other bind needs a bearer token, which every scrape must then send; and, whatever the bind,
the dashboard's Host check (:func:`sediment.access.allowed_hosts` and
:func:`~sediment.access.host_of_header`, as :class:`~sediment.access.HostCheck` applies them)
so that a web page re-pointed at the machine (DNS rebinding) reads nothing from it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from sediment.access import MISDIRECTED, allowed_hosts, host_of_header, is_loopback, same_token
from sediment.errors import SedimentError

log = logging.getLogger("sediment.metrics")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class MetricsEndpointError(SedimentError):
    """A metrics endpoint that would be open to the network without a token, or a bad
    address or port for it."""


def check_bind(host: str, port: int, token: str | None, allowed: Iterable[str] = ()) -> None:
    """Refuse, before anything is opened, a bind beyond loopback without a token, a port
    out of range and a Host name that is no host name."""
    if not 0 <= port <= 65535:
        raise MetricsEndpointError(f"--metrics-port {port} is not a port number")
    if not is_loopback(host) and not token:
        raise MetricsEndpointError(
            f"refusing to serve metrics on {host}: a non-loopback address needs a token "
            f"(scrapes then send it as a bearer token); or bind 127.0.0.1")
    try:
        allowed_hosts(host, allowed)
    except ValueError as e:
        raise MetricsEndpointError(f"metrics endpoint: {e}") from None


class _Threading(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        log.debug("metrics scrape: " + format, *args)


class MetricsEndpoint:
    """``GET /metrics`` of this process's registry on ``host:port`` (0: any free port,
    :attr:`port` says which), served by a daemon thread until :meth:`close`."""

    def __init__(self, host: str, port: int, *, token: str | None = None,
                 allowed: Iterable[str] = ()) -> None:
        check_bind(host, port, token, allowed)
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        from sediment.metrics import enable

        self.registry = enable()
        self._generate = generate_latest
        self._content_type = CONTENT_TYPE_LATEST
        self.allowed = allowed_hosts(host, allowed)
        self.token = token
        self._server = make_server(host.strip("[]"), port, self._app,
                                   server_class=_Threading, handler_class=_Quiet)
        self.port = int(self._server.server_port)
        # a short poll: close() waits for the loop to see it (the default waits up to 0.5 s)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True, name="sediment-metrics")
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        host = host_of_header(environ.get("HTTP_HOST", ""))
        if host not in self.allowed:
            return _plain(start_response, f"{MISDIRECTED} Misdirected Request",
                          b"misdirected request: this server does not answer that Host name\n")
        if self.token is not None:
            given = environ.get("HTTP_AUTHORIZATION", "")
            if not given.startswith("Bearer ") or not same_token(given[7:].strip(),
                                                                  self.token):
                return _plain(start_response, "401 Unauthorized", b"a bearer token is needed\n",
                              [("WWW-Authenticate", "Bearer")])
        if environ.get("PATH_INFO") != "/metrics":
            return _plain(start_response, "404 Not Found", b"metrics are at /metrics\n")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return _plain(start_response, "405 Method Not Allowed", b"GET /metrics\n")
        body = self._generate(self.registry)
        start_response("200 OK", [("Content-Type", self._content_type),
                                  ("Content-Length", str(len(body))),
                                  ("Cache-Control", "no-store")])
        return [body]


def _plain(start_response: StartResponse, status: str, body: bytes,
           extra: list[tuple[str, str]] | None = None) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body))),
                            ("X-Content-Type-Options", "nosniff"),
                            ("Cache-Control", "no-store"), *(extra or [])])
    return [body]
