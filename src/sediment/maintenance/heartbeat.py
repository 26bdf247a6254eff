"""A running maintainer's heartbeat in its store, so that ``sediment doctor`` can tell one
that stopped (killed, hung, its machine gone) from one that was never started.

``maintain --loop`` rewrites ``maintainers/<id>.json`` at the store's root at every report
(``--interval``) and deletes it when it stops cleanly. The object's modification time is
the beat; its document says who (host, process id, since when) and how often it beats. A
heartbeat older than :data:`MISSED_BEATS` intervals (and at least :data:`MIN_STALE_SECONDS`)
is a maintainer that stopped: a kill -9 or a lost machine leaves exactly that. A beat that
fails is logged and tried again at the next report: maintenance never stops for it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sediment.errors import CorruptMetadataError, ObjectNotFoundError, SedimentError
from sediment.handle import TableHandle
from sediment.state.documents import read_sealed, sealed
from sediment.storage.base import ObjectStore

log = logging.getLogger(__name__)

PREFIX = "maintainers/"
MISSED_BEATS = 5
"""Intervals without a beat after which a maintainer counts as stopped."""
MIN_STALE_SECONDS = 60.0
"""However short its interval, a maintainer is judged stopped only after this long (a
collection pass or a slow store may delay one report)."""


class Heartbeat:
    """One maintainer's heartbeat: :meth:`beat` at each report, :meth:`stop` at the end."""

    def __init__(self, interval: float) -> None:
        self.key = f"{PREFIX}{uuid.uuid4().hex}.json"
        self.doc = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
                    "interval": interval}
        self._root: ObjectStore | None = None

    def due(self, tables: Sequence[TableHandle]) -> bool:
        """Whether the first beat is due: the store became known (a table of it)."""
        return self._root is None and bool(tables)

    def beat(self, tables: Sequence[TableHandle]) -> None:
        """Rewrite the heartbeat in the store of ``tables`` (nothing before a table is
        known: the store is reached through them)."""
        if self._root is None and tables:
            self._root = tables[0].objects.root()
        if self._root is None:
            return
        try:
            self._root.put(self.key, sealed({**self.doc, "beat": time.time()}))
        except (SedimentError, OSError) as e:
            log.warning("maintainer heartbeat %s not written: %s", self.key, e)

    def stop(self) -> None:
        """Delete the heartbeat: a maintainer stopped on purpose is not missed."""
        if self._root is not None:
            try:
                self._root.delete_many([self.key])
            except (SedimentError, OSError) as e:
                log.warning("maintainer heartbeat %s not deleted: %s", self.key, e)


@dataclass(frozen=True, slots=True)
class Beat:
    """A heartbeat found in a store: its key, its document (empty when unreadable) and how
    long ago it was last written."""

    key: str
    doc: dict[str, Any]
    age: float

    @property
    def stale(self) -> bool:
        interval = float(self.doc.get("interval", 0) or 0)
        return self.age > max(MISSED_BEATS * interval, MIN_STALE_SECONDS)


def heartbeats(root: ObjectStore, now: float | None = None) -> list[Beat]:
    """The heartbeats of the maintainers of the store at ``root``."""
    now = time.time() if now is None else now
    out = []
    for o in root.list(PREFIX):
        if not o.key.endswith(".json"):
            continue
        try:
            doc = read_sealed(root, o.key, f"maintainer heartbeat {o.key}")
        except ObjectNotFoundError:
            continue  # a maintainer that stopped since the listing
        except CorruptMetadataError:
            doc = {}
        out.append(Beat(o.key, doc, now - o.mtime))
    return out
