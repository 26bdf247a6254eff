"""Peer engines for ``lookups.py``, each driven in a worker process, and the timing loops that
every engine of that benchmark (Sediment included) is measured with.

Run by ``lookups.py`` as ``<python> benchmarks/_lookup_peers.py PEER DIR``, where PEER is
``duckdb`` (a native DuckDB table in a database file under DIR, with an ART index on ``key``)
or ``lance`` (a pylance dataset under DIR with a BTREE scalar index on ``key``). A worker
imports only pyarrow and its peer, never Sediment: pylance lives in a virtualenv of its own
(``/work/venvs/peers``), and a worker process keeps the peer's memory out of the Sediment
process whose RSS the benchmark measures.

Protocol: one JSON command per stdin line, one JSON answer per stdout line (prefixed ``@@``;
anything else the peer prints goes to stderr). Commands:

* ``sort {src, dst}`` (DuckDB only): write the rows of the Parquet file ``src`` sorted by
  (``key``, ``timestamp``) to ``dst`` (DuckDB's sort on 2 cores takes a third of pyarrow's);
* ``load {path}``: read the Parquet file ``path`` (sorted by key; not timed), then build the
  table and its index as the peer's docs recommend (timed: ``load_seconds``,
  ``index_seconds``), and check once that a point query uses the index (``plan``);
* ``exact {keys, warm, output}``: ``warm`` lookups of ``keys[:warm]`` not timed, then one
  timed lookup per key of ``keys[warm:]``: latencies (s) and row counts; ``output`` ``"rows"``
  (DuckDB only) fetches Python tuples instead of an Arrow table;
* ``ranges {bounds, warm}``: the same for ``[lo, hi)`` ranges, sorted by key;
* ``rate {keys, threads}``: every key looked up once by ``threads`` threads (a slice each,
  started together): wall seconds, CPU seconds, rows (see :func:`thread_rate`);
* ``quit``.

Both peers return what Sediment's ``table.query`` returns: an Arrow table of every column.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

Lookup = Callable[[Any], int]
"""One read (a key, or a (lo, hi) range): the number of rows it returned."""


# ---- timing loops (shared with lookups.py, which times Sediment with them) ----------------------
def time_each(fn: Lookup, args: Sequence[Any], warm: int = 0) -> tuple[list[float], list[int]]:
    """Call ``fn`` on ``args[:warm]`` (not timed), then time one call per argument of
    ``args[warm:]``: (seconds, row counts)."""
    for a in args[:warm]:
        fn(a)
    times: list[float] = []
    counts: list[int] = []
    for a in args[warm:]:
        t0 = time.perf_counter()
        n = fn(a)
        times.append(time.perf_counter() - t0)
        counts.append(n)
    return times, counts


def thread_rate(make: Callable[[], Lookup], keys: Sequence[Any], threads: int
                ) -> dict[str, Any]:
    """Every key looked up once, by ``threads`` threads each taking every ``threads``-th key,
    all released together by a barrier: wall and CPU seconds (this process, all threads) from
    the release until the last thread ends, lookups/s and rows returned. ``make`` gives each
    thread its own lookup function (DuckDB: a cursor per thread)."""
    slices = [list(keys[i::threads]) for i in range(threads)]
    fns = [make() for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)
    rows = [0] * threads

    def work(i: int) -> None:
        f = fns[i]
        barrier.wait()
        n = 0
        for k in slices[i]:
            n += f(k)
        rows[i] = n

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(work, i) for i in range(threads)]
        barrier.wait()
        t0, c0 = time.perf_counter(), time.process_time()
        for f in futures:
            f.result()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"threads": threads, "lookups": len(keys), "seconds": seconds, "cpu_seconds": cpu,
            "rate": len(keys) / seconds if seconds > 0 else float("inf"), "rows": sum(rows)}


# ---- peers ------------------------------------------------------------------------------------
class Peer:
    name = ""

    def __init__(self, root: Path) -> None:
        self.root = root

    def load(self, data: pa.Table) -> dict[str, Any]:
        raise NotImplementedError

    def lookup_fn(self, output: str = "arrow") -> Lookup:
        """A function looking up one key (for the calling thread)."""
        raise NotImplementedError

    def range_fn(self) -> Lookup:
        raise NotImplementedError


class DuckDB(Peer):
    """DuckDB: a native table in a database file (``CREATE TABLE t AS SELECT * FROM <arrow>``,
    then ``CREATE INDEX t_key ON t(key)``: the docs advise loading before indexing), queried
    with parameterised statements (``SELECT * FROM t WHERE key = $1``). An ART index serves
    equality filters whose matches stay under ``index_scan_max_count`` (2,048) or
    ``index_scan_percentage`` of the rows; plain ``EXPLAIN`` shows a sequential scan because
    the choice is made at execution, so the plan is checked with ``EXPLAIN ANALYZE`` (``Type:
    Index Scan``). Each thread reads through its own cursor (``con.cursor()``), as the Python
    client's docs require. Results as Arrow (``to_arrow_table()``), as Sediment returns;
    ``output="rows"`` fetches Python tuples (``fetchall()``), DuckDB's fastest output for one
    row, reported beside it."""

    name = "duckdb"
    EXACT = "SELECT * FROM t WHERE key = $1"
    RANGE = "SELECT * FROM t WHERE key >= $1 AND key < $2 ORDER BY key, timestamp"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        import duckdb

        self.con = duckdb.connect(str(root / "duck.db"))

    def load(self, data: pa.Table) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.con.register("arrow_data", data)
        self.con.execute("CREATE TABLE t AS SELECT * FROM arrow_data")
        self.con.unregister("arrow_data")
        t1 = time.perf_counter()
        self.con.execute("CREATE INDEX t_key ON t(key)")
        self.con.execute("CHECKPOINT")
        t2 = time.perf_counter()
        key = data.column("key")[data.num_rows // 2].as_py()
        plan = "\n".join(str(r[1]) for r in self.con.execute(
            "EXPLAIN ANALYZE " + self.EXACT, [key]).fetchall())
        if "Index Scan" not in plan:
            raise AssertionError(f"duckdb: a point query does not use the ART index:\n{plan}")
        return {"load_seconds": t1 - t0, "index_seconds": t2 - t1, "plan": "Index Scan"}

    def sort(self, src: str, dst: str) -> dict[str, Any]:
        import duckdb

        t0 = time.perf_counter()
        con = duckdb.connect()  # in memory: the benchmark's database file holds only ``t``
        try:
            con.execute(f"COPY (SELECT * FROM read_parquet({quote(src)}) ORDER BY key, "
                        f"timestamp) TO {quote(dst)} (FORMAT parquet)")
        finally:
            con.close()
        return {"seconds": time.perf_counter() - t0}

    def lookup_fn(self, output: str = "arrow") -> Lookup:
        cur = self.con.cursor()
        sql = self.EXACT
        if output == "rows":
            return lambda k: len(cur.execute(sql, [k]).fetchall())
        return lambda k: cur.sql(sql, params=[k]).to_arrow_table().num_rows

    def range_fn(self) -> Lookup:
        cur = self.con.cursor()
        sql = self.RANGE
        return lambda b: cur.sql(sql, params=list(b)).to_arrow_table().num_rows


class Lance(Peer):
    """pylance: ``lance.write_dataset`` of the sorted rows (default fragments of 1M rows),
    ``create_scalar_index("key", index_type="BTREE")`` (the docs' index for equality and range
    filters on a column of mostly distinct values); reads with ``to_table(filter="key =
    '...'")``, the documented filtered read, which the plan shows served by the index
    (``ScalarIndexQuery``; checked at load). ``scanner(prefilter=True)``,
    ``late_materialization`` and ``scan_in_order=False`` measured within noise of it on 1M
    rows; ``take`` reads by row id, not by key, so it is no key lookup. One dataset object is
    shared by the threads (its reads release the GIL)."""

    name = "lance"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        import lance

        self.lance = lance
        self.path = str(root / "lance")
        self.ds: Any = None

    def load(self, data: pa.Table) -> dict[str, Any]:
        t0 = time.perf_counter()
        ds = self.lance.write_dataset(data, self.path)
        t1 = time.perf_counter()
        ds.create_scalar_index("key", index_type="BTREE")
        t2 = time.perf_counter()
        self.ds = self.lance.dataset(self.path)
        key = data.column("key")[data.num_rows // 2].as_py()
        plan = self.ds.scanner(filter=f"key = '{key}'").explain_plan(True)
        if "ScalarIndexQuery" not in plan:
            raise AssertionError(f"lance: a point query does not use the BTREE index:\n{plan}")
        return {"load_seconds": t1 - t0, "index_seconds": t2 - t1, "plan": "ScalarIndexQuery",
                "fragments": len(self.ds.get_fragments())}

    def lookup_fn(self, output: str = "arrow") -> Lookup:
        ds = self.ds
        return lambda k: ds.to_table(filter=f"key = '{k}'").num_rows  # keys are [a-z]+

    def range_fn(self) -> Lookup:
        ds = self.ds
        return lambda b: ds.to_table(filter=f"key >= '{b[0]}' AND key < '{b[1]}'").num_rows


def quote(path: str) -> str:
    """A path as an SQL string literal."""
    return "'" + path.replace("'", "''") + "'"


PEERS: dict[str, type[Peer]] = {"duckdb": DuckDB, "lance": Lance}
DISTRIBUTIONS = {"duckdb": ["duckdb"], "lance": ["pylance"]}


def answer(doc: dict[str, Any]) -> None:
    sys.stdout.write("@@" + json.dumps(doc) + "\n")
    sys.stdout.flush()


def handle(peer: Peer, cmd: dict[str, Any]) -> dict[str, Any]:
    op = cmd["op"]
    if op == "sort" and isinstance(peer, DuckDB):
        return peer.sort(cmd["src"], cmd["dst"])
    if op == "load":
        return peer.load(pq.read_table(cmd["path"]))
    if op == "exact":
        times, counts = time_each(peer.lookup_fn(cmd.get("output", "arrow")), cmd["keys"],
                                  cmd.get("warm", 0))
        return {"seconds": times, "counts": counts}
    if op == "ranges":
        times, counts = time_each(peer.range_fn(), [tuple(b) for b in cmd["bounds"]],
                                  cmd.get("warm", 0))
        return {"seconds": times, "counts": counts}
    if op == "rate":
        return thread_rate(peer.lookup_fn, cmd["keys"], int(cmd["threads"]))
    raise ValueError(f"unknown command {op!r}")


def main() -> None:
    name, root = sys.argv[1], Path(sys.argv[2])
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # the peer's own prints must not break the protocol
    peer = PEERS[name](root)
    versions = {"pyarrow": pa.__version__, "python": sys.version.split()[0]}
    from importlib.metadata import version

    for dist in DISTRIBUTIONS[name]:
        versions[dist] = version(dist)
    sys.stdout = real_stdout
    answer({"ready": name, "versions": versions})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        sys.stdout = sys.stderr
        try:
            out = handle(peer, cmd)
        except Exception as e:  # reported to the driver, which stops using this peer
            out = {"error": f"{type(e).__name__}: {e}"}
        finally:
            sys.stdout = real_stdout
        answer(out)


if __name__ == "__main__":
    main()
