"""Arrow types by name, and key values typed as text.

The names a schema is written with (JSON schemas, the CLI, schema changes, the services'
requests) and parsed back from; which types a key may have and how a table stores them;
a key value typed as text (a command line, a web form); a field name quoted for SQL.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from sediment.errors import SchemaError

KEY_TYPES: dict[str, pa.DataType] = {
    "int32": pa.int32(),
    "int64": pa.int64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "timestamp[us]": pa.timestamp("us"),
    "timestamp[ms]": pa.timestamp("ms"),
    "timestamp[ns]": pa.timestamp("ns"),
    "date32": pa.date32(),
    "timestamp[s]": pa.timestamp("s"),
    "date64": pa.date64(),
}
"""Types a row or sort key may have, by the name used in JSON schemas and the CLI; timestamps
may also carry a time zone (``pa.timestamp("us", tz="UTC")``, ``timestamp[ms, tz=...]``):
see :func:`is_key_type`. ``timestamp[s]`` and ``date64`` are stored as ``timestamp[ms]`` and
``date32`` (:func:`storage_type`)."""


def is_key_type(t: pa.DataType) -> bool:
    """Whether a row or sort key may have type ``t``: 32/64-bit integers, strings, binaries,
    timestamps of any unit with or without a time zone, dates."""
    return (pa.types.is_int32(t) or pa.types.is_int64(t) or pa.types.is_string(t)
            or pa.types.is_binary(t) or pa.types.is_timestamp(t) or pa.types.is_date(t))


def storage_type(t: pa.DataType) -> pa.DataType:
    """The type a field of type ``t`` has in a table: ``t`` itself, except the two temporal
    types Parquet cannot hold as they are, which pyarrow reads back as another type:
    ``timestamp[s]`` becomes ``timestamp[ms]`` (time zone kept) and ``date64`` becomes
    ``date32`` (both hold the same instants; a ``date64`` that is not a whole day is refused at
    ingest). Keys then sort, compare with Parquet statistics and round-trip as stored."""
    if pa.types.is_timestamp(t) and t.unit == "s":
        return pa.timestamp("ms", tz=t.tz)
    if pa.types.is_date64(t):
        return pa.date32()
    return t


_SIMPLE_TYPES: dict[str, pa.DataType] = {
    **KEY_TYPES,
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float": pa.float32(),
    "float32": pa.float32(),
    "double": pa.float64(),
    "float64": pa.float64(),
    "large_string": pa.large_string(),
    "large_binary": pa.large_binary(),
    "timestamp[s]": pa.timestamp("s"),
    "date64": pa.date64(),
    # the names ``str(pa.DataType)`` gives, so ``Schema.to_json`` type strings parse back
    "date32[day]": pa.date32(),
    "date64[ms]": pa.date64(),
}


def quote_identifier(name: str) -> str:
    """``name`` as a SQL identifier: in double quotes, each double quote inside doubled.

    DataFusion (``col``) and DuckDB parse a column name as SQL: unquoted, it is folded to lower
    case and a dot splits off a table qualifier; quoted, it is taken as it is. Any field name
    (spaces, dots, quotes, backslashes, non-ASCII) goes through this to reach its column."""
    return '"' + name.replace('"', '""') + '"'


def key_from_text(text: str, field: pa.Field) -> Any:
    """A value of row-key ``field`` typed as text (a command line, a web form): integers,
    floats and booleans parsed, strings kept, binary as the UTF-8 bytes of the text,
    timestamps as ISO 8601 or the raw integer, dates as ISO 8601.

    Raises ValueError naming the text, the type and the field; callers re-raise it as their
    own error (the CLI's, the dashboard form's)."""
    import datetime as dt

    t = field.type
    try:
        if pa.types.is_integer(t):
            return int(text)
        if pa.types.is_floating(t):
            return float(text)
        if pa.types.is_boolean(t):
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return text.encode("utf-8")
        if pa.types.is_timestamp(t):
            try:
                return int(text)
            except ValueError:
                return dt.datetime.fromisoformat(text)
        if pa.types.is_date(t):
            return dt.date.fromisoformat(text)
        return text
    except ValueError:
        raise ValueError(f"{text!r} is not a valid {t} for row key field {field.name!r}"
                         ) from None


def parse_type(text: str) -> pa.DataType:
    """Parse a type name such as ``int64``, ``list<string>`` or ``map<string, int64>``."""
    t = text.strip()
    if t in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[t]
    m = re.fullmatch(r"timestamp\[(s|ms|us|ns),\s*tz=([^\]]+)\]", t)
    if m:
        return pa.timestamp(m.group(1), tz=m.group(2).strip())
    m = re.fullmatch(r"decimal(128|256)\(\s*(\d+)\s*,\s*(-?\d+)\s*\)", t)
    if m:  # Arrow's own text of a decimal type (what a schema change stores)
        make = pa.decimal128 if m.group(1) == "128" else pa.decimal256
        try:
            return make(int(m.group(2)), int(m.group(3)))
        except (ValueError, pa.ArrowInvalid) as e:
            raise SchemaError(f"invalid decimal type {text!r}: {e}") from None
    m = re.fullmatch(r"(large_)?list<(?:item: )?(.+)>", t)
    if m:
        item = parse_type(m.group(2))
        return pa.large_list(item) if m.group(1) else pa.list_(item)
    m = re.fullmatch(r"map<(.+)>", t)
    if m:
        parts = _split_top_level(m.group(1))
        if len(parts) != 2:
            raise SchemaError(f"map type needs two type arguments: {text!r}")
        return pa.map_(parse_type(parts[0]), parse_type(parts[1]))
    m = re.fullmatch(r"struct<(.*)>", t)
    if m:
        fields = []
        for part in _split_top_level(m.group(1)) if m.group(1).strip() else []:
            name, sep, typ = part.partition(":")
            if not sep or not name.strip():
                raise SchemaError(f"struct field {part.strip()!r} must be 'name: type' in {text!r}")
            fields.append(pa.field(name.strip(), parse_type(typ)))
        return pa.struct(fields)
    raise SchemaError(f"unknown type {text!r}; known: {', '.join(sorted(_SIMPLE_TYPES))}, "
                      "decimal128(P, S), decimal256(P, S), list<T>, map<K, V>, "
                      "struct<name: T, ...>")


def _split_top_level(text: str) -> list[str]:
    """Split ``text`` at commas outside ``<...>``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def key_text(value: Any, type_: pa.DataType) -> str:
    """A key value as a person reads it: dates and times in ISO 8601 (a region holds temporal
    keys as the integers they are stored as, which read as nothing: ``19875`` is
    2024-06-01), strings and bytes quoted as Python writes them, numbers as they are."""
    import datetime as dt

    if isinstance(value, int) and not isinstance(value, bool) and (
            pa.types.is_date(type_) or pa.types.is_timestamp(type_)):
        stored = storage_type(type_)
        try:
            value = pa.scalar(value, pa.int32() if pa.types.is_date32(stored) else pa.int64()
                              ).cast(stored).as_py()
        except (pa.ArrowInvalid, OverflowError, ValueError):
            return repr(value)  # out of Python's range: the number stands
    if isinstance(value, dt.date):  # a datetime too
        return value.isoformat()
    return repr(value)


