"""Row-key tuples and their JSON form.

A key is a tuple of Python values (int, str, bytes, or temporal values as int) ordered
lexicographically; a shorter tuple that is a prefix of a longer one sorts first. JSON cannot hold
bytes, so bytes are written as ``{"b64": ...}``.
"""

from __future__ import annotations

import base64
from typing import Any

Key = tuple[Any, ...]


def encode_value(v: Any) -> Any:
    """JSON form of one key value."""
    if isinstance(v, bytes | bytearray | memoryview):
        return {"b64": base64.b64encode(bytes(v)).decode()}
    return v


def decode_value(v: Any) -> Any:
    if isinstance(v, dict) and "b64" in v:
        return base64.b64decode(v["b64"])
    return v


def encode_key(key: Key | None) -> list[Any] | None:
    return None if key is None else [encode_value(v) for v in key]


def decode_key(doc: list[Any] | None) -> Key | None:
    if doc is None:
        return None
    # a log entry of a delete by keys holds thousands: the common key (no bytes) is copied
    # as it is, without a call per value
    for v in doc:
        if type(v) is dict:
            return tuple(decode_value(v) for v in doc)
    return tuple(doc)


def as_key(value: Any) -> Key:
    """A user's key (scalar or tuple/list) as a tuple."""
    if isinstance(value, tuple):
        return value
    if isinstance(value, list):
        return tuple(value)
    return (value,)
