"""Turning user input into validated record batches of the table's schema.

Accepted: pyarrow Table, RecordBatch, RecordBatchReader, pandas DataFrame, or an iterable of any
of these; and files (Parquet, CSV, JSON lines; local or S3; globs). Every batch is checked: a
missing or unknown field, a value that cannot be cast, or a null in a key raises DataError naming
the table, the field and (where it applies) the row, before anything is written.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from sediment.errors import DataError
from sediment.schema import Schema
from sediment.storage import ObjectStore, open_object_store

IngestInput = Any  # pa.Table | pa.RecordBatch | pa.RecordBatchReader | DataFrame | Iterable


def iter_input(data: IngestInput, table: str = "?", source: str = "input", *,
               verb: str = "ingest") -> Iterator[pa.RecordBatch]:
    """Record batches from any accepted input type (no copies for Arrow input).

    A pandas DataFrame Arrow cannot convert (a column mixing strings and numbers, a string
    that is not valid Unicode, two columns of one name) raises DataError naming the table, the
    column and the first bad row, counted across everything before it in ``data``; ``verb``:
    the write it is for, as its errors say (``ingest``, ``upsert``)."""
    seen = [0]  # rows yielded so far: where a DataFrame's row 0 is in the whole input
    for batch in _batches(data, table, source, seen, verb):
        yield batch
        seen[0] += batch.num_rows


def _batches(data: IngestInput, table: str, source: str, seen: list[int], verb: str
             ) -> Iterator[pa.RecordBatch]:
    if isinstance(data, pa.RecordBatch):
        yield data
    elif isinstance(data, pa.Table):
        yield from data.to_batches()
    elif isinstance(data, pa.RecordBatchReader):
        yield from data
    elif _is_dataframe(data):
        yield from _from_pandas(data, table, source, seen[0], verb).to_batches()
    elif hasattr(data, "__arrow_c_stream__"):
        yield from pa.RecordBatchReader.from_stream(data)
    elif isinstance(data, Iterable) and not isinstance(data, str | bytes | dict):
        for item in data:
            if isinstance(item, pa.RecordBatchReader | pa.Table | pa.RecordBatch) or \
                    _is_dataframe(item):
                yield from _batches(item, table, source, seen, verb)
            else:
                raise DataError(f"cannot {verb} an element of type {type(item).__name__}; "
                                "give Arrow tables/batches or pandas DataFrames")
    else:
        raise DataError(f"cannot {verb} {type(data).__name__}; give a pyarrow Table, "
                        "RecordBatch, RecordBatchReader, pandas DataFrame or an iterable of them")


_PANDAS_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError,
                  UnicodeError, ValueError, TypeError)
"""What ``pa.Table.from_pandas`` raises for values it cannot convert (a lone surrogate is a
UnicodeEncodeError, mixed types an ArrowTypeError, duplicate names a ValueError)."""


def _from_pandas(df: Any, table: str, source: str, offset: int, verb: str) -> pa.Table:
    """The DataFrame as an Arrow table, or DataError naming the column and row at fault
    (found on the error path only: the columns one by one, then the rows by bisection)."""
    names = [str(c) for c in df.columns]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DataError(f"{verb} into table {table}: {source} has two columns named "
                        f"{twice[0]!r}; refusing to pick one")
    try:
        return pa.Table.from_pandas(df, preserve_index=False)
    except _PANDAS_ERRORS as e:
        reason = e
    for i, name in enumerate(names):
        column = df.iloc[:, i]
        try:
            pa.array(column, from_pandas=True)
            continue
        except _PANDAS_ERRORS as e:
            reason = e
        row = _first_bad_pandas_row(column)
        value = repr(column.iloc[row])  # repr: a lone surrogate shows escaped, printable
        value = value if len(value) <= 60 else value[:57] + "..."
        raise DataError(f"{verb} into table {table}: field {name!r} at row {offset + row} of "
                        f"{source} ({value}) cannot be converted from the DataFrame: "
                        f"{_describe(reason)}") from None
    raise DataError(f"{verb} into table {table}: {source} cannot be converted from the "
                    f"DataFrame: {_describe(reason)}") from None


def _first_bad_pandas_row(column: Any) -> int:
    """The first row of a pandas column Arrow cannot convert, by bisection on prefixes
    (O(log n) conversions): a prefix fails once it holds a bad value, and so does every longer
    one."""
    good, bad = 0, len(column)
    while bad - good > 1:
        mid = (good + bad) // 2
        try:
            pa.array(column.iloc[:mid], from_pandas=True)
            good = mid
        except _PANDAS_ERRORS:
            bad = mid
    return bad - 1


def _describe(e: BaseException) -> str:
    """An exception's reason in one line (ArrowTypeError carries a tuple of messages)."""
    if e.args and all(isinstance(a, str) for a in e.args) and len(e.args) > 1:
        return "; ".join(e.args)
    return str(e)


