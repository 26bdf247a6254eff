"""Shared helpers of the proof suites, and subprocess entry points.

Run as ``python tests/proof/workers.py MODE '<json args>'``. Every worker opens its own Store
(its own StateStore, caches and S3 client), so processes race only through the object store.

Records have an identity: ``value`` is ``"<writer>-<batch>-<row>"``, unique over a run, so
lost and duplicated records are found by comparing multisets of values. Batches are generated
deterministically from (writer, batch, seed): the checking process regenerates exactly what a
worker ingested without shipping the rows around.

Modes:

``ingest``    ingest ``batches`` batches, appending ``{"batch", "version"}`` per commit to
              ``out`` (jsonl); a failed ingest appends ``{"batch", "error"}``.
``query``     until the ``stop`` file exists: random range queries (and now and then a
              time-travel query), each appended to ``out`` with the versions around it and a
              digest of the result.
``crash``     touch ``ready``, wait for ``go``, then loop the operation ``op`` (ingest,
              compact, split, gc, dump) forever; the test kills it with SIGKILL. With
              ``kill_at`` (``{"kind", "when", "nth"}``) the worker SIGKILLs itself just before
              or just after writing the nth log entry of that transaction kind.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

if __name__ == "__main__":  # run as a script: make ``sediment`` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import sediment as sd
from sediment.files.sidecars import KEYS, SAMPLE, data_file_of, parse_sidecar

SCALE = max(1, int(os.environ.get("SEDIMENT_PROOF_SCALE", "1")))
"""Long variants: hypothesis examples and crash iterations are multiplied by this
(``benchmarks/soak.py --proof-scale N`` sets it; CI runs with 1)."""

HERE = Path(__file__).resolve()
PYTHON = sys.executable
TABLE = "proof"
KEY_ALPHABET = "abcdefghijklmnopqrstuvwxyz"

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string()), ("n", pa.int64())])

BOX_SCHEMA = sd.Schema(row_keys=[("key", pa.string()), ("ts", pa.int64())],
                       values=[("value", pa.string()), ("n", pa.int64())])
"""The schema of the box-partition proofs: ``ts`` a second row-key field, so splits cut either
field. Its Arrow form is SCHEMA's (same columns, types and nullability), so every helper here
serves both, and rows with equal ``(key, ts)`` stay distinct records (no iterator merges
them)."""


def schema_for(properties: dict[str, Any]) -> sd.Schema:
    """BOX_SCHEMA for a table of box partitions, SCHEMA otherwise."""
    return BOX_SCHEMA if properties.get("partitioning") == "dimensions" else SCHEMA


Row = tuple[str, int, str, int | None]


# ---- deterministic data --------------------------------------------------------------------
def batch_rows(writer: str, batch: int, rows: int, *, seed: int = 0,
               key_len: int = 2) -> list[Row]:
    """The rows of one batch: random keys (so batches spread over partitions), unique values."""
    rng = random.Random(f"{seed}/{writer}/{batch}")
    out = []
    for i in range(rows):
        key = "".join(rng.choice(KEY_ALPHABET) for _ in range(key_len))
        n = None if rng.random() < 0.1 else rng.randrange(-1000, 1000)
        out.append((key, rng.randrange(0, 50), f"{writer}-{batch}-{i}", n))
    return out


def to_arrow(rows: Sequence[Row]) -> pa.Table:
    cols = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
    return pa.table({"key": pa.array(cols[0], pa.string()), "ts": pa.array(cols[1], pa.int64()),
                     "value": pa.array(cols[2], pa.string()), "n": pa.array(cols[3], pa.int64())},
                    schema=SCHEMA.to_arrow())


def rows_of(table: pa.Table) -> list[Row]:
    d = table.select(["key", "ts", "value", "n"]).to_pydict()
    return list(zip(d["key"], d["ts"], d["value"], d["n"], strict=True))


_MOD = 2**128


def value_hash(value: str) -> int:
    return int.from_bytes(hashlib.sha256(value.encode()).digest()[:16], "big")


def combine(count: int, total: int) -> str:
    return f"{count}:{total % _MOD:032x}"


def digest(values: Iterable[str]) -> str:
    """Digest of a multiset of record identities: the count and the sum of their hashes, so
    the digest of a union is computed from the parts (see QueryChecker)."""
    count = total = 0
    for v in values:
        count += 1
        total += value_hash(v)
    return combine(count, total)


def is_sorted(table: pa.Table) -> bool:
    keys = table.column("key").to_pylist()
    ts = table.column("ts").to_pylist()
    pairs = list(zip(keys, ts, strict=True))
    return all(a <= b for a, b in zip(pairs, pairs[1:], strict=False))


def in_range(key: str, lo: str | None, hi: str | None) -> bool:
    """``[lo, hi)`` (None: open end), the ranges the query workers ask."""
    return (lo is None or key >= lo) and (hi is None or key < hi)


class QueryChecker:
    """Checks query records against the content of committed versions.

    ``commits`` are (version, rows) of every committed ingest. The content at version ``v`` is
    the rows of the commits at or before ``v``. Query ranges have one-letter bounds and keys
    start with a letter, so membership depends on the first letter only: per commit, the
    count and hash sum per first letter are kept and the digest of any (range, version) is
    summed from them.
    """

    def __init__(self, commits: Sequence[tuple[int, Sequence[Row]]]) -> None:
        self.versions = [v for v, _ in commits]
        self.prefix: list[dict[str, tuple[int, int]]] = [{}]  # cumulative, per first letter
        for _, rows in commits:
            acc = dict(self.prefix[-1])
            for r in rows:
                c, t = acc.get(r[0][:1], (0, 0))
                acc[r[0][:1]] = (c + 1, t + value_hash(r[2]))
            self.prefix.append(acc)

    def digest_at(self, version: int, lo: str | None, hi: str | None) -> str:
        n = bisect.bisect_right(self.versions, version)
        count = total = 0
        for letter, (c, t) in self.prefix[n].items():
            if in_range(letter, lo, hi):
                count += c
                total += t
        return combine(count, total)

    def check(self, q: dict[str, Any]) -> str | None:
        """None when the record is right, else what is wrong."""
        if "error" in q:
            return f"query failed: {q['error']}"
        if not q["sorted"]:
            return "result not sorted"
        lo, hi = q["lo"], q["hi"]
        if "version" in q:
            if q["digest"] != self.digest_at(q["version"], lo, hi):
                return f"query at version {q['version']} of [{lo}, {hi}) is wrong"
            return None
        candidates = [q["v0"]] + [v for v in self.versions if q["v0"] < v <= q["v1"]]
        if not any(q["digest"] == self.digest_at(v, lo, hi) for v in candidates):
            return (f"query of [{lo}, {hi}) between versions {q['v0']} and {q['v1']} "
                    f"({q['rows']} rows) equals no committed version")
        return None


def random_range(rng: random.Random) -> tuple[str | None, str | None]:
    lo = None if rng.random() < 0.2 else rng.choice(KEY_ALPHABET)
    hi = None if rng.random() < 0.2 else rng.choice(KEY_ALPHABET)
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    return lo, hi


# ---- table state checks ---------------------------------------------------------------------
def data_objects(table: sd.Table) -> set[str]:
    """Data files (not samples, not folder markers) under the table's ``data/``."""
    return {o.key for o in table._handle.objects.list("data/")
            if o.key.endswith(".parquet") and parse_sidecar(o.key) is None}


