"""Expired versions: telling "retention let this version go" from "a file is missing".

A version is *expired* when what reading it needs is gone because it is older than the table's
retention (``retention.seconds``):

- its data files were collected: garbage collection records the files it deletes (DeleteFiles)
  before deleting them, and nothing else ever removes a file from the state's unreferenced files,
  so a file that the version references and that the head neither references nor holds as
  unreferenced was deleted by GC. A file missing from storage that the head still knows of was
  lost some other way (deleted by hand, a damaged store): that stays a missing-file error.
- its log entries and snapshots were pruned (the version is below the oldest loadable one).

The check costs set lookups over the files a read would open, against the head (refreshed, so a
collection another process just recorded is seen); no storage request but the head's refresh,
except one per file recorded deleted (a file a pin kept is recorded but still there).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from sediment.core.state import TableState
from sediment.core.units import human_seconds
from sediment.errors import QueryError, VersionExpiredError
from sediment.properties import defaults
from sediment.state.store import StateStore


def _retention(head: TableState) -> str:
    seconds = float({**defaults(), **head.properties}["retention.seconds"])
    return f"retention.seconds = {seconds:g} s ({human_seconds(seconds)})"


def collected(files: Iterable[str], head: TableState) -> list[str]:
    """Of ``files`` (referenced by some version), those garbage collection deleted: the head
    neither references them nor holds them as unreferenced (only DeleteFiles drops one)."""
    return [f for f in files if f not in head.refcount and f not in head.unreferenced]


def expired_by_gc(name: str, state: TableState, head: TableState, files: list[str]
                  ) -> VersionExpiredError:
    """The error for reading ``state`` (an old version) whose ``files`` GC deleted."""
    age = max(0.0, time.time() - state.last_update) if state.last_update else None
    when = f" (committed {human_seconds(age)} ago)" if age is not None else ""
    more = f" and {len(files) - 1} more" if len(files) > 1 else ""
    return VersionExpiredError(
        f"table {name}: version {state.version} has expired{when}: garbage collection deleted "
        f"its data files ({files[0]}{more}), as it does for versions older than the table's "
        f"retention when it ran (the table's {_retention(head)} now); tag a version to keep it "
        f"readable, or raise retention.seconds")


def expired_by_prune(name: str, version: int, head: TableState, earliest: int
                     ) -> VersionExpiredError:
    """The error for loading ``version`` whose log entries and snapshots were pruned."""
    return VersionExpiredError(
        f"table {name}: version {version} has expired: its log entries were pruned, as they are "
        f"for versions older than the table's {_retention(head)}; the oldest readable version "
        f"is {earliest}; tag a version to keep it readable, or raise retention.seconds")


def load_version(states: StateStore, name: str, version: int) -> TableState:
    """``states.load(version)``, with a pruned version reported as VersionExpiredError (an
    unknown version stays a QueryError)."""
    try:
        return states.load(version)
    except VersionExpiredError:
        raise
    except QueryError as e:
        head = states.head()
        if 1 <= version < head.version:
            earliest = states.earliest_version()
            if version < earliest:
                raise expired_by_prune(name, version, head, earliest) from e
        raise


def check_files(states: StateStore, name: str, state: TableState,
                files: Iterable[str] | None = None) -> None:
    """Raise VersionExpiredError when GC deleted any of ``files`` (default: every file of
    ``state``) that ``state``, an old version, reads. Nothing for the head itself.

    A file recorded deleted that is still there counts only once it is gone: GC spares the
    recorded files that a pin written while it ran holds (``sediment.maintenance.gc``), and
    that pin's reader reads them. One existence check per recorded file, stopping at the
    first missing one (a version past retention: usually the first)."""
    head = states.head()
    if state.version >= head.version:
        return
    gone = sorted(collected(state.refcount if files is None else files, head))
    if any(not states.objects.exists(f) for f in gone):
        raise expired_by_gc(name, state, head, gone)


def check_pinnable(states: StateStore, name: str, state: TableState) -> None:
    """Raise VersionExpiredError when GC recorded any file of ``state`` deleted, present or
    not: for a pin of ``state`` just written, which a running GC pass may have decided without.
    The handshake with GC (``sediment.maintenance.gc``): the pin is written, then the log
    read (here); GC records its deletions, then reads the pins. Either GC sees the pin and
    spares its files, or the read here sees the record and the pin is refused."""
    head = states.head()
    if state.version >= head.version:
        return
    gone = collected(state.refcount, head)
    if gone:
        raise expired_by_gc(name, state, head, sorted(gone))