def _is_dataframe(obj: Any) -> bool:
    return type(obj).__name__ == "DataFrame" and hasattr(obj, "columns") and \
        type(obj).__module__.startswith("pandas")


def conform(batch: pa.RecordBatch, schema: Schema, table: str, row_offset: int,
            source: str = "input", *, verb: str = "ingest") -> pa.RecordBatch:
    """The batch with the table's fields in order and types, or DataError (saying ``verb``
    into table ``table``). A field a schema change added (``Schema.added``) may be missing:
    it is all nulls, as in the files written before it was added."""
    optional = schema.added
    names = batch.schema.names
    wanted = schema.to_arrow()
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DataError(f"{verb} into table {table}: {source} has two fields named "
                        f"{twice[0]!r}; refusing to pick one")
    keys = set(schema.key_names)
    extra = [n for n in names if n not in wanted.names]
    if extra:
        raise DataError(f"{verb} into table {table}: {source} has field {extra[0]!r} which is "
                        f"not in the table's schema ({', '.join(wanted.names)})")
    cols = []
    for f in wanted:
        if f.name not in names and f.name in optional:
            cols.append(pa.nulls(batch.num_rows, f.type))
            continue
        if f.name not in names:
            raise DataError(f"{verb} into table {table}: {source} has no field {f.name!r}")
        col = batch.column(names.index(f.name))
        if _temporal_into_number(col.type, f.type):
            raise DataError(
                f"{verb} into table {table}: field {f.name!r} of {source} is {col.type} "
                f"({_unit_words(col.type)}) but the table stores it as {f.type}: refusing to "
                "store the raw count of that unit, which would silently mix units with the "
                "values already stored. Convert it to the table's unit first (a pandas "
                "datetime64[ns] column to milliseconds: df[col].astype('int64') // 10**6), "
                "or declare the field a timestamp")
        if _quietly_stringified(col.type, f.type):
            raise DataError(
                f"{verb} into table {table}: field {f.name!r} of {source} is {col.type} but "
                f"the table stores it as {f.type}: refusing to turn those values into text"
                f"{_example_text(col)}; convert the column to strings first if that is what "
                "you mean")
        if f.name in keys and not _key_kind_fits(col.type, f.type):
            raise DataError(
                f"{verb} into table {table}: key field {f.name!r} of {source} is {col.type} "
                f"but the table's key is {f.type}: keys are compared as stored (7 is not "
                "'7'), so a key of another kind is refused, as query(keys=...) refuses it; "
                "convert the column to the key's type first")
        if not col.type.equals(f.type):
            try:
                col = col.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                row = _first_bad_row(col, f.type)
                at = f" at row {row_offset + row}" if row is not None else ""
                raise DataError(f"{verb} into table {table}: field {f.name!r}{at} of {source} "
                                f"cannot be cast from {col.type} to {f.type}: {e}") from None
        if not f.nullable and col.null_count:
            row = pc.indices_nonzero(pc.is_null(col))[0].as_py()
            raise DataError(f"{verb} into table {table}: key field {f.name!r} is null at row "
                            f"{row_offset + row} of {source}")
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=wanted)


