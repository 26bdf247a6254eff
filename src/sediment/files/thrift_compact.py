"""A generic Thrift compact-protocol codec: Parquet's footer, page index and page headers
decoded into plain values and encoded back byte for byte, with no generated code.

pyarrow writes the Parquet page index but cannot read it from Python, and a page read needs a
footer edited to fit one page (``sediment.files.pages``): both need the Thrift structs
themselves. The ``thrift`` package would bring a code generator for one schema file; the
compact protocol is small enough to read and write generically, and a generic form keeps every
field, known or not, so an edited footer keeps what it was not told about.

The generic form:

- a struct is a ``dict`` ``{field_id: (type, value)}`` in the order the fields were read (a
  writer's canonical order, ascending ids, is what makes re-encoding byte-exact);
- a list or set is a :class:`TList` ``(element_type, items)``, a map a :class:`TMap`
  ``(key_type, value_type, [(key, value), ...])``;
- bool (type :data:`BOOL`) is a Python bool, byte/i16/i32/i64 ints, double a float, binary
  (strings too) ``bytes``, uuid 16 ``bytes``.

Bytes that do not decode (truncated, an unknown type, a count past the end, nesting past
:data:`MAX_DEPTH`) raise :class:`ThriftError`, a ValueError the caller names the file in.
"""

from __future__ import annotations

import struct as _struct
from typing import Any, NamedTuple

STOP, BOOL, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT, UUID = range(14)
"""Compact-protocol type codes. A bool field's type nibble holds its value (1 true, 2 false);
the generic form types every bool :data:`BOOL`, whatever its value."""

MAX_DEPTH = 64
"""Deepest nesting decoded: Parquet's structs nest about 6 deep; bytes claiming more are damage
(and would otherwise exhaust Python's stack)."""

Struct = dict[int, tuple[int, Any]]


class TList(NamedTuple):
    """A list or set: the element type as written (a bool list's may be 1 or 2) and the items."""

    etype: int
    items: list[Any]


class TMap(NamedTuple):
    """A map: key and value types (0, 0 when empty: an empty map's bytes carry no types) and
    its (key, value) pairs in the order read."""

    ktype: int
    vtype: int
    items: list[tuple[Any, Any]]


class ThriftError(ValueError):
    """Bytes that are not a valid compact-protocol struct."""


_DOUBLE = _struct.Struct("<d")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]  # IndexError past the end: turned into ThriftError by the entry points
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ThriftError("varint longer than 10 bytes")


read_varint = _varint
"""``read_varint(buf, pos)``: the unsigned varint at ``pos`` and the position past it
(IndexError past the end, ThriftError past 10 bytes), for a reader of one fixed layout
(``sediment.files.chunk_index``)."""


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _value(buf: bytes, pos: int, t: int, depth: int) -> tuple[Any, int]:
    if t == STRUCT:
        return _struct_at(buf, pos, depth + 1)
    if t == I32 or t == I64 or t == I16:  # the hot path: no tuple built
        n, pos = _varint(buf, pos)
        return (n >> 1) ^ -(n & 1), pos
    if t == BINARY:
        n, pos = _varint(buf, pos)
        end = pos + n
        if end > len(buf):
            raise ThriftError(f"binary of {n} bytes past the end")
        return buf[pos:end], end
    if t == BOOL or t == FALSE:  # a list element: 1 is true
        return buf[pos] == 1, pos + 1
    if t == BYTE:
        b = buf[pos]
        return b - 256 if b > 127 else b, pos + 1
    if t == LIST or t == SET:
        head = buf[pos]
        pos += 1
        size, etype = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(buf, pos)
        if size > len(buf) - pos:  # every element takes at least one byte
            raise ThriftError(f"list of {size} elements past the end")
        if depth >= MAX_DEPTH:
            raise ThriftError(f"nested deeper than {MAX_DEPTH}")
        items: list[Any] = []
        append = items.append
        if etype == STRUCT:  # the page index's lists: no dispatch per element
            for _ in range(size):
                v, pos = _struct_at(buf, pos, depth + 2)
                append(v)
        else:
            for _ in range(size):
                v, pos = _value(buf, pos, etype, depth + 1)
                append(v)
        return TList(etype, items), pos
    if t == DOUBLE:
        if pos + 8 > len(buf):
            raise ThriftError("double past the end")
        return _DOUBLE.unpack_from(buf, pos)[0], pos + 8
    if t == MAP:
        size, pos = _varint(buf, pos)
        if size == 0:
            return TMap(0, 0, []), pos
        if 2 * size > len(buf) - pos:
            raise ThriftError(f"map of {size} entries past the end")
        if depth >= MAX_DEPTH:
            raise ThriftError(f"nested deeper than {MAX_DEPTH}")
        kv = buf[pos]
        pos += 1
        ktype, vtype = kv >> 4, kv & 0x0F
        pairs = []
        for _ in range(size):
            k, pos = _value(buf, pos, ktype, depth + 1)
            v, pos = _value(buf, pos, vtype, depth + 1)
            pairs.append((k, v))
        return TMap(ktype, vtype, pairs), pos
    if t == UUID:
        if pos + 16 > len(buf):
            raise ThriftError("uuid past the end")
        return buf[pos:pos + 16], pos + 16
    raise ThriftError(f"unknown type {t}")


