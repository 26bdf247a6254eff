"""A fault-injecting HTTP/1.1 proxy for S3 tests (standard library only).

The proxy is a real TCP server on 127.0.0.1 in front of an HTTP server (the moto S3 server of
``tests/conftest.py``). S3 clients (boto3, pyarrow's S3 filesystem, worker processes) point
their ``endpoint_url`` at :attr:`FaultProxy.url`; every request is forwarded to the upstream
server over a persistent connection, except when a rule says otherwise::

    proxy = FaultProxy(upstream="http://127.0.0.1:5000", seed=1).start()
    rule = proxy.add_rule("drop_response", method="PUT", path=r"/log/\\d{20}\\.json$", count=1)
    ...                       # the next log PUT is written upstream, its answer never arrives
    assert rule.fired == 1 and proxy.counts["drop_response"] == 1
    proxy.stop()

Actions (``FaultProxy.add_rule``):

``drop_response``  forward the request, read the upstream's whole response, then reset the
                   client connection without answering: the write happened, the client does
                   not know (botocore retries it).
``reset``          reset the client connection before forwarding anything (nothing happened).
``delay``          sleep ``delay`` seconds, then forward normally.
``status``         answer ``status`` (default 503) with an S3-style XML error without
                   forwarding (nothing happened; botocore and the AWS C++ SDK retry 500/503).
                   ``code`` is the error's ``<Code>`` (default: S3's for the status, e.g.
                   ``SlowDown`` for 503; ``InternalError`` for S3's other 503).
``corrupt``        forward the request, then flip one byte of a 200/206 response body (``xor``,
                   default 0x01) before answering: the object is intact upstream, this one
                   read of it is not (bit rot on the wire, a bad cache, a broken proxy).
                   ``offset`` is a byte of the *object* (negative: from its end), found in a
                   ranged answer through its ``Content-Range``; a read that does not cover it
                   is passed through untouched. ``offset=None`` flips a byte of the body drawn
                   from the seeded generator. The body keeps its length (``Content-Length``
                   stays true); a chunked body is flipped in a chunk's data, never in its
                   framing. Unless ``keep_checksums``, the ``x-amz-checksum-*`` headers are
                   stripped from the answer: botocore validates a whole-object GET against
                   them and would raise ``FlexibleChecksumError`` while reading the body
                   (after its retry layer: not retried) before the reader under test saw the
                   bytes; with ``keep_checksums=True`` that SDK layer is what is tested
                   (moto sends ``x-amz-checksum-crc32`` on whole GETs only). ``ranged``:
                   True matches only GETs with a ``Range`` header, False only GETs without,
                   None both. The method defaults to GET. ``fired`` counts only answers that
                   had a byte flipped. With ``method="HEAD"`` (no body) the answer's
                   ``Content-Length`` is xored with ``xor`` instead: the object's size is
                   misreported.

A rule matches on ``method`` (exact, None: any), ``path`` (regex searched in the unquoted
request path, without the query), ``query`` (regex searched in the raw query string),
``body`` (regex searched in the request body as received, e.g. ``'"kind":"add_files"'`` to
pick one kind of log entry), ``ranged`` (the ``Range`` header present or not), and
fires after letting ``skip`` matches through, at most ``count`` times (None: unlimited), each
time with ``probability`` (drawn from the proxy's seeded random generator). The first rule
that fires decides; a ``delay`` rule that fires lets later rules be considered too.

HTTP handling: keep-alive (one upstream connection per client connection), request bodies by
``Content-Length`` or ``Transfer-Encoding: chunked`` (forwarded as they came), ``Expect:
100-continue`` (answered ``100 Continue`` by the proxy itself and stripped before forwarding),
responses by ``Content-Length``, chunked, or read-to-close; no body for HEAD, 1xx, 204, 304.
Every loop is bounded (header sizes, socket timeouts, a stop flag); :meth:`stop` closes the
listener and every connection and joins the threads.

Run as a script it serves until interrupted: ``python tests/faultproxy.py UPSTREAM [--port N]
[--rules JSON] [--seed N]`` (prints its URL, and its counts as JSON on exit). ``--rules`` is a
JSON list of :meth:`FaultProxy.add_rule` arguments, e.g. ``[r.spec() for r in rules]`` (or
``to_json()``, whose counters :meth:`FaultProxy.add_rules` ignores): the way to drive a proxy
in another process.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import socket
import struct
import sys
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

ACTIONS = ("drop_response", "reset", "delay", "status", "corrupt")
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 200
IO_TIMEOUT = 60.0
"""Seconds a connection may be idle (client keep-alive, or a slow upstream) before closing."""
LOG_LIMIT = 10_000
"""Events kept in :attr:`FaultProxy.events` (counts keep counting past it)."""

_REASONS = {500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
            504: "Gateway Timeout", 429: "Too Many Requests", 403: "Forbidden"}
_S3_CODES = {500: "InternalError", 503: "SlowDown", 502: "BadGateway", 504: "GatewayTimeout",
             429: "SlowDown", 403: "AccessDenied"}
"""The error code S3 sends with each status (a 403 is a read-only role's ``AccessDenied``)."""
_COUNTERS = ("matched", "fired")
"""Keys of :meth:`Rule.to_json` that are results, not :meth:`FaultProxy.add_rule` arguments."""
_CHECKSUM_HEADER = b"x-amz-checksum-"
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


class _Closed(Exception):
    """The peer closed the connection (or it timed out) between or within messages."""


@dataclass
class Rule:
    """One programmed fault (see the module docs). ``fired``: how often it acted."""

    action: str
    method: str | None = None
    path: str | None = None
    query: str | None = None
    body: str | None = None
    count: int | None = None
    probability: float = 1.0
    skip: int = 0
    delay: float = 0.0
    status: int = 503
    name: str = ""
    offset: int | None = None
    xor: int = 0x01
    ranged: bool | None = None
    keep_checksums: bool = False
    code: str | None = None
    matched: int = 0
    fired: int = 0
    _path_re: re.Pattern[str] | None = field(default=None, repr=False)
    _query_re: re.Pattern[str] | None = field(default=None, repr=False)
    _body_re: re.Pattern[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown fault action {self.action!r} (one of {ACTIONS})")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability {self.probability} is not in [0, 1]")
        if not 1 <= self.xor <= 0xFF:
            raise ValueError(f"xor {self.xor} flips no bit of a byte (1..255)")
        if self.action == "corrupt" and self.method is None:
            self.method = "GET"  # only a response body can be corrupted
        self._path_re = re.compile(self.path) if self.path else None
        self._query_re = re.compile(self.query) if self.query else None
        self._body_re = re.compile(self.body.encode()) if self.body else None
        self.name = self.name or f"{self.action}:{self.method or '*'}:{self.path or '*'}"

    def matches(self, req: Request) -> bool:
        if self.method is not None and self.method.upper() != req.method:
            return False
        if self.ranged is not None and self.ranged != (req.header("range") is not None):
            return False
        if self._path_re is not None and not self._path_re.search(req.path):
            return False
        if self._query_re is not None and not self._query_re.search(req.query):
            return False
        return self._body_re is None or bool(self._body_re.search(req.body))

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.fired >= self.count

    def spec(self) -> dict[str, Any]:
        """The :meth:`FaultProxy.add_rule` arguments that make this rule (JSON-ready)."""
        return {"action": self.action, "method": self.method, "path": self.path,
                "query": self.query, "body": self.body, "count": self.count,
                "probability": self.probability,
                "skip": self.skip, "delay": self.delay, "status": self.status,
                "name": self.name, "offset": self.offset, "xor": self.xor,
                "ranged": self.ranged, "keep_checksums": self.keep_checksums,
                "code": self.code}

    def to_json(self) -> dict[str, Any]:
        return {**self.spec(), "matched": self.matched, "fired": self.fired}


@dataclass
class Request:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes  # as received (chunked bodies keep their framing)

    @property
    def path(self) -> str:
        return urllib.parse.unquote(urllib.parse.urlsplit(self.target).path)

    @property
    def query(self) -> str:
        return urllib.parse.urlsplit(self.target).query

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    @property
    def wants_close(self) -> bool:
        c = (self.header("connection") or "").lower()
        return "close" in c or (self.version == "HTTP/1.0" and "keep-alive" not in c)

    def encode(self) -> bytes:
        lines = [f"{self.method} {self.target} {self.version}"]
        lines += [f"{k}: {v}" for k, v in self.headers if k.lower() != "expect"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


@dataclass
class Response:
    status: int
    raw: bytes  # status line, headers and body, as the upstream sent them
    close: bool  # the upstream connection cannot be reused
    head_len: int = 0  # raw[:head_len] is the head (up to the blank line), the rest the body
    chunked: bool = False  # the body has chunked framing

    @property
    def head_lines(self) -> list[bytes]:
        return self.raw[: self.head_len].split(b"\r\n")[:-2]

    def header(self, name: str) -> str | None:
        return _get(_headers(self.head_lines[1:]), name.lower())


class _Reader:
    """Buffered reads from a socket, each bounded by the socket's timeout."""

    def __init__(self, sock: socket.socket, stop: threading.Event) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.stop = stop

    def _fill(self) -> None:
        if self.stop.is_set():
            raise _Closed("proxy stopping")
        try:
            data = self.sock.recv(256 * 1024)
        except (TimeoutError, OSError) as e:
            raise _Closed(str(e)) from None
        if not data:
            raise _Closed("end of stream")
        self.buf += data

    def line(self, limit: int = MAX_HEAD_BYTES) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                out = bytes(self.buf[: i + 2])
                del self.buf[: i + 2]
                return out
            if len(self.buf) > limit:
                raise _Closed("line too long")
            self._fill()

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def until_close(self) -> bytes:
        with contextlib.suppress(_Closed):
            while True:
                self._fill()
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def head(self) -> list[bytes]:
        """Lines of a message head (start line + headers), without the blank line."""
        lines: list[bytes] = []
        size = 0
        while True:
            line = self.line()
            size += len(line)
            if size > MAX_HEAD_BYTES or len(lines) > MAX_HEADERS:
                raise _Closed("message head too large")
            if line == b"\r\n":
                if not lines:
                    continue  # stray CRLF between messages (RFC 9112 allows ignoring it)
                return lines
            lines.append(line[:-2])

    def chunked(self) -> bytes:
        """A chunked body, framing included (chunks, last chunk, trailers, blank line)."""
        out = bytearray()
        while True:
            size_line = self.line()
            out += size_line
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers up to the blank line
                    t = self.line()
                    out += t
                    if t == b"\r\n":
                        return bytes(out)
            out += self.exactly(size + 2)


def _headers(lines: list[bytes]) -> list[tuple[str, str]]:
    out = []
    for raw in lines:
        k, sep, v = raw.decode("latin-1").partition(":")
        if sep:
            out.append((k.strip(), v.strip()))
    return out


def _get(headers: list[tuple[str, str]], name: str) -> str | None:
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0): the peer sees ECONNRESET, not a clean end."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class FaultProxy:
    """The proxy (see the module docs). Thread-safe: rules may change while it serves."""

    def __init__(self, upstream: str, *, seed: int = 0, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        parts = urllib.parse.urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be http://host:port, not {upstream!r}")
        self.upstream = (parts.hostname, parts.port or 80)
        self._bind = (host, port)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self.counts: Counter[str] = Counter()
        """``requests`` (received), ``forwarded``, one count per action that fired,
        ``upstream_errors`` (the upstream closed or failed: the client connection is closed),
        ``protocol_errors`` (a request the proxy could not parse: closed), and the bytes of
        the bodies forwarded: ``body_bytes_up`` (requests' bodies, as received) and
        ``body_bytes_down`` (responses' bodies): how a test proves that a server-side copy's
        data never passed through the client."""
        self.events: list[tuple[float, str, str, str]] = []
        """(time, action, method, path) of every fault, up to LOG_LIMIT."""
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._threads: set[threading.Thread] = set()
        self._socks: set[socket.socket] = set()
        self.url = ""

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(self._bind)
        listener.listen(128)
        listener.settimeout(0.2)
        self._listener = listener
        host, port = listener.getsockname()[:2]
        self.url = f"http://{host}:{port}"
        self._accept_thread = threading.Thread(target=self._accept_loop, name="faultproxy-accept",
                                               daemon=True)
        self._accept_thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, close every connection, join the threads."""
        self._stop.set()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._lock:
            socks, threads = list(self._socks), list(self._threads)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> FaultProxy:
        return self.start() if self._listener is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- rules -------------------------------------------------------------------------------
    def add_rule(self, action: str, *, method: str | None = None, path: str | None = None,
                 query: str | None = None, body: str | None = None, count: int | None = None,
                 probability: float = 1.0, skip: int = 0, delay: float = 0.0, status: int = 503,
                 name: str = "", offset: int | None = None, xor: int = 0x01,
                 ranged: bool | None = None, keep_checksums: bool = False,
                 code: str | None = None) -> Rule:
        rule = Rule(action, method, path, query, body, count, probability, skip, delay, status,
                    name, offset, xor, ranged, keep_checksums, code)
        with self._lock:
            self._rules.append(rule)
        return rule

    def add_rules(self, specs: list[dict[str, Any]]) -> list[Rule]:
        """Rules from dicts of :meth:`add_rule`'s arguments (e.g. parsed from JSON; the
        counters of :meth:`Rule.to_json` are ignored, so a rule's JSON makes a fresh copy)."""
        return [self.add_rule(**{k: v for k, v in spec.items() if k not in _COUNTERS})
                for spec in specs]

    def remove_rule(self, rule: Rule) -> None:
        with self._lock:
            with contextlib.suppress(ValueError):
                self._rules.remove(rule)

    def clear(self) -> None:
        """Remove every rule (counts are kept)."""
        with self._lock:
            self._rules.clear()

    @property
    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    def faults(self) -> int:
        """How many faults of any kind fired so far (delays included)."""
        with self._lock:
            return sum(self.counts[a] for a in ACTIONS)

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return {"counts": dict(self.counts), "rules": [r.to_json() for r in self._rules]}

    def _decide(self, req: Request) -> list[Rule]:
        """The rules that fire for this request: delays, then at most one other action.

        A ``corrupt`` rule is only reserved here (``fired`` counts it, so a concurrent request
        sees a ``count`` used up); :meth:`_corrupt` gives the reservation back when the answer
        had no byte to flip, and counts and logs the fault when it flips one."""
        fired: list[Rule] = []
        with self._lock:
            self.counts["requests"] += 1
            for rule in self._rules:
                if rule.exhausted or not rule.matches(req):
                    continue
                rule.matched += 1
                if rule.matched <= rule.skip:
                    continue
                if rule.probability < 1.0 and self._rng.random() >= rule.probability:
                    continue
                rule.fired += 1
                if rule.action != "corrupt":
                    self._record(rule, req)
                fired.append(rule)
                if rule.action != "delay":
                    break
        return fired

    def _record(self, rule: Rule, req: Request) -> None:
        """Count and log a fault that acted (the lock held)."""
        self.counts[rule.action] += 1
        if len(self.events) < LOG_LIMIT:
            self.events.append((time.time(), rule.action, req.method, req.path))

    def _corrupt(self, rule: Rule, req: Request, resp: Response) -> Response:
        """``resp`` with one body byte flipped by ``rule`` (see the module docs), or unchanged
        (and the reservation of :meth:`_decide` given back) when it has none to flip."""
        if req.method == "HEAD":
            return self._corrupt_head(rule, req, resp)
        body = memoryview(resp.raw)[resp.head_len:]
        spans = _chunk_spans(body) if resp.chunked else [(0, len(body))]
        size = sum(n for _, n in spans)
        pos = None
        with self._lock:
            if resp.status in (200, 206) and size > 0:
                if rule.offset is None:
                    pos = self._rng.randrange(size)
                else:
                    pos = _body_position(rule.offset, resp, size)
            if pos is None:
                rule.fired -= 1
                return resp
            self._record(rule, req)
        for start, n in spans:  # the body position to a raw position past the chunk framing
            if pos < n:
                at = start + pos
                break
            pos -= n
        head = resp.raw[: resp.head_len]
        if not rule.keep_checksums:
            lines = head.split(b"\r\n")
            head = b"\r\n".join(x for x in lines if not x.lower().startswith(_CHECKSUM_HEADER))
        out = bytearray(body)
        out[at] ^= rule.xor
        return Response(resp.status, head + bytes(out), resp.close, len(head), resp.chunked)

    def _corrupt_head(self, rule: Rule, req: Request, resp: Response) -> Response:
        """A HEAD answer whose ``Content-Length`` (the object's size) is xored with
        ``rule.xor``, or unchanged (the reservation given back) when it has none."""
        lines = resp.raw[: resp.head_len].split(b"\r\n")
        for i, line in enumerate(lines):
            name, _, value = line.partition(b":")
            if resp.status == 200 and name.strip().lower() == b"content-length" \
                    and value.strip().isdigit():
                lines[i] = b"Content-Length: " + str(int(value) ^ rule.xor).encode()
                head = b"\r\n".join(lines)
                with self._lock:
                    self._record(rule, req)
                return Response(resp.status, head + resp.raw[resp.head_len:], resp.close,
                                len(head), resp.chunked)
        with self._lock:
            rule.fired -= 1
        return resp

    # ---- serving -----------------------------------------------------------------------------
    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.add(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.discard(sock)

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.01)
                continue
            client.settimeout(IO_TIMEOUT)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = threading.Thread(target=self._serve, args=(client,), name="faultproxy-conn",
                                 daemon=True)
            with self._lock:
                self._threads = {x for x in self._threads if x.is_alive()}
                self._threads.add(t)
                self._socks.add(client)
            t.start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        reader = _Reader(client, self._stop)
        up_reader: _Reader | None = None
        try:
            while not self._stop.is_set():
                try:
                    req = self._read_request(reader, client)
                except _Closed:
                    return
                except (ValueError, IndexError):  # not HTTP we understand: hang up
                    with self._lock:
                        self.counts["protocol_errors"] += 1
                    return
                rules = self._decide(req)
                action = rules[-1] if rules and rules[-1].action != "delay" else None
                for r in rules:
                    if r.action == "delay" and r.delay > 0:
                        self._stop.wait(r.delay)
                if action is not None and action.action == "reset":
                    _reset(client)
                    return
                if action is not None and action.action == "status":
                    client.sendall(self._error_response(action.status, req, action.code))
                    if req.wants_close:
                        return
                    continue
                try:
                    if upstream is None:
                        upstream = socket.create_connection(self.upstream, timeout=IO_TIMEOUT)
                        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        self._track(upstream)
                        up_reader = _Reader(upstream, self._stop)
                    assert up_reader is not None
                    upstream.sendall(req.encode())
                    resp = self._read_response(up_reader, req.method)
                except (_Closed, OSError, ValueError, IndexError):
                    with self._lock:
                        self.counts["upstream_errors"] += 1
                    return
                with self._lock:
                    self.counts["forwarded"] += 1
                    self.counts["body_bytes_up"] += len(req.body)
                    self.counts["body_bytes_down"] += len(resp.raw) - resp.head_len
                if action is not None and action.action == "drop_response":
                    _reset(client)
                    return
                if action is not None and action.action == "corrupt":
                    resp = self._corrupt(action, req, resp)
                client.sendall(resp.raw)
                if resp.close or req.wants_close:
                    return
        except OSError:
            return
        finally:
            self._untrack(client)
            with contextlib.suppress(OSError):
                client.close()
            if upstream is not None:
                self._untrack(upstream)
                with contextlib.suppress(OSError):
                    upstream.close()

    def _read_request(self, reader: _Reader, client: socket.socket) -> Request:
        lines = reader.head()
        parts = lines[0].decode("latin-1").split(" ")
        if len(parts) != 3:
            raise ValueError(f"bad request line {lines[0][:100]!r}")
        method, target, version = parts
        headers = _headers(lines[1:])
        te = (_get(headers, "transfer-encoding") or "").lower()
        length = _get(headers, "content-length")
        if "100-continue" in (_get(headers, "expect") or "").lower():
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if "chunked" in te:
            body = reader.chunked()
        elif length is not None:
            body = reader.exactly(int(length))
        else:
            body = b""
        return Request(method.upper(), target, version, headers, body)

    @staticmethod
    def _read_response(reader: _Reader, method: str) -> Response:
        while True:
            lines = reader.head()
            status_line = lines[0].decode("latin-1")
            status = int(status_line.split(" ", 2)[1])
            if 100 <= status < 200 and status != 101:
                continue  # an interim response (we strip Expect, but be safe)
            break
        headers = _headers(lines[1:])
        head = b"\r\n".join(lines) + b"\r\n\r\n"
        conn = (_get(headers, "connection") or "").lower()
        close = "close" in conn or status_line.startswith("HTTP/1.0") and "keep-alive" not in conn
        te = (_get(headers, "transfer-encoding") or "").lower()
        length = _get(headers, "content-length")
        chunked = False
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif "chunked" in te:
            body, chunked = reader.chunked(), True
        elif length is not None:
            body = reader.exactly(int(length))
        else:
            body, close = reader.until_close(), True
        return Response(status, head + body, close, len(head), chunked)

    @staticmethod
    def _error_response(status: int, req: Request, code: str | None = None) -> bytes:
        code = code or _S3_CODES.get(status, "InternalError")
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                f"<Message>injected by faultproxy</Message><Resource>{req.path}</Resource>"
                f"<RequestId>faultproxy</RequestId></Error>").encode()
        if req.method == "HEAD":
            body = b""
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"Content-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
                f"x-amz-request-id: faultproxy\r\n"
                f"Connection: {'close' if req.wants_close else 'keep-alive'}\r\n\r\n")
        return head.encode() + body


