"""CLI command ``report``: a table's partition tree, file references, compaction jobs or job
events, or the store's partition schemes.

A reader's command, kept apart from the maintenance commands that write: it runs no passes and
needs none of their loop, progress or daemon handling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

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
from sediment.cli.output import emit, iso_time, make_table
from sediment.types import region_text

if TYPE_CHECKING:
    from sediment.table import Table

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""


def _partition_rows(t: Table, version: int | None) -> list[dict[str, Any]]:
    files: dict[str, int] = {}
    records: dict[str, int] = {}
    for r in t.files(version):
        files[r.partition_id] = files.get(r.partition_id, 0) + 1
        records[r.partition_id] = records.get(r.partition_id, 0) + r.records
    types = [f.type for f in t.schema.row_keys]
    return [{"id": p.id, "parent": p.parent_id, "leaf": p.is_leaf,
             "region": region_text(p.region, types),
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
    what: Annotated[str, typer.Argument(help="partitions, files, jobs, tasks, schemes or "
                                        "maintainers")],
    table: Annotated[str | None, typer.Option("--table", "-t",
                                              help="Table to report on.")] = None,
    store: StoreOption = None,
    version: VersionOption = None,
    json_out: JsonOption = False,
) -> None:
    """Reports: the partition tree, file references, compaction jobs, or all job events of a
    table; or (schemes, no --table) the store's partition schemes with their member tables;
    or (maintainers, no --table) the `maintain --loop` processes of the store, which
    tables each holds and when each last sent a heartbeat.

    partitions and files read --version (a number or a tag; default: latest)."""
    if what not in ("partitions", "files", "jobs", "tasks", "schemes", "maintainers"):
        raise CliError(f"unknown report {what!r}: use partitions, files, jobs, tasks, "
                       "schemes or maintainers")
    if what == "maintainers":
        from sediment.maintenance.lease_store import maintainers_report

        emit(maintainers_report(open_store(store).objects), json_out, _render_maintainers)
        return
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
            ["time", "kind", "job", "status", "partition", "details"],
            [[iso_time(r["time"]), r["kind"], short_id(r["job_id"]), r["status"],
              short_id(r["partition_id"]), _details(r["details"])] for r in rs],
            title=f"{len(rs)} events", no_wrap=["time", "job", "partition"]))


SHORT_ID = 8
"""Characters of a job or partition id a report table shows (``--json`` has the whole id)."""


def short_id(value: Any) -> str:
    """An id as a table shows it: its first :data:`SHORT_ID` characters, as ``git log``
    shortens hashes (unique enough within one table to tell rows apart)."""
    text = "" if value is None else str(value)
    return text[:SHORT_ID]


def _details(details: Any) -> str:
    """An event's details as ``name=value`` pairs, numbers rounded for people."""
    if not isinstance(details, dict):
        return "" if details is None else str(details)
    return "  ".join(f"{k}={human_value(k, v)}" for k, v in details.items())


def _render_maintainers(d: dict[str, Any]) -> list[RenderableType]:
    """``report maintainers`` for people: the members, then the leases."""
    members = make_table(
        ["maintainer", "host", "pid", "heartbeat", "live", "holds"],
        [[m["member"], m["host"], m["pid"], f"{m['heartbeat_age_seconds']:.1f} s ago",
          "yes" if m["live"] else "no", ", ".join(m["leases"]) or "(none)"]
         for m in d["members"]],
        title=f"{len(d['members'])} maintainers", no_wrap=["maintainer"])
    leases = make_table(
        ["lease", "holder", "epoch", "heartbeat", "state"],
        [[r["lease"], r["member"], r["epoch"], f"{r['heartbeat_age_seconds']:.1f} s ago",
          r["state"]] for r in d["leases"]],
        title=f"{len(d['leases'])} leases", numeric=["epoch"], no_wrap=["holder"])
    return [members, leases]
