"""CLI commands of the data path: ``ingest``, ``query`` and the ``demo`` main job."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

import pyarrow as pa
import typer
from rich.text import Text

from sediment.cli.errors import CliError
from sediment.cli.humanize import human_items
from sediment.cli.options import (
    JsonOption,
    StoreOption,
    TableArg,
    VersionOption,
    open_table,
    resolve_store_uri,
    resolve_version_option,
)
from sediment.cli.output import emit, key_value_table, to_json
from sediment.cli.parsing import convert_split_point
from sediment.cli.terminal import progress_bar, stdout_console
from sediment.schema import Schema
from sediment.types import key_from_text

if TYPE_CHECKING:  # imported where used: a command's start imports only its rooms
    from sediment.core.regions import Range
    from sediment.query.request import ReadRequest

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""


def key_values(text: str, schema: Schema, what: str) -> tuple[Any, ...]:
    """A key typed on the command line: a plain value of the first row key field, or a JSON
    array for several fields (``'["a", 5]'``; a shorter array is a prefix)."""
    if text.startswith("["):
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise CliError(f"{what} {text!r} is not a JSON array: {e}") from None
        if not isinstance(values, list):
            raise CliError(f"{what} {text!r} must be a JSON array")
        if not values or len(values) > len(schema.row_keys):
            # a longer array cut to the row key would name more records than asked (a
            # delete or purge of every record of the shorter key)
            raise CliError(f"{what} {text!r} must have 1..{len(schema.row_keys)} values "
                           f"({', '.join(schema.row_key_names)})")
        return tuple(
            convert_split_point(v, f, what) if isinstance(v, str)
            and not pa.types.is_string(f.type) else v
            for v, f in zip(values, schema.row_keys, strict=False))
    return (convert_split_point(text, schema.row_keys[0], what),)


def parse_range(text: str, schema: Schema) -> Range:
    """``[a,m)``, ``(a,m]``, ``[a,)`` (open end), ``[,m)``; JSON values for multi-field keys:
    ``[["a",1],["b",2])``."""
    from sediment.core.regions import Range

    t = text.strip()
    if len(t) < 3 or t[0] not in "[(" or t[-1] not in "])":
        raise CliError(f"range {text!r}: write [start,end), (start,end], [start,) ...")
    inner = t[1:-1]
    if inner.lstrip().startswith(("[", '"')):
        try:
            start_v, end_v = json.loads(f"[{inner}]")
        except (json.JSONDecodeError, ValueError) as e:
            raise CliError(f"range {text!r}: {e}") from None
        start = None if start_v in (None, "") else key_values(json.dumps(start_v)
                                                               if isinstance(start_v, list)
                                                               else str(start_v), schema, "range")
        end = None if end_v in (None, "") else key_values(json.dumps(end_v)
                                                           if isinstance(end_v, list)
                                                           else str(end_v), schema, "range")
    else:
        if "," not in inner:
            raise CliError(f"range {text!r} needs a comma between start and end")
        a, b = inner.split(",", 1)
        start = key_values(a.strip(), schema, "range start") if a.strip() else None
        end = key_values(b.strip(), schema, "range end") if b.strip() else None
    return Range(start, end, start_inclusive=t[0] == "[", end_inclusive=t[-1] == "]")


def parse_region(text: str, schema: Schema) -> Range:
    """``source=(c,p];destination=[5,)``: a range per row-key field, ``;``-separated (a
    per-field region, ``sd.Region``); each end a plain value of its field."""
    from sediment.core.regions import Box, Range

    fields: dict[str, Range] = {}
    for part in (p for p in text.split(";") if p.strip()):
        name, _, rng = (x.strip() for x in part.partition("="))
        field = next((f for f in schema.row_keys if f.name == name), None)
        if field is None:
            raise CliError(f"region {text!r}: {name!r} is not a row key field (row key "
                           f"fields: {', '.join(schema.row_key_names)}); write "
                           f"field=[start,end);field=...")
        if name in fields:  # (the last one silently winning would read another region)
            raise CliError(f"region {text!r}: {name!r} is given twice; give each row key "
                           "field one range")
        if len(rng) < 3 or rng[0] not in "[(" or rng[-1] not in "])" or "," not in rng:
            raise CliError(f"region {text!r}: write {name}=[start,end), (start,end], [start,)")
        a, b = (x.strip() for x in rng[1:-1].split(",", 1))
        try:
            ends = [key_from_text(x, field) if x else None for x in (a, b)]
        except ValueError:
            raise CliError(f"region {text!r}: an end of {name} is not a valid {field.type}"
                           ) from None
        fields[name] = Range(ends[0], ends[1], start_inclusive=rng[0] == "[",
                             end_inclusive=rng[-1] == "]")
    return Box(fields)


SpillDirOption = Annotated[Path | None, typer.Option(
    "--spill-dir",
    help="Local folder for sorted runs spilled past ingest.memory_limit_bytes; it must "
         "exist. Default: $SEDIMENT_SPILL_DIR, else the system temp folder.")]
"""``--spill-dir`` of ``ingest`` and ``upsert``."""

IdempotencyKeyOption = Annotated[str | None, typer.Option(
    "--idempotency-key",
    help="Commit this write at most once under this key: run again with the same key and "
         "files, it prints the first run's version and writes nothing (within the table's "
         "write.idempotency_window_seconds); with other records it is refused.")]
"""``--idempotency-key`` of ``ingest``, ``upsert`` and ``delete``."""

FilesArg = Annotated[list[str], typer.Argument(help="Parquet, CSV or JSON-lines files; globs "
                                                    "and s3:// paths allowed.")]
"""The FILES of ``ingest`` and ``upsert``."""


@commands.command()
def ingest(
    name: TableArg,
    files: FilesArg,
    spill_dir: SpillDirOption = None,
    idempotency_key: IdempotencyKeyOption = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Ingest files into a table as one transaction, with a progress bar."""
    write_files("ingest", name, files, spill_dir, store, json_out, idempotency_key)


