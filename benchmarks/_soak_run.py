"""One classic soak run (``benchmarks/soak.py`` without ``--chaos``): writers, maintainers and
readers on one table, kill -9 of a writer or maintainer every ``--chaos-seconds``, then the
checks (records lost, duplicated, partial; wrong answers) and a settle (leftovers after
``maintain`` + ``gc`` with no delays). soak.py has the command line and the report."""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import workers as w

import sediment as sd

PROPERTIES = {
    "partition.split.threshold": 20_000,
    "parquet.row_group_rows": 1024,
    "state.cache.refresh_seconds": 0,  # readers see the head when they start a query
    "gc.delay_seconds": 3600,  # old versions stay readable for the checks
    "retention.seconds": 3600,  # (stated: the default is 2 days; settle() sets both to 0)
    "compaction.job_timeout_seconds": 20,  # jobs of a killed maintainer run again
}


# ---- one soak run ------------------------------------------------------------------------------
class Soak:
    def __init__(self, uri: str, options: dict[str, Any], env: dict[str, str], work: Path,
                 args: argparse.Namespace, *, direct: dict[str, Any] | None = None) -> None:
        self.uri, self.options, self.work, self.args = uri, options, work, args
        self.direct = options if direct is None else direct
        """Options the main process checks with (``--faults``: past the proxy)."""
        self.faulty = direct is not None
        self.env = w.worker_env(env)
        self.store = sd.Store.open(uri, **options, create=True)
        self.table = self.store.create_table(w.TABLE, w.SCHEMA, properties=PROPERTIES)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.writer_logs: list[tuple[str, Path]] = []  # (writer id, ingest log)
        self.generation = Counter[str]()
        self.kills = Counter[str]()
        self.stop = work / "stop"
        self.rng = random.Random(args.seed)
        self.max_files_during = 0
        self.deadline = 0.0

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        self.procs[name] = subprocess.Popen(
            argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        log.close()

    def start_writer(self, i: int) -> None:
        gen = self.generation[f"writer-{i}"]
        self.generation[f"writer-{i}"] += 1
        wid = f"w{i}.{gen}"
        out = self.work / f"ingest-{wid}.jsonl"
        self.writer_logs.append((wid, out))
        self._start(f"writer-{i}", w.command("ingest", {
            "uri": self.uri, "options": self.options, "writer": wid, "rows": self.args.rows,
            "until": self.deadline, "out": str(out), "pause": 0.05, "seed": self.args.seed}))

    def start_maintainer(self, i: int) -> None:
        self._start(f"maintain-{i}", [sys.executable, "-m", "sediment.cli", "maintain",
                                      "--store", self.uri, "--table", w.TABLE, "--loop",
                                      "--interval", "0.5", "--json"])

    def start_reader(self, i: int) -> None:
        self._start(f"reader-{i}", w.command("query", {
            "uri": self.uri, "options": self.options, "seed": self.args.seed * 100 + i,
            "stop": str(self.stop), "out": str(self.work / f"reader-{i}.jsonl")}))

    def run(self) -> float:
        a = self.args
        started = time.time()
        self.deadline = started + a.minutes * 60
        for i in range(a.writers):
            self.start_writer(i)
        for i in range(a.maintainers):
            self.start_maintainer(i)
        for i in range(a.readers):
            self.start_reader(i)
        next_kill = time.time() + a.chaos_seconds if a.chaos_seconds else float("inf")
        table = sd.Store.open(self.uri, **self.direct).table(w.TABLE)
        while time.time() < self.deadline:
            time.sleep(1.0)
            self.max_files_during = max(self.max_files_during, w.max_files_per_leaf(table))
            if time.time() >= next_kill and time.time() < self.deadline - 5:
                next_kill = time.time() + a.chaos_seconds
                victims = [n for n in self.procs if n.startswith(("writer-", "maintain-"))]
                name = self.rng.choice(victims)
                self.procs[name].kill()
                self.procs[name].wait()
                self.kills[name.split("-")[0]] += 1
                kind, i = name.split("-")
                (self.start_writer if kind == "writer" else self.start_maintainer)(int(i))
            for name, p in self.procs.items():
                if p.poll() not in (None, 0) and not name.startswith("writer-"):
                    raise RuntimeError(f"{name} died: {self.log_tail(name)}")
        for i in range(a.writers):
            self.procs[f"writer-{i}"].wait(timeout=300)
        time.sleep(1.0)
        self.stop.touch()
        for i in range(a.maintainers):
            p = self.procs[f"maintain-{i}"]
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in self.procs.values():
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return time.time() - started

    def log_tail(self, name: str) -> str:
        return (self.work / f"{name}.log").read_text(errors="replace")[-2000:]

    # ---- accounting ------------------------------------------------------------------------
    def _batch_of_version(self, table: sd.Table, version: int) -> tuple[str, int]:
        """(writer, batch) whose ingest committed ``version`` (read from its files)."""
        txn = table._handle.states.log.read(version).transaction
        name = txn.references[0].filename  # type: ignore[attr-defined]
        value = pq.read_table(table._handle.objects.path(name) if self.uri.startswith("/")
                              else _open(table, name), columns=["value"])["value"][0].as_py()
        writer, batch, _ = value.rsplit("-", 2)
        return writer, int(batch)

    def check(self) -> dict[str, Any]:
        table = sd.Store.open(self.uri, **self.direct).table(w.TABLE)
        got = Counter(r[2] for r in w.rows_of(table.query()))
        rows_of = {}  # (writer, batch) -> rows
        commits: list[tuple[int, list[w.Row]]] = []
        unfinished: list[tuple[str, int]] = []
        failed = 0
        for wid, path in self.writer_logs:
            done, errors, started = w.read_ingest_log(path)
            failed += len(errors)
            for b, v in done.items():
                rows_of[(wid, b)] = w.batch_rows(wid, b, self.args.rows, seed=self.args.seed)
                commits.append((v, rows_of[(wid, b)]))
            if started is not None:
                unfinished.append((wid, started))
        claimed = {v for v, _ in commits}
        orphan_versions = [e.version for e in table.history()
                           if e.kind == "add_files" and e.version not in claimed]
        for v in orphan_versions:  # a killed writer's batch that committed: find out which
            wid, b = self._batch_of_version(table, v)
            rows_of[(wid, b)] = w.batch_rows(wid, b, self.args.rows, seed=self.args.seed)
            commits.append((v, rows_of[(wid, b)]))
        commits.sort(key=lambda c: c[0])
        expected = Counter(r[2] for _, rows in commits for r in rows)
        partial = 0
        for wid, b in unfinished:
            values = [r[2] for r in w.batch_rows(wid, b, self.args.rows, seed=self.args.seed)]
            present = sum(1 for v in values if got[v])
            if present and (wid, b) not in rows_of:
                partial += 1  # visible yet not committed by any version we know
            elif 0 < present < len(values):
                partial += 1
        lost = sum((expected - got).values())
        duplicated = sum(c - 1 for c in got.values() if c > 1)
        unexpected = sum((got - expected).values()) - duplicated
        checker = w.QueryChecker(commits)
        wrong: list[str] = []
        latencies: list[float] = []
        travel: list[float] = []
        query_errors = 0
        for i in range(self.args.readers):
            path = self.work / f"reader-{i}.jsonl"
            for line in path.read_text().splitlines() if path.exists() else []:
                q = json.loads(line)
                if "error" in q:
                    query_errors += 1
                    if self.faulty:  # a clean failure under faults is allowed, not wrong
                        continue
                problem = checker.check(q)
                if problem:
                    wrong.append(problem)
                elif "version" in q:
                    travel.append(q["seconds"])
                else:
                    latencies.append(q["seconds"])
        return {
            "records": sum(expected.values()), "commits": len(commits),
            "killed_writer_batches_committed": len(orphan_versions),
            "ingests_failed": failed, "records_lost": lost, "records_duplicated": duplicated,
            "records_unexpected": unexpected, "partial_batches": partial,
            "queries": len(latencies) + len(travel), "query_errors": query_errors,
            "wrong_answers": len(wrong),
            "wrong_examples": wrong[:5],
            "query_p50_ms": _pct(latencies, 50) * 1000, "query_p99_ms": _pct(latencies, 99) * 1000,
            "time_travel_p99_ms": _pct(travel, 99) * 1000,
            "max_files_per_leaf_during": self.max_files_during,
            "versions": table.version, "kills": dict(self.kills),
            "transactions": dict(Counter(e.kind for e in table.history())),
        }

    def settle(self) -> dict[str, Any]:
        table = sd.Store.open(self.uri, **self.direct).table(w.TABLE)
        before = Counter(w.rows_of(table.query()))
        table.set_properties({"gc.delay_seconds": 0, "retention.seconds": 0,
                              "gc.clock_skew_seconds": 0, "compaction.job_timeout_seconds": 0})
        t0 = time.perf_counter()
        table.maintain()
        w.collect_later(table)
        left = w.leftovers(table)
        return {"settle_seconds": time.perf_counter() - t0,
                "leftovers": sum(len(v) for v in left.values()),
                "leftover_examples": {k: v[:3] for k, v in left.items() if v},
                "content_kept": Counter(w.rows_of(table.query())) == before,
                "max_files_per_leaf_final": w.max_files_per_leaf(table),
                "leaves": len(table.state().leaf_partitions())}


def _open(table: sd.Table, name: str) -> Any:
    import pyarrow as pa

    return pa.BufferReader(table._handle.objects.get(name))


def _pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def soak_one(label: str, uri: str, options: dict[str, Any], env: dict[str, str],
             args: argparse.Namespace, proxy: Any = None) -> dict[str, Any]:
    """One run. With ``proxy`` (a started ``faultproxy.FaultProxy`` in front of the server of
    ``options``), the workers go through it with random faults; the checks do not."""
    with tempfile.TemporaryDirectory(prefix="sediment-soak-") as tmp:
        work = Path(tmp)
        if not uri:
            uri = str(work / "store")
        faults: dict[str, Any] = {}
        if proxy is None:
            s = Soak(uri, options, env, work, args)
        else:
            from faultproxy import random_fault_specs

            s = Soak(uri, {**options, "endpoint_url": proxy.url},
                     {**env, "AWS_ENDPOINT_URL": proxy.url}, work, args, direct=options)
            proxy.add_rules(random_fault_specs(args.fault_scale))
        print(f"\n[{label}] {args.minutes:g} min: {args.writers} writers, {args.maintainers} "
              f"maintainers, {args.readers} readers, kill -9 every "
              f"{args.chaos_seconds or 'never'} s"
              + (f", random faults x{args.fault_scale:g}" if proxy else ""), flush=True)
        try:
            seconds = s.run()
        finally:
            if proxy is not None:
                faults = {"counts": dict(proxy.counts),
                          "rules": {r.name: r.fired for r in proxy.rules}}
                proxy.clear()
        result = {"store": label, "seconds": seconds, **s.check(), **s.settle()}
        if proxy is not None:
            result["faults"] = faults
        return result
