"""Changes and streams, side by side in one run: a Spark stream into Sediment against Spark's
own Parquet sink, the latency from a commit in table A to its row in table B, and the change
feed's read rate against a plain scan.

Run: ``python benchmarks/streaming.py [--rows N] [--rates R,R,...] [--seconds S]
[--confirm-seconds S] [--quick] [--skip-spark]`` (default 2M rows, rates 25k..400k rows/s,
60 s per rate, the highest sustained rate of each sink confirmed for 300 s; ``--quick``: 200k
rows, 20 s per rate, no confirmation, a few minutes).

**Sustained stream rate.** Spark's rate source (``local[2]``) at each rate in turn, its rows
shaped as the benchmark schema's (a key from the row number, a timestamp, a value), written
with a 1 s processing-time trigger into (a) a Sediment table of 8 leaves with the maintainer
running beside it (a thread calling ``table.maintain()`` in a loop) and (b) Spark's own
Parquet file sink, after a warm-up run of each (not counted). A rate is sustained when the
median micro-batch takes at most the trigger (1 s) and the stream kept up (rows processed >=
90% of the rows offered); the highest
sustained rate of each sink is then run for ``--confirm-seconds``. Also reported: batch
durations (p50, p95), and for Sediment the files per leaf at the end against the batch size.

**End-to-end latency.** A rate stream into table A (1 s trigger), A read as a stream
(``readStream.format("sediment")``) into table B (1 s trigger): for each row of B, the time
from the commit of its row in A to the commit of its row in B (both from the change feed's
``_commit_timestamp``): p50 and p95.

**Change feed read rate.** N rows of the benchmark schema (``support.workload``; record key
``key`` + ``timestamp``) are ingested in 10 commits into a ``merge="none"`` table, then a mix of
10% more: half upserts of existing records (new values) and half deletes by key of existing
records, in 10 commits each, interleaved. ``table.changes(0)`` (every change row, streamed,
every column) is timed against ``table.scan()`` of a table holding as many records as the
feed has rows (plain ingests of the same data), alternated, medians of 3. Rates are rows/s.

Goals: the stream into Sediment sustains >= 0.8x the rate of Spark's Parquet sink; the
end-to-end latency p50 <= the trigger + 1 s (2 s); the change feed's read rate >= 0.8x the
plain scan's.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa
from _common import fmt, goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload


def _load(table: sd.Table, rows: int, commits: int) -> pa.Table:
    """``rows`` records in ``commits`` ingests; returns them."""
    data = workload.generate(rows, seed=42)
    step = -(-rows // commits)
    for i in range(commits):
        table.ingest(data.slice(i * step, step))
    return data


def _mix(table: sd.Table, data: pa.Table, fraction: float, commits: int) -> int:
    """Upserts of ``fraction / 2`` of the records (new values) and deletes by key of as many
    others, in ``commits`` commits of each, interleaved. Returns the rows changed."""
    rng = np.random.default_rng(7)
    n = int(data.num_rows * fraction / 2)
    picks = rng.permutation(data.num_rows)[: 2 * n]
    ups = data.take(pa.array(picks[:n]))
    ups = ups.set_column(ups.schema.get_field_index("value"), "value",
                         workload.random_strings(rng, n, workload.VALUE_LENGTH))
    dels = data.take(pa.array(picks[n:])).column("key").to_pylist()
    step = -(-n // commits)
    for i in range(commits):
        table.upsert(ups.slice(i * step, step))
        table.delete(keys=dels[i * step:(i + 1) * step])
    return 2 * n


def _timed(fn: Any) -> tuple[float, int]:
    t0 = time.perf_counter()
    rows = 0
    for batch in fn():
        rows += batch.num_rows
    return time.perf_counter() - t0, rows


# ---- Spark streams ------------------------------------------------------------------------
def _rate_frame(spark: Any, rate: int) -> Any:
    from pyspark.sql import functions as F

    return (spark.readStream.format("rate").option("rowsPerSecond", rate)
            .option("numPartitions", 2).load()
            .select(F.format_string("k%012d", (F.col("value") * 7919) % 10**12).alias("key"),
                    F.col("value").alias("timestamp"),
                    F.format_string("v%d", F.col("value")).alias("value"),
                    F.lit(None).cast("string").alias("nullable_value")))


def _run_stream(spark: Any, rate: int, seconds: float, sink: str, d: Any) -> dict[str, Any]:
    """One stream at ``rate`` rows/s for ``seconds`` into ``sink`` ("sediment" or
    "parquet"); its batch durations and rows."""
    import threading

    tag = f"{sink}-{rate}-{int(time.time() * 1000)}"
    df = _rate_frame(spark, rate)
    stop = threading.Event()
    maint = None
    if sink == "sediment":
        store = sd.Store.open(str(d / "store"), create=True)
        table = store.create_table(tag, benchmark_schema(), split_points=workload.split_points(8))
        w = (df.writeStream.format("sediment").option("store", store.uri)
             .option("table", tag))

        def maintain() -> None:
            while not stop.is_set():
                table.maintain()
                stop.wait(1.0)

        maint = threading.Thread(target=maintain, daemon=True)
        maint.start()
    else:
        w = df.writeStream.format("parquet").option("path", str(d / tag))
    q = (w.option("checkpointLocation", str(d / f"cp-{tag}"))
         .trigger(processingTime="1 second").start())
    t0 = time.monotonic()
    progress: list[dict[str, Any]] = []
    seen: set[int] = set()
    while time.monotonic() - t0 < seconds:
        time.sleep(0.5)
        for p in q.recentProgress:
            if p["batchId"] not in seen:
                seen.add(p["batchId"])
                progress.append(p)
    q.stop()
    stop.set()
    if maint is not None:
        maint.join(60)
    batches = [p for p in progress if p["numInputRows"] > 0]
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in batches]
    rows = sum(p["numInputRows"] for p in batches)
    out: dict[str, Any] = {
        "rate": rate, "seconds": seconds, "rows": rows, "batches": len(batches),
        "p50_batch_s": statistics.median(durations) if durations else None,
        "p95_batch_s": float(np.percentile(durations, 95)) if durations else None}
    out["sustained"] = bool(durations) and out["p50_batch_s"] <= 1.0 and \
        rows >= 0.9 * rate * (seconds - 3)
    if sink == "sediment":
        out["files_per_leaf_max"] = max(
            (len(table.state().references(p.id)) for p in table.leaves()), default=0)
    return out


def _rates(spark: Any, rates: list[int], seconds: float, confirm: float, d: Any
           ) -> dict[str, Any]:
    """Each sink at each rate (alternated); the highest sustained, confirmed."""
    runs: dict[str, list[dict[str, Any]]] = {"sediment": [], "parquet": []}
    for sink in ("parquet", "sediment"):  # warm-up (JIT, first files): not counted
        _run_stream(spark, rates[0], 10.0, sink, d)
    for rate in rates:
        for sink in ("parquet", "sediment"):
            r = _run_stream(spark, rate, seconds, sink, d)
            print(f"  {sink:8s} {rate:>8,} rows/s: {r}")
            runs[sink].append(r)
    best: dict[str, int] = {}
    for sink, rs in runs.items():
        ok = [r["rate"] for r in rs if r["sustained"]]
        best[sink] = max(ok) if ok else 0
        if confirm and best[sink]:
            r = _run_stream(spark, best[sink], confirm, sink, d)
            print(f"  confirm {sink} at {best[sink]:,} rows/s for {confirm:.0f} s: {r}")
            runs[sink].append({**r, "confirm": True})
            if not r["sustained"]:
                best[sink] = 0
    return {"runs": runs, "best": best}


def _latency(spark: Any, rate: int, seconds: float, d: Any) -> dict[str, Any]:
    """Rate stream into A, A's stream into B; per row, B's commit time - A's."""
    import pyarrow.compute as pc

    store = sd.Store.open(str(d / "latency"), create=True)
    a = store.create_table("a", benchmark_schema(), split_points=workload.split_points(8))
    b = store.create_table("b", benchmark_schema(), split_points=workload.split_points(8))
    qa = (_rate_frame(spark, rate).writeStream.format("sediment").option("store", store.uri)
          .option("table", "a").option("checkpointLocation", str(d / "cp-lat-a"))
          .trigger(processingTime="1 second").start())
    qb = (spark.readStream.format("sediment").option("store", store.uri).option("table", "a")
          .option("startingVersion", "latest").load()
          .writeStream.format("sediment").option("store", store.uri).option("table", "b")
          .option("checkpointLocation", str(d / "cp-lat-b"))
          .trigger(processingTime="1 second").start())
    time.sleep(seconds)
    qa.stop()
    time.sleep(3)
    qb.stop()
    cols = ["key", "timestamp", "_commit_timestamp"]
    ca = a.changes(0, columns=cols).read_all()
    cb = b.changes(0, columns=cols).read_all()
    joined = cb.join(ca, ["key", "timestamp"], left_suffix="_b", right_suffix="_a")
    lag = pc.subtract(joined.column("_commit_timestamp_b").cast("int64"),
                      joined.column("_commit_timestamp_a").cast("int64")).to_numpy() / 1000
    return {"rate": rate, "rows_a": ca.num_rows, "rows_b": cb.num_rows,
            "p50_s": float(np.median(lag)) if len(lag) else None,
            "p95_s": float(np.percentile(lag, 95)) if len(lag) else None}