def write_files(how: str, name: str, files: list[str], spill_dir: Path | None,
                store: str | None, json_out: bool, idempotency_key: str | None = None
                ) -> None:
    """``ingest`` or ``upsert`` (``how``) of files into table ``name`` in one transaction,
    with a progress bar; prints the result (the same fields for both)."""
    table = open_table(store, name)
    write = table.upsert_files if how == "upsert" else table.ingest_files
    with progress_bar(json_out, "rows") as bar:
        task = bar.add_task(f"{how} {name}", total=None)
        result = write(files, progress=lambda n: bar.advance(task, n),
                       spill_dir=None if spill_dir is None else str(spill_dir),
                       idempotency_key=idempotency_key)
    data = {"table": name, "rows": result.rows, "files": result.files, "bytes": result.bytes,
            "version": result.version, "seconds": result.seconds,
            "rows_per_second": result.rows_per_second}
    if result.stalled_seconds:  # waited for compaction (ingest.stall_files)
        data["stalled_seconds"] = result.stalled_seconds
    # a retry of a committed write says so (as ``delete`` says ``committed``): it wrote
    # nothing and prints the first run's result
    data["replayed"] = result.replayed
    title = f"{how} (a retry under its idempotency key: nothing written)" \
        if result.replayed else how
    emit(data, json_out, lambda d: key_value_table(human_items(d), title=title))


class Format(StrEnum):
    """``query --format``: how records are written."""

    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


TABLE_ROWS = 100
"""Rows ``--format table`` shows when no ``--limit`` is given."""


