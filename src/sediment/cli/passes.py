"""How a maintenance command runs over a store's tables: once, or every ``--interval`` with
``--loop``; a progress bar on a terminal; one report row per table.

Kept apart from the commands (:mod:`sediment.cli.maintenance`), which only say what to do to one
table: here is what every such command shares, above all that in a loop (a daemon) a table that
cannot be opened or fails is reported and retried next pass instead of stopping the others.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer
from rich.console import RenderableType

from sediment.cli.humanize import human_value
from sediment.cli.options import open_store
from sediment.cli.output import emit, iso_time, iso_times, json_default, make_table
from sediment.cli.terminal import progress_bar
from sediment.errors import SedimentError

if TYPE_CHECKING:
    from sediment.table import Table


def each_table(store: str | None, table: str | None, *, online_only: bool,
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


def warn_errors(rows: list[dict[str, Any]], verb: str, loop: bool) -> None:
    """One line on stderr per table the pass could not fully do: the report table may be
    redirected, and a daemon's operator must see at once which table needs attention."""
    then = " (the other tables go on; retried next pass)" if loop else ""
    for row in rows:
        if "error" in row:
            typer.echo(f"{verb}: table {row['table']}: {row['error']}{then}", err=True)


def emit_rows(rows: list[dict[str, Any]], json_out: bool, *, loop: bool = False) -> None:
    """One row per table: full values in JSON, rounded for people in the table. A loop's
    JSON is one compact object per line (JSON lines): a log collector such as journald
    takes each line as one record, and a report never spans lines; each line carries the
    ``time`` it was reported (ISO 8601 UTC), so a line read alone says when it was."""
    if json_out and loop:
        now = time.time()
        for row in rows:
            typer.echo(json.dumps(iso_times({"time": iso_time(now), **row}),
                                  default=json_default))
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


LOOP_COLUMNS = ("tables", "ticks", "splits", "jobs", "failed", "deleted", "ingests", "running",
                "errors")
"""The columns of ``maintain --loop``'s line, each a total over the tables in the interval."""

LOOP_LEGEND = ("  tables: tables maintained  ticks: looks at them  splits: leaves split\n"
               "  jobs: compaction jobs committed  failed: jobs failed  deleted: files GC "
               "deleted\n"
               "  ingests: batcher jobs committed (files queued by `batcher submit`)\n"
               "  running: jobs running now  errors: tables in error (each named on stderr)")


class LoopLines:
    """``maintain --loop`` for people: one line per interval, its numbers summed over the
    tables, under a legend printed once. A daemon's terminal or log then grows by one line per
    interval whatever the number of tables (``--json`` has a line per table for scripts)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.started = False

    def __call__(self, rows: list[dict[str, Any]]) -> None:
        widths = [max(len(c), 7) for c in LOOP_COLUMNS]
        if not self.started:
            self.started = True
            every = human_value("seconds", self.interval)
            typer.echo(f"maintain --loop: a line every {every}, totals over the tables "
                       f"(--json: per table)\n{LOOP_LEGEND}")
            typer.echo(f"{'time':<24}" + "".join(f" {c:>{w}}" for c, w in
                                                  zip(LOOP_COLUMNS, widths, strict=True)))
        totals = {"tables": len(rows), "errors": sum("error" in r for r in rows)}
        for c in LOOP_COLUMNS[1:-1]:
            totals[c] = sum(int(r.get(c, 0) or 0) for r in rows)
        typer.echo(f"{iso_time(time.time()):<24}" + "".join(
            f" {human_value(c, totals[c]):>{w}}" for c, w in zip(LOOP_COLUMNS, widths,
                                                                 strict=True)))


Progress = Callable[[int, int], None]


def run_passes(store: str | None, table: str | None, loop: bool, interval: float,
               max_loops: int, json_out: bool,
               action: Callable[[Table, Progress], dict[str, Any]], *, online_only: bool,
               store_pass: Callable[[], list[dict[str, Any]]] | None = None,
               after_tables: Callable[[list[dict[str, Any]]], None] | None = None,
               verb: str = "", unit: str = "tables") -> None:
    """Run ``action`` on each table (once, or every ``interval`` with ``loop``), a progress
    bar on a terminal, then one report row per table. With ``unit`` "tables" the bar counts
    the tables; otherwise each table gets a bar of its own that ``action`` drives through the
    ``progress(done, total)`` it is given (compaction jobs: their real total, per pass).
    ``store_pass`` runs first in each round (its rows head the report); ``after_tables``
    once the tables are done, given the round's rows to complete."""
    passes = 0
    while True:
        passes += 1
        rows: list[dict[str, Any]] = []
        if store_pass is not None:
            try:
                rows.extend(store_pass())
            except SedimentError as e:
                if not loop:
                    raise
                rows.append({"table": "(unnamed folders)", "error": f"{type(e).__name__}: {e}"})
        try:
            tables, unopened = each_table(store, table, online_only=online_only, loop=loop)
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
        if after_tables is not None:
            try:
                after_tables(rows)
            except SedimentError as e:
                if not loop:
                    raise
                rows.append({"table": "*", "error": f"{type(e).__name__}: {e}"})
        emit_rows(rows, json_out, loop=loop)
        warn_errors(rows, verb, loop)
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
