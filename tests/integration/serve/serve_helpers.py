"""Helpers of the Flight service tests: ``sediment serve`` as a real process on 127.0.0.1 (a
free port, a bounded wait until it answers), and small tables."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

import sediment as sd

STARTUP_SECONDS = 30.0
SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.int64()), ("note", pa.string())])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rows(keys: list[str], start: int = 0) -> pa.Table:
    """Records of SCHEMA for ``keys`` (values numbered from ``start``)."""
    n = len(keys)
    return pa.table({"key": keys, "ts": list(range(start, start + n)),
                     "value": list(range(start, start + n)),
                     "note": [None if i % 5 == 0 else f"n{i}" for i in range(start, start + n)]},
                    schema=SCHEMA.to_arrow())


class Server:
    """A ``sediment serve`` process; its stderr (the request log) goes to ``log``."""

    def __init__(self, store: str, args: list[str], log: Path, env: dict[str, str] | None,
                 scheme: str = "grpc", roots: bytes | None = None,
                 token: str | None = None, command: list[str] | None = None) -> None:
        self.port = free_port()
        self.uri = f"{scheme}://127.0.0.1:{self.port}"
        self.log = log
        self.token = token
        self.roots = roots
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [*(command or [sys.executable, "-m", "sediment.cli"]), "serve", "--store", store,
                 "--port", str(self.port), *args],
                stdout=subprocess.DEVNULL, stderr=out, stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})})
        self._wait_up()

    def connect(self, token: Any = "default") -> Any:
        return sd.connect(self.uri, token=self.token if token == "default" else token,
                          tls_root_certs=self.roots)

    def _wait_up(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sediment serve exited {self.proc.returncode}: "
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            try:
                with self.connect() as c:
                    c.health()
                return
            except sd.SedimentError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"sediment serve did not answer within {STARTUP_SECONDS}s: "
                           f"{self.log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return int(self.proc.returncode)
