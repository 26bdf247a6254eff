"""Scrapes of a Sediment metrics endpoint (``--metrics-port``) for the tests of the processes
that serve one: every sample as (name, labels) -> value, read with prometheus_client's own
parser (an independent reading of the exposition format)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

Scrape = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int, *, host: str = "127.0.0.1") -> Scrape:
    """One scrape of ``http://127.0.0.1:port/metrics`` (``host``: the Host header)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Host": host})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def value(s: Scrape, name: str, **labels: str) -> float:
    """A sample's value (0 when the scrape has no such sample yet)."""
    return s.get((name, frozenset(labels.items())), 0.0)


def wait_for_scrape(port: int, ok: Callable[[Scrape], bool], *, seconds: float = 60.0,
                    what: str = "") -> Scrape:
    """Scrape until ``ok`` holds (a bounded wait: the endpoint may still be starting, the
    process still working); AssertionError with the last scrape after ``seconds``."""
    deadline = time.monotonic() + seconds
    last: Scrape = {}
    while time.monotonic() < deadline:
        try:
            last = scrape(port)
        except (urllib.error.URLError, ConnectionError):
            last = {}
        if last and ok(last):
            return last
        time.sleep(0.1)
    raise AssertionError(f"metrics never showed {what} within {seconds} s; last scrape: "
                         f"{sorted((k[0], sorted(k[1]), v) for k, v in last.items())[:60]}")