@commands.command()
def query(
    name: TableArg,
    key: Annotated[list[str] | None, typer.Option("--key", "-k", help="Exact row key (JSON "
                                                  "array for multi-field keys); repeatable.")]
    = None,
    range_: Annotated[list[str] | None, typer.Option("--range", "-r", help="Key range such "
                                                     "as [a,m) or (a,]; repeatable.")] = None,
    region: Annotated[list[str] | None, typer.Option(
        "--region", help="A range on each named row-key field, such as "
                         "'src=(c,p];dst=[5,)' (fields not named are unbounded); "
                         "repeatable, with --key and --range: rows in any of them.")] = None,
    columns: Annotated[str | None, typer.Option("--columns", "-c",
                                                help="Comma-separated columns.")] = None,
    where: Annotated[str | None, typer.Option(
        "--where", "-w",
        help="Keep records matching a condition on any columns, applied after the table's "
             "iterators: comparisons of a field with a literal (= != <> < <= > >=), "
             "field [NOT] IN (a, b), field [NOT] BETWEEN a AND b, field IS [NOT] NULL, "
             "joined by AND, OR, NOT and parentheses. Literals: numbers, 'strings' ('' for "
             "a quote), true, false; cast to the field's type (ts >= '2024-01-01' for a "
             "timestamp). Conditions on the first row key narrow what is read. Example: "
             "--where \"key BETWEEN 'a' AND 'f' AND (value > 3 OR value IS NULL)\".")]
    = None,
    version: VersionOption = None,
    fmt: Annotated[Format | None, typer.Option(
        "--format", "-f", case_sensitive=False,
        help="table (default; a rich table of the first rows), csv (with a header), json "
             "(one JSON object per line), parquet (to --output FILE, or binary to stdout when "
             "stdout is not a terminal: `... --format parquet > out.parquet`).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to a file "
                                                "(csv, json, parquet).")] = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", "-n", min=0,
        help=f"Stop after N rows (streamed: the rest is never read). Default: every row, "
             f"or the first {TABLE_ROWS} for --format table.")] = None,
    request: Annotated[str | None, typer.Option(
        "--request",
        help="The read as a read request's JSON (sediment.ReadRequest.to_json: keys, ranges, "
             "columns, version, filter, iterators; what the Flight service and the Spark data "
             "source take), or @FILE to read it from a file; instead of --key, --range, "
             "--region, --columns, --where and --version. Example: --request "
             "'{\"format\": 1, \"keys\": [\"a\"], \"columns\": [\"key\"]}'.")] = None,
    store: StoreOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
) -> None:
    """Query a table by exact keys and/or ranges (no key or range: the whole table).

    Records stream from the table batch by batch in key order, so --limit and --format
    csv/json/parquet never hold the whole result in memory. Examples:
    sediment query events --key a --json;
    sediment query events --range '[a,m)' --format csv --output out.csv;
    sediment query edges --region 'dst=[5,9]';
    sediment query events --version v1 --limit 10;
    sediment query events --where "key >= 'm' AND value IN ('x', 'y')".
    """
    if json_out:
        if fmt not in (None, Format.json):
            raise CliError(f"--json and --format {fmt.value} disagree: give one of them")
        fmt = Format.json
    fmt = fmt or Format.table
    if fmt is Format.table and output is not None:
        raise CliError("--output needs --format csv, json or parquet")
    if fmt is Format.parquet and output is None and _stdout_is_terminal():
        raise CliError("--format parquet writes binary: give --output FILE or redirect "
                       "stdout to a file or pipe")
    given = [flag for flag, value in (("--key", key), ("--range", range_), ("--region", region),
                                      ("--columns", columns), ("--where", where),
                                      ("--version", version)) if value]
    if request is not None and given:
        raise CliError(f"--request holds the whole read: give it or {given[0]}, not both")
    table = open_table(store, name)
    read = read_request_option(request) if request is not None else \
        _request_of_options(table, key, range_, region, columns, where, version)
    reader = table.prepare(read).to_batches()
    try:
        if fmt is Format.table:
            _print_table(reader, TABLE_ROWS if limit is None else limit, limit is not None)
        else:
            _write_stream(reader, fmt, output, limit)
    finally:
        close = getattr(reader, "close", None)
        if close is not None:
            close()


