"""Numbers for people: sizes, counts, rates and durations as a report table shows them.

The ``--json`` output keeps full values; only the tables printed for people go through here
(durations themselves: :func:`sediment.core.units.human_seconds`, shared with the library).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sediment.core.units import human_seconds


def human_bytes(n: float | None) -> str:
    """A size in B, KiB, MiB, GiB or TiB (one decimal past bytes)."""
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)  # pragma: no cover


def human_number(value: Any) -> Any:
    """Counts with thousands separators, other floats to three significant digits."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def human_value(key: str, value: Any) -> Any:
    """A result field for people, by its name: seconds, bytes, rates and counts rounded."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if key == "seconds" or key.endswith("_seconds"):
        return human_seconds(float(value))
    if key in ("bytes", "size") or key.endswith("_bytes") or key.startswith("bytes_"):
        return human_bytes(value)
    if key.endswith("per_second"):
        return f"{human_number(float(value))}/s"
    if key in ("version", "job_id") or key.endswith("_version"):
        return value
    return human_number(value)


def human_items(data: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``data``'s items with :func:`human_value` applied (for key/value tables)."""
    return [(k, human_value(k, v)) for k, v in data.items()]


