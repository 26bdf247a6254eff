"""Which column of a data file is which field of the table: by field id, else by name.

A table's schema changes in metadata only (sediment.schema_changes): no file is rewritten. Files
written since field ids exist carry each column's id in their Parquet schema (Arrow metadata
``PARQUET:field_id``) and are read by id: a renamed column keeps its values, a dropped name
added again is a new id that old files do not hold (its old values never come back). A file
without ids (written before, or by a writer that does not set them) is read by name as of the
schema it was written under: the schema in force at the version that added it (Iceberg's name
mapping). A widened field's old values are cast exactly to the new type; a field the file does
not hold reads as nulls.

:func:`column_map` is pure (a file's Arrow schema in, a plan out); :func:`conform` applies the
plan to what was read. Most files need nothing: their plan is ``identity`` and reads stay as
they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from sediment.errors import SchemaError
from sediment.schema import FIELD_ID_KEY, Schema


def file_field_ids(arrow: pa.Schema) -> dict[int, str] | None:
    """Field id -> column name, from a file's Arrow schema; None when no column has an id."""
    out: dict[int, str] = {}
    for f in arrow:
        meta = f.metadata or {}
        raw = meta.get(FIELD_ID_KEY)
        if raw is not None:
            try:
                out[int(raw)] = f.name
            except ValueError:
                continue
    return out or None


@dataclass(frozen=True, slots=True)
class ColumnMap:
    """How to read the table's fields from one file: ``sources`` maps each field the file can
    give (by the table's name) to the file's column name; a field not in ``sources`` is all
    nulls in this file; ``casts`` names the fields whose file type differs (a widening)."""

    sources: dict[str, str]
    casts: dict[str, pa.DataType]
    identity: bool
    fields: frozenset[str] = frozenset()
    """Every field name of the table."""

    def file_columns(self, columns: Sequence[str]) -> list[str]:
        """The file's columns to read for the table's ``columns`` (names outside the table's
        fields, like the hidden sequence, pass through)."""
        if self.identity:
            return list(columns)
        return [self.sources.get(c, c) for c in columns
                if c in self.sources or c not in self.fields]


IDENTITY = ColumnMap({}, {}, True)


def column_map(file_schema: pa.Schema, target: Schema, written_under: Schema | None = None
               ) -> ColumnMap:
    """The plan to read ``target``'s fields from a file whose Arrow schema is
    ``file_schema``: by the file's field ids when it has them, else by name as of
    ``written_under`` (the schema at the version that added the file; ``target`` when None)."""
    ids = file_field_ids(file_schema)
    if ids is None:
        under = written_under or target
        present = set(file_schema.names)
        ids = {i: f.name for i, f in zip(under.ids, under.fields, strict=True)
               if f.name in present}
    sources: dict[str, str] = {}
    casts: dict[str, pa.DataType] = {}
    identity = True
    for fid, field in zip(target.ids, target.fields, strict=True):
        name = ids.get(fid)
        if name is None:
            identity = False
            continue
        sources[field.name] = name
        have = file_schema.field(name).type
        if name != field.name:
            identity = False
        if not have.equals(field.type):
            casts[field.name] = field.type
            identity = False
    return IDENTITY if identity else ColumnMap(sources, casts, False,
                                               frozenset(target.field_names))


def conform(data: pa.Table, cmap: ColumnMap, columns: Sequence[str],
            target: pa.Schema) -> pa.Table:
    """``data`` (read from a file with ``cmap.file_columns(columns)``) as the table's
    ``columns``: renamed, widened and null-filled; other columns (the hidden sequence) kept
    after them. ``target``: the table's Arrow schema (every field)."""
    if cmap.identity:
        return data
    arrays: list[pa.ChunkedArray | pa.Array] = []
    fields: list[pa.Field] = []
    for c in columns:
        if c not in target.names:
            continue
        field = target.field(c)
        src = cmap.sources.get(c)
        if src is None:
            arr: pa.ChunkedArray | pa.Array = pa.nulls(data.num_rows, field.type)
        else:
            arr = data.column(src)
            if c in cmap.casts:
                try:
                    arr = arr.cast(field.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise SchemaError(f"column {src!r} cannot be read as field {c!r} "
                                      f"({field.type}): {e}") from e
        arrays.append(arr)
        fields.append(field)
    for c in data.schema.names:
        if c not in target.names and c not in cmap.sources.values():
            arrays.append(data.column(c))
            fields.append(data.schema.field(c))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
