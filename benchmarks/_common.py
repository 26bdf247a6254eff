"""Helpers shared by the benchmarks: timing, peak memory, result tables and JSON, and
object-store wrappers that count requests.

Every benchmark is a plain script (``python benchmarks/<name>.py [--quick]``) that imports this
module as ``_common`` (the script's own folder is first on ``sys.path``). Importing it puts
``tests/`` on ``sys.path`` too, for the support the benchmarks share with the tests
(``tests/support``: the loopback S3 server, the workload, helpers over Sediment's internals),
so a benchmark imports ``_common`` before ``support``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow.fs as pafs

from sediment.storage.base import ObjectInfo, ObjectStore

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
if str(BENCH_DIR.parent / "tests") not in sys.path:
    sys.path.insert(1, str(BENCH_DIR.parent / "tests"))  # after the script's own folder
# Loopback traffic (the moto server of support.s3) must not go through an HTTP proxy.
_no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY", ""), "127.0.0.1", "localhost"]))
os.environ["NO_PROXY"] = os.environ["no_proxy"] = _no_proxy


# ---- command line ----------------------------------------------------------------------------
def parse_args(description: str, argv: Sequence[str] | None = None,
               extra: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.Namespace:
    """``--quick`` (small sizes, for CI/smoke runs) and ``--no-save`` for every benchmark."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true",
                   help="small sizes: a smoke run (well under a minute)")
    p.add_argument("--no-save", action="store_true",
                   help="do not write benchmarks/results/<name>.json")
    if extra is not None:
        extra(p)
    return p.parse_args(argv)


# ---- timing and memory -----------------------------------------------------------------------
class Timer:
    """``with Timer() as t: ...`` then ``t.seconds`` (wall clock) and ``t.cpu`` (CPU seconds of
    this process, all threads: steadier than wall time on a machine shared with other jobs)."""

    def __init__(self) -> None:
        self.start = self.start_cpu = 0.0
        self.seconds = self.cpu = 0.0

    def __enter__(self) -> Timer:
        self.start_cpu = time.process_time()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
        self.cpu = time.process_time() - self.start_cpu


