"""Editing integer fields of Thrift compact-protocol bytes in place of decoding them.

:mod:`sediment.files.thrift_compact` decodes a struct into Python values and encodes it back:
~0.5 ms for the footer of a two-row-group Parquet file, most of it building values nobody
changes (statistics, encoding stats, size statistics). Joining Parquet parts
(:mod:`sediment.files.stitch`) changes a few offsets per column chunk; here the bytes are
walked once, the fields a *plan* names are rewritten, and every other span is copied as it is
(field headers, and so field order and ids, never change: a rewritten integer only changes
its own varint's length).

A plan maps a field id to an edit of an integer field (a function from the old value to the
new), or to the plan of a struct field (or of each struct in a list field). Key :data:`START`
(no field has id 0 in Parquet's structs) holds a function called as each struct of that plan
begins (to tell the edits which struct they are in).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sediment.files.thrift_compact import (
    BINARY,
    BOOL,
    BYTE,
    DOUBLE,
    FALSE,
    I16,
    I32,
    I64,
    LIST,
    MAP,
    SET,
    STRUCT,
    UUID,
    ThriftError,
    put_int,
)

START = 0
"""A plan's key for the function called as each struct of it begins."""

Plan = dict[int, Any]
"""Field id -> ``Callable[[int], int]`` (an integer field's new value) or a nested Plan."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7
        if shift > 63:
            raise ThriftError("varint longer than 10 bytes")



def _list_head(buf: bytes, pos: int) -> tuple[int, int, int]:
    """(element type, size, position of the first element) of the list at ``pos``."""
    head = buf[pos]
    pos += 1
    size, etype = head >> 4, head & 0x0F
    if size == 15:
        size, pos = _varint(buf, pos)
    return etype, size, pos


def skip(buf: bytes, pos: int, t: int) -> int:
    """The position just past the value of type ``t`` at ``pos`` (a struct field's value:
    a bool has none, its value is in the field's type)."""
    if t == I64 or t == I32 or t == I16:
        while buf[pos] & 0x80:
            pos += 1
        return pos + 1
    if t == BINARY:
        n, pos = _varint(buf, pos)
        if pos + n > len(buf):
            raise ThriftError(f"binary of {n} bytes past the end")
        return pos + n
    if t == STRUCT:  # the hot path: integers and binaries skipped inline
        while True:
            head = buf[pos]
            pos += 1
            if head == 0:
                return pos
            if not head >> 4:  # a long field id: a varint
                while buf[pos] & 0x80:
                    pos += 1
                pos += 1
            ft = head & 0x0F
            if ft == I64 or ft == I32 or ft == I16:
                while buf[pos] & 0x80:
                    pos += 1
                pos += 1
            elif ft == BINARY:
                n = shift = 0
                while True:
                    b = buf[pos]
                    pos += 1
                    n |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                pos += n
            elif ft != BOOL and ft != FALSE:
                pos = skip(buf, pos, ft)
    if t == BOOL or t == FALSE:
        return pos
    if t == LIST or t == SET:
        etype, size, pos = _list_head(buf, pos)
        if etype == BOOL or etype == FALSE or etype == BYTE:  # a byte each
            return pos + size
        if etype == I64 or etype == I32 or etype == I16:
            for _ in range(size):
                while buf[pos] & 0x80:
                    pos += 1
                pos += 1
            return pos
        if etype == BINARY:
            for _ in range(size):
                pos = skip(buf, pos, BINARY)
            return pos
        for _ in range(size):
            pos = skip(buf, pos, etype)
        return pos
    if t == BYTE:
        return pos + 1
    if t == DOUBLE:
        return pos + 8
    if t == UUID:
        return pos + 16
    if t == MAP:
        size, pos = _varint(buf, pos)
        if size:
            kv = buf[pos]
            pos += 1
            for _ in range(size):
                pos = skip(buf, skip(buf, pos, kv >> 4), kv & 0x0F)
        return pos
    raise ThriftError(f"unknown type {t}")


def edit_struct(buf: bytes, pos: int, out: bytearray, plan: Plan) -> int:
    """Append to ``out`` the struct at ``pos`` of ``buf`` with ``plan``'s edits; returns the
    position just past it."""
    begin = plan.get(START)
    if begin is not None:
        begin()
    last = 0
    copied = pos
    while True:
        head = buf[pos]
        if head == 0:
            out += buf[copied:pos + 1]
            return pos + 1
        pos += 1
        t = head & 0x0F
        if head >> 4:
            fid = last + (head >> 4)
        else:
            n, pos = _varint(buf, pos)
            fid = (n >> 1) ^ -(n & 1)
        last = fid
        action = plan.get(fid) if fid != START else None
        if action is None or t == BOOL or t == FALSE:
            pos = skip(buf, pos, t)
            continue
        out += buf[copied:pos]  # up to this field's value
        if isinstance(action, dict):
            if t == STRUCT:
                pos = edit_struct(buf, pos, out, action)
            elif t == LIST or t == SET:
                etype, size, first = _list_head(buf, pos)
                if etype != STRUCT:
                    raise ThriftError(f"field {fid} is not a list of structs")
                out += buf[pos:first]
                pos = first
                for _ in range(size):
                    pos = edit_struct(buf, pos, out, action)
            else:
                raise ThriftError(f"field {fid} is not a struct")
        else:
            if t != I64 and t != I32 and t != I16:
                raise ThriftError(f"field {fid} is not an integer")
            n, pos = _varint(buf, pos)
            edited: Callable[[int], int] = action
            put_int(out, edited((n >> 1) ^ -(n & 1)))
        copied = pos


def edit(buf: bytes, plan: Plan) -> bytes:
    """The struct ``buf`` holds, with ``plan``'s edits."""
    out = bytearray()
    try:
        end = edit_struct(buf, 0, out, plan)
    except IndexError:
        raise ThriftError("struct runs past the end of its bytes") from None
    if end != len(buf):
        raise ThriftError(f"{len(buf) - end} bytes after the struct")
    return bytes(out)


def field_spans(buf: bytes) -> dict[int, tuple[int, int, int]]:
    """Each field of the struct ``buf`` holds: id -> (type, where its value starts, where it
    ends)."""
    spans: dict[int, tuple[int, int, int]] = {}
    pos = last = 0
    try:
        while True:
            head = buf[pos]
            pos += 1
            if head == 0:
                return spans
            t = head & 0x0F
            if head >> 4:
                fid = last + (head >> 4)
            else:
                n, pos = _varint(buf, pos)
                fid = (n >> 1) ^ -(n & 1)
            last = fid
            end = skip(buf, pos, t)
            spans[fid] = (t, pos, end)
            pos = end
    except IndexError:
        raise ThriftError("struct runs past the end of its bytes") from None


def struct_spans(buf: bytes, pos: int) -> list[tuple[int, int]]:
    """(start, end) of each struct in the list of structs at ``pos``."""
    etype, size, pos = _list_head(buf, pos)
    if etype != STRUCT:
        raise ThriftError("not a list of structs")
    out = []
    for _ in range(size):
        end = skip(buf, pos, STRUCT)
        out.append((pos, end))
        pos = end
    return out


def list_head(size: int, etype: int) -> bytes:
    """The header of a list of ``size`` elements of type ``etype``."""
    if size < 15:
        return bytes([size << 4 | etype])
    out = bytearray([0xF0 | etype])
    while size > 0x7F:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out)
