"""The object store's own clock, for deletions that compare times with listed modification
times: a probe object is written and its modification time read back.

Machines' clocks may differ by up to ``CLOCK_SKEW_SECONDS`` (the documented assumption);
modification times of listed objects all come from the object store's clock, so comparing them
with this probe's time (rather than this machine's ``time.time()``) is immune to that skew.
"""

from __future__ import annotations

import contextlib
import time
import uuid

from sediment.errors import SedimentError
from sediment.storage.base import ObjectStore

CLOCK_SKEW_SECONDS = 300.0
"""The largest difference between two machines' clocks that Sediment assumes (5 minutes):
every time-based deletion keeps at least this margin on top of its own delay."""
PROBE_PREFIX = "clock/"
"""Where probe objects are written, at the root of the store (deleted at once)."""


def object_store_time(objects: ObjectStore) -> float | None:
    """The object store's current time (the modification time of a probe object written now),
    or None when it cannot be told (the probe failed)."""
    root = objects.root()
    key = f"{PROBE_PREFIX}probe-{uuid.uuid4().hex}"
    try:
        root.put(key, b"")
        info = root.head(key)
    except SedimentError:
        return None
    finally:
        with contextlib.suppress(SedimentError):
            root.delete_many([key])
    return None if info is None else float(info.mtime)


def deletion_clock(objects: ObjectStore, now: float | None = None) -> float:
    """The time to compare listed modification times with before deleting: the earlier of
    this machine's clock (``now``, default ``time.time()``) and the object store's, so that a
    clock running ahead of the store's never makes an object look older than it is."""
    local = time.time() if now is None else now
    store = object_store_time(objects)
    return local if store is None else min(local, store)