def _key_kind(t: pa.DataType) -> str:
    """What a key value of type ``t`` is: integer, text, bytes or time (any width, unit,
    encoding or time zone of one kind casts to another)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "text"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or \
            pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return "bytes"
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "time"
    return str(t)


def _key_kind_fits(given: pa.DataType, wanted: pa.DataType) -> bool:
    """One rule for key types, that of ``query(keys=...)`` (``Schema.check_key_field``): a
    key column must hold values of the key's kind; integers are times too (as in ``keys=``:
    a count of the key's unit). CSV and JSON text is parsed to the schema before it gets here;
    an all-null column goes on to the null check, which names its first row."""
    if pa.types.is_null(given):
        return True
    kind = _key_kind(given)
    return kind == _key_kind(wanted) or (kind == "integer" and _key_kind(wanted) == "time")


def _temporal_into_number(given: pa.DataType, wanted: pa.DataType) -> bool:
    """A timestamp, date, time or duration column bound for a number field: Arrow casts it
    to its raw count of units (nanoseconds for a pandas datetime64[ns]), which is never what a
    table storing, say, epoch milliseconds means."""
    return pa.types.is_temporal(given) and (pa.types.is_integer(wanted)
                                            or pa.types.is_floating(wanted))


def _quietly_stringified(given: pa.DataType, wanted: pa.DataType) -> bool:
    """A column bound for a string field that Arrow would cast by printing its values: floats
    (1.5 -> "1.5"), booleans ("true"), decimals, temporal values. Only text (string, binary
    as UTF-8, dictionary-encoded text), integers (1 -> "1": the documented safe cast; not
    into a key field, see :func:`_key_kind_fits`) and all-null columns go to a string
    field."""
    if not (pa.types.is_string(wanted) or pa.types.is_large_string(wanted)):
        return False
    if pa.types.is_dictionary(given):
        given = given.value_type
    return not (pa.types.is_string(given) or pa.types.is_large_string(given)
                or pa.types.is_string_view(given) or pa.types.is_binary(given)
                or pa.types.is_large_binary(given) or pa.types.is_integer(given)
                or pa.types.is_null(given))


def _example_text(col: pa.Array) -> str:
    """`` (1.5 would become '1.5')`` for the column's first value, for the message."""
    values = pc.drop_null(col)
    if len(values) == 0:
        return ""
    try:
        text = values.slice(0, 1).cast(pa.string())[0].as_py()
    except pa.ArrowException:
        return ""
    return f" ({values[0].as_py()!r} would become {text!r})"


def _unit_words(t: pa.DataType) -> str:
    unit = getattr(t, "unit", None)
    names = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
    if pa.types.is_date32(t):
        return "days since the epoch"
    if pa.types.is_date64(t):
        return "milliseconds since the epoch"
    if pa.types.is_timestamp(t) and t.unit == "ns":
        return "nanoseconds since the epoch, pandas' datetime64[ns]"
    return f"{names.get(str(unit), str(unit))}" + (" since the epoch"
                                                    if pa.types.is_timestamp(t) else "")


def _first_bad_row(col: pa.Array, typ: pa.DataType) -> int | None:
    """Find the first row that fails to cast, by bisection on slices (O(log n) casts)."""
    lo, hi = 0, len(col)
    if hi == 0:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            col.slice(lo, mid - lo).cast(typ, safe=True)
            lo = mid
        except (pa.ArrowException, TypeError, ValueError):
            hi = mid
    try:
        col.slice(lo, 1).cast(typ, safe=True)
        return None
    except (pa.ArrowException, TypeError, ValueError):
        return lo


# ---- files ---------------------------------------------------------------------------------
def _filesystem_for(path: str, store: ObjectStore) -> tuple[pafs.FileSystem, str]:
    """Filesystem and path for an input file; S3 inputs reuse the store's S3 settings."""
    parsed = urlparse(path)
    if parsed.scheme == "s3":
        root = store.root()
        # An S3 store's filesystem reaches every bucket with its settings; otherwise the
        # bucket is opened with the AWS environment's settings.
        s3 = root if urlparse(root.uri).scheme == "s3" else \
            open_object_store(f"s3://{parsed.netloc}")
        fs, _ = s3.arrow_filesystem()
        return fs, parsed.netloc + parsed.path
    if parsed.scheme == "file":
        from sediment.storage.local import file_uri_to_path

        return pafs.LocalFileSystem(), file_uri_to_path(path)
    return pafs.LocalFileSystem(), os.path.abspath(path)


def expand_paths(paths: Sequence[str], store: ObjectStore) -> list[tuple[pafs.FileSystem, str]]:
    """Files named by paths and globs, in order; DataError for a pattern matching nothing,
    and for a file named twice (by two names, or a name and a glob): its records would be
    written twice."""
    out: list[tuple[pafs.FileSystem, str]] = []
    named: dict[tuple[str, str], int] = {}  # (filesystem, resolved path) -> the path naming it

    def take(fs: pafs.FileSystem, path: str, given: int) -> None:
        where = (fs.type_name, os.path.realpath(path) if fs.type_name == "local" else path)
        first = named.setdefault(where, given)
        if first != given:
            raise DataError(f"input file {path!r} is named twice (by {str(paths[first])!r} and "
                            f"{str(paths[given])!r}): its records would be written twice")
        out.append((fs, path))

    for i, p in enumerate(paths):
        fs, path = _filesystem_for(str(p), store)
        if any(ch in path for ch in "*?["):
            if isinstance(fs, pafs.LocalFileSystem):
                matches = sorted(glob.glob(path, recursive=True))
            else:
                base = path.split("*")[0].split("?")[0].split("[")[0].rsplit("/", 1)[0]
                infos = fs.get_file_info(pafs.FileSelector(base, recursive=True,
                                                           allow_not_found=True))
                matches = sorted(i.path for i in infos
                                 if i.type == pafs.FileType.File and fnmatch.fnmatch(i.path, path))
            if not matches:
                raise DataError(f"no files match {p!r}")
            for m in matches:
                take(fs, m, i)
        else:
            info = fs.get_file_info(path)
            if info.type != pafs.FileType.File:
                raise DataError(f"input file {p!r} does not exist")
            take(fs, path, i)
    return out


