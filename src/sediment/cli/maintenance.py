"""CLI commands of maintenance and reports: compact, split, gc, maintain, report."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import Annotated, Any

import typer
from rich.console import RenderableType
from rich.tree import Tree

from sediment.cli.errors import CliError
from sediment.cli.humanize import human_value
from sediment.cli.options import (
    JsonOption,
    StoreOption,
    VersionOption,
    open_store,
    open_table,
    resolve_version_option,
)
from sediment.cli.output import emit, iso_time, json_default, make_table
from sediment.cli.terminal import progress_bar
from sediment.errors import SedimentError
from sediment.table import Table

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""

TableOption = Annotated[str | None, typer.Option("--table", "-t",
                                                 help="One table (default: every table).")]
LoopOption = Annotated[bool, typer.Option("--loop", help="Repeat until interrupted.")]
IntervalOption = Annotated[float, typer.Option("--interval", help="Seconds between loop "
                                               "passes (maintain: between its report rows and "
                                               "GC runs; jobs start as soon as they are due).")]
OrphanTimeoutOption = Annotated[float | None, typer.Option(
    "--orphan-timeout", help="Seconds after which files no transaction added and no live "
    "writer holds are deleted; overrides gc.orphan_timeout_seconds (which is at least an "
    "hour). Lower it only where no writer can be slower, e.g. in tests.")]
PassesOption = Annotated[int, typer.Option("--max-loops", help="Stop --loop after this many "
                                           "reports, one per --interval (0: never).")]


def _each_table(store: str | None, table: str | None, *, online_only: bool,
                loop: bool = False) -> tuple[list[Table], list[dict[str, Any]]]:
    """The tables to work on, and (``loop``) an error row for each that cannot be opened: a
    damaged catalog entry or log of one table must not stop a daemon from maintaining the
    others. Without ``loop`` the first such error is raised."""
    st = open_store(store)
    names = [table] if table else st.tables()
    tables: list[Table] = []
    errors: list[dict[str, Any]] = []
    for n in names:
        try:
            t = st.table(n)
            if online_only and not table and not t.online:
                continue
            tables.append(t)
        except SedimentError as e:
            if not loop:
                raise
            errors.append({"table": n, "error": f"{type(e).__name__}: {e}"})
    return tables, errors


def _warn_errors(rows: list[dict[str, Any]], verb: str, loop: bool) -> None:
    """One line on stderr per table the pass could not fully do: the report table may be
    redirected, and a daemon's operator must see at once which table needs attention."""
    then = " (the other tables go on; retried next pass)" if loop else ""
    for row in rows:
        if "error" in row:
            typer.echo(f"{verb}: table {row['table']}: {row['error']}{then}", err=True)


