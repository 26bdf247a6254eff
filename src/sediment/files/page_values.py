"""A Parquet column's statistics values (plain encoding: a ColumnIndex's per-page min and max)
as Python values in the model's form, so a caller can bisect pages against a key.

The form is ``sediment.files.keys.first_field_bounds``'s (the row-group bounds a lookup
already bisects): dates, times and timestamps as their integer (``sediment.core.keys``),
strings (STRING, ENUM, JSON) as ``str``, other binaries as ``bytes``, integers signed or not
as their logical type says, decimals as ``Decimal``, floats as ``float``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sediment.files.thrift_compact import I32, STRUCT, Struct

BOOLEAN, INT32, INT64, INT96, FLOAT, DOUBLE, BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY = range(8)
"""Parquet's physical types (parquet.thrift ``Type``)."""

# SchemaElement fields
_TYPE, _CONVERTED, _SCALE, _LOGICAL = 1, 6, 7, 10
# LogicalType members (a union: one field set) and their fields
_L_STRING, _L_ENUM, _L_DECIMAL, _L_INTEGER, _L_JSON, _L_FLOAT16 = 1, 4, 5, 10, 12, 15
_DECIMAL_SCALE, _INTEGER_SIGNED = 1, 2
# ConvertedType values
_C_UTF8, _C_ENUM, _C_DECIMAL, _C_JSON = 0, 4, 5, 19
_C_UNSIGNED = (11, 12, 13, 14)  # UINT_8 .. UINT_64

_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_F16 = struct.Struct("<e")


def value_decoder(element: Struct) -> Callable[[bytes], Any]:
    """What decodes a plain-encoded statistics value of the column ``element`` (its decoded
    SchemaElement) describes."""
    physical = element[_TYPE][1]
    logical: Struct = element[_LOGICAL][1] if _LOGICAL in element and \
        element[_LOGICAL][0] == STRUCT else {}
    converted = element[_CONVERTED][1] if _CONVERTED in element else None
    if _L_DECIMAL in logical or converted == _C_DECIMAL:
        scale = logical[_L_DECIMAL][1].get(_DECIMAL_SCALE, (I32, 0))[1] if \
            _L_DECIMAL in logical else element.get(_SCALE, (I32, 0))[1]
        if physical in (INT32, INT64):
            return lambda b: Decimal(int.from_bytes(b, "little", signed=True)).scaleb(-scale)
        return lambda b: Decimal(int.from_bytes(b, "big", signed=True)).scaleb(-scale)
    if physical == BOOLEAN:
        return lambda b: b[0] != 0
    if physical in (INT32, INT64):
        signed = converted not in _C_UNSIGNED and (
            _L_INTEGER not in logical or logical[_L_INTEGER][1].get(_INTEGER_SIGNED,
                                                                    (1, True))[1])
        return lambda b: int.from_bytes(b, "little", signed=signed)
    if physical == FLOAT:
        return lambda b: _F32.unpack(b)[0]
    if physical == DOUBLE:
        return lambda b: _F64.unpack(b)[0]
    if physical == BYTE_ARRAY and (logical.keys() & {_L_STRING, _L_ENUM, _L_JSON} or
                                   converted in (_C_UTF8, _C_ENUM, _C_JSON)):
        return lambda b: b.decode("utf-8")
    if physical == FIXED_LEN_BYTE_ARRAY and _L_FLOAT16 in logical:
        return lambda b: _F16.unpack(b)[0]
    return bytes  # other binaries, fixed-size binaries, INT96
