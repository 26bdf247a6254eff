"""CLI commands of maintenance: compact, split, gc, maintain (once, or as a daemon with --loop).

Each command says what to do to one table; running it over the store's tables, with progress
bars and report rows, is :mod:`sediment.cli.passes`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sediment.cli.humanize import human_bytes
from sediment.cli.metrics_options import (
    MetricsHostOption,
    MetricsPortOption,
    check_metrics,
    start_metrics,
)
from sediment.cli.options import JsonOption, StoreOption, open_store, open_table
from sediment.cli.output import iso_time
from sediment.cli.passes import (
    LoopLines,
    Progress,
    each_table,
    emit_rows,
    run_passes,
    warn_errors,
)
from sediment.cli.terminal import stop_on_signals
from sediment.core.units import human_seconds
from sediment.errors import SedimentError

if TYPE_CHECKING:  # imported where a command runs: a command's start imports only its rooms
    from sediment.maintenance.kept import GcKept, Kept
    from sediment.maintenance.orchestrator import StoreMaintenance
    from sediment.maintenance.passes import MaintenanceResult
    from sediment.table import Table

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""

TableOption = Annotated[str | None, typer.Option("--table", "-t",
                                                 help="One table (default: every table).")]
LoopOption = Annotated[bool, typer.Option("--loop", help="Repeat until interrupted.")]
def _more_than_zero(value: float) -> float:
    """``--interval``: a loop with no wait between passes would spin a core."""
    if not value > 0:
        raise typer.BadParameter(f"must be more than 0 seconds, not {value:g}")
    return value


def _not_negative(value: float | None) -> float | None:
    """``--orphan-timeout``: a negative age is no age."""
    if value is not None and not value >= 0:
        raise typer.BadParameter(f"must be 0 seconds or more, not {value:g}")
    return value


IntervalOption = Annotated[float, typer.Option("--interval", callback=_more_than_zero,
                                               help="Seconds between loop "
                                               "passes (maintain: between its report rows and "
                                               "GC runs; jobs start as soon as they are due).")]
OrphanTimeoutOption = Annotated[float | None, typer.Option(
    "--orphan-timeout", callback=_not_negative,
    help="Seconds after which files no transaction added and no live "
    "writer holds are deleted; overrides gc.orphan_timeout_seconds (which is at least an "
    "hour). Lower it only where no writer can be slower, e.g. in tests.")]
PassesOption = Annotated[int, typer.Option("--max-loops", help="Stop --loop after this many "
                                           "reports, one per --interval (0: never).")]


def _tag_errors(problems: Iterable[str]) -> dict[str, Any]:
    """The report row's error entry for tags GC could not read (empty when none)."""
    text = "; ".join(problems)
    return {"error": f"gc kept every unreferenced file: {text}"} if text else {}


def _store_rows(maintenance: StoreMaintenance) -> list[dict[str, Any]]:
    """The store steps (the folders of tables and partition schemes no catalog entry names:
    dropped ones, killed loads); a report row for each that did something or could not."""
    return [row for r in maintenance.run_store_steps() if (row := r.row()) is not None]


@commands.command()
def compact(table: TableOption = None, loop: LoopOption = False, interval: IntervalOption = 10.0,
            max_loops: PassesOption = 0, store: StoreOption = None,
            json_out: JsonOption = False,
            full: Annotated[bool, typer.Option(
                "--full", help="Compact every leaf with more than one file (or a file spanning "
                               "other leaves too) into one file, whatever the strategy.")
                            ] = False) -> None:
    """One compaction pass (jobs run in parallel); offline tables are skipped."""
    def act(t: Table, progress: Progress) -> dict[str, Any]:
        r = t.compact(full=full, progress=progress)
        # CompactionResult's own names, so a script reads the JSON as it reads the result
        return {"references_pushed_down": r.references_pushed_down,
                "jobs_created": r.jobs_created, "jobs_committed": r.jobs_committed,
                "jobs_failed": r.jobs_failed, "rows_in": r.rows_in, "rows_out": r.rows_out}
    run_passes(store, table, loop, interval, max_loops, json_out, act, online_only=True,
              verb="compact", unit="jobs")


@commands.command()
def split(table: TableOption = None, loop: LoopOption = False, interval: IntervalOption = 10.0,
          max_loops: PassesOption = 0, store: StoreOption = None,
          json_out: JsonOption = False) -> None:
    """Split leaf partitions over the threshold at their medians; offline tables skipped."""
    def act(t: Table, progress: Progress) -> dict[str, Any]:
        r = t.split()
        return {"splits": r.splits, "unsplittable": len(r.unsplittable)}
    run_passes(store, table, loop, interval, max_loops, json_out, act, online_only=True,
              verb="split")