def file_format(path: str) -> str:
    low = path.lower()
    for suffix, fmt in ((".parquet", "parquet"), (".pq", "parquet"), (".csv", "csv"),
                        (".csv.gz", "csv"), (".jsonl", "json"), (".json", "json"),
                        (".ndjson", "json"), (".jsonl.gz", "json")):
        if low.endswith(suffix):
            return fmt
    raise DataError(f"cannot tell the format of {path!r}: use .parquet, .csv or .jsonl")


def read_file(fs: pafs.FileSystem, path: str, schema: Schema) -> Iterator[pa.RecordBatch]:
    """Stream a Parquet/CSV/JSON-lines file as batches (types guided by the table schema)."""
    import pyarrow.csv as pacsv
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    fmt = file_format(path)
    arrow = schema.to_arrow()
    try:
        if fmt == "parquet":
            pf = pq.ParquetFile(fs.open_input_file(path))
            for i in range(pf.num_row_groups):  # row group by row group: bounded memory
                yield from pf.read_row_group(i).to_batches()
        elif fmt == "csv":
            simple = {f.name: f.type for f in arrow if not pa.types.is_nested(f.type)}
            stream = fs.open_input_stream(path, compression="detect")
            # only an empty cell is null ('""' is ""): Arrow's default null markers ("NA",
            # "null", "N/A", "nan", ...) are text a cell may hold (Namibia's country code;
            # in a key, every such cell would have become the one empty key)
            reader = pacsv.open_csv(
                stream, convert_options=pacsv.ConvertOptions(
                    column_types=simple, null_values=[""], strings_can_be_null=True,
                    quoted_strings_can_be_null=False))
            # an empty cell in a string/binary key field is the empty key (keys are never null)
            empty_keys = [f for f in arrow if not f.nullable and
                          (pa.types.is_string(f.type) or pa.types.is_binary(f.type))]
            for batch in reader:
                for f in empty_keys:
                    i = batch.schema.get_field_index(f.name)
                    if i >= 0 and batch.column(i).null_count:
                        batch = batch.set_column(i, f.name, pc.fill_null(
                            batch.column(i), pa.scalar(b"" if pa.types.is_binary(f.type)
                                                       else "", batch.column(i).type)))
                yield batch
        else:
            stream = fs.open_input_stream(path, compression="detect")
            try:
                data = pajson.read_json(stream, parse_options=pajson.ParseOptions(
                    explicit_schema=arrow, unexpected_field_behavior="error"))
            except pa.ArrowInvalid as e:
                if "unexpected field" in str(e):
                    _name_unexpected_json_field(fs, path, arrow, e)
                raise
            yield from data.to_batches()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
        raise DataError(f"cannot read {fmt} file {path!r}: {e}") from e


def _name_unexpected_json_field(fs: pafs.FileSystem, path: str, arrow: pa.Schema,
                                error: Exception) -> None:
    """Arrow's JSON reader says only "unexpected field": read the file again letting it infer
    the extra fields, and raise DataError naming the first one not in the schema and the first
    row holding it (on the error path only). Returns when that read fails too, so the caller
    reports Arrow's own error."""
    import pyarrow.json as pajson

    try:
        with fs.open_input_stream(path, compression="detect") as stream:
            inferred = pajson.read_json(stream, parse_options=pajson.ParseOptions(
                explicit_schema=arrow, unexpected_field_behavior="infer"))
    except (pa.ArrowException, OSError):
        return
    extra = [n for n in inferred.schema.names if n not in arrow.names]
    if not extra:
        return
    rows = pc.indices_nonzero(pc.is_valid(inferred.column(extra[0])))
    at = f" (first at row {rows[0].as_py()})" if len(rows) else ""
    raise DataError(f"cannot read json file {path!r}: field {extra[0]!r}{at} is not in the "
                    f"table's schema ({', '.join(arrow.names)})") from error
