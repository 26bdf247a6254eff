"""Peer engines for ``upsert.py``, each driven in a worker process of its own interpreter.

Run by ``upsert.py`` as ``<python> benchmarks/_upsert_peers.py PEER DIR``, where PEER is
``delta`` (deltalake), ``lance`` (pylance) or ``paimon`` (pypaimon). A worker imports only
pyarrow and its peer, never Sediment: pypaimon pins ``pyarrow<20``, so it runs from a virtualenv
of its own (``/work/venvs/paimon`` by default), and deltalake and pylance from another
(``/work/venvs/peers``) unless the benchmark's interpreter has them.

Protocol: one JSON command per stdin line, one JSON answer per stdout line (prefixed ``@@``;
anything else the peer prints goes to stderr). Data comes as Parquet files written by the
driver; each command reads its file *before* the clock starts, so every engine is timed on
Arrow data in memory, as Sediment's ``table.upsert(arrow_table)`` is. Commands:

* ``load {path}``: create the table from the rows of ``path`` (sorted by key, as each peer's
  docs suggest for lookups by key), build what the docs recommend for key lookups;
* ``upsert {path, check_key, check_value}``: the peer's upsert of the rows of ``path`` by
  record key (``key``, ``timestamp``), timed until it returns committed; then (not timed) a
  read of ``check_key`` must show ``check_value``;
* ``lookups {keys, warm}``: exact-key reads, the first ``warm`` not timed: latencies (s);
* ``delete {lo, hi}``: delete by the predicate ``lo <= timestamp < hi``, timed until it
  returns committed, then a read of the predicate (timed separately: visible) must return 0;
* ``count``: rows in the table; ``quit``.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

KEYS = ["key", "timestamp"]


class Peer:
    name = ""

    def __init__(self, root: Path) -> None:
        self.root = root

    def load(self, data: pa.Table) -> None:
        raise NotImplementedError

    def upsert(self, data: pa.Table) -> None:
        raise NotImplementedError

    def lookup(self, key: str) -> pa.Table:
        raise NotImplementedError

    def delete(self, lo: int, hi: int) -> None:
        raise NotImplementedError

    def read_where(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def count(self) -> int:
        raise NotImplementedError

    def refresh(self) -> None:
        """Open the table's latest version for the reads that follow (not timed)."""


class Delta(Peer):
    """deltalake: ``write_deltalake``, ``DeltaTable.merge(...)`` with ``when_matched_update_all``
    and ``when_not_matched_insert_all``, ``DeltaTable.delete(predicate)``; reads with its own
    SQL engine (``QueryBuilder``, DataFusion: file statistics skip files). (Its
    ``to_pyarrow_dataset()`` cannot filter a table whose MERGE wrote ``string_view`` files:
    pyarrow has no kernel comparing them with the schema's ``string``.)"""

    name = "delta"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        import deltalake

        self.dl = deltalake
        self.path = str(root / "delta")
        self.qb: Any = None

    def load(self, data: pa.Table) -> None:
        self.dl.write_deltalake(self.path, data)

    def upsert(self, data: pa.Table) -> None:
        dt = self.dl.DeltaTable(self.path)
        (dt.merge(source=data, source_alias="s", target_alias="t",
                  predicate="t.key = s.key AND t.timestamp = s.timestamp")
         .when_matched_update_all().when_not_matched_insert_all().execute())

    def refresh(self) -> None:
        self.qb = self.dl.QueryBuilder().register("t", self.dl.DeltaTable(self.path))

    def _sql(self, sql: str) -> pa.Table:
        return pa.table(self.qb.execute(sql).read_all())

    def lookup(self, key: str) -> pa.Table:
        return self._sql(f"SELECT * FROM t WHERE key = '{key}'")  # keys are [a-z]+

    def delete(self, lo: int, hi: int) -> None:
        self.dl.DeltaTable(self.path).delete(f"timestamp >= {lo} AND timestamp < {hi}")

    def read_where(self, lo: int, hi: int) -> int:
        self.refresh()
        return self._sql(f"SELECT count(*) AS n FROM t WHERE timestamp >= {lo} "
                         f"AND timestamp < {hi}").column("n")[0].as_py()

    def count(self) -> int:
        return self._sql("SELECT count(*) AS n FROM t").column("n")[0].as_py()


class Lance(Peer):
    """pylance: ``lance.write_dataset``, a BTREE scalar index on ``key`` (the docs' advice for
    filtered lookups), ``merge_insert(["key", "timestamp"])`` with ``when_matched_update_all``
    and ``when_not_matched_insert_all``, ``LanceDataset.delete(predicate)``."""

    name = "lance"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        import lance

        self.lance = lance
        self.path = str(root / "lance")
        self.ds: Any = None

    def load(self, data: pa.Table) -> None:
        ds = self.lance.write_dataset(data, self.path)
        ds.create_scalar_index("key", "BTREE")

    def upsert(self, data: pa.Table) -> None:
        ds = self.lance.dataset(self.path)
        (ds.merge_insert(KEYS).when_matched_update_all().when_not_matched_insert_all()
         .execute(data))

    def refresh(self) -> None:
        self.ds = self.lance.dataset(self.path)

    def lookup(self, key: str) -> pa.Table:
        return self.ds.to_table(filter=pc.field("key") == key)

    def delete(self, lo: int, hi: int) -> None:
        self.lance.dataset(self.path).delete(f"timestamp >= {lo} AND timestamp < {hi}")

    def read_where(self, lo: int, hi: int) -> int:
        return self.lance.dataset(self.path).count_rows(
            filter=f"timestamp >= {lo} AND timestamp < {hi}")

    def count(self) -> int:
        return self.lance.dataset(self.path).count_rows()


