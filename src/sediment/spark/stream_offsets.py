"""The pure parts of the Spark stream source (sediment.spark.stream_source): its options, its
offsets and how much one micro-batch admits. Nothing here reads a store or needs Spark.

An offset is a position in a table's history, a JSON object Spark checkpoints::

    {"stream": "3f2a...", "version": 42, "snapshot": false}

``version`` 42 with ``snapshot`` false: every change up to and including version 42 has been
emitted; with ``snapshot`` true: nothing has, and the next micro-batch starts with the whole
content at version 42 as inserts (a stream without ``startingVersion``). ``stream`` is the
stream's identity, drawn when Spark asks for the initial offset: every later offset carries it
through the checkpoint, so a restarted query holds the same pin (its name) and a new
checkpoint draws a new one. Versions never change meaning (compaction and splits commit new
versions and change no record), so an offset read back from a checkpoint after any amount of
maintenance names the same place in the feed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sediment.errors import QueryError

STREAM_OPTIONS = ("startingVersion", "readChangeFeed", "ignoreDeletes", "maxRecordsPerTrigger",
                  "maxVersionsPerTrigger", "pin", "pinTtlSeconds")
"""The options a stream source takes besides the store's and ``table``."""
BATCH_ONLY = ("version", "tag", "request", "pushdown", "leaves")
"""Batch options a stream refuses (``startingVersion`` says where a stream starts)."""
PIN_TTL_SECONDS = 7 * 24 * 3600.0
"""The default ``pinTtlSeconds``: a stream down for up to a week restarts where it stopped."""
DATA_KINDS = frozenset({"add_files", "add_files_with_splits", "delete_records", "restore",
                        "clear"})
"""Transaction kinds that can change records: the kinds ``sediment.query.changes.
commit_reads`` reads something for. Every other kind (compaction, splits, GC, properties,
schema changes...) yields no change row: such versions count for no admission limit and
need no task."""
PARTITIONS = 8
"""A micro-batch's change versions are cut into at least this many Spark partitions (when
there are that many versions), so executors read them in parallel."""


@dataclass(frozen=True, slots=True)
class StreamOffset:
    """A stream's position (module docstring)."""

    stream: str
    version: int
    snapshot: bool = False

    def to_json(self) -> dict[str, Any]:
        # one key order always: Spark compares offsets by their JSON text
        return {"stream": self.stream, "version": self.version, "snapshot": self.snapshot}

    @classmethod
    def from_json(cls, doc: Any, table: str) -> StreamOffset:
        """The offset of Spark's JSON; QueryError naming the table for one this source never
        wrote (another source's checkpoint given to this query)."""
        ok = isinstance(doc, Mapping) and isinstance(doc.get("stream"), str) \
            and isinstance(doc.get("version"), int) and not isinstance(doc.get("version"), bool) \
            and doc["version"] >= 0 and isinstance(doc.get("snapshot", False), bool)
        if not ok:
            raise QueryError(f"the sediment stream source on table {table}: the checkpoint "
                             f"holds offset {doc!r}, which is not a sediment stream offset "
                             f"(is the checkpoint another query's?)")
        assert isinstance(doc, Mapping)
        return cls(doc["stream"], int(doc["version"]), bool(doc.get("snapshot", False)))


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """A stream's options, checked. ``starting``: None (the content first), ``"latest"``, a
    version number or a tag name (a string not all digits)."""

    starting: int | str | None
    change_feed: bool
    ignore_deletes: bool
    max_records: int | None
    max_versions: int | None
    pin: bool
    pin_ttl_seconds: float


