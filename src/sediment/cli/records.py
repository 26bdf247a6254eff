"""CLI commands that change records by key: ``upsert``, ``delete`` and ``purge``.

Apart from :mod:`sediment.cli.data` (``ingest``, ``query``) only to keep each module to one
job; ``upsert`` shares ``ingest``'s options, progress and output, and ``delete`` takes keys
and ranges written as ``query`` takes them.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sediment.cli.data import (
    FilesArg,
    IdempotencyKeyOption,
    SpillDirOption,
    key_values,
    parse_range,
    parse_region,
    write_files,
)
from sediment.cli.errors import CliError
from sediment.cli.options import JsonOption, StoreOption, TableArg, open_table
from sediment.cli.output import emit
from sediment.core.units import iso_time

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""


@commands.command()
def upsert(
    name: TableArg,
    files: FilesArg,
    spill_dir: SpillDirOption = None,
    idempotency_key: IdempotencyKeyOption = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Upsert files into a table as one transaction, with a progress bar: each record
    replaces every record of its record key (row keys + sort keys) written before it,
    whatever the table's merge rule; of equal keys in the files, the last in file order
    wins. Options and output as ingest's."""
    write_files("upsert", name, files, spill_dir, store, json_out, idempotency_key)


KeyOption = Annotated[list[str] | None, typer.Option(
    "--key", "-k", help="Every record of this row key (JSON array for multi-field keys; a "
                        "shorter array is a prefix); repeatable.")]
RangeOption = Annotated[list[str] | None, typer.Option(
    "--range", "-r", help="Every record in a key range such as [a,m) or (a,] (written as "
                          "query --range takes it); repeatable.")]
RegionOption = Annotated[list[str] | None, typer.Option(
    "--region", help="Every record in a range on each named row-key field, such as "
                     "'src=(c,p];dst=[5,)' (written as query --region takes it); repeatable.")]
WhereOption = Annotated[str | None, typer.Option(
    "--where", "-w",
    help="Every record matching a condition on any columns (the query --where language), "
         "record by record (on a table with a merge rule: every record of a key whose "
         "merged record matches); with --key or --range, only their records that match. "
         "Kept as a predicate tombstone: applied at read to the records written before it, "
         "settled by compaction.")]


def _selection(verb: str, name: str, key: list[str] | None, range_: list[str] | None,
               region: list[str] | None, where: str | None, store: str | None
               ) -> tuple[Any, Any, Any]:
    """The table and the keys and ranges a delete or purge names (CliError naming the table
    when it names none: ``clear`` removes every record)."""
    if not key and not range_ and not region and where is None:
        raise CliError(f"{verb} on table {name} names no --key, --range, --region or --where: "
                       f"to delete every record use `sediment clear {name}`")
    table = open_table(store, name)
    schema = table.schema
    keys = [key_values(k, schema, "key") for k in key] if key else None
    ranges = [parse_range(r, schema) for r in range_] if range_ else None
    if region:
        ranges = [*(ranges or []), *(parse_region(r, schema) for r in region)]
    return table, keys, ranges


@commands.command()
def delete(
    name: TableArg,
    key: KeyOption = None,
    range_: RangeOption = None,
    region: RegionOption = None,
    where: WhereOption = None,
    idempotency_key: IdempotencyKeyOption = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Delete records by key, range, region and/or condition in one transaction; prints the
    version committed. A metadata commit: no data is read or written whatever it covers;
    older versions (time travel, tags, restore) still read the records until compaction and
    gc remove them, and records written after it are kept. Examples:
    sediment delete events --key a --key b;
    sediment delete events --range '[a,m)';
    sediment delete events --where "value = 'spam'".
    To remove every record, use sediment clear; to remove them from storage too, purge.
    """
    table, keys, ranges = _selection("delete", name, key, range_, region, where, store)
    before = table.version
    version = table.delete(keys, ranges, filter=where, idempotency_key=idempotency_key)
    # a keyed delete answered with an earlier version: the key's delete, committed before
    replayed = idempotency_key is not None and version <= before
    emit({"table": name, "version": version, "committed": version > before,
          "replayed": replayed}, json_out,
         lambda d: f"deleted from table {name}: version {version}" if d["committed"]
         else f"table {name}: the delete under idempotency key {idempotency_key!r} was committed "
              f"at version {version} before: nothing deleted again" if replayed
         else f"table {name}: nothing to delete (version {version})")


@commands.command()
def purge(
    name: TableArg,
    key: KeyOption = None,
    range_: RangeOption = None,
    region: RegionOption = None,
    where: WhereOption = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Delete records as delete does, then rewrite every live file that held one, in one
    transaction, so that once retention, pins and tags allow, gc leaves no data file or
    sidecar holding them. Prints the version, the retained versions and the tags that still
    read them, and when gc may delete their files. Example:
    sediment purge events --key user-42 && sediment gc --table events.
    """
    table, keys, ranges = _selection("purge", name, key, range_, region, where, store)
    r = table.purge(keys, ranges, filter=where)
    held = r.held_by_versions
    doc = {"table": name, "version": r.version,
           "held_by_versions": list(held),
           "held_by_tags": list(r.held_by_tags), "expires": r.expires,
           "split_keys": [list(k) for k in r.split_keys]}

    def text(d: dict[str, Any]) -> str:
        lines = [f"purged from table {name}: version {r.version}"]
        if held:
            lines.append(f"  versions {held[0]}..{held[-1]} still read them (time travel) "
                         f"until retention")
        if r.held_by_tags:
            lines.append(f"  tags and pins keeping their files: {', '.join(r.held_by_tags)}")
        if r.expires is not None and held:
            lines.append(f"  gc may delete their files from {iso_time(r.expires)}")
        if r.split_keys:
            lines.append(f"  split points equal to purged keys stay in the partition tree: "
                         f"{', '.join(map(str, r.split_keys))}")
        return "\n".join(lines)

    emit(doc, json_out, text)
