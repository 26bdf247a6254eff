"""CLI commands for versions, dumps and loads: tag, pin, unpin, tags, diff, restore, prune, dump,
load."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sediment.cli.data import parse_range
from sediment.cli.errors import CliError
from sediment.cli.humanize import human_items
from sediment.cli.options import (
    JsonOption,
    StoreOption,
    TableArg,
    VersionOption,
    open_store,
    open_table,
    resolve_version_option,
)
from sediment.cli.output import emit, iso_time, key_value_table, make_table
from sediment.cli.terminal import progress_bar, stopped_by_sigterm

if TYPE_CHECKING:
    from sediment.core.deletions import Deletion

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""

VersionArg = Annotated[str, typer.Argument(help="A version number or a tag.")]


@commands.command()
def tag(name: TableArg, tag_name: Annotated[str, typer.Argument(metavar="TAG")],
        version: Annotated[str | None, typer.Option(
            "--version", metavar="VERSION|TAG",
            help="The version to tag: a number or another tag (default: latest).")] = None,
        delete: Annotated[bool, typer.Option("--delete", help="Delete the tag.")] = False,
        store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Tag a version (GC keeps its files), or delete a tag with --delete."""
    t = open_table(store, name)
    if delete:
        t.delete_tag(tag_name)
        emit({"table": name, "deleted": tag_name}, json_out,
             lambda d: f"deleted tag {tag_name} of {name}")
        return
    tg = t.tag(tag_name, resolve_version_option(t, version))
    emit({"table": name, "tag": tg.name, "version": tg.version}, json_out,
         lambda d: f"tagged version {tg.version} of {name} as {tg.name}")


