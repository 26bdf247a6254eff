"""Schema changes: add, drop, rename and widen value columns, in metadata only (pure).

Each function takes a table's schema and returns the changed one, or raises SchemaError naming
the table's field. Field ids make the change safe without rewriting a file
(sediment.files.columns): an added column takes a new id (``last_id + 1``), so a dropped and
re-added name never meets its old values; a rename keeps the id, so the column keeps its
values; a widening keeps the id and old files' values are cast exactly when read. Row and sort
keys never change: they order the files.

:func:`apply_change` is what the ``alter_schema`` transaction replays, so an alter planned on
an older head is re-judged at the head it commits on (two concurrent alters compose, or the
later one is refused with the reason).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pyarrow as pa

from sediment.errors import PropertyError, SchemaError
from sediment.schema import RESERVED_PREFIX, Schema, _as_field
from sediment.types import parse_type

OPS = ("add_columns", "drop_columns", "rename_column", "widen_column")


def conformed(rows: pa.Table, schema: Schema, target: Schema) -> pa.Table:
    """``rows``, read under ``schema``, as ``target`` (a later schema of the same table)
    shapes them: columns matched by field id (a renamed column keeps its values, a widened
    one is cast exactly), a column added since is null, a dropped one gone."""
    if schema == target:
        arrow = target.to_arrow()
        return rows if rows.schema.equals(arrow) else rows.cast(arrow)
    old = {i: f.name for i, f in zip(schema.ids, schema.fields, strict=True)}
    arrays = []
    for f, i in zip(target.fields, target.ids, strict=True):
        name = old.get(i)
        if name is None or name not in rows.column_names:
            arrays.append(pa.nulls(rows.num_rows, f.type))
        else:
            col = rows.column(name)
            arrays.append(col if col.type == f.type else col.cast(f.type))
    return pa.Table.from_arrays(arrays, schema=target.to_arrow())


def add_columns(schema: Schema, columns: Sequence[tuple[str, pa.DataType | str]]) -> Schema:
    """``schema`` with nullable value columns appended, each with a new id."""
    if not columns:
        raise SchemaError("add_columns needs at least one (name, type)")
    fields = list(schema.values)
    ids = list(schema.ids)
    last = schema.last_id
    for spec in columns:
        if not isinstance(spec, tuple | list) or len(spec) != 2:
            raise SchemaError(f"column {spec!r} must be (name, type)")
        name, typ = spec
        field = _as_field((name, parse_type(typ) if isinstance(typ, str) else typ),
                          role="value")
        if not field.nullable:
            raise SchemaError(f"added column {field.name!r} must be nullable: files written "
                              "before it hold no value for it")
        if field.name in schema.field_names or field.name in [f.name for f in fields]:
            raise SchemaError(f"column {field.name!r} already exists")
        last += 1
        fields.append(field)
        ids.append(last)
    return _rebuilt(schema, fields, ids, last)


def drop_columns(schema: Schema, names: Sequence[str]) -> Schema:
    """``schema`` without the value columns ``names`` (their ids are never used again)."""
    if isinstance(names, str) or not names:
        raise SchemaError("drop_columns takes a non-empty list of column names")
    for n in names:
        _value_field(schema, n, "drop")
    keep = [(f, i) for f, i in zip(schema.fields, schema.ids, strict=True)
            if f.name not in set(names)]
    nk = len(schema.key_names)
    return _rebuilt(schema, [f for f, _ in keep[nk:]], [i for _, i in keep], schema.last_id)


def rename_column(schema: Schema, old: str, new: str) -> Schema:
    """``schema`` with value column ``old`` named ``new`` (same id: its values stay)."""
    _value_field(schema, old, "rename")
    if new in schema.field_names:
        raise SchemaError(f"cannot rename {old!r} to {new!r}: column {new!r} already exists")
    values = [f.with_name(new) if f.name == old else f for f in schema.values]
    _as_field(values[[f.name for f in values].index(new)], role="value")
    return _rebuilt(schema, values, list(schema.ids), schema.last_id)


def widen_column(schema: Schema, name: str, typ: pa.DataType | str) -> Schema:
    """``schema`` with value column ``name`` of the wider type ``typ`` (old values cast
    exactly when read)."""
    field = _value_field(schema, name, "widen")
    new = parse_type(typ) if isinstance(typ, str) else typ
    if new.equals(field.type):
        raise SchemaError(f"column {name!r} is {field.type} already")
    if not is_widening(field.type, new):
        raise SchemaError(f"column {name!r}: {field.type} -> {new} is not a widening every "
                          "value survives exactly (widenings: to wider integers, float32 -> "
                          "float64, small integers -> float64, date32 -> timestamp[s|ms|us], "
                          "string/binary -> large_string/large_binary, decimal to a larger "
                          "precision at the same scale)")
    values = [f.with_type(new) if f.name == name else f for f in schema.values]
    return _rebuilt(schema, values, list(schema.ids), schema.last_id)


def is_widening(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` converts to ``new`` exactly (and back)."""
    t = pa.types
    if t.is_integer(old) and t.is_integer(new):
        if t.is_signed_integer(old):
            return t.is_signed_integer(new) and new.bit_width > old.bit_width
        return new.bit_width > old.bit_width  # unsigned: to a wider unsigned or signed
    if t.is_integer(old) and t.is_floating(new):
        # a float64 holds every integer of up to 53 bits exactly; a float32 up to 24
        return old.bit_width <= (32 if new.bit_width == 64 else 16 if new.bit_width == 32
                                 else 8)
    if t.is_floating(old) and t.is_floating(new):
        return new.bit_width > old.bit_width
    if t.is_date32(old) and t.is_timestamp(new):
        return new.unit in ("s", "ms", "us") and new.tz is None  # ns overflows past 2262
    if (t.is_string(old) and t.is_large_string(new)) or \
            (t.is_binary(old) and t.is_large_binary(new)):
        return True
    if t.is_decimal(old) and t.is_decimal(new):
        return new.scale == old.scale and new.precision > old.precision
    return False