def given(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` keyed by lower-case name: Spark hands a data source its options in a
    case-insensitive map, and ``dict()`` of it lower-cases every key."""
    return {str(k).lower(): v for k, v in options.items()}


def _flag(options: Mapping[str, str], name: str, table: str, default: bool) -> bool:
    if name.lower() not in options:
        return default
    value = options[name.lower()]
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise QueryError(f"the sediment stream source on table {table}: option "
                         f"{name}={value!r} is not true or false")
    return text == "true"


def _positive(options: Mapping[str, str], name: str, table: str) -> int | None:
    if name.lower() not in options:
        return None
    value = options[name.lower()]
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise QueryError(f"the sediment stream source on table {table}: option "
                         f"{name}={value!r} is not a positive whole number")
    return int(text)


def stream_options(options: Mapping[str, str]) -> StreamOptions:
    """The stream options of ``options`` (Spark's, keys as given), checked: QueryError naming
    the table and the option for a value that is none of what it takes, or for a batch
    option (``version``, ``tag``...) given to a stream. Names are matched ignoring case,
    as Spark matches them."""
    options = given(options)
    table = options.get("table", "?")
    for name in BATCH_ONLY:
        if name in options:
            raise QueryError(f"the sediment stream source on table {table}: option {name} is "
                             f"for batch reads; a stream starts where option startingVersion "
                             f"says (a version, a tag or latest)")
    starting: int | str | None = None
    if "startingversion" in options:
        text = str(options["startingversion"]).strip()
        if text.isdigit():
            starting = int(text)
        elif text.lower() == "latest":
            starting = "latest"
        elif not text or text.startswith("-"):
            raise QueryError(f"the sediment stream source on table {table}: option "
                             f"startingVersion={options['startingversion']!r} is not a version "
                             f"number, a tag name or latest")
        else:
            starting = text  # a tag: resolved (TagNotFoundError) when the stream starts
    ttl = PIN_TTL_SECONDS
    if "pinttlseconds" in options:
        try:
            ttl = float(options["pinttlseconds"])
        except ValueError:
            ttl = math.nan
        if not (ttl > 0 and math.isfinite(ttl)):
            raise QueryError(f"the sediment stream source on table {table}: option "
                             f"pinTtlSeconds={options['pinttlseconds']!r} is not a positive "
                             f"number of seconds")
    return StreamOptions(
        starting=starting,
        change_feed=_flag(options, "readChangeFeed", table, False),
        ignore_deletes=_flag(options, "ignoreDeletes", table, False),
        max_records=_positive(options, "maxRecordsPerTrigger", table),
        max_versions=_positive(options, "maxVersionsPerTrigger", table),
        pin=_flag(options, "pin", table, True),
        pin_ttl_seconds=ttl)


@dataclass(frozen=True, slots=True)
class VersionWeight:
    """What one version weighs for admission: ``records`` its added files hold (0 for a
    delete, a restore or a clear: unknown before reading), ``data`` whether its kind can
    change records at all (:data:`DATA_KINDS`)."""

    version: int
    records: int
    data: bool


def admit(start: StreamOffset, weights: Iterable[VersionWeight], snapshot_records: int,
          max_records: int | None, max_versions: int | None) -> StreamOffset:
    """The end of the next micro-batch from ``start``: the pending snapshot (``start.
    snapshot``, ``snapshot_records`` records, counted as one version), then the versions of
    ``weights`` (the versions after ``start.version``, in order, up to the newest the batch
    may reach) while the batch stays within ``max_records`` and ``max_versions`` (None: no
    limit). Limits are soft: the first unit is admitted whatever it weighs, and only whole
    versions are. Versions that change no record count for neither limit; they join the
    batch up to the first data version that does not fit."""
    taken, records, end = 0, 0, start.version
    if start.snapshot:
        taken, records = 1, snapshot_records
    for w in weights:
        if w.data:
            over = (max_versions is not None and taken + 1 > max_versions) or \
                (max_records is not None and records + w.records > max_records)
            if taken and over:
                break
            taken, records = taken + 1, records + w.records
        end = w.version
    return StreamOffset(start.stream, end, False)


def group_versions(weights: Sequence[VersionWeight], target_records: int,
                   parts: int = PARTITIONS) -> list[tuple[int, int]]:
    """The change ranges ``(a, b]`` the Spark partitions of a micro-batch read: only
    versions that can change records are covered (others have nothing to read); each range
    holds whole versions, up to ``target_records`` records (a bigger version alone), and the
    data versions are cut into at least ``parts`` ranges when there are that many, so a
    batch of small versions still reads in parallel. In version order."""
    data = [w for w in weights if w.data]
    if not data:
        return []
    total = sum(max(w.records, 1) for w in data)
    cap = max(1, min(target_records, total // min(parts, len(data))))
    out: list[tuple[int, int]] = []
    first, last, held = data[0].version, data[0].version, 0
    for w in data:
        size = max(w.records, 1)
        if held and held + size > cap:
            out.append((first - 1, last))
            first, held = w.version, 0
        last, held = w.version, held + size
    out.append((first - 1, last))
    return out
