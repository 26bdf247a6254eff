"""``sediment alter add-column|drop-column|rename-column|widen-column``: schema changes.

Each call is one transaction of the library's (``Table.add_columns``, ``drop_columns``,
``rename_column``, ``widen_column``): several columns added or dropped in one call are one new
version, and a refused change commits nothing. ``NAME:TYPE`` is read by the parser of
``create-table --value`` (:func:`sediment.cli.parsing._parse_field`), so the two commands take
the same types. The output is the new version, what changed and the new schema, as
``describe`` shows a schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import RenderableType

from sediment.cli.admin import schema_table
from sediment.cli.options import JsonOption, StoreOption, TableArg, open_table
from sediment.cli.output import emit
from sediment.cli.parsing import _parse_field
from sediment.schema_changes import describe_change

if TYPE_CHECKING:
    from sediment.table import Table

alter_app = typer.Typer(
    name="alter",
    help="Change a table's schema in one transaction: add, drop, rename or widen value "
    "columns. Files are not rewritten (columns are matched by field id); row and sort keys "
    "never change.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
"""The ``alter`` group (added to the root app by ``sediment.cli.app``)."""


def _fields(name: str, specs: list[str], command: str) -> list[tuple[str, Any]]:
    """``NAME:TYPE`` arguments as (name, Arrow type), errors naming the command and table."""
    return [(f.name, f.type) for f in
            (_parse_field(s, option=f"{command} on table {name}:", nullable=True)
             for s in specs)]


def _report(table: Table, version: int, op: str, args: dict[str, Any],
            json_out: bool) -> None:
    """Print the version an alter committed, its change (as ``history`` summarises it) and
    the schema of that version."""
    schema = {k: v for k, v in table.schema_at(version).to_json().items() if k != "arrow"}
    doc = {"table": table.name, "version": version, "change": describe_change(op, args),
           "schema": schema}

    def text(d: dict[str, Any]) -> list[RenderableType]:
        return [f"altered table {d['table']}: {d['change']} (version {d['version']})",
                schema_table(d["schema"])]

    emit(doc, json_out, text)


@alter_app.command("add-column")
def add_column(
    name: TableArg,
    columns: Annotated[list[str], typer.Argument(
        metavar="NAME:TYPE...",
        help="Columns to add, nullable, typed as create-table --value takes them "
             "(e.g. colour:string n:int64).")],
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Add nullable value columns, all in one transaction; records written before read them
    as nulls. A name the table has, or had and dropped, starts empty: old values never
    return. Example: sediment alter add-column events colour:string score:float64."""
    fields = _fields(name, columns, "add-column")
    table = open_table(store, name)
    _report(table, table.add_columns(fields), "add_columns",
            {"columns": [(n, str(t)) for n, t in fields]}, json_out)


@alter_app.command("drop-column")
def drop_column(
    name: TableArg,
    columns: Annotated[list[str], typer.Argument(
        metavar="NAME...", help="Value columns to drop.")],
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Drop value columns, all in one transaction. Older versions (time travel, tags) still
    read them; a property naming one (merge.functions, an iterator's field...) must change
    first. Example: sediment alter drop-column events colour."""
    table = open_table(store, name)
    _report(table, table.drop_columns(columns), "drop_columns", {"names": columns}, json_out)


@alter_app.command("rename-column")
def rename_column(
    name: TableArg,
    old: Annotated[str, typer.Argument(metavar="OLD", help="The value column's name.")],
    new: Annotated[str, typer.Argument(metavar="NEW", help="Its new name.")],
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Rename a value column; its values stay with it, in old files too. Example:
    sediment alter rename-column events value note."""
    table = open_table(store, name)
    _report(table, table.rename_column(old, new), "rename_column", {"old": old, "new": new},
            json_out)


@alter_app.command("widen-column")
def widen_column(
    name: TableArg,
    column: Annotated[str, typer.Argument(
        metavar="NAME:TYPE", help="The value column and its wider type (e.g. n:int64).")],
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Widen a value column's type where every value converts exactly (int32 to int64,
    float32 to float64, date32 to timestamp[us], string to large_string...); old files'
    values are cast when read. Example: sediment alter widen-column events n:int64."""
    ((field, typ),) = _fields(name, [column], "widen-column")
    table = open_table(store, name)
    _report(table, table.widen_column(field, typ), "widen_column",
            {"name": field, "type": str(typ)}, json_out)