def time_call(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def repeat_timed(fn: Callable[[], Any], repeats: int) -> tuple[dict[str, float], Any]:
    """Run ``fn`` ``repeats`` times: ({min, median, max} seconds, last result)."""
    times: list[float] = []
    out: Any = None
    for _ in range(max(1, repeats)):
        dt, out = time_call(fn)
        times.append(dt)
    return {"min": min(times), "median": statistics.median(times), "max": max(times),
            "runs": len(times)}, out


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB.

    Linux: ``VmHWM`` from /proc/self/status, which starts afresh at ``exec``. ``ru_maxrss``
    does not: Linux carries it over fork + exec, so a benchmark child started by a parent that
    once held 700 MiB would report at least 700 MiB. Elsewhere: ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return kb / (1024 * 1024) if sys.platform == "darwin" else kb / 1024


def current_rss_mib() -> float:
    """Current resident set size in MiB (Linux /proc; falls back to the peak)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        return peak_rss_mib()


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


# ---- output ----------------------------------------------------------------------------------
def fmt(v: Any, digits: int = 3) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.{digits}g}"
    return str(v)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], title: str = "") -> None:
    """A plain aligned text table (numbers right-aligned)."""
    cells = [[fmt(c) for c in r] for r in rows]
    raw = [list(r) for r in cells]
    widths = [max([len(h)] + [len(r[i]) for r in raw]) for i, h in enumerate(headers)]
    if title:
        print(f"\n{title}")
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                    for i, (h, w) in enumerate(zip(headers, widths, strict=True))))
    print("  ".join("-" * w for w in widths))
    for r in raw:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True))))


def goal_line(name: str, value: float, target: float, unit: str, *,
              higher_is_better: bool = True) -> dict[str, Any]:
    """Print ``GOAL ...: PASS/FAIL`` and return it as a dict for the JSON results."""
    ok = value >= target if higher_is_better else value <= target
    op = ">=" if higher_is_better else "<="
    print(f"GOAL {name}: {fmt(value)} {unit} (target {op} {fmt(target)} {unit}) "
          f"-> {'PASS' if ok else 'FAIL'}")
    return {"name": name, "value": value, "target": target, "unit": unit,
            "comparison": op, "passed": ok}


def environment() -> dict[str, Any]:
    """Versions and machine facts recorded with every result file."""
    out: dict[str, Any] = {
        "python": platform.python_version(), "platform": platform.platform(),
        "machine": platform.machine(), "cpus": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    with contextlib.suppress(OSError, AttributeError):
        out["load_average_1_5_15"] = os.getloadavg()
    for mod in ("pyarrow", "boto3", "moto", "numpy", "sediment"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "?")
        except ImportError:
            pass
    return out


def save_results(name: str, results: dict[str, Any], *, quick: bool = False) -> Path:
    """Write ``benchmarks/results/<name>.json`` (``<name>.quick.json`` for --quick runs)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / (f"{name}.quick.json" if quick else f"{name}.json")
    doc = {"benchmark": name, "quick": quick, "argv": sys.argv[1:],
           "environment": environment(), "peak_rss_mib": peak_rss_mib(), **results}
    path.write_text(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    print(f"\nresults saved to {path}")
    return path


@contextlib.contextmanager
def temp_dir(prefix: str = "sediment-bench-") -> Iterator[Path]:
    """A temporary folder on local disk, removed afterwards."""
    d = tempfile.mkdtemp(prefix=prefix)
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---- peers: worker processes in their own venvs ------------------------------------------------
class PeerError(RuntimeError):
    pass


class PeerProcess:
    """One peer engine's worker process (a benchmark's ``_<name>_peers.py`` script run by
    another venv's Python): JSON commands on stdin, one ``@@``-prefixed JSON answer per
    command on stdout, its own output in a log file."""

    def __init__(self, script: Path, name: str, python: str, root: Path) -> None:
        self.name = name
        self.log_path = root / f"{name}.log"
        self.log: IO[str] = open(self.log_path, "w")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen([python, str(script), name, str(root / name)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        self.versions = self._read()["versions"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@"):
                doc: dict[str, Any] = json.loads(line[2:])
                if "error" in doc:
                    raise PeerError(f"{self.name}: {doc['error']}")
                return doc
        raise PeerError(f"{self.name}: the worker exited ({self.proc.wait()}): "
                        f"{self.log_path.read_text()[-2000:]}")

    def call(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                assert self.proc.stdin is not None
                self.proc.stdin.write('{"op": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.log.close()


# ---- object-store wrappers -------------------------------------------------------------------
@dataclass
class Requests:
    """Counts of object-store calls through a :class:`CountingObjectStore`."""

    calls: Counter[str] = field(default_factory=Counter)
    put_keys: list[str] = field(default_factory=list)
    put_bytes: int = 0
    get_bytes: int = 0

    def merge(self, other: Requests) -> None:
        self.calls.update(other.calls)
        self.put_keys.extend(other.put_keys)
        self.put_bytes += other.put_bytes
        self.get_bytes += other.get_bytes

    def puts_under(self, prefix: str) -> int:
        return sum(1 for k in self.put_keys if k.startswith(prefix))

    def summary(self) -> dict[str, Any]:
        by_prefix = Counter(k.split("/", 1)[0] + "/" if "/" in k else k for k in self.put_keys)
        return {"calls": dict(self.calls), "puts_by_prefix": dict(by_prefix),
                "put_bytes": self.put_bytes, "get_bytes": self.get_bytes}


class CountingObjectStore(ObjectStore):
    """Delegates to ``inner``, counting calls and bytes; keys under ``hide`` prefixes are left
    out of listings (e.g. ``("snapshots/",)`` makes a state store replay the whole log)."""

    def __init__(self, inner: ObjectStore, *, hide: Sequence[str] = ()) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.hide = tuple(hide)
        self.requests = Requests()
        self._lock = threading.Lock()

    def reset(self) -> Requests:
        """Start counting afresh; returns the counts so far."""
        with self._lock:
            old, self.requests = self.requests, Requests()
        return old

    def _count(self, op: str, key: str | None = None, put: int = 0, got: int = 0) -> None:
        with self._lock:
            r = self.requests
            r.calls[op] += 1
            if key is not None and put:
                r.put_keys.append(key)
            r.put_bytes += put
            r.get_bytes += got

    def get(self, key: str) -> bytes:
        data = self.inner.get(key)
        self._count("get", got=len(data))
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        data = self.inner.get_range(key, start, end)
        self._count("get_range", got=len(data))
        return data

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)
        self._count("put", key, put=max(1, len(data)))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        ok = self.inner.put_if_absent(key, data)
        self._count("put_if_absent" if ok else "put_if_absent_lost", key if ok else None,
                    put=max(1, len(data)) if ok else 0)
        return ok

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        self._count("list")
        for o in self.inner.list(prefix, start_after=start_after):
            if not (self.hide and o.key.startswith(self.hide)):
                yield o

    def delete_many(self, keys: Iterable[str]) -> None:
        self._count("delete_many")
        self.inner.delete_many(keys)

    def head(self, key: str) -> ObjectInfo | None:
        self._count("head")
        if self.hide and key.startswith(self.hide):
            return None
        return self.inner.head(key)

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        return self.inner.arrow_filesystem()


# ---- peak memory of one stage (appended for ingest.py / query.py) ------------------------------
class RssSampler:
    """``with RssSampler() as m: ...`` then ``m.peak_mib`` (sampled peak RSS during the block)
    and ``m.delta_mib`` (that peak minus the RSS when the block started). A thread polls
    /proc/self/statm every ``interval`` seconds, so ``ru_maxrss`` (monotonic over the whole
    process) is not needed to tell one stage from the next."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.start_mib = 0.0
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak_mib = max(self.peak_mib, current_rss_mib())
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self.start_mib = self.peak_mib = current_rss_mib()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak_mib = max(self.peak_mib, current_rss_mib())

    @property
    def delta_mib(self) -> float:
        return self.peak_mib - self.start_mib


RESULT_PREFIX = "@@RESULT "
"""Prefix of the one stdout line in which a benchmark's child process reports its result."""


def emit_child_result(result: dict[str, Any]) -> None:
    """Report a child process's result to :func:`run_child_script` (one stdout line)."""
    print(RESULT_PREFIX + json.dumps(result))


def run_child_script(script: str, args: list[str], label: str) -> dict[str, Any]:
    """Run ``python script args...`` in a fresh process (so its memory and caches are its
    own), echo its output, and return the result it emitted."""
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          check=False)
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
        else:
            print(line)
    if proc.returncode != 0 or result is None:
        raise RuntimeError(f"{label} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return result
