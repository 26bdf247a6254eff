"""``benchmarks/soak.py --chaos``: an hour (``--minutes``) of FoundationDB-grade faults.

Every process reaches a loopback moto S3 server through the fault proxy
(``tests/faultproxy.py``, :func:`faultproxy.chaos_fault_specs`: 15% errors (500 and 503
InternalError), 20% throttling (503 SlowDown), 10% delays, 0.5% corrupted answers of GET,
LIST and HEAD, lost answers of writes, resets). The processes (``_chaos_workers.py``):
``--writers`` keyed writers (ingest, upsert, delete by keys, ranges and filters, and now and
then a new column), the streaming sink (``Table.writer()``: buffered small writes, committed
in micro-batches), ``--readers`` readers, ``--maintainers`` ``sediment maintain --loop``, one
GC-and-prune loop whose clock runs 5 minutes ahead (``faketime``), and half-way a dump and a
load into a second table. Every ``--chaos-seconds`` (on average) one of them is killed with
SIGKILL and started again.

The harness tails the table's log past the proxy (every version's kind and idempotency keys,
before prune may delete it), and checks, once the writers are done:

- every operation a writer or the sink saw commit is in the log exactly once, at the version
  it was told (records lost and duplicated: the final table against the reference, which
  replays the logged operations in version order, ``keyed_workers.Reference``);
- every reader's answer equals the reference at a version committed while it ran (at its
  version, for a time-travel read), and every version a reader saw is one the log holds;
- the loaded copy equals the reference at the dumped version.

Then the maintainers stop and one GC and prune run with retention, GC delay and clock skew
at 0 (no tags): every data object left is referenced by the head, none referenced is missing.
"""

from __future__ import annotations

import bisect
import contextlib
import glob
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import _chaos_workers as cw
import keyed_workers as kw
import workers as w

import sediment as sd
from sediment.state.pending import LEASE_TIMEOUT_ENV

PROPERTIES = {
    "partition.split.threshold": 5_000,
    "parquet.row_group_rows": 1024,
    "state.cache.refresh_seconds": 0,
    "gc.delay_seconds": 300,  # compacted files go after 5 minutes: GC acts during the run
    "retention.seconds": 600,  # versions older than 10 minutes are pruned during the run
    "compaction.job_timeout_seconds": 20,  # jobs of a killed maintainer run again
}
SCHEMA_EVERY = 10
"""Writers 0 and 1 add a column as every tenth operation."""
READER_GRACE = 60.0
"""Seconds a reader may take to end its last query once the writers are done (then kill -9):
every reader process answers at least one query, and its answers are what the run checks."""
SKEW = "+5m"
"""The clock skew of the GC-and-prune process (``faketime``'s offset)."""


