"""Durations for people: one formatter for messages (errors) and the CLI's tables."""

from __future__ import annotations

import math


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