class Paimon(Peer):
    """pypaimon: a filesystem catalog, a primary-key table on (``key``, ``timestamp``) with the
    default ``deduplicate`` merge engine (the latest write wins) and fixed buckets (the docs'
    advice: a bucket per ~1 GB; 4 here); an upsert is a batch write + commit; reads are
    ``read_builder.with_filter(equal("key", k))``. With ``pypaimon-rust`` installed, the
    table turns on its native (Rust) write, read and commit routes (``write.native.enabled``
    and the others; pypaimon falls back to Python where a route is unsupported), since
    pypaimon's Python writer hashes and merges row by row. Delete by predicate: pypaimon's
    ``delete_by_predicate`` is for row-tracking tables, and a primary-key table's delete is a
    ``-D`` row kind from a ``rowkind.field`` column the benchmark schema does not have, so the
    peer has none here."""

    name = "paimon"
    BUCKETS = "4"
    NATIVE = {"write.native.enabled": "true", "read.native.enabled": "true",
              "commit.native.enabled": "true"}

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        from pypaimon import CatalogFactory, Schema

        self.Schema = Schema
        (root / "paimon").mkdir(parents=True, exist_ok=True)
        self.catalog = CatalogFactory.create({"warehouse": f"file://{root / 'paimon'}"})
        self.catalog.create_database("bench", True)
        self.table: Any = None
        from pypaimon.write.native_write import native_write_available

        self.native = native_write_available()

    def _write(self, data: pa.Table) -> None:
        wb = self.table.new_batch_write_builder()
        w = wb.new_write()
        c = wb.new_commit()
        try:
            w.write_arrow(data)
            c.commit(w.prepare_commit())
        finally:
            w.close()
            c.close()

    def load(self, data: pa.Table) -> None:
        options = {"bucket": self.BUCKETS}
        if self.native:
            options.update(self.NATIVE)
        schema = self.Schema.from_pyarrow_schema(data.schema, primary_keys=KEYS,
                                                 options=options)
        self.catalog.create_table("bench.t", schema, False)
        self.table = self.catalog.get_table("bench.t")
        self._write(data)

    def upsert(self, data: pa.Table) -> None:
        self._write(data)

    def refresh(self) -> None:
        self.table = self.catalog.get_table("bench.t")

    def _read(self, predicate: Any = None) -> pa.Table:
        rb = self.table.new_read_builder()
        if predicate is not None:
            rb = rb.with_filter(predicate(rb.new_predicate_builder()))
        return rb.new_read().to_arrow(rb.new_scan().plan().splits())

    def lookup(self, key: str) -> pa.Table:
        return self._read(lambda pb: pb.equal("key", key))

    def count(self) -> int:
        return self._read().num_rows


PEERS: dict[str, type[Peer]] = {"delta": Delta, "lance": Lance, "paimon": Paimon}


def answer(doc: dict[str, Any]) -> None:
    sys.stdout.write("@@" + json.dumps(doc) + "\n")
    sys.stdout.flush()


def handle(peer: Peer, cmd: dict[str, Any]) -> dict[str, Any]:
    op = cmd["op"]
    if op == "load":
        data = pq.read_table(cmd["path"])
        t0 = time.perf_counter()
        peer.load(data)
        return {"seconds": time.perf_counter() - t0}
    if op == "upsert":
        data = pq.read_table(cmd["path"])
        t0 = time.perf_counter()
        peer.upsert(data)
        seconds = time.perf_counter() - t0
        peer.refresh()
        got = peer.lookup(cmd["check_key"]).to_pylist()
        values = [r["value"] for r in got if r["timestamp"] == cmd["check_timestamp"]]
        if values != [cmd["check_value"]]:
            raise AssertionError(f"{peer.name}: after the upsert, key {cmd['check_key']!r} "
                                 f"reads {values}, expected [{cmd['check_value']!r}]")
        return {"seconds": seconds}
    if op == "lookups":
        peer.refresh()
        keys = cmd["keys"]
        for k in keys[: cmd.get("warm", 0)]:
            peer.lookup(k)
        times = []
        for k in keys[cmd.get("warm", 0):]:
            t0 = time.perf_counter()
            peer.lookup(k)
            times.append(time.perf_counter() - t0)
        return {"seconds": times}
    if op == "delete":
        lo, hi = cmd["lo"], cmd["hi"]
        t0 = time.perf_counter()
        peer.delete(lo, hi)
        seconds = time.perf_counter() - t0
        left = peer.read_where(lo, hi)
        visible = time.perf_counter() - t0
        if left:
            raise AssertionError(f"{peer.name}: {left} rows still match after the delete")
        return {"seconds": seconds, "visible_seconds": visible}
    if op == "count":
        peer.refresh()
        return {"rows": peer.count()}
    raise ValueError(f"unknown command {op!r}")


def main() -> None:
    name, root = sys.argv[1], Path(sys.argv[2])
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # the peer's own prints must not break the protocol
    peer = PEERS[name](root)
    versions = {"pyarrow": pa.__version__}
    from importlib.metadata import version

    for dist in {"delta": ["deltalake"], "lance": ["pylance"],
                 "paimon": ["pypaimon", "pypaimon-rust"]}[name]:
        try:
            versions[dist] = version(dist)
        except Exception:  # not installed (pypaimon-rust is optional)
            versions[dist] = None
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