def _request_of_options(table: Any, key: list[str] | None, range_: list[str] | None,
                        region: list[str] | None, columns: str | None, where: str | None,
                        version: str | None) -> ReadRequest:
    """The read ``query``'s options ask for, as a request."""
    from sediment.query.request import ReadRequest
    from sediment.query.where import parse_where

    schema = table.schema
    keys = [key_values(k, schema, "key") for k in key] if key else None
    ranges = [parse_range(r, schema) for r in range_] if range_ else None
    if region:
        ranges = [*(ranges or []), *(parse_region(r, schema) for r in region)]
    cols = [c.strip() for c in columns.split(",")] if columns else None
    v = resolve_version_option(table, version)
    flt = parse_where(where, schema.to_arrow()) if where is not None else None
    return ReadRequest(keys=keys, ranges=ranges, columns=cols, version=v, filter=flt)


def read_request_option(text: str) -> ReadRequest:
    """``--request``: a read request's JSON, or ``@FILE`` holding it (CliError for a file
    that cannot be read; the request's own errors name the field)."""
    from sediment.query.request import ReadRequest

    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise CliError(f"--request {text[:80]!r}: cannot read {str(path)!r}: {e}") from None
    return ReadRequest.from_json(text)


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def limited(reader: pa.RecordBatchReader, limit: int | None) -> Iterator[pa.RecordBatch]:
    """The reader's batches, cut after ``limit`` rows; stops reading there."""
    if limit is not None and limit <= 0:
        return
    left = limit
    for batch in reader:
        if left is not None and batch.num_rows >= left:
            yield batch.slice(0, left)
            return
        if left is not None:
            left -= batch.num_rows
        yield batch


def _binary_stdout() -> BinaryIO:
    sys.stdout.flush()
    return sys.stdout.buffer


def _write_stream(reader: pa.RecordBatchReader, fmt: Format, output: Path | None,
                  limit: int | None) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from sediment.cli.output import json_default

    batches = limited(reader, limit)
    if fmt is Format.json:
        with (output.open("w", encoding="utf-8") if output is not None
              else nullcontext(sys.stdout)) as out:
            for batch in batches:
                for row in batch.to_pylist():
                    out.write(json.dumps(row, default=json_default) + "\n")
        return
    sink: Any = str(output) if output is not None else _binary_stdout()
    if fmt is Format.csv:
        with pacsv.CSVWriter(sink, reader.schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
    else:
        with pq.ParquetWriter(sink, reader.schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
    if output is None:
        sys.stdout.buffer.flush()


def _print_table(reader: pa.RecordBatchReader, limit: int, explicit: bool) -> None:
    """The first ``limit`` rows as a rich table; reads one row more to say whether there
    are more (never the whole result)."""
    from sediment.cli.output import make_table

    rows: list[dict[str, Any]] = []
    for batch in limited(reader, limit + 1):
        rows.extend(batch.to_pylist())
    more = len(rows) > limit
    rows = rows[:limit]
    console = stdout_console()
    console.print(make_table(reader.schema.names, [list(r.values()) for r in rows],
                             title=f"{'first ' if more else ''}{len(rows):,} "
                                   f"row{'s' * (len(rows) != 1)}"))
    if more:
        console.print(Text("more rows not shown: " + ("raise --limit" if explicit
                                                      else "use --limit N")
                           + ", or --format csv/json/parquet for every row"))


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
    from rich.console import Console

    from sediment.demo import run_demo

    # With --json, stdout carries only the JSON document: the demo's notes and tables go to
    # stderr.
    result = run_demo(resolve_store_uri(store), rows=rows, use_spark=spark,
                      console=Console(stderr=True, highlight=False) if json_out
                      else stdout_console())
    if json_out:
        typer.echo(to_json(result))
