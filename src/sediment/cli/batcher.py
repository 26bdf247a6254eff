"""``sediment batcher submit|status|run``: the ingest batcher from a shell."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.console import RenderableType

from sediment.cli.errors import CliError
from sediment.cli.humanize import human_seconds
from sediment.cli.options import JsonOption, StoreOption, open_table
from sediment.cli.output import emit, key_value_table, make_table

batcher_app = typer.Typer(
    name="batcher",
    help="The ingest batcher: queue files, then ingest them in jobs grouped by count, size "
    "and age (big jobs go to Spark bulk import with --spark).",
    no_args_is_help=True,
    rich_markup_mode=None,
)

TableArg = Annotated[str, typer.Argument(metavar="TABLE", help="Table name.")]


def _size(n: int | None) -> str:
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


@batcher_app.command("submit")
def submit_cmd(
    name: TableArg,
    files: Annotated[list[str], typer.Argument(metavar="FILES...",
                                               help="Parquet, CSV or JSON-lines files, local "
                                               "or s3://; globs allowed.")],
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Queue files for ingest into a table (ingested by `batcher run`, or by a running
    `maintain --loop` within batcher.max_age_seconds)."""
    from sediment.ingest import batcher

    table = open_table(store, name)
    requests = batcher.submit(table, files)
    data: dict[str, Any] = {"table": name, "submitted": [r.to_json() for r in requests],
            "files": len(requests), "bytes": sum(r.size for r in requests)}
    emit(data, json_out, lambda d: f"table {name}: queued {d['files']} file(s), "
         f"{_size(d['bytes'])}")


@batcher_app.command("status")
def status_cmd(name: TableArg, store: StoreOption = None, json_out: JsonOption = False) -> None:
    """The queue (its depth and the age of its oldest request), the jobs a run would make
    now, running and recent jobs, failures."""
    from sediment.ingest import batcher

    data = batcher.status(open_table(store, name))
    emit(data, json_out, _render_status)


def _render_status(d: dict[str, Any]) -> list[RenderableType]:
    p = d["pending"]
    age = p["oldest_age_seconds"]
    out: list[RenderableType] = [key_value_table([
        ("table", d["table"]),
        ("queue depth", f"{p['requests']} request(s)"),
        ("queued bytes", _size(p["bytes"])),
        ("oldest request", "" if age is None else f"{age:.1f} s ago"),
        ("jobs ready now", len(d["ready"])),
        ("requests waiting", d["waiting"]),
        ("failed requests", len(d["failed_requests"])),
    ])]
    if d["ready"]:
        out.append(make_table(["files", "bytes", "reason", "route with --spark"],
                              [[b["files"], _size(b["bytes"]), b["reason"],
                                b["route_with_spark"]] for b in d["ready"]],
                              title="ready jobs", numeric=["files", "bytes"]))
    jobs = d["running"] + d["recent"]
    if jobs:
        out.append(make_table(["job", "route", "state", "files", "bytes", "version"],
                              [[_short(j["id"]), j["route"], j["state"], j["files"],
                                _size(j["bytes"]), "" if j["version"] is None else j["version"]]
                               for j in jobs],
                              title="jobs", numeric=["files", "bytes", "version"],
                              no_wrap=["job", "route", "state"]))
        out.extend(f"job {_short(j['id'])}: {j['error']}" for j in jobs if j["error"])
    out.extend(f"job {_short(j['id'])} not settled after {j['recovery_attempts']} attempt(s): "
               f"{j['recovery_error']}" for j in d.get("unsettled", []))
    if d["failed_requests"]:
        out.append("failed requests (fix the file, then submit it again):")
        out.extend(f"  {f['path']}: {f['error']}" for f in d["failed_requests"])
    return out


@batcher_app.command("run")
def run_cmd(
    name: TableArg,
    spark: Annotated[bool, typer.Option("--spark", help="Send big jobs to Spark bulk import "
                                        "(a local[*] session unless --master).")] = False,
    master: Annotated[str | None, typer.Option("--master", metavar="URL",
                                               help="Spark master for --spark.")] = None,
    now: Annotated[bool, typer.Option(
        "--now", help="Also run the groups that are not full yet, without waiting for "
        "batcher.max_age_seconds (flush the queue).")] = False,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Make and run every job that is due (and settle jobs whose runner died).

    A job is due when its group is full (batcher.max_files, batcher.max_bytes) or its oldest
    request is batcher.max_age_seconds old; with --now, every pending request runs."""
    from sediment.ingest import batcher

    table = open_table(store, name)
    started = time.perf_counter()
    session = None
    if spark or master:
        from sediment.spark import session as spark_session

        session = spark_session(master)
    try:
        result = batcher.run(table, session, flush=now)
    finally:
        if session is not None:
            session.stop()
    data = {"table": name, **result.to_json(), "seconds": time.perf_counter() - started}
    emit(data, json_out, _render_run)
    failed = [o for o in data["jobs"] if o["state"] != "committed"]
    if failed:
        first = failed[0]
        raise CliError(f"{len(failed)} of {len(data['jobs'])} batcher job(s) of table {name} "
                       f"did not commit (job {_short(first['job_id'])}: "
                       f"{first['error'] or first['state']})")
    unsettled = [o for o in data["recovered"] if o["state"] == "unsettled"]
    if unsettled:
        raise CliError(f"{len(unsettled)} abandoned batcher job(s) of table {name} could not be "
                       f"settled: {unsettled[0]['error']}")


def _render_run(d: dict[str, Any]) -> list[RenderableType]:
    done = d["recovered"] + d["jobs"]
    out: list[RenderableType] = []
    if done:
        out.append(make_table(["job", "route", "state", "files", "bytes", "rows", "version"],
                              [[_short(o["job_id"]), o["route"], o["state"], o["files"],
                                _size(o["bytes"]), o["rows"],
                                "" if o["version"] is None else o["version"]] for o in done],
                              numeric=["files", "bytes", "rows", "version"],
                              no_wrap=["job", "route", "state"]))
        out.extend(f"job {_short(o['job_id'])}: {o['error']}" for o in done if o["error"])
    out.append(f"table {d['table']}: {len(d['jobs'])} job(s) run, "
               f"{sum(o['state'] == 'committed' for o in d['jobs'])} committed, "
               f"{d['waiting']} request(s) waiting ({human_seconds(d['seconds'])})")
    return out


def _short(job_id: str) -> str:
    """The random part of a job id (the rest is its creation time)."""
    return job_id.rsplit("-", 1)[-1]