@commands.command()
def gc(table: TableOption = None, loop: LoopOption = False, interval: IntervalOption = 60.0,
       max_loops: PassesOption = 0, store: StoreOption = None,
       json_out: JsonOption = False, orphan_timeout: OrphanTimeoutOption = None) -> None:
    """Delete unreferenced files past the GC delay and orphans past the orphan timeout, and
    abort incomplete multipart uploads (S3) past it; say what is kept, why (tag, pin,
    retention, gc_delay, clock_skew; orphans: lease, orphan_timeout), how many bytes and when
    it becomes due."""
    def act(t: Table, progress: Progress) -> dict[str, Any]:
        r = t.gc(orphan_timeout=orphan_timeout)
        return {"deleted": r.deleted, "orphans_deleted": r.orphans_deleted,
                "uploads_aborted": r.uploads_aborted,
                "kept_bytes": r.kept.bytes,
                "kept": kept_json(r.kept) if json_out else kept_text(r.kept),
                **_tag_errors(r.unreadable_tags)}
    run_passes(store, table, loop, interval, max_loops, json_out, act, online_only=False,
              verb="gc")


_UNTIMED = {"tag": "until the tag is deleted", "lease": "while its writer lives"}


def kept_json(kept: GcKept) -> dict[str, Any]:
    """``GcResult.kept`` for ``--json``: files, bytes and due times (ISO 8601 UTC; null: not
    by time) per reason, unreferenced files and orphans apart."""
    def one(k: Kept) -> dict[str, Any]:
        return {"files": k.files, "bytes": k.bytes,
                "due": None if k.due is None else iso_time(k.due),
                "last_due": None if k.last_due is None else iso_time(k.last_due)}
    return {"unreferenced": {r: one(k) for r, k in kept.unreferenced.items()},
            "orphans": {r: one(k) for r, k in kept.orphans.items()}}


def kept_text(kept: GcKept, now: float | None = None) -> str:
    """``GcResult.kept`` for people: one line per reason, e.g. ``retention: 3 files,
    12.0 KiB, due in 1h 59m`` (empty when nothing is kept)."""
    now = time.time() if now is None else now
    lines = []
    for what, groups in (("", kept.unreferenced), ("orphans ", kept.orphans)):
        for reason, k in groups.items():
            if k.due is None:
                when = _UNTIMED.get(reason, "not by time")
            else:
                when = f"due in {human_seconds(max(0.0, k.due - now))}"
                if k.last_due is not None and k.last_due - k.due >= 1:
                    when += f" (all in {human_seconds(max(0.0, k.last_due - now))})"
            lines.append(f"{what}{reason}: {k.files} file{'s' * (k.files != 1)}, "
                         f"{human_bytes(k.bytes)}, {when}")
    return "\n".join(lines)