def sample_objects(table: sd.Table) -> set[str]:
    return {o.key for o in table._handle.objects.list("data/") if _kind(o.key) == SAMPLE}


def filter_objects(table: sd.Table) -> set[str]:
    return {o.key for o in table._handle.objects.list("data/") if _kind(o.key) == KEYS}


def _kind(key: str) -> str | None:
    sidecar = parse_sidecar(key)
    return None if sidecar is None else sidecar.kind


def collect_later(table: sd.Table) -> None:
    """GC as if run two hours from now: the leases of killed writers are dead by then and
    every leftover is past the orphan timeout, so nothing but referenced files remains."""
    from sediment.maintenance.gc import gc

    gc(table._handle, now=time.time() + 2 * 3600)


def leftovers(table: sd.Table) -> dict[str, list[str]]:
    """Files in storage that no state knows, and referenced files missing from storage."""
    state = table.state()
    files = data_objects(table)
    samples = {data_file_of(s) for s in sample_objects(table)}
    filters = {data_file_of(s) for s in filter_objects(table)}
    known = set(state.refcount) | set(state.unreferenced)
    temporaries: list[str] = []
    if table.store.uri.startswith("file://"):  # temp files of puts a kill interrupted
        folder = Path(table._handle.objects.path("log")).parent
        temporaries = sorted(str(p.relative_to(folder)) for p in folder.rglob(".tmp-*"))
    return {
        "temporaries": temporaries,
        "orphans": sorted(files - known),
        "orphan_samples": sorted(samples - known),
        "orphan_filters": sorted(filters - known),
        "missing": sorted(f for f in state.refcount if f not in files),
        "missing_samples": sorted(f for f in state.refcount if f not in samples),
        "unreferenced": sorted(state.unreferenced),
    }


