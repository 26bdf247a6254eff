"""Durations and moments for people: one formatter each, for messages (errors), the CLI and
the dashboard (which must not import the CLI)."""

from __future__ import annotations

import datetime as dt
import math


def iso_time(epoch_seconds: float) -> str:
    """A moment as ISO 8601 UTC with milliseconds (``2026-11-27T04:55:09.123Z``): the one time
    format of ``--json`` and of every dashboard page, unambiguous across machines' time zones,
    exact enough to tell commits a few milliseconds apart, and what JavaScript's
    ``Date.toISOString()`` and Plotly's date axes read and write."""
    stamp = dt.datetime.fromtimestamp(epoch_seconds, tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def human_seconds(seconds: float) -> str:
    """``0.2701268340001661`` -> ``0.27 s``: three significant digits at most below ten
    seconds; minutes and seconds, hours and minutes, then days past two days."""
    if seconds is None or not math.isfinite(seconds):
        return str(seconds)
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.3g} days"
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    if seconds >= 60:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    if seconds >= 10:
        return f"{seconds:.0f} s"
    if seconds >= 0.1 or seconds == 0:
        return f"{seconds:.3g} s"
    return f"{seconds * 1000:.3g} ms"