def add_args(columns: Any) -> dict[str, Any]:
    """``add_columns``' stored arguments from ``[(name, type), ...]`` (or one pair), each type
    a pyarrow type or its text, kept as text (parsed when the change applies): what a table
    and a remote table send alike."""
    if isinstance(columns, tuple) and len(columns) == 2 and isinstance(columns[0], str):
        columns = [columns]
    out = []
    for c in columns:
        if not isinstance(c, tuple | list) or len(c) != 2:
            raise SchemaError(f"column {c!r} must be (name, type)")
        out.append([str(c[0]), str(c[1])])
    return {"columns": out}


def drop_args(names: Any) -> dict[str, Any]:
    """``drop_columns``' stored arguments from a list of names (a lone string is refused: it
    would be dropped letter by letter)."""
    if isinstance(names, str):
        raise SchemaError(f"drop_columns takes a list of names, not the string {names!r}")
    return {"names": [str(n) for n in names]}


def apply_change(schema: Schema, op: str, args: Mapping[str, Any]) -> Schema:
    """The schema after the change ``op`` with ``args`` (as the transaction stores them)."""
    if op == "add_columns":
        return add_columns(schema, [(str(n), parse_type(str(t))) for n, t in args["columns"]])
    if op == "drop_columns":
        return drop_columns(schema, [str(n) for n in args["names"]])
    if op == "rename_column":
        return rename_column(schema, str(args["old"]), str(args["new"]))
    if op == "widen_column":
        return widen_column(schema, str(args["name"]), parse_type(str(args["type"])))
    raise SchemaError(f"unknown schema change {op!r} (known: {', '.join(OPS)})")


def judged_change(schema: Schema, properties: Mapping[str, Any],
                  filtered: Mapping[int, Collection[str]], op: str,
                  args: Mapping[str, Any]) -> Schema:
    """The schema after the change, judged against a table's properties and the fields its
    pending deletes filter on (``filtered``): what the table checks before it commits and
    the transaction again at the head it commits on (SchemaError)."""
    new = apply_change(schema, op, args)
    if op in ("drop_columns", "rename_column"):
        check_properties(new, properties, describe_change(op, args))
        check_deletions(op, args, filtered)
    return new


def describe_change(op: str, args: Mapping[str, Any]) -> str:
    """One line for history and the dashboard: what the change did."""
    if op == "add_columns":
        return "added " + ", ".join(f"{n}:{t}" for n, t in args["columns"])
    if op == "drop_columns":
        return "dropped " + ", ".join(args["names"])
    if op == "rename_column":
        return f"renamed {args['old']} to {args['new']}"
    if op == "widen_column":
        return f"widened {args['name']} to {args['type']}"
    return op


def check_properties(new: Schema, properties: Mapping[str, Any], op: str) -> None:
    """Refuse a drop or rename that leaves a property naming a field the schema no longer has
    (an iterator's field, ``merge.functions``, ``parquet.dictionary_columns``): SchemaError
    naming the property, so the user changes it first."""
    from sediment.properties import validate_properties

    for name, value in properties.items():
        try:
            validate_properties({name: value}, schema=new)
        except PropertyError as e:
            raise SchemaError(f"{op} would leave property {name!r} naming a column the table "
                              f"no longer has ({e}); change the property first") from None
    dictionary = properties.get("parquet.dictionary_columns")
    if isinstance(dictionary, str) and dictionary.strip():
        for col in (c.strip() for c in dictionary.split(",")):
            if col and col not in new.field_names:
                raise SchemaError(f"{op} would leave property 'parquet.dictionary_columns' "
                                  f"naming column {col!r}, which the table no longer has; "
                                  "change the property first")


def check_deletions(op: str, args: Mapping[str, Any],
                    filtered: Mapping[int, Collection[str]]) -> None:
    """Refuse dropping or renaming a column that a delete not yet settled filters on
    (``filtered``: each pending delete's version -> the fields its filter reads): its filter
    is judged on the records it covers, by that name, until compaction settles it."""
    names = {"drop_columns": list(args.get("names", ())),
             "rename_column": [args.get("old")]}.get(op, [])
    for version, fields in sorted(filtered.items()):
        hit = set(fields) & {str(n) for n in names}
        if hit:
            raise SchemaError(f"column {sorted(hit)[0]!r} is filtered on by the delete of "
                              f"version {version}, not yet settled: compact the table "
                              "(table.compact(full=True) or maintain) first")


def _value_field(schema: Schema, name: str, verb: str) -> pa.Field:
    if name in schema.key_names:
        raise SchemaError(f"cannot {verb} key field {name!r}: row and sort keys order the "
                          "table's files and never change")
    if name.startswith(RESERVED_PREFIX):
        raise SchemaError(f"cannot {verb} {name!r}: a reserved name")
    for f in schema.values:
        if f.name == name:
            return f
    raise SchemaError(f"no value column {name!r}; value columns: "
                      f"{', '.join(schema.value_names) or '(none)'}")


def _rebuilt(schema: Schema, values: Sequence[pa.Field], ids: Sequence[int],
             last: int) -> Schema:
    return Schema(schema.row_keys, schema.sort_keys, values, ids=ids, last_id=last,
                  created_id=schema.created_id)