def _libfaketime() -> str | None:
    """Debian's libfaketime (package ``faketime``), or None."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
                   + glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    return found[0] if found else None


class Chaos:
    def __init__(self, uri: str, direct: dict[str, Any], proxied: dict[str, Any],
                 env: dict[str, str], work: Path, args: Any) -> None:
        self.uri, self.direct, self.proxied, self.work, self.args = \
            uri, direct, proxied, work, args
        self.env = w.worker_env(env)
        self.table = sd.Store.open(uri, **direct, create=True).create_table(
            w.TABLE, w.SCHEMA, properties=PROPERTIES)
        self.argv: dict[str, list[str]] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.kills = Counter[str]()
        self.exits = Counter[str]()  # unexpected exits (restarted)
        self.rng = random.Random(args.seed)
        self.stop = work / "stop"
        self.log: dict[int, tuple[str, list[str]]] = {}  # version -> (kind, idempotency keys)
        self.unread: list[int] = []
        self.deadline = 0.0
        self.phases: dict[str, float] = {}
        """Seconds past the deadline at which each kind of process was done."""
        self.faketime = _libfaketime()

    # ---- processes ---------------------------------------------------------------------
    def _spawn(self, name: str) -> None:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        env = self.env
        if name == "gc" and self.faketime:  # preloaded, not the faketime wrapper: a kill -9
            env = {**env, "LD_PRELOAD": self.faketime, "FAKETIME": SKEW}  # must hit Python
        self.procs[name] = subprocess.Popen(
            self.argv[name], env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        log.close()

    def _worker(self, name: str, mode: str, **extra: Any) -> None:
        self.argv[name] = cw.command(mode, {"uri": self.uri, "options": self.proxied,
                                            "seed": self.args.seed, **extra})
        self._spawn(name)

    def start(self) -> None:
        a = self.args
        for i in range(a.writers):
            self._worker(f"writer-{i}", "writer", writer=f"w{i}", rows=30,
                         until=self.deadline, out=str(self.work / f"writer-{i}.jsonl"),
                         pause=0.05, schema_every=SCHEMA_EVERY if i < 2 else 0)
        self._worker("sink", "sink", until=self.deadline, out=str(self.work / "sink.jsonl"))
        for i in range(a.readers):
            self._worker(f"reader-{i}", "reader", reader=i, stop=str(self.stop),
                         out=str(self.work / f"reader-{i}.jsonl"))
        self._worker("gc", "gc", stop=str(self.stop), out=str(self.work / "gc.jsonl"),
                     interval=5.0)
        for i in range(a.maintainers):
            self.argv[f"maintain-{i}"] = [sys.executable, "-m", "sediment.cli", "maintain",
                                          "--store", self.uri, "--table", w.TABLE, "--loop",
                                          "--interval", "0.5", "--json"]
            self._spawn(f"maintain-{i}")

    def start_dump(self) -> None:
        self._worker("dump", "dump", root="s3://soak/dump", table="loaded",
                     out=str(self.work / "dump.jsonl"))

    def _finished(self, name: str) -> bool:
        """Whether ``name`` is done for good (its own end, not a crash)."""
        if name == "dump":
            return any("version" in d for d in cw.read_jsonl(self.work / "dump.jsonl"))
        if name.startswith(("writer-", "sink")):
            return time.time() >= self.deadline
        return self.stop.exists()

    def run(self) -> float:
        a = self.args
        started = time.time()
        self.deadline = started + a.minutes * 60
        self.start()
        dump_at = started + a.minutes * 60 * getattr(a, "dump_at", 0.5)
        next_kill = time.time() + self.rng.uniform(0.5, 1.5) * a.chaos_seconds
        next_tail = 0.0
        while time.time() < self.deadline:
            time.sleep(1.0)
            if "dump" not in self.procs and time.time() >= dump_at:
                self.start_dump()
            if time.time() >= next_tail:
                self.tail()
                next_tail = time.time() + 10
            if time.time() >= next_kill and time.time() < self.deadline - 5:
                next_kill = time.time() + self.rng.uniform(0.5, 1.5) * a.chaos_seconds
                alive = [n for n, p in self.procs.items() if p.poll() is None
                         and (n != "dump" or getattr(a, "kill_dump", True))]
                if alive:
                    name = self.rng.choice(sorted(alive))
                    self.procs[name].kill()
                    self.procs[name].wait()
                    self.kills[name.split("-")[0]] += 1
                    self._spawn(name)
            for name, p in list(self.procs.items()):
                if p.poll() is not None and not self._finished(name):
                    self.exits[name] += 1  # a crash of its own: reported, started again
                    self._spawn(name)
        # the maintainers, readers and GC stop while the writers finish their last operation
        self.stop.touch()
        for name, p in self.procs.items():
            if name.startswith("maintain-") and p.poll() is None:
                p.send_signal(signal.SIGINT)
        for name, p in self.procs.items():
            if name.startswith(("writer-", "sink", "dump")):
                self._wait(name, p, 600)
                self.phases[f"{name.split('-')[0]} done"] = time.time() - self.deadline
        grace = time.time() + getattr(a, "stop_grace", 120.0)
        # a reader ends its last query (S3's backoff under the fault mix can hold one for
        # tens of seconds): its answers are what the run checks
        reading = time.time() + max(getattr(a, "stop_grace", 120.0), READER_GRACE)
        for name, p in self.procs.items():  # past the grace, kill -9 as the chaos would
            end = reading if name.startswith("reader-") else grace
            self._wait(name, p, max(0.0, end - time.time()))
        self.phases["all stopped"] = time.time() - self.deadline
        self.tail()
        return time.time() - started

    def _wait(self, name: str, p: subprocess.Popen[bytes], timeout: float) -> None:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.exits[f"{name} (stuck, killed)"] += 1
            p.kill()
            p.wait()

    def tail(self) -> None:
        """Record the kind and idempotency keys of every version committed since the last
        call (past the proxy), before prune deletes them."""
        log = self.table._handle.states.log
        head = self.table.version
        for v in range(max(self.log, default=0) + 1, head + 1):
            entry = log.read_if_present(v)
            if entry is None:
                self.unread.append(v)
                continue
            txn = entry.transaction
            self.log[v] = (txn.kind, [k.key for k in getattr(txn, "keys", ()) or ()])

    # ---- the checks ----------------------------------------------------------------------
    def check(self) -> dict[str, Any]:
        key_versions: dict[str, list[int]] = defaultdict(list)
        for v, (_, keys) in self.log.items():
            for k in keys:
                key_versions[k].append(v)
        duplicated_commits = sorted(k for k, vs in key_versions.items() if len(vs) > 1)
        # what the writers were told, against the log
        told: dict[str, int] = {}
        gave_up = schema_ops = 0
        for i in range(self.args.writers):
            for d in cw.read_jsonl(self.work / f"writer-{i}.jsonl"):
                if "version" in d:
                    if d["version"] == -1 or cw.is_schema_op(
                            {"schema_every": SCHEMA_EVERY if i < 2 else 0}, d["op"]):
                        schema_ops += 1
                    else:
                        told[f"w{i}#{d['op']}"] = d["version"]
                elif "error" in d:
                    gave_up += 1
        sink_told: list[int] = []  # the writes of batches a flush acknowledged
        sink_failed = 0
        last = -1  # a batch runs from the write after the last one logged
        for d in cw.read_jsonl(self.work / "sink.jsonl"):
            if "flushed" in d:
                sink_told.extend(range(last + 1, d["flushed"] + 1))
                last = d["flushed"]
            elif "failed" in d:
                sink_failed += 1
                last = d["failed"]
        missing_commits = sorted(k for k, v in told.items() if k not in key_versions)
        missing_commits += [f"sink#{m}" for m in sink_told if f"sink#{m}" not in key_versions]
        misreported = sorted(k for k, v in told.items()
                             if k in key_versions and key_versions[k][0] != v)
        # the reference: the logged operations in version order
        ordered: list[tuple[int, int, kw.Op]] = []  # (version, sink write, op)
        for k, vs in key_versions.items():
            who, n = k.split("#")
            if who == "sink":  # a micro-batch's writes in the order they were written
                ordered.append((vs[0], int(n), kw.Op("ingest",
                                                     rows=tuple(cw.sink_rows(int(n))))))
            else:
                ordered.append((vs[0], 0, kw.make_op(who, int(n), cw.KINDS, rows=30,
                                                     seed=self.args.seed)))
        ordered.sort(key=lambda x: (x[0], x[1]))
        ops = [(v, op) for v, _, op in ordered]
        changes = sorted({v for v, _ in ops})
        queries, query_errors, seen = self._reader_queries()
        needs: dict[int, list[int]] = defaultdict(list)  # state index -> queries
        for qi, q in enumerate(queries):
            if "version" in q:
                needs[bisect.bisect_right(changes, q["version"])].append(qi)
            else:
                for s in range(bisect.bisect_right(changes, q["v0"]),
                               bisect.bisect_right(changes, q["v1"]) + 1):
                    needs[s].append(qi)
        dump = [d for d in cw.read_jsonl(self.work / "dump.jsonl") if "version" in d]
        dump_state = bisect.bisect_right(changes, dump[0]["version"]) if dump else -1
        ok = [False] * len(queries)
        ref = kw.Reference()
        dump_content: list[w.Row] | None = None
        by_version = iter(ops)
        pending = next(by_version, None)
        for s in range(len(changes) + 1):
            if s:
                while pending is not None and pending[0] <= changes[s - 1]:
                    ref.apply(pending[1])
                    pending = next(by_version, None)
            if needs.get(s) or s == dump_state:
                content = ref.content()
                if s == dump_state:
                    dump_content = content
                cache: dict[tuple[str | None, str | None], str] = {}
                for qi in needs.get(s, ()):
                    q = queries[qi]
                    rng = (q["lo"], q["hi"])
                    if rng not in cache:
                        cache[rng] = cw.answer_digest(
                            [r[2] for r in content if w.in_range(r[0], *rng)])
                    ok[qi] = ok[qi] or cache[rng] == q["digest"]
        final = ref.content()
        head = sd.Store.open(self.uri, **self.direct).table(w.TABLE)
        got = w.rows_of(head.query(columns=["key", "ts", "value", "n"]))
        want_values = Counter(r[2] for r in final)
        got_values = Counter(r[2] for r in got)
        duplicated = sum(c - 1 for c in got_values.values() if c > 1)
        dump_ok = None
        if dump:
            loaded = sd.Store.open(self.uri, **self.direct).table(dump[0]["table"])
            dump_ok = [r[2] for r in w.rows_of(loaded.query(
                columns=["key", "ts", "value", "n"]))] == [r[2] for r in dump_content or []]
        unverifiable = sorted(v for v in seen if v not in self.log)
        wrong = [queries[i] for i, good in enumerate(ok) if not good]
        writes = sum(1 for k in key_versions if not k.startswith("sink#"))
        sink_commits = len({vs[0] for k, vs in key_versions.items() if k.startswith("sink#")})
        return {
            "versions": head.version, "log_kinds": dict(Counter(k for k, _ in self.log.values())),
            "versions_unread_by_tail": len(self.unread),
            "writer_ops_committed": writes, "schema_changes": schema_ops,
            "sink_writes_committed": sum(1 for k in key_versions if k.startswith("sink#")),
            "sink_commits": sink_commits,
            "committed_writes": writes + schema_ops + sum(
                1 for k in key_versions if k.startswith("sink#")),
            "write_commits": writes + schema_ops + sink_commits,
            "ops_given_up": gave_up, "sink_batches_given_up": sink_failed,
            "records": len(final), "records_lost": sum((want_values - got_values).values()),
            "records_duplicated": duplicated,
            "records_unexpected": sum((got_values - want_values).values()) - duplicated,
            "order_differs": [r[2] for r in got] != [r[2] for r in final],
            "commits_missing": len(missing_commits), "commits_missing_examples":
                missing_commits[:5],
            "commits_duplicated": len(duplicated_commits),
            "commits_misreported": len(misreported), "misreported_examples": misreported[:5],
            "answers_checked": len(queries), "query_errors": query_errors,
            "query_error_kinds": dict(Counter(e.split(":")[0] for e in self._errors)),
            "wrong_answers": len(wrong), "wrong_examples": wrong[:3],
            "versions_seen": len(seen), "versions_unverifiable": len(unverifiable),
            "dump_version": dump[0]["version"] if dump else None,
            "dump_loaded_equal": dump_ok,
            "kills": dict(self.kills), "unexpected_exits": dict(self.exits),
        }

    def _reader_queries(self) -> tuple[list[dict[str, Any]], int, set[int]]:
        queries: list[dict[str, Any]] = []
        self._errors: list[str] = []
        seen: set[int] = set()
        for i in range(self.args.readers):
            for q in cw.read_jsonl(self.work / f"reader-{i}.jsonl"):
                if "error" in q:
                    self._errors.append(q["error"])
                elif "digest" in q:
                    queries.append(q)
                    seen.update(q[k] for k in ("version", "v0", "v1") if k in q)
        return queries, len(self._errors), seen

    def settle(self) -> dict[str, Any]:
        """One GC and prune with retention, delay and skew at 0 and no tags; what is left."""
        table = sd.Store.open(self.uri, **self.direct).table(w.TABLE)
        before = w.rows_of(table.query(columns=["key", "ts", "value", "n"]))
        tags = [t.name for t in table.tags()]
        table.set_properties({"gc.delay_seconds": 0, "retention.seconds": 0,
                              "gc.clock_skew_seconds": 0, "compaction.job_timeout_seconds": 0})
        t0 = time.perf_counter()
        # every writer is gone: their leases count as dead after a second (this process holds
        # none), as they would after the default 5 minutes
        lease = os.environ.get(LEASE_TIMEOUT_ENV)
        os.environ[LEASE_TIMEOUT_ENV] = "1"
        try:
            time.sleep(1.5)
            g = table.gc(orphan_timeout=0)
        finally:
            if lease is None:
                os.environ.pop(LEASE_TIMEOUT_ENV, None)
            else:
                os.environ[LEASE_TIMEOUT_ENV] = lease
        p = table.prune()
        seconds = time.perf_counter() - t0
        left = w.leftovers(table)
        objects = Counter(o.key.split("/", 1)[0] for o in table._handle.objects.list(""))
        after = w.rows_of(table.query(columns=["key", "ts", "value", "n"]))
        return {"settle_seconds": seconds, "tags_at_settle": tags,
                "gc": str(g)[:300], "prune": str(p)[:300],
                "leftovers": sum(len(left[k]) for k in ("orphans", "orphan_samples",
                                                         "orphan_filters", "missing",
                                                         "missing_samples")),
                "unreferenced_after_gc": len(left["unreferenced"]),
                "leftover_examples": {k: v[:3] for k, v in left.items() if v},
                "objects_by_folder": dict(objects), "content_kept": before == after}


def run_chaos(args: Any) -> dict[str, Any]:
    """One chaos run (module docs); the figures."""
    import tempfile

    from faultproxy import FaultProxy, chaos_fault_specs
    from support.s3 import moto_s3_server

    with moto_s3_server() as server, \
            FaultProxy(server.options["endpoint_url"], seed=args.seed) as proxy, \
            tempfile.TemporaryDirectory(prefix="sediment-chaos-") as tmp:
        server.create_bucket("soak")
        work = Path(args.work) if args.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        direct = server.options
        proxied = {**direct, "endpoint_url": proxy.url}
        env = {**server.env(), "AWS_ENDPOINT_URL": proxy.url}
        c = Chaos("s3://soak/store", direct, proxied, env, work, args)
        proxy.add_rules(chaos_fault_specs(args.fault_scale))
        print(f"\n[chaos] {args.minutes:g} min: {args.writers} writers, a sink, {args.readers} "
              f"readers, {args.maintainers} maintainers, GC+prune (clock "
              f"{SKEW if c.faketime else 'not skewed: no faketime'}), a dump and load, kill -9 "
              f"about every {args.chaos_seconds:g} s; work in {work}", flush=True)
        try:
            seconds = c.run()
        finally:
            for p in c.procs.values():
                with contextlib.suppress(ProcessLookupError):
                    if p.poll() is None:
                        p.kill()
                        p.wait()
            counts = dict(proxy.counts)
            rules = {r.name: r.fired for r in proxy.rules}
            proxy.clear()
        result: dict[str, Any] = {"store": "s3+chaos", "seconds": seconds,
                                  "clock_skew": SKEW if c.faketime else None}
        result["seconds_past_deadline"] = c.phases
        t0 = time.perf_counter()
        result.update(c.check())
        result["check_seconds"] = time.perf_counter() - t0
        result.update(c.settle())
        result["requests"] = counts.get("requests", 0)
        result["requests_per_second"] = result["requests"] / seconds
        result["faults"] = {"by_rule": rules,
                            "by_kind": {k: v for k, v in counts.items() if k != "requests"}}
        if os.environ.get("SEDIMENT_CHAOS_KEEP"):
            result["work"] = str(work)
        return result