def _key_text_at(value: Any, types: Sequence[pa.DataType], i: int) -> str:
    """:func:`key_text` of field ``i``'s value (a field past ``types``: as it is)."""
    return key_text(value, types[i] if i < len(types) else pa.null())


def key_end_text(key: tuple[Any, ...] | None, types: Sequence[pa.DataType]) -> str | None:
    """A region's end (a key tuple, None: unbounded) for people: a one-field key as its
    value, a longer one as a tuple, each value by :func:`key_text` under ``types``."""
    if key is None:
        return None
    parts = [_key_text_at(v, types, i) for i, v in enumerate(key)]
    return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"


def region_text(region: Any, types: Sequence[pa.DataType]) -> str:
    """``str(region)`` with each end's values shown by :func:`key_text` under the row-key
    field types ``types``: ``[-inf, 2024-06-01)`` where ``str`` gives ``[-inf, 19875)``. A
    run of the key order (``Region``) shows a one-field end as its value, a longer one as a
    tuple; a per-field cell (``Cell``) shows each field's ``[lo, hi)``."""
    def one(v: Any, i: int, inf: str) -> str:
        return inf if v is None else _key_text_at(v, types, i)

    bounds = getattr(region, "bounds", None)  # a Cell's (types sits below core: no import)
    if bounds:
        return " x ".join(f"[{one(lo, i, '-inf')}, {one(hi, i, '+inf')})"
                          for i, (lo, hi) in enumerate(bounds))

    return (f"[{key_end_text(region.min, types) or '-inf'}, "
            f"{key_end_text(region.max, types) or '+inf'})")