def _tag_errors(problems: Iterable[str]) -> dict[str, Any]:
    """The report row's error entry for tags GC could not read (empty when none)."""
    text = "; ".join(problems)
    return {"error": f"gc kept every unreferenced file: {text}"} if text else {}


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (unless ignored): the daemon stops starting work and
    waits for its running jobs; the same signal again aborts at once."""
    stop = threading.Event()

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        typer.echo("stopping: waiting for running compaction jobs (again to abort)", err=True)

    for sig in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, handler)
    return stop


def _emit_rows(rows: list[dict[str, Any]], json_out: bool, *, loop: bool = False) -> None:
    """One row per table: full values in JSON, rounded for people in the table. A loop's
    JSON is one compact object per line (JSON lines): a log collector such as journald
    takes each line as one record, and a report never spans lines."""
    if json_out and loop:
        for row in rows:
            typer.echo(json.dumps(row, default=json_default))
        return

    def render(r: list[dict[str, Any]]) -> RenderableType:
        cols = list(dict.fromkeys(k for row in r for k in row))
        numeric = [c for c in cols if any(isinstance(row.get(c), int | float)
                                          and not isinstance(row.get(c), bool) for row in r)]
        # headers with spaces ("rows in") wrap between words in a narrow terminal
        return make_table([c.replace("_", " ") for c in cols],
                          [[human_value(k, row[k]) if k in row else "" for k in cols]
                           for row in r], numeric=[c.replace("_", " ") for c in numeric],
                          no_wrap=["table"], compact=True)
    emit(rows, json_out, render)


def _collect_unnamed(store: str | None, orphan_timeout: float | None) -> dict[str, Any] | None:
    """Remove the folders of tables no catalog entry names (dropped tables, killed loads);
    a report row when it did something or could not."""
    r = open_store(store).collect_unnamed_tables(timeout=orphan_timeout)
    if not (r.removed or r.note):
        return None
    return {"table": "(unnamed tables)", "removed": len(r.removed),
            "deleted": r.objects_deleted, **({"error": r.note} if r.note else {})}


Progress = Callable[[int, int], None]


def _run(store: str | None, table: str | None, loop: bool, interval: float, max_loops: int,
         json_out: bool, action: Callable[[Table, Progress], dict[str, Any]], *,
         online_only: bool, store_pass: Callable[[], dict[str, Any] | None] | None = None,
         verb: str = "", unit: str = "tables") -> None:
    """Run ``action`` on each table (once, or every ``interval`` with ``loop``), a progress
    bar on a terminal, then one report row per table. With ``unit`` "tables" the bar counts
    the tables; otherwise each table gets a bar of its own that ``action`` drives through the
    ``progress(done, total)`` it is given (compaction jobs: their real total, per pass)."""
    passes = 0
    while True:
        passes += 1
        rows: list[dict[str, Any]] = []
        if store_pass is not None:
            try:
                row = store_pass()
            except SedimentError as e:
                if not loop:
                    raise
                row = {"table": "(unnamed tables)", "error": f"{type(e).__name__}: {e}"}
            if row is not None:
                rows.append(row)
        try:
            tables, unopened = _each_table(store, table, online_only=online_only, loop=loop)
            rows.extend(unopened)
        except SedimentError as e:
            if not loop:
                raise
            tables = []
            rows.append({"table": table or "*", "error": f"{type(e).__name__}: {e}"})
        with progress_bar(json_out, unit) as bar:
            per_table = unit != "tables"
            task = None if per_table else bar.add_task(verb, total=len(tables))
            for i, t in enumerate(tables, 1):
                where = f" ({i}/{len(tables)} tables)" if len(tables) > 1 else ""
                if task is not None:
                    bar.update(task, description=f"{verb} {t.name}")
                    progress: Progress = _ignore
                else:
                    progress = _table_progress(bar, f"{verb} {t.name}{where}")
                started = time.perf_counter()
                try:
                    if not t.online and online_only:
                        rows.append({"table": t.name, "skipped": "offline"})
                        continue
                    rows.append({"table": t.name, **action(t, progress),
                                 "seconds": time.perf_counter() - started})
                except Exception as e:
                    # A loop is a daemon: one table's failure (damaged metadata, a storage
                    # error, even a bug) is reported and retried next pass; it must not stop
                    # every table's upkeep.
                    if not loop:
                        raise
                    rows.append({"table": t.name, "error": f"{type(e).__name__}: {e}"})
                finally:
                    if task is not None:
                        bar.advance(task)
        _emit_rows(rows, json_out, loop=loop)
        _warn_errors(rows, verb, loop)
        if not loop or (max_loops and passes >= max_loops):
            return
        time.sleep(interval)


def _ignore(done: int, total: int) -> None:
    pass


def _table_progress(bar: Any, description: str) -> Progress:
    """A ``progress(done, total)`` driving a new task of ``bar``: the total as the work
    reports it; a ``(0, n)`` after work was done starts a new pass (maintain: "pass 2")."""
    task = bar.add_task(description, total=None)
    passes = [0]

    def progress(done: int, total: int) -> None:
        if done == 0:
            passes[0] += 1
            name = description if passes[0] == 1 else f"{description} pass {passes[0]}"
            bar.update(task, description=name, completed=0, total=total)
        else:
            bar.update(task, completed=done, total=total)

    return progress


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
        return {"pushed_down": r.references_pushed_down, "jobs": r.jobs_created,
                "committed": r.jobs_committed, "failed": r.jobs_failed, "rows_in": r.rows_in,
                "rows_out": r.rows_out}
    _run(store, table, loop, interval, max_loops, json_out, act, online_only=True,
         verb="compact", unit="jobs")


@commands.command()
def split(table: TableOption = None, loop: LoopOption = False, interval: IntervalOption = 10.0,
          max_loops: PassesOption = 0, store: StoreOption = None,
          json_out: JsonOption = False) -> None:
    """Split leaf partitions over the threshold at their medians; offline tables skipped."""
    def act(t: Table, progress: Progress) -> dict[str, Any]:
        r = t.split()
        return {"splits": r.splits, "unsplittable": len(r.unsplittable)}
    _run(store, table, loop, interval, max_loops, json_out, act, online_only=True,
         verb="split")


@commands.command()
def gc(table: TableOption = None, loop: LoopOption = False, interval: IntervalOption = 60.0,
       max_loops: PassesOption = 0, store: StoreOption = None,
       json_out: JsonOption = False, orphan_timeout: OrphanTimeoutOption = None) -> None:
    """Delete unreferenced files past the GC delay and orphans past the orphan timeout."""
    def act(t: Table, progress: Progress) -> dict[str, Any]:
        r = t.gc(orphan_timeout=orphan_timeout)
        return {"deleted": r.deleted, "orphans_deleted": r.orphans_deleted,
                **_tag_errors(r.unreadable_tags)}
    _run(store, table, loop, interval, max_loops, json_out, act, online_only=False,
         verb="gc")


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
             store: StoreOption = None, json_out: JsonOption = False,
             orphan_timeout: OrphanTimeoutOption = None) -> None:
    """Split, compact and collect garbage until nothing is left to do (offline tables:
    GC only). With --loop (local jobs): maintain continuously, starting splits and compaction
    jobs as soon as they are due and each job committing as it ends, each job in a worker
    process; one report row per table every --interval seconds (GC runs at that period too)."""
    if workers not in ("process", "thread"):
        raise typer.BadParameter(f"--workers is process or thread, not {workers!r}")
    if spark:
        from sediment.spark import session

        session(master)
    elif loop:
        from sediment.maintenance.continuous import Maintainer

        stop = _stop_on_signals()
        collected = [float("-inf")]

        def tables() -> list[Table]:
            # once per GC period, the store's unnamed table folders (whole-store runs only)
            if table is None and time.monotonic() - collected[0] >= interval:
                collected[0] = time.monotonic()
                try:
                    _collect_unnamed(store, orphan_timeout)
                except SedimentError as e:
                    typer.echo(f"collecting unnamed table folders: {type(e).__name__}: {e}",
                               err=True)
            found, unopened = _each_table(store, table, online_only=False, loop=True)
            for row in unopened:  # reported in the next rows, looked at again next refresh
                maintainer.note(row["table"], row["error"])
            return found

        def on_report(rows: list[dict[str, Any]]) -> None:
            _emit_rows(rows, json_out, loop=True)
            _warn_errors(rows, "maintain", True)

        maintainer = Maintainer(tables, gc_every=interval, refresh_tables=interval,
                                orphan_timeout=orphan_timeout, threads=threads,
                                workers="process" if workers == "process" else "thread")
        maintainer.run(report_every=interval, max_reports=max_loops, stop=stop,
                       on_report=on_report)
        return
    def act(t: Table, progress: Progress) -> dict[str, Any]:
        if not t.online:
            r = t.gc(orphan_timeout=orphan_timeout)
            progress(0, 0)
            return {"passes": 1, "splits": 0, "jobs": 0, "failed": 0,
                    "deleted": r.deleted + r.orphans_deleted,
                    **_tag_errors(r.unreadable_tags)}
        from sediment.handle import handle_of
        from sediment.maintenance.gc import tag_protection

        m = t.maintain(runner="spark" if spark else "local", orphan_timeout=orphan_timeout,
                       progress=progress)
        return {**_scheme_of(t), "passes": m.passes, "splits": m.splits,
                "jobs": m.jobs_committed, "failed": m.jobs_failed, "deleted": m.files_deleted,
                **_tag_errors(tag_protection(handle_of(t))[1])}
    _run(store, table, loop, interval, max_loops, json_out, act, online_only=False,
         store_pass=None if table else lambda: _collect_unnamed(store, orphan_timeout),
         verb="maintain", unit="jobs")


def _scheme_of(t: Table) -> dict[str, Any]:
    """``{"scheme": name}`` for a member of a partition scheme (its splits count every
    member's records, so a report row says which scheme split), else nothing."""
    from sediment.schemes.catalog import scheme_name_of

    sid = t.properties.get("partition.scheme")
    return {"scheme": scheme_name_of(t.store, str(sid))} if sid else {}


# ---- reports --------------------------------------------------------------------------------
def _partition_rows(t: Table, version: int | None) -> list[dict[str, Any]]:
    files: dict[str, int] = {}
    records: dict[str, int] = {}
    for r in t.files(version):
        files[r.partition_id] = files.get(r.partition_id, 0) + 1
        records[r.partition_id] = records.get(r.partition_id, 0) + r.records
    return [{"id": p.id, "parent": p.parent_id, "leaf": p.is_leaf, "region": str(p.region),
             "files": files.get(p.id, 0), "records": records.get(p.id, 0),
             "children": list(p.children)} for p in t.partitions(version)]


def _partition_tree(rows: list[dict[str, Any]]) -> RenderableType:
    by_id = {r["id"]: r for r in rows}

    def label(r: dict[str, Any]) -> str:
        kind = "leaf" if r["leaf"] else "node"
        return (f"{r['id']} {kind} {r['region']}  records={r['records']:,} "
                f"files={r['files']}")

    root = next(r for r in rows if r["parent"] is None)
    tree = Tree(label(root))

    def add(node: Tree, r: dict[str, Any]) -> None:
        for c in r["children"]:
            child = by_id[c]
            add(node.add(label(child)), child)

    add(tree, root)
    return tree


@commands.command()
def report(
    what: Annotated[str, typer.Argument(help="partitions, files, jobs, tasks or schemes")],
    table: Annotated[str | None, typer.Option("--table", "-t",
                                              help="Table to report on.")] = None,
    store: StoreOption = None,
    version: VersionOption = None,
    json_out: JsonOption = False,
) -> None:
    """Reports: the partition tree, file references, compaction jobs, or all job events of a
    table; or (schemes, no --table) the store's partition schemes with their member tables.

    partitions and files read --version (a number or a tag; default: latest)."""
    if what not in ("partitions", "files", "jobs", "tasks", "schemes"):
        raise CliError(f"unknown report {what!r}: use partitions, files, jobs, tasks or "
                       "schemes")
    if what == "schemes":
        st = open_store(store)
        rows = [st.describe_scheme(n).to_json() for n in st.schemes()]
        emit(rows, json_out, lambda rs: make_table(
            ["scheme", "version", "leaves", "split threshold", "member tables"],
            [[r["name"], r["version"], r["leaves"], r["split_threshold"],
              ", ".join(r["members"]) or "(none)"] for r in rs],
            title=f"{len(rs)} partition schemes"))
        return
    if table is None:
        raise CliError(f"report {what} needs --table")
    t = open_table(store, table)
    if version is not None and what in ("jobs", "tasks"):
        raise CliError(f"report {what} covers every version: --version applies to "
                       "partitions and files")
    v = resolve_version_option(t, version)
    if what == "partitions":
        emit(_partition_rows(t, v), json_out, _partition_tree)
    elif what == "files":
        rows = [r._asdict() for r in t.files(v)]
        emit(rows, json_out, lambda rs: make_table(
            ["filename", "partition_id", "records", "approximate", "job_id"],
            [[r[k] for k in ("filename", "partition_id", "records", "approximate", "job_id")]
             for r in rs], title=f"{len(rs)} file references"))
    elif what == "jobs":
        rows = t.jobs("compaction")
        cols = ["job_id", "partition_id", "status", "created", "inputs", "rows_in", "rows_out",
                "seconds", "rows_per_second", "reason"]
        emit(rows, json_out, lambda rs: make_table(cols, [
            [iso_time(r[c]) if c == "created" else human_value(c, r.get(c, "")) for c in cols]
            for r in rs],
            title=f"{len(rs)} compaction jobs"))
    elif what == "tasks":
        rows = [e.to_json() for e in t.events()]
        emit(rows, json_out, lambda rs: make_table(
            ["time", "kind", "job_id", "status", "partition_id", "details"],
            [[iso_time(r["time"]), r["kind"], r["job_id"], r["status"],
              r["partition_id"] or "", r["details"]] for r in rs],
            title=f"{len(rs)} events"))

