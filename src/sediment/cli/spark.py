"""CLI commands that run on Spark: ``bulk-import``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from sediment.cli.errors import CliError
from sediment.cli.humanize import human_items
from sediment.cli.options import JsonOption, StoreOption, TableArg, open_table
from sediment.cli.output import emit, key_value_table
from sediment.cli.terminal import progress_bar, show_progress
from sediment.errors import DataError

if TYPE_CHECKING:
    from sediment.table import Table

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""


def check_inputs(table: Table, paths: list[str], json_out: bool) -> int:
    """Check every input before Spark starts (a JVM start costs seconds and a bad file would
    otherwise fail inside a task): each path or glob names files that exist and can be read,
    of a known format, and Parquet files are Parquet (their footer reads). Returns the number
    of files; raises CliError naming the first bad path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sediment.ingest.sources import expand_paths, file_format

    try:
        files = expand_paths(paths, table.store.object_store_at(table.store.uri))
    except DataError as e:
        raise CliError(f"bulk-import input: {e}") from None
    with progress_bar(json_out, "files") as bar:
        task = bar.add_task("check inputs", total=len(files))
        for fs, path in files:
            shown = path if fs.type_name == "local" else f"{fs.type_name}://{path}"
            try:
                fmt = file_format(path)
            except DataError as e:
                raise CliError(f"bulk-import input {shown!r}: {e}") from None
            try:
                if fmt == "parquet":
                    with fs.open_input_file(path) as f:
                        pq.read_metadata(f)
                else:
                    with fs.open_input_stream(path) as f:
                        f.read(1)
            except PermissionError:
                raise CliError(f"bulk-import input {shown!r} is not readable "
                               "(permission denied)") from None
            except (OSError, pa.ArrowException) as e:
                what = "not a readable Parquet file" if fmt == "parquet" else "not readable"
                raise CliError(f"bulk-import input {shown!r} is {what}: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
                               ) from None
            bar.advance(task)
    return len(files)


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
    """Bulk import files with Spark: pre-split, shuffle by leaf, sort, write, one commit.

    The inputs are checked first (they exist, can be read, Parquet files are Parquet), so a
    bad path fails at once with an error naming it, before Spark starts. On a terminal,
    Spark's own console progress bar shows its stages with their task totals."""
    table = open_table(store, name)
    n_files = check_inputs(table, paths, json_out)
    from sediment.spark import bulk_import, session

    show = show_progress(json_out)
    if show:
        typer.echo(f"{n_files} input file(s) checked; starting Spark "
                   f"({master or 'local[*]'}) ...", err=True)
    spark = session(master, conf={"spark.ui.showConsoleProgress": "true" if show else "false"})
    try:
        result = bulk_import(spark, table, paths)
    finally:
        spark.stop()
    data: dict[str, Any] = {
        "table": name, "rows": result.rows, "files": result.files, "bytes": result.bytes,
        "version": result.version, "seconds": result.seconds,
        "rows_per_second": result.rows_per_second}
    emit(data, json_out, lambda d: key_value_table(human_items(d), title="bulk import"))
