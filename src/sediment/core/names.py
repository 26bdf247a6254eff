"""Names people give to stored things (tables, partition schemes): each becomes part of an
object key, so one rule keeps them to safe characters."""

from __future__ import annotations

import re

from sediment.errors import InvalidTableNameError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def validate_name(name: object, kind: str) -> str:
    """``name`` when it is a valid ``kind`` name ("table", "scheme"): no separators, no
    traversal, nothing empty; InvalidTableNameError saying the rule otherwise."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidTableNameError(
            f"invalid {kind} name {name!r}: use 1-128 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit (no '/', no '..')")
    return name