@commands.command()
def pin(name: TableArg, pin_name: Annotated[str, typer.Argument(metavar="PIN")],
        ttl: Annotated[float, typer.Option(
            "--ttl", metavar="SECONDS", help="How long the pin holds unless pinned again.")],
        version: Annotated[str | None, typer.Option(
            "--version", metavar="VERSION|TAG",
            help="The version to pin: a number or a tag (default: latest).")] = None,
        store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Pin a version for --ttl seconds (GC and prune hold it like a tag until it expires or
    is unpinned); pinning again renews or moves the pin."""
    t = open_table(store, name)
    p = t.pin(pin_name, resolve_version_option(t, version), ttl)
    expires = float(p.expires or 0)
    emit({"table": name, "pin": p.name, "version": p.version, "expires": expires}, json_out,
         lambda d: f"pinned version {p.version} of {name} as {p.name} until {iso_time(expires)}")


@commands.command()
def unpin(name: TableArg, pin_name: Annotated[str, typer.Argument(metavar="PIN")],
          store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Let a pin go at once (a pin that expired or was let go already is no error)."""
    gone = open_table(store, name).unpin(pin_name)
    emit({"table": name, "unpinned": pin_name, "existed": gone}, json_out,
         lambda d: f"unpinned {pin_name} of {name}" if gone else
         f"table {name} holds no pin {pin_name} (let go, or expired)")


@commands.command()
def tags(name: TableArg, store: StoreOption = None, json_out: JsonOption = False) -> None:
    """List a table's tags and live pins (a pin shows when it expires)."""
    rows: list[dict[str, Any]] = [{"tag": x.name, "version": x.version, "created": x.created,
                                   "expires": x.expires}
                                  for x in open_table(store, name).tags()]
    emit(rows, json_out, lambda rs: make_table(["tag", "version", "created", "expires"], [
        [r["tag"], r["version"], iso_time(r["created"]),
         "" if r["expires"] is None else iso_time(r["expires"])] for r in rs]))


@commands.command()
def diff(name: TableArg, v1: VersionArg,
         v2: Annotated[str | None, typer.Argument(help="Default: latest.")] = None,
         store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Files, partitions and records that changed between two versions (and the value
    columns of each, when the schema changed between them)."""
    d = open_table(store, name).diff(v1, v2)
    data: dict[str, Any] = {
        "from_version": d.from_version, "to_version": d.to_version,
        "files_added": list(d.files_added), "files_removed": list(d.files_removed),
        "partitions_added": list(d.partitions_added),
        "partitions_removed": list(d.partitions_removed),
        "references_added": len(d.references_added),
        "references_removed": len(d.references_removed),
        "records_change": d.records_change,
        # deletes leave their files in place until compaction: without these a delete's
        # version showed no change at all
        "deletions_added": [_deletion(x) for x in d.deletions_added],
        "deletions_removed": [_deletion(x) for x in d.deletions_removed]}
    if d.schemas is not None:  # the columns as each version reads them
        data["schema_from"] = ", ".join(f"{f.name}:{f.type}" for f in d.schemas[0].values)
        data["schema_to"] = ", ".join(f"{f.name}:{f.type}" for f in d.schemas[1].values)
    emit(data, json_out, lambda x: key_value_table(
        [(k, len(v) if isinstance(v, list) else v) for k, v in x.items()],
        title=f"diff {d.from_version} -> {d.to_version}"))


def _deletion(d: Deletion) -> dict[str, Any]:
    """A pending delete as ``diff --json`` shows it: its version, how many key ranges it
    names (None: every row key) and whether a filter narrows it."""
    return {"version": d.version, "ranges": None if d.ranges is None else len(d.ranges),
            "filter": d.filter is not None}


@commands.command()
def restore(name: TableArg, version: VersionArg, store: StoreOption = None,
            json_out: JsonOption = False) -> None:
    """Make the table's content what it was at a version (as a new transaction)."""
    v = open_table(store, name).restore(version)
    emit({"table": name, "restored": version, "version": v}, json_out,
         lambda d: f"restored {name} to {version} as version {v}")


@commands.command()
def prune(name: TableArg, store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Delete log entries and snapshots that no tag or retained version needs."""
    r = open_table(store, name).prune()
    emit({"log_entries": r.log_entries, "snapshots": r.snapshots, "objects": r.objects},
         json_out, lambda d: key_value_table(human_items(d), title="pruned"))


@commands.command()
def dump(name: TableArg, root: Annotated[str, typer.Argument(help="Destination folder or "
                                                             "s3://bucket/prefix.")],
         range_: Annotated[str | None, typer.Option("--range", help="Key range, e.g. [a,m)")]
         = None,
         version: VersionOption = None,
         spark: Annotated[bool, typer.Option("--spark", help="Run tasks on Spark.")] = False,
         abandon: Annotated[bool, typer.Option("--abandon", help="Drop the lock of an "
                                               "interrupted dump job to ROOT instead of "
                                               "dumping (refused while its heartbeat is "
                                               "fresh: the dump may be running).")] = False,
         force: Annotated[bool, typer.Option("--force", help="With --abandon: drop the lock "
                                             "even though its heartbeat is fresh (the dump "
                                             "holding it breaks).")] = False,
         store: StoreOption = None, json_out: JsonOption = False,
         print_manifest: Annotated[bool, typer.Option(
             "--print-manifest", help="Print only the job manifest's path, for a script: "
             "sediment load \"$(sediment dump T ROOT --print-manifest)\" COPY.")] = False
         ) -> None:
    """Dump a key range at a version (resumes an interrupted dump to the same root)."""
    if print_manifest and json_out:
        raise CliError("--print-manifest prints the manifest's path alone: leave out --json")
    t = open_table(store, name)
    if force and not abandon:
        raise CliError("--force goes with --abandon")
    if abandon:
        held = t.abandon_dump(root, force=force)
        emit({"table": name, "abandoned": held is not None,
              "job_id": None if held is None else held.get("job_id")}, json_out,
             lambda d: f"dump lock of job {d['job_id']} removed" if d["abandoned"] else
             f"no dump of table {name} holds the lock: nothing to abandon")
        return
    rng = parse_range(range_, t.schema) if range_ else None
    # SIGTERM ends the dump as Ctrl-C does (its lock marked stopped: the next dump to ROOT
    # resumes at once, --abandon drops it at once), not with the lock's heartbeat fresh
    with stopped_by_sigterm(), progress_bar(json_out or print_manifest, "tasks") as bar:
        task = bar.add_task(f"dump {name}", total=None)
        job = t.dump(root, range=rng, version=resolve_version_option(t, version),
                     runner="spark" if spark else "local",
                     progress=lambda done, total: bar.update(task, completed=done,
                                                             total=total))
    if print_manifest:
        typer.echo(job.manifest_uri)
        return
    emit({"job_id": job.job_id, "manifest": job.manifest_uri, "version": job.version,
          "tasks": job.tasks, "rows": job.rows, "bytes": job.bytes, "seconds": job.seconds,
          "resumed_tasks": job.resumed_tasks}, json_out,
         lambda d: key_value_table(human_items(d), title="dump"))


@commands.command()
def load(manifest: Annotated[str, typer.Argument(help="<root>/<job>/job-manifest.json")],
         name: TableArg, store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Verify a dump and load it into a new or existing table (one transaction)."""
    started = time.perf_counter()
    with progress_bar(json_out, "bytes") as bar:
        # bytes copied of the dump's total (reported once the dump is verified)
        task = bar.add_task(f"load {name}", total=None)
        t, loaded = open_store(store)._load(
            manifest, name, progress=lambda done, total: bar.update(
                task, completed=done, total=total))
    d = t.describe()
    # the dump's records and files (loaded now, or by an earlier load of the same dump:
    # replayed), then the table's totals
    emit({"table": name, "version": loaded.version, "loaded_records": loaded.rows,
          "loaded_files": loaded.files, "replayed": loaded.replayed,
          "records": d["records"], "files": d["files"],
          "seconds": time.perf_counter() - started}, json_out,
         lambda x: key_value_table(human_items(x), title="load"))