def max_files_per_leaf(table: sd.Table) -> int:
    st = table.state()
    return max((len(st.references(p.id)) for p in st.leaf_partitions()), default=0)


# ---- workers ---------------------------------------------------------------------------------
def open_table(args: dict[str, Any]) -> sd.Table:
    return sd.Store.open(args["uri"], **args.get("options", {})).table(args.get("table", TABLE))


def _append(path: str, doc: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(doc) + "\n")
        f.flush()


def ingest_worker(args: dict[str, Any]) -> None:
    """Ingest ``batches`` batches (or until the time ``until``); before each, a ``start``
    line, after it the committed version (or the error): a killed writer's last batch is the
    one started and not finished."""
    table = open_table(args)
    until = float(args.get("until", float("inf")))
    for b in range(args.get("batches", 10**9)):
        if time.time() >= until:
            break
        rows = batch_rows(args["writer"], b, args["rows"], seed=args.get("seed", 0))
        _append(args["out"], {"batch": b, "start": True})
        try:
            r = table.ingest(to_arrow(rows))
            _append(args["out"], {"batch": b, "version": r.version})
        except sd.SedimentError as e:
            _append(args["out"], {"batch": b, "error": f"{type(e).__name__}: {e}"})
        time.sleep(random.uniform(0, args.get("pause", 0.0)))


def read_ingest_log(path: str | Path) -> tuple[dict[int, int], dict[int, str], int | None]:
    """(batch -> version committed, batch -> error, batch started but not finished)."""
    done: dict[int, int] = {}
    failed: dict[int, str] = {}
    started: int | None = None
    p = Path(path)
    for line in p.read_text().splitlines() if p.exists() else []:
        doc = json.loads(line)
        if doc.get("start"):
            started = doc["batch"]
        elif "version" in doc:
            done[doc["batch"]] = doc["version"]
            started = None
        else:
            failed[doc["batch"]] = doc["error"]
            started = None
    return done, failed, started