def main() -> None:
    def extra(p: Any) -> None:
        p.add_argument("--rows", type=int, default=2_000_000)
        p.add_argument("--rates", default="25000,50000,100000,200000,400000")
        p.add_argument("--seconds", type=float, default=60.0)
        p.add_argument("--confirm-seconds", type=float, default=300.0)
        p.add_argument("--skip-spark", action="store_true")

    args = parse_args(__doc__ or "", extra=extra)
    rows = 200_000 if args.quick else args.rows
    results: dict[str, Any] = {"rows": rows}
    goals: list[dict[str, Any]] = []
    if not args.skip_spark:
        from sediment.spark import session

        spark = session("local[2]")
        spark.sparkContext.setLogLevel("ERROR")  # a stopped query's cancelled tasks are noise
        seconds = 20.0 if args.quick else args.seconds
        confirm = 0.0 if args.quick else args.confirm_seconds
        with temp_dir() as d:
            print("sustained stream rate (1 s trigger):")
            rates = _rates(spark, [int(r) for r in args.rates.split(",")], seconds, confirm, d)
            print("end-to-end latency A -> B:")
            lat = _latency(spark, 20_000, 30.0 if args.quick else 120.0, d)
            print(f"  {lat}")
        spark.stop()
        best = rates["best"]
        print_table(["sink", "highest sustained rows/s"], [[k, v] for k, v in best.items()],
                    title="Spark stream, 1 s trigger, local[2]")
        results.update(stream_rates=rates, latency=lat)
        goals.append(goal_line("stream into sediment / parquet sink, sustained rate",
                               best["sediment"] / best["parquet"] if best["parquet"] else 0.0,
                               0.8, "x"))
        goals.append(goal_line("end-to-end latency p50 A -> B", lat["p50_s"] or 1e9, 2.0, "s",
                               higher_is_better=False))
    with temp_dir() as d:
        store = sd.Store.open(str(d / "store"), create=True)
        split = workload.split_points(8)
        feed = store.create_table("feed", benchmark_schema(), split_points=split)
        data = _load(feed, rows, 10)
        changed = _mix(feed, data, 0.10, 10)
        expected = rows + changed + changed // 2  # inserts, deletes, pre + post images
        plain = store.create_table("plain", benchmark_schema(), split_points=split)
        _load(plain, expected, 10)
        feed.maintain()
        plain.maintain()
        times: dict[str, list[float]] = {"changes": [], "scan": []}
        counts: dict[str, int] = {}
        for _ in range(3):
            for name, fn in (("changes", lambda: feed.changes(0)),
                             ("scan", lambda: plain.scan())):
                s, n = _timed(fn)
                times[name].append(s)
                counts[name] = n
    med = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: counts[k] / med[k] for k in med}
    print_table(["read", "rows", "median s", "rows/s"],
                [[k, counts[k], fmt(med[k]), fmt(rate[k])] for k in med],
                title=f"change feed vs plain scan ({rows:,} rows + 10% upserts and deletes)")
    ratio = rate["changes"] / rate["scan"]
    goals.append(goal_line("change feed read rate / plain scan", ratio, 0.8, "x"))
    results.update(times=times, counts=counts, rates=rate, ratio=ratio, goals=goals)
    if not args.no_save:
        save_results("streaming", results, quick=args.quick)


if __name__ == "__main__":
    main()
