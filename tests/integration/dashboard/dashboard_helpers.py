"""Helpers of the dashboard tests: the store they look at, a real ``sediment dashboard``
process on 127.0.0.1 (a free port) started and stopped, and plain HTTP requests.

The store has a table split by maintenance and compacted (``events``), one cut at split points
holding keys made of HTML (``web``: the injection payloads), one whose compaction job failed
(``broken``: a data file overwritten with garbage), an empty one cut into 1,024 leaves
(``deep``), and an empty, offline table (``idle``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

import sediment as sd
from helpers import SCHEMA, rows, stop_process
from sediment.state import pending

HTML_KEYS = ["<script>alert('k')</script>", '"><img src=x onerror=alert(1)>']
"""Row keys (and split points) that are HTML: the pages must show them as text."""
TOKEN = "s3cret-dashboard-token"


@dataclass(frozen=True)
class Server:
    url: str
    store: str
    token: str | None
    log: Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_store(root: Path) -> str:
    """The tests' store (see the module docstring); returns its URI."""
    store = sd.Store.open(str(root), create=True)
    events = store.create_table("events", SCHEMA, properties={
        "state.cache.refresh_seconds": 0, "compaction.strategy": "basic",
        "compaction.batch_size": 3, "partition.split.threshold": 400})
    for seed in range(4):
        events.ingest(rows(300, seed=seed))
    events.tag("before-maintenance")
    for _ in range(3):
        events.maintain()  # splits the root, compacts the leaves
    for seed in range(4, 7):  # files arriving after maintenance: more than a batch per leaf
        events.ingest(rows(100, seed=seed))
    events.tag("latest")

    web = store.create_table("web", SCHEMA, split_points=sorted(HTML_KEYS),
                             properties={"state.cache.refresh_seconds": 0})
    payload = rows(len(HTML_KEYS), seed=9).set_column(
        0, "key", pa.array(HTML_KEYS, pa.string())).set_column(
        2, "value", pa.array(["<b>bold</b>", "<iframe src=x>"], pa.string()))
    web.ingest(payload)
    web.ingest(rows(50, seed=10))

    broken = store.create_table("broken", SCHEMA, properties={
        "state.cache.refresh_seconds": 0, "compaction.strategy": "basic",
        "compaction.batch_size": 2})
    for seed in range(2):
        broken.ingest(rows(50, seed=20 + seed))
    victim = broken.files()[0].filename
    broken._handle.objects.put(victim, b"not parquet")  # its compaction job fails
    result = broken.compact()
    assert result.jobs_failed == 1, result

    # 2,047 partitions: more than a tree view sends (whole levels down to 256 nodes)
    store.create_table("deep", SCHEMA, split_points=[f"k{i:04d}" for i in range(1, 1024)])

    idle = store.create_table("idle", SCHEMA)
    idle.set_online(False)
    # this process's pending-file leases, empty once their files are committed, are deleted
    # at the next heartbeat: settled now, so that no object vanishes under the server's views
    # (a GC survey the server cached named one that a test's later reading did not)
    pending.flush()
    return str(root)


def wait_up(proc: subprocess.Popen[bytes], url: str, log: Path, token: str | None) -> None:
    deadline = time.monotonic() + 30
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dashboard exited with {proc.returncode}: "
                               f"{log.read_text(errors='replace')[-3000:]}")
        try:
            req = urllib.request.Request(url + "/api/health", headers=headers)
            with urllib.request.urlopen(req, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise RuntimeError(f"dashboard at {url} did not answer within 30 s")


def start(store: str, log: Path, *, token: str | None = None, refresh: float = 2.0,
          args: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], Server]:
    """``sediment dashboard`` on 127.0.0.1 at a free port (with more command-line ``args``),
    up and answering."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SEDIMENT_DASHBOARD_TOKEN", None)
    if token is not None:
        env["SEDIMENT_DASHBOARD_TOKEN"] = token
    cmd = [sys.executable, "-m", "sediment.cli", "dashboard", "--store", store,
           "--host", "127.0.0.1", "--port", str(port), "--refresh", str(refresh), *args]
    out = log.open("wb")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    out.close()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(proc, url, log, token)
    except BaseException:
        stop(proc)
        raise
    return proc, Server(url, store, token, log)


def stop(proc: subprocess.Popen[bytes]) -> None:
    stop_process(proc)


def fetch(url: str, *, headers: dict[str, str] | None = None, data: bytes | None = None,
          follow: bool = True) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of a request (4xx and 5xx answers too;
    redirects followed only when ``follow``)."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener() if follow else \
        urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(url, headers=headers or {}, data=data)
    try:
        with opener.open(req, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def get_json(server: Server, path: str, status: int = 200) -> Any:
    """A dashboard API answer, checked for its status and its JSON content type."""
    code, headers, body = fetch(server.url + path)
    assert code == status, body[:500]
    assert headers["content-type"].startswith("application/json")
    return json.loads(body)


def page_data(body: bytes) -> Any:
    """The view data a page embeds (the JSON its script draws)."""
    m = re.search(rb'<script type="application/json" id="view-data">(.*?)</script>', body,
                  re.S)
    assert m is not None
    return json.loads(m.group(1))