def query_worker(args: dict[str, Any]) -> None:
    table = open_table(args)
    rng = random.Random(args.get("seed", 0))
    stop = Path(args["stop"])
    while not stop.exists():
        lo, hi = random_range(rng)
        rec: dict[str, Any] = {"lo": lo, "hi": hi}
        try:
            if rng.random() < 0.15 and table.version > 1:
                v = rng.randint(1, table.version)
                t0 = time.perf_counter()
                res = table.query(ranges=[sd.Range(lo, hi)], version=v)
                rec.update(version=v)
            else:
                rec["v0"] = table.version
                t0 = time.perf_counter()
                res = table.query(ranges=[sd.Range(lo, hi)])
                rec["v1"] = table.version
            rec["seconds"] = time.perf_counter() - t0
            rec.update(rows=res.num_rows, digest=digest(res.column("value").to_pylist()),
                       sorted=is_sorted(res))
        except sd.SedimentError as e:
            rec["error"] = f"{type(e).__name__}: {e}"
        _append(args["out"], rec)
        # a short pause between queries: still hundreds of answers checked a run, without a
        # reader spinning a core (with moto and the proxy) beside the processes under test
        time.sleep(args.get("pause", 0.01))


def _install_kill_point(kill_at: dict[str, Any]) -> None:
    """SIGKILL this process just before/after writing the nth log entry of one kind."""
    from sediment.state.log import TransactionLog

    original = TransactionLog.try_append
    seen = 0

    def try_append(self: TransactionLog, version: int, t: float, txn: Any,
                   commit_id: str, scheme_version: int | None = None) -> bool:
        nonlocal seen
        if txn.kind == kill_at["kind"]:
            seen += 1
            if seen == kill_at["nth"] and kill_at["when"] == "before":
                os.kill(os.getpid(), signal.SIGKILL)
        ok = original(self, version, t, txn, commit_id, scheme_version)
        if ok and txn.kind == kill_at["kind"] and seen == kill_at["nth"] \
                and kill_at["when"] == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return ok

    TransactionLog.try_append = try_append  # type: ignore[method-assign]


def _install_delete_kill_point(nth: int) -> None:
    """SIGKILL this process right after the nth delete of data files (GC between deleting
    files and recording the deletion, or the other way round)."""
    from sediment.storage.base import ObjectStore, PrefixedObjectStore

    seen = 0
    original = PrefixedObjectStore.delete_many

    def delete_many(self: ObjectStore, keys: Iterable[str]) -> None:
        nonlocal seen
        keys = list(keys)
        original(self, keys)
        if any(k.startswith("data/") for k in keys):
            seen += 1
            if seen == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    PrefixedObjectStore.delete_many = delete_many  # type: ignore[method-assign]


def crash_worker(args: dict[str, Any]) -> None:
    if args.get("kill_at"):
        _install_kill_point(args["kill_at"])
    if args.get("kill_after_delete"):
        _install_delete_kill_point(int(args["kill_after_delete"]))
    table = open_table(args)
    table._handle.states.head()
    op = args["op"]
    Path(args["ready"]).touch()
    go = Path(args["go"])
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            sys.exit("crash worker: no go signal")
        time.sleep(0.002)
    batch = args.get("first_batch", 0)

    def ingest_one() -> None:
        nonlocal batch
        rows = batch_rows(args["writer"], batch, args["rows"], seed=args.get("seed", 0))
        table.ingest(to_arrow(rows))
        batch += 1

    i = 0
    while True:
        i += 1
        if op == "ingest":
            ingest_one()
        elif op == "compact":
            ingest_one()
            r = table.compact()
            print(f"compact: {r}", flush=True)  # the harness shows it when a kill point is late
        elif op == "split":
            ingest_one()
            table.split()
        elif op == "gc":
            ingest_one()
            table.compact()
            table.gc()
        elif op == "maintain":
            ingest_one()
            table.maintain()
        elif op == "dump":
            table.dump(f"{args['dump_root']}/run-{i:04d}")
        else:
            raise SystemExit(f"unknown op {op}")


MODES = {"ingest": ingest_worker, "query": query_worker, "crash": crash_worker}


def command(mode: str, args: dict[str, Any]) -> list[str]:
    """The argv that runs this module as a worker."""
    return [PYTHON, str(HERE), mode, json.dumps(args)]


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    src = str(HERE.parents[2] / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


if __name__ == "__main__":
    MODES[sys.argv[1]](json.loads(sys.argv[2]))