@commands.command()
def maintain(table: TableOption = None, loop: LoopOption = False,
             interval: IntervalOption = 10.0, max_loops: PassesOption = 0,
             spark: Annotated[bool, typer.Option("--spark", help="Run compaction jobs as "
                                                 "Spark tasks.")] = False,
             master: Annotated[str | None, typer.Option("--master", help="Spark master URL "
                                                        "(default local[*]).")] = None,
             workers: Annotated[str, typer.Option(
                 "--workers", metavar="process|thread",
                 help="With --loop: run compaction jobs in worker processes (every core "
                      "busy) or in threads of this process (one GIL).")] = "process",
             threads: Annotated[int, typer.Option(
                 "--threads", min=0, help="With --loop: jobs run at once (0: one per "
                                          "CPU).")] = 0,
             batcher_threads: Annotated[int, typer.Option(
                 "--batcher-threads", min=0,
                 help="With --loop: ingest batcher jobs run at once (files queued with "
                      "`batcher submit` are ingested with no other command; 0: none).")] = 1,
             lease_timeout: Annotated[float, typer.Option(
                 "--lease-timeout", min=0.1,
                 help="With --loop: seconds after its last heartbeat that a maintainer's "
                      "tables are taken over by the other maintainers of the store.")] = 30.0,
             store: StoreOption = None, json_out: JsonOption = False,
             orphan_timeout: OrphanTimeoutOption = None,
             metrics_port: MetricsPortOption = None,
             metrics_host: MetricsHostOption = "127.0.0.1") -> None:
    """Split, compact and collect garbage until nothing is left to do (offline tables:
    GC only), then prune the log and snapshots past retention.seconds and roll job events
    up past status.retention.seconds. With --loop: maintain continuously, starting splits
    and compaction jobs as soon as they are due and each job committing as it ends, each
    job in a worker process
    (with --spark: each tick's jobs of a table as one Spark stage), and run the ingest
    batcher's jobs (with --spark, big groups as bulk imports); one report row per table
    every --interval seconds (GC runs at that period too). Several --loop maintainers over
    one store share its tables through leases in the store (`sediment report
    maintainers`)."""
    if workers not in ("process", "thread"):
        raise typer.BadParameter(f"--workers is process or thread, not {workers!r}")
    if metrics_port is not None and not loop:
        raise typer.BadParameter("--metrics-port goes with --loop: a single pass ends before "
                                 "a scrape could see it")
    check_metrics(metrics_port, metrics_host, None)
    def maintenance_of_store() -> StoreMaintenance:
        """The one maintenance of a store (``Store.maintain``'s): the same table steps, the
        same settling of partition-scheme members, the same store steps."""
        from sediment.store import store_maintenance

        return store_maintenance(open_store(store), runner="spark" if spark else "local",
                                 orphan_timeout=orphan_timeout)

    spark_session = None
    if spark:
        from sediment.spark import session

        spark_session = session(master)
    if loop:
        from sediment.maintenance.continuous import Maintainer
        from sediment.maintenance.lease_store import LeaseHolder
        from sediment.runners import load_runner

        if table:  # a table named on the command line exists (a typo would loop for ever)
            open_table(store, table)
        stop = stop_on_signals("stopping: waiting for running compaction jobs (again to abort)")
        try:
            whole: StoreMaintenance | None = None if table else maintenance_of_store()
        except SedimentError as e:  # a daemon: the tables' rows report it, round after round
            whole = None
            typer.echo(f"maintain: not collecting unnamed folders: {type(e).__name__}: {e}",
                       err=True)

        def tables() -> list[Table]:
            found, unopened = each_table(store, table, online_only=False, loop=True)
            for row in unopened:  # reported in the next rows, looked at again next refresh
                maintainer.note(row["table"], row["error"])
            return found

        lines = LoopLines(interval)

        def on_report(rows: list[dict[str, Any]]) -> None:
            if json_out:
                emit_rows(rows, json_out, loop=True)
            else:
                lines(rows)
            warn_errors(rows, "maintain", True)

        maintainer = Maintainer(tables, gc_every=interval, refresh_tables=interval,
                                orphan_timeout=orphan_timeout, threads=threads,
                                workers="process" if workers == "process" and not spark
                                else "thread",
                                store=whole, batcher_threads=batcher_threads,
                                leases=LeaseHolder(open_store(store).objects,
                                                   timeout=lease_timeout),
                                # with --spark: each tick's jobs of a table in one Spark stage
                                batch_runner=load_runner("compaction", "spark")
                                if spark else None, spark=spark_session)
        if metrics_port is not None:
            from sediment import metrics

            metrics.watch_queue("jobs", maintainer.jobs_waiting)
            metrics.watch_queue("batcher", maintainer.batcher_waiting)
            start_metrics(metrics_port, metrics_host, None)
        maintainer.run(report_every=interval, max_reports=max_loops, stop=stop,
                       on_report=on_report)
        return
    maintenance = maintenance_of_store()
    results: dict[str, MaintenanceResult] = {}

    def act(t: Table, progress: Progress) -> dict[str, Any]:
        from sediment.handle import handle_of
        from sediment.maintenance.gc import tag_protection

        # an offline table: its steps split and compact nothing, GC runs
        m = results[t.name] = maintenance.maintain_table(t, progress=progress)
        row = {**_scheme_of(t), **_counts(m), **_tag_errors(tag_protection(handle_of(t))[1])}
        if m.prune_note and "error" not in row:  # the unreadable tag named once, not twice
            row["error"] = f"prune: {m.prune_note}"
        if m.errors:  # a damaged member of its scheme: named, the others maintained
            problems = [row["error"]] if "error" in row else []
            row["error"] = "; ".join([*problems, "scheme members left as they are: "
                                      + "; ".join(m.errors)])
        return row

    def settle(rows: list[dict[str, Any]]) -> None:
        """After the tables, as ``Store.maintain``: the members of partition schemes
        maintained again while a round splits anything, their rows summed."""
        settled = maintenance.settle(dict(results))
        for row in rows:
            name = row.get("table")
            if name in results and settled[name] is not results[name]:
                row.update(_counts(settled[name]))
        results.clear()

    run_passes(store, table, loop, interval, max_loops, json_out, act, online_only=False,
              store_pass=None if table else lambda: _store_rows(maintenance),
              after_tables=None if table else settle, verb="maintain", unit="jobs")


def _counts(m: MaintenanceResult) -> dict[str, Any]:
    """A ``maintain`` report row's numbers (``pruned``, as in the loop's rows: the metadata
    objects the closing prune deleted, when it deleted any)."""
    return {"passes": m.passes, "splits": m.splits, "jobs": m.jobs_committed,
            "failed": m.jobs_failed, "deleted": m.files_deleted,
            **({"pruned": m.metadata_deleted} if m.metadata_deleted else {})}


def _scheme_of(t: Table) -> dict[str, Any]:
    """``{"scheme": name}`` for a member of a partition scheme (its splits count every
    member's records, so a report row says which scheme split), else nothing."""
    from sediment.schemes.catalog import scheme_name_of

    sid = t.properties.get("partition.scheme")
    return {"scheme": scheme_name_of(t.store, str(sid))} if sid else {}