def _chunk_spans(body: memoryview | bytes) -> list[tuple[int, int]]:
    """(start, length) of each chunk's data in a chunked body (framing as received)."""
    spans: list[tuple[int, int]] = []
    i = 0
    while True:
        eol = bytes(body[i : i + MAX_HEAD_BYTES]).find(b"\r\n")
        if eol < 0:
            return spans
        size = int(bytes(body[i : i + eol]).split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            return spans
        spans.append((i + eol + 2, size))
        i += eol + 2 + size + 2


def _body_position(offset: int, resp: Response, size: int) -> int | None:
    """Where byte ``offset`` of the object (negative: from its end) is in this answer's body
    of ``size`` bytes, or None when the answer does not hold it. A 206 answer holds the bytes
    its ``Content-Range`` names; a 200 answer holds the whole object."""
    first, total = 0, size
    if resp.status == 206:
        m = _CONTENT_RANGE.fullmatch((resp.header("content-range") or "").strip())
        if m is None:
            return None
        first = int(m.group(1))
        if m.group(3) == "*":
            if offset < 0:
                return None
        else:
            total = int(m.group(3))
    at = (offset + total if offset < 0 else offset) - first
    return at if 0 <= at < size else None


def random_fault_specs(scale: float = 1.0, *, log_path: str = r"/log/\d{20}\.json$"
                       ) -> list[dict[str, Any]]:
    """The random fault mix of the proof and soak runs (``add_rules`` arguments): lost answers
    of log-entry PUTs (ambiguous commits) and of other writes, resets and 503s anywhere, and
    short delays. ``scale`` multiplies every probability."""
    def p(x: float) -> float:
        return min(1.0, x * scale)

    return [
        {"action": "drop_response", "method": "PUT", "path": log_path, "probability": p(0.15),
         "name": "lost log-entry answer"},
        {"action": "drop_response", "method": "PUT", "probability": p(0.02),
         "name": "lost write answer"},
        {"action": "reset", "probability": p(0.02), "name": "reset"},
        {"action": "status", "status": 503, "probability": p(0.01), "name": "503"},
        {"action": "delay", "delay": 0.05, "probability": p(0.02), "name": "delay"},
    ]


def chaos_fault_specs(scale: float = 1.0) -> list[dict[str, Any]]:
    """FoundationDB's S3 fault mix (apple/foundationdb PR #12656: 15% errors, 20% throttling,
    10% delays, 0.5% corrupted bodies), plus lost answers of writes and resets, for
    ``benchmarks/soak.py --chaos`` (``add_rules`` arguments). The shares are of every request
    (a delay may come with another fault): errors are 500 and 503 ``InternalError`` answers,
    throttling 503 ``SlowDown``; corruption flips a byte of a GET's body (whole and ranged
    object reads, and listings) or of a HEAD's ``Content-Length``. ``scale`` multiplies
    every probability."""
    def p(x: float) -> float:
        return min(1.0, x * scale)

    listing = r"(^|&)list-type="
    objects = r"^/[^/]+/."  # a key under the bucket (a listing's path is the bucket)
    return [
        {"action": "delay", "delay": 0.1, "probability": p(0.10), "name": "delay"},
        {"action": "drop_response", "method": "PUT", "path": r"/log/\d{20}\.json$",
         "probability": p(0.05), "name": "lost log-entry answer"},
        {"action": "drop_response", "method": "PUT", "probability": p(0.01),
         "name": "lost write answer"},
        {"action": "drop_response", "method": "DELETE", "probability": p(0.01),
         "name": "lost delete answer"},
        {"action": "reset", "probability": p(0.01), "name": "reset"},
        {"action": "corrupt", "method": "GET", "query": listing, "probability": p(0.005),
         "name": "corrupt listing"},
        {"action": "corrupt", "path": objects, "ranged": False, "probability": p(0.005),
         "name": "corrupt whole read"},
        {"action": "corrupt", "path": objects, "ranged": True, "probability": p(0.005),
         "name": "corrupt ranged read"},
        {"action": "corrupt", "method": "HEAD", "probability": p(0.005),
         "name": "corrupt head"},
        {"action": "status", "status": 500, "probability": p(0.075),
         "name": "500 InternalError"},
        {"action": "status", "status": 503, "code": "InternalError",
         "probability": p(0.075 / 0.925), "name": "503 InternalError"},
        {"action": "status", "status": 503, "probability": p(0.20 / 0.85),
         "name": "503 SlowDown"},
    ]


def transient_fault_specs(probability: float = 0.02) -> list[dict[str, Any]]:
    """Faults an S3 client's retries absorb (``add_rules`` arguments), each with
    ``probability``: resets before forwarding and 503s (nothing happened upstream), and lost
    answers of reads (GET: nothing changed). An object store must pass its whole conformance
    suite under them. Lost answers of writes are left out: a conditional PUT retried after its
    own answer was lost finds the key taken, which only a read can resolve
    (sediment.storage.conditional.create_once), not the store."""
    return [
        {"action": "reset", "probability": probability, "name": "reset"},
        {"action": "status", "status": 503, "probability": probability, "name": "503"},
        {"action": "drop_response", "method": "GET", "probability": probability,
         "name": "lost read answer"},
    ]


def corruption_fault_specs(p: float = 0.005, *, path: str | None = None
                           ) -> list[dict[str, Any]]:
    """Corrupted read answers for the proofs (``add_rules`` arguments): each GET answer,
    whole or ranged, has one random byte flipped with probability ``p`` (default 0.5%, the
    share FoundationDB's bulk load and dump tests inject), ``x-amz-checksum-*`` headers
    stripped so the flip reaches Sediment's own checks. ``path`` (a regex) narrows them to some
    objects. Two rules, so a run can report whole and ranged flips apart."""
    return [
        {"action": "corrupt", "path": path, "ranged": False, "probability": p,
         "name": "corrupt whole read"},
        {"action": "corrupt", "path": path, "ranged": True, "probability": p,
         "name": "corrupt ranged read"},
    ]


class ProxiedS3:
    """A store URI reachable through a proxy and directly (the checks use the direct path).

    ``open()`` opens ``sediment.Store`` through the proxy, ``open_direct()`` without it;
    ``env()`` is the environment for worker processes (AWS variables through the proxy).
    """

    def __init__(self, proxy: FaultProxy, direct_endpoint: str, uri: str, *,
                 region: str = "us-east-1", access_key_id: str = "testing",
                 secret_access_key: str = "testing") -> None:
        self.proxy = proxy
        self.uri = uri
        self.direct_endpoint = direct_endpoint
        creds = {"region": region, "access_key_id": access_key_id,
                 "secret_access_key": secret_access_key}
        self.options: dict[str, Any] = {"endpoint_url": proxy.url, **creds}
        self.direct_options: dict[str, Any] = {"endpoint_url": direct_endpoint, **creds}

    def open(self, **kwargs: Any) -> Any:
        return open_store(self.proxy, self.uri, **{**self.options, **kwargs})

    def open_direct(self, **kwargs: Any) -> Any:
        import sediment as sd

        return sd.Store.open(self.uri, **{"create": True, **self.direct_options, **kwargs})

    def env(self, *, direct: bool = False) -> dict[str, str]:
        o = self.direct_options if direct else self.options
        return {"AWS_ENDPOINT_URL": o["endpoint_url"], "AWS_REGION": o["region"],
                "AWS_DEFAULT_REGION": o["region"], "AWS_ACCESS_KEY_ID": o["access_key_id"],
                "AWS_SECRET_ACCESS_KEY": o["secret_access_key"],
                "AWS_EC2_METADATA_DISABLED": "true"}


def open_store(proxy: FaultProxy, uri: str, **options: Any) -> Any:
    """``sediment.Store.open(uri, create=True)`` with every S3 request going through ``proxy``
    (``options``: region and credentials as for ``Store.open``, ``create=False`` among
    them to refuse a missing store)."""
    import sediment as sd

    return sd.Store.open(uri, **{"create": True, **options, "endpoint_url": proxy.url})


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Fault-injecting HTTP proxy (see module docs).")
    p.add_argument("upstream", help="http://host:port of the server to forward to")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rules", default="[]", help="JSON list of add_rule arguments")
    a = p.parse_args(argv)
    proxy = FaultProxy(a.upstream, seed=a.seed, port=a.port).start()
    proxy.add_rules(json.loads(a.rules))
    print(proxy.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
        print(json.dumps(proxy.summary()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
