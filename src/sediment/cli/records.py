"""CLI commands that change records by key: ``upsert`` and ``delete``.

Apart from :mod:`sediment.cli.data` (``ingest``, ``query``) only to keep each module to one
job; ``upsert`` shares ``ingest``'s options, progress and output, and ``delete`` takes keys
and ranges written as ``query`` takes them.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sediment.cli.data import (
    FilesArg,
    SpillDirOption,
    key_values,
    parse_range,
    parse_region,
    write_files,
)
from sediment.cli.errors import CliError
from sediment.cli.options import JsonOption, StoreOption, TableArg, open_table
from sediment.cli.output import emit

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""


@commands.command()
def upsert(
    name: TableArg,
    files: FilesArg,
    spill_dir: SpillDirOption = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Upsert files into a table as one transaction, with a progress bar: each record
    replaces every record of its record key (row keys + sort keys) written before it,
    whatever the table's merge rule; of equal keys in the files, the last in file order
    wins. Options and output as ingest's."""
    write_files("upsert", name, files, spill_dir, store, json_out)


@commands.command()
def delete(
    name: TableArg,
    key: Annotated[list[str] | None, typer.Option(
        "--key", "-k", help="Delete every record of this row key (JSON array for "
                            "multi-field keys; a shorter array is a prefix); repeatable.")]
    = None,
    range_: Annotated[list[str] | None, typer.Option(
        "--range", "-r", help="Delete every record in a key range such as [a,m) or (a,] "
                              "(written as query --range takes it); repeatable.")] = None,
    region: Annotated[list[str] | None, typer.Option(
        "--region", help="Delete every record in a range on each named row-key field, such "
                         "as 'src=(c,p];dst=[5,)' (written as query --region takes it); "
                         "repeatable.")] = None,
    where: Annotated[str | None, typer.Option(
        "--where", "-w",
        help="Delete every record matching a condition on any columns (the query --where "
             "language), record by record; with --key or --range, only their records that "
             "match. Kept as a predicate tombstone: applied at read to the records written "
             "before it, settled by compaction.")] = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Delete records by key, range, region and/or condition in one transaction; prints the version
    committed. A metadata commit: no data is read or written whatever it covers; older
    versions (time travel, tags, restore) still read the records until compaction and gc
    remove them, and records written after it are kept. Examples:
    sediment delete events --key a --key b;
    sediment delete events --range '[a,m)';
    sediment delete events --where "value = 'spam'".
    To remove every record, use sediment clear.
    """
    if not key and not range_ and not region and where is None:
        raise CliError(f"delete on table {name} names no --key, --range, --region or --where: to "
                       f"delete every record use `sediment clear {name}`")
    table = open_table(store, name)
    schema = table.schema
    keys = [key_values(k, schema, "key") for k in key] if key else None
    ranges = [parse_range(r, schema) for r in range_] if range_ else None
    if region:
        ranges = [*(ranges or []), *(parse_region(r, schema) for r in region)]
    before = table.version
    version = table.delete(keys, ranges, filter=where)
    emit({"table": name, "version": version, "committed": version != before}, json_out,
         lambda d: f"deleted from table {name}: version {version}" if d["committed"]
         else f"table {name}: nothing to delete (version {version})")
