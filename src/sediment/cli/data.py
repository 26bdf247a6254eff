"""CLI commands of the data path: ``ingest``, ``query`` and the ``demo`` main job."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from sediment.cli.output import (
    CliError,
    JsonOption,
    StoreOption,
    TableArg,
    emit,
    key_value_table,
    open_table,
    resolve_store_uri,
    stdout_console,
)
from sediment.cli.parsing import convert_split_point
from sediment.core.ranges import Range
from sediment.schema import Schema

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""


def _key_values(text: str, schema: Schema, what: str) -> tuple[Any, ...]:
    """A key typed on the command line: a plain value of the first row key field, or a JSON
    array for several fields (``'["a", 5]'``; a shorter array is a prefix)."""
    if text.startswith("["):
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise CliError(f"{what} {text!r} is not a JSON array: {e}") from None
        if not isinstance(values, list):
            raise CliError(f"{what} {text!r} must be a JSON array")
        return tuple(
            convert_split_point(v, f) if isinstance(v, str) and not pa.types.is_string(f.type)
            else v for v, f in zip(values, schema.row_keys, strict=False))
    return (convert_split_point(text, schema.row_keys[0]),)


def parse_range(text: str, schema: Schema) -> Range:
    """``[a,m)``, ``(a,m]``, ``[a,)`` (open end), ``[,m)``; JSON values for multi-field keys:
    ``[["a",1],["b",2])``."""
    t = text.strip()
    if len(t) < 3 or t[0] not in "[(" or t[-1] not in "])":
        raise CliError(f"range {text!r}: write [start,end), (start,end], [start,) ...")
    inner = t[1:-1]
    if inner.lstrip().startswith(("[", '"')):
        try:
            start_v, end_v = json.loads(f"[{inner}]")
        except (json.JSONDecodeError, ValueError) as e:
            raise CliError(f"range {text!r}: {e}") from None
        start = None if start_v in (None, "") else _key_values(json.dumps(start_v)
                                                               if isinstance(start_v, list)
                                                               else str(start_v), schema, "range")
        end = None if end_v in (None, "") else _key_values(json.dumps(end_v)
                                                           if isinstance(end_v, list)
                                                           else str(end_v), schema, "range")
    else:
        if "," not in inner:
            raise CliError(f"range {text!r} needs a comma between start and end")
        a, b = inner.split(",", 1)
        start = _key_values(a.strip(), schema, "range start") if a.strip() else None
        end = _key_values(b.strip(), schema, "range end") if b.strip() else None
    return Range(start, end, start_inclusive=t[0] == "[", end_inclusive=t[-1] == "]")


@commands.command()
def ingest(
    name: TableArg,
    files: Annotated[list[str], typer.Argument(help="Parquet, CSV or JSON-lines files; globs "
                                                    "and s3:// paths allowed.")],
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Ingest files into a table as one transaction, with a progress bar."""
    table = open_table(store, name)
    show = not json_out and sys.stderr.isatty()
    with Progress(TextColumn("ingest"), BarColumn(), TextColumn("{task.completed:,} rows"),
                  TimeElapsedColumn(), disable=not show, transient=True) as bar:
        task = bar.add_task("ingest", total=None)
        result = table.ingest_files(files, progress=lambda n: bar.advance(task, n))
    data = {"table": name, "rows": result.rows, "files": result.files, "bytes": result.bytes,
            "version": result.version, "seconds": result.seconds,
            "rows_per_second": result.rows_per_second}
    emit(data, json_out, lambda d: key_value_table(d.items(), title="ingest"))


@commands.command()
def query(
    name: TableArg,
    key: Annotated[list[str] | None, typer.Option("--key", "-k", help="Exact row key (JSON "
                                                  "array for multi-field keys); repeatable.")]
    = None,
    range_: Annotated[list[str] | None, typer.Option("--range", "-r", help="Key range such "
                                                     "as [a,m) or (a,]; repeatable.")] = None,
    columns: Annotated[str | None, typer.Option("--columns", "-c",
                                                help="Comma-separated columns.")] = None,
    version: Annotated[int | None, typer.Option("--version", help="Read this version.")]
    = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv, json or parquet")]
    = "table",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to a file.")]
    = None,
    limit: Annotated[int, typer.Option("--limit", help="Rows shown by --format table.")] = 100,
    store: StoreOption = None,
) -> None:
    """Query a table by exact keys and/or ranges (no key or range: the whole table)."""
    if fmt not in ("table", "csv", "json", "parquet"):
        raise CliError(f"unknown --format {fmt!r}: use table, csv, json or parquet")
    if fmt == "parquet" and output is None:
        raise CliError("--format parquet needs --output FILE")
    table = open_table(store, name)
    schema = table.schema
    keys = [_key_values(k, schema, "key") for k in key] if key else None
    ranges = [parse_range(r, schema) for r in range_] if range_ else None
    cols = [c.strip() for c in columns.split(",")] if columns else None
    result = table.query(keys=keys, ranges=ranges, columns=cols, version=version)
    _write_result(result, fmt, output, limit)


def _write_result(result: pa.Table, fmt: str, output: Path | None, limit: int) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if fmt == "parquet":
        assert output is not None
        pq.write_table(result, output)
        return
    if fmt == "csv":
        if output is not None:
            pacsv.write_csv(result, output)
        else:
            sink = pa.BufferOutputStream()
            pacsv.write_csv(result, sink)
            sys.stdout.write(sink.getvalue().to_pybytes().decode())
        return
    if fmt == "json":
        from sediment.cli.output import json_default

        text = "\n".join(json.dumps(r, default=json_default) for r in result.to_pylist())
        if output is not None:
            output.write_text(text + ("\n" if text else ""))
        elif text:
            sys.stdout.write(text + "\n")
        return
    from sediment.cli.output import make_table

    shown = result.slice(0, limit)
    console = stdout_console()
    console.print(make_table(result.column_names,
                             [list(r.values()) for r in shown.to_pylist()],
                             title=f"{result.num_rows:,} rows"
                                   + (f" (first {limit})" if result.num_rows > limit else "")))
    if output is not None:
        raise CliError("--output needs --format csv, json or parquet")


@commands.command()
def demo(
    store: StoreOption = None,
    rows: Annotated[int, typer.Option("--rows", help="Rows to generate.")] = 2_000_000,
    spark: Annotated[bool | None, typer.Option("--spark/--no-spark", help="Bulk import with "
                                               "Spark (default: when Java is installed).")]
    = None,
    json_out: JsonOption = False,
) -> None:
    """The main job on an embedded store: bulk import (Spark), ingest, maintain, query, dump."""
    from sediment.demo import run_demo

    result = run_demo(resolve_store_uri(store), rows=rows, use_spark=spark,
                      console=stdout_console() if not json_out else None)
    if json_out:
        typer.echo(json.dumps(result))