def _struct_at(buf: bytes, pos: int, depth: int, until: int = 1 << 16
               ) -> tuple[Struct, int]:
    if depth > MAX_DEPTH:
        raise ThriftError(f"nested deeper than {MAX_DEPTH}")
    fields: Struct = {}
    last = 0
    while True:
        head = buf[pos]
        if head == STOP:
            return fields, pos + 1
        at = pos
        pos += 1
        t = head & 0x0F
        delta = head >> 4
        if delta:
            fid = last + delta
        else:
            n, pos = _varint(buf, pos)
            fid = _zigzag(n)
        if fid > until:
            return fields, at
        if t == I64 or t == I32 or t == I16:  # inline: most fields of a footer are integers
            n = shift = 0
            while True:
                b = buf[pos]
                pos += 1
                n |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise ThriftError("varint longer than 10 bytes")
            fields[fid] = (t, (n >> 1) ^ -(n & 1))
        elif t == BOOL or t == FALSE:  # the value is the type nibble
            fields[fid] = (BOOL, t == BOOL)
        else:
            v, pos = _value(buf, pos, t, depth)
            fields[fid] = (t, v)
        last = fid


def decode_struct(data: bytes | bytearray | memoryview, pos: int = 0, *,
                  until: int | None = None) -> tuple[Struct, int]:
    """The struct starting at ``pos`` of ``data`` and the position just past it: for bytes
    that go on after it (a page header precedes its page's data).

    With ``until``, its fields up to that id alone, and the position of the first field past
    it (a reader wanting a struct's first fields skips decoding the rest: a ColumnIndex's
    null counts and level histograms are as long as its bounds)."""
    buf = bytes(data)
    try:
        return _struct_at(buf, pos, 0, 1 << 16 if until is None else until)
    except IndexError:
        raise ThriftError("struct runs past the end of its bytes") from None
    except RecursionError:
        raise ThriftError("struct nested too deep") from None


def decode(data: bytes | bytearray | memoryview) -> Struct:
    """The struct ``data`` holds, exactly (bytes left after it are damage)."""
    fields, end = decode_struct(data)
    if end != len(data):
        raise ThriftError(f"{len(data) - end} bytes after the struct")
    return fields


def _put_varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def put_int(out: bytearray, n: int) -> None:
    """Append ``n`` as a compact-protocol integer (zigzag, then a varint)."""
    _put_varint(out, ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _put_value(out: bytearray, t: int, v: Any) -> None:
    if t == STRUCT:
        if isinstance(v, bytes):  # encoded already
            out += v
        else:
            _put_struct(out, v)
    elif t == I32 or t == I64 or t == I16:
        put_int(out, v)
    elif t == BINARY:
        _put_varint(out, len(v))
        out += v
    elif t == BOOL or t == FALSE:  # a list element
        out.append(BOOL if v else FALSE)
    elif t == BYTE:
        out.append(v & 0xFF)
    elif t == LIST or t == SET:
        etype, items = v
        if len(items) < 15:
            out.append(len(items) << 4 | etype)
        else:
            out.append(0xF0 | etype)
            _put_varint(out, len(items))
        for item in items:
            _put_value(out, etype, item)
    elif t == DOUBLE:
        out += _DOUBLE.pack(v)
    elif t == MAP:
        ktype, vtype, pairs = v
        _put_varint(out, len(pairs))
        if pairs:
            out.append(ktype << 4 | vtype)
            for k, val in pairs:
                _put_value(out, ktype, k)
                _put_value(out, vtype, val)
    elif t == UUID:
        if len(v) != 16:
            raise ThriftError(f"uuid of {len(v)} bytes")
        out += v
    else:
        raise ThriftError(f"unknown type {t}")


def _put_struct(out: bytearray, fields: Struct, last: int = 0, stop: bool = True) -> None:
    for fid, (t, v) in fields.items():
        nibble = (BOOL if v else FALSE) if t == BOOL else t
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | nibble)
        else:
            out.append(nibble)
            put_int(out, fid)
        if t != BOOL:
            _put_value(out, t, v)
        last = fid
    if stop:
        out.append(STOP)


def encode(fields: Struct) -> bytes:
    """The compact-protocol bytes of a struct in the generic form (the inverse of
    :func:`decode`; byte-exact for bytes a canonical writer such as pyarrow's wrote).

    Wherever a struct goes, ``bytes`` holding one already encoded are written as they are:
    a caller that writes many similar structs encodes their constant parts once."""
    out = bytearray()
    _put_struct(out, fields)
    return bytes(out)


def encode_fields(fields: Struct, *, after: int = 0) -> bytes:
    """Some fields of a struct, encoded as they follow field ``after`` (0: the struct's first)
    and with no end: pieces of a struct whose other fields are encoded once (the
    concatenation of pieces then :data:`END` is the struct)."""
    out = bytearray()
    _put_struct(out, fields, after, stop=False)
    return bytes(out)


END = bytes([STOP])
"""The byte that ends a struct."""
