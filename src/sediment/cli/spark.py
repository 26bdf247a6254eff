"""CLI commands that run on Spark: ``bulk-import``."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sediment.cli.output import JsonOption, StoreOption, TableArg, emit, key_value_table, open_table

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""


@commands.command("bulk-import")
def bulk_import_cmd(
    name: TableArg,
    paths: Annotated[list[str], typer.Argument(help="Parquet, CSV or JSON-lines files; globs "
                                                    "and s3:// paths allowed.")],
    master: Annotated[str | None, typer.Option("--master", help="Spark master URL (default "
                                               "local[*]).")] = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Bulk import files with Spark: pre-split, shuffle by leaf, sort, write, one commit."""
    from sediment.spark import bulk_import, session

    table = open_table(store, name)
    show = not json_out and sys.stderr.isatty()
    if show:
        typer.echo(f"starting Spark ({master or 'local[*]'}) ...", err=True)
    spark = session(master, conf={"spark.ui.showConsoleProgress": "true" if show else "false"})
    try:
        result = bulk_import(spark, table, paths)
    finally:
        spark.stop()
    emit({"table": name, "rows": result.rows, "files": result.files, "bytes": result.bytes,
          "version": result.version, "seconds": result.seconds,
          "rows_per_second": result.rows_per_second}, json_out,
         lambda d: key_value_table(d.items(), title="bulk import"))
