"""Content-addressed snapshots of a table state, graveler style.

A snapshot at version ``v`` is a small pointer ``snapshots/<v>.json`` naming a *metarange*: a
Parquet object listing *ranges* (first/last partition id, row count, digest). Each range is a
Parquet object of file references, sorted by (partition id, filename) and named by the SHA-256 of
its bytes under ``objects/``. Range boundaries fall between partitions, chosen by a hash of the
partition id, so a commit that touches one partition changes one range: every other range keeps
its digest and its object is not written again. ``diff`` skips equal digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.deletions import Deletion
from sediment.core.model import FileSums, Partition
from sediment.core.references import REFERENCE_COLUMNS, SUM_COLUMNS, CowDict
from sediment.core.state import TableState, partition_runs
from sediment.errors import CorruptMetadataError, ObjectNotFoundError
from sediment.schema import Schema
from sediment.state.documents import json_value, open_sealed, sealed
from sediment.state.log import BASE_FORMAT, check_format, version_of_key
from sediment.storage import checksums
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import ChecksumMismatch, get_verified

SNAPSHOT_PREFIX = "snapshots/"
OBJECT_PREFIX = "objects/"
RANGE_MIN_ROWS = 20_000
"""A range closes after a partition boundary whose hash says so, once it has this many rows."""
RANGE_MAX_ROWS = 100_000
"""A range never holds more rows than this (a huge partition is cut into several)."""
_BOUNDARY_MODULUS = 4

REFERENCE_SCHEMA = pa.schema([
    ("partition_id", pa.string()), ("filename", pa.string()), ("records", pa.int64()),
    ("approximate", pa.bool_()), ("job_id", pa.string()), ("sequence", pa.int64()),
    ("sequenced", pa.bool_()),
    # the referenced file's checksums (FileSums; null: none recorded): one per reference
    # row, so a state loads them with its ranges and decodes them only when asked
    ("size", pa.int64()), ("footer_crc", pa.int64()), ("file_crc", pa.int64()),
    ("sample_crc", pa.int64()),
])
_STATE_COLUMNS = list(REFERENCE_COLUMNS)
METARANGE_SCHEMA = pa.schema([
    ("first_partition", pa.string()), ("last_partition", pa.string()),
    ("rows", pa.int64()), ("digest", pa.string()),
])


DIGEST_MEMO_SECONDS = 60.0
"""How long a writer trusts that a snapshot object it wrote or read still exists.

It must stay well below ``state.store.PRUNE_GRACE_SECONDS`` (300 s): pruning deletes an object
only when no snapshot at or above its base names it, and that base is older than the prune
window, so a digest learnt less than this long ago cannot have been pruned yet (an older one
is written again). Prune also verifies the base it keeps, in case this ever fails."""


class DigestMemo:
    """Digests of snapshot objects known to exist, each forgotten ``ttl`` seconds after it was
    last recorded: a drop-in for the ``set[str]`` that ``write_snapshot`` and ``read_snapshot``
    take (``in``, ``add``, ``update``, ``len``).

    A plain set remembered digests forever: after ``prune`` had deleted such an object, a
    long-lived writer still skipped writing it and committed a snapshot naming a missing object.
    """

    def __init__(self, ttl: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = DIGEST_MEMO_SECONDS if ttl is None else float(ttl)
        self._clock = clock
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, digest: str, at: float | None = None) -> None:
        """Record ``digest`` as existing at ``at`` (this memo's clock; default: now)."""
        self.update((digest,), at)

    def update(self, digests: Iterable[str], at: float | None = None) -> None:
        t = self._clock() if at is None else at
        with self._lock:
            for d in digests:
                if self._seen.get(d, float("-inf")) < t:
                    self._seen[d] = t
            if len(self._seen) > 1024 and len(self._seen) % 256 == 0:
                self._expire_locked()

    def __contains__(self, digest: object) -> bool:
        t = self._seen.get(digest) if isinstance(digest, str) else None
        return t is not None and self._clock() - t < self.ttl

    def __len__(self) -> int:
        with self._lock:
            self._expire_locked()
            return len(self._seen)

    def discard(self, digest: str) -> None:
        with self._lock:
            self._seen.pop(digest, None)

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()

    def now(self) -> float:
        return self._clock()

    def _expire_locked(self) -> None:
        limit = self._clock() - self.ttl
        for d in [d for d, t in self._seen.items() if t <= limit]:
            del self._seen[d]


KnownDigests = set[str] | DigestMemo
"""What ``write_snapshot`` and ``read_snapshot`` take as their memo of stored objects."""


def _noted(known: KnownDigests, digests: Iterable[str], at: float | None) -> None:
    """Record ``digests`` in ``known`` as seen at ``at`` (a DigestMemo keeps the time)."""
    if isinstance(known, DigestMemo):
        known.update(digests, at)
    else:
        known.update(digests)


def _memo_now(known: KnownDigests | None) -> float | None:
    return known.now() if isinstance(known, DigestMemo) else None


def snapshot_key(version: int) -> str:
    return f"{SNAPSHOT_PREFIX}{version:020d}.json"


def object_key(digest: str) -> str:
    return f"{OBJECT_PREFIX}{digest}.parquet"


@dataclass(frozen=True, slots=True)
class RangeInfo:
    """One entry of a metarange."""

    first_partition: str
    last_partition: str
    rows: int
    digest: str


def _parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=False)
    return buf.getvalue()


def _state_references_table(state: TableState) -> pa.Table:
    """All references as one Arrow table sorted by (partition id, filename)."""
    parts: list[pa.Table] = []
    for pid in state.partitions_with_references():
        lazy = state._lazy.get(pid)
        if lazy is not None:
            # an untouched partition: its rows (and their sums) as the snapshot had them
            parts.append(_with_sum_columns(lazy.table).select(REFERENCE_SCHEMA.names)
                         .cast(REFERENCE_SCHEMA))
            continue
        refs = state.references(pid)
        names = sorted(refs)
        rows = [refs[n] for n in names]
        sums = state.partition_sums(pid, names)
        none = (None, None, None, None)
        columns = (list(zip(*(none if s is None else s for s in sums), strict=True))
                   if sums else [(), (), (), ()])
        parts.append(pa.table({
            "partition_id": [pid] * len(rows), "filename": names,
            "records": [r.records for r in rows], "approximate": [r.approximate for r in rows],
            "job_id": [r.job_id for r in rows], "sequence": [r.sequence for r in rows],
            "sequenced": [r.sequenced for r in rows],
            **dict(zip(SUM_COLUMNS, (list(c) for c in columns), strict=True)),
        }, schema=REFERENCE_SCHEMA))
    if not parts:
        return REFERENCE_SCHEMA.empty_table()
    return pa.concat_tables(parts).combine_chunks()


def _cut_ranges(table: pa.Table) -> list[tuple[int, int]]:
    """[start, end) row spans of ranges, content-defined at partition boundaries."""
    spans: list[tuple[int, int]] = []
    start = 0
    for pid, i, j in partition_runs(table):
        if j - start > RANGE_MAX_ROWS:
            if i > start:
                spans.append((start, i))
                start = i
            while j - start > RANGE_MAX_ROWS:
                spans.append((start, start + RANGE_MAX_ROWS))
                start += RANGE_MAX_ROWS
        if j - start >= RANGE_MIN_ROWS and zlib.crc32(pid.encode()) % _BOUNDARY_MODULUS == 0:
            spans.append((start, j))
            start = j
    if start < table.num_rows:
        spans.append((start, table.num_rows))
    return spans


def _json_object(objects: ObjectStore, doc: Any, known: KnownDigests) -> str:
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    key = f"{OBJECT_PREFIX}{digest}.json"
    if digest not in known:
        started = _memo_now(known)
        objects.put(key, data)
        _noted(known, (digest,), started)
    return digest


def write_snapshot(objects: ObjectStore, state: TableState, known: KnownDigests
                   ) -> dict[str, Any]:
    """Write the snapshot of ``state``; ``known`` holds digests already stored (updated).

    Returns the pointer document. Only ranges whose digest is not known are written; pass a
    :class:`DigestMemo` (not a plain set) from anything that lives longer than a few seconds,
    so that a digest whose object prune has deleted since is written again.
    """
    refs = _state_references_table(state)
    ranges: list[RangeInfo] = []
    to_write: list[tuple[str, bytes]] = []
    for start, end in _cut_ranges(refs):
        part = refs.slice(start, end - start)
        data = _parquet_bytes(part)
        digest = hashlib.sha256(data).hexdigest()
        pids = part.column("partition_id")
        ranges.append(RangeInfo(pids[0].as_py(), pids[-1].as_py(), end - start, digest))
        if digest not in known:
            to_write.append((digest, data))
    if to_write:
        started = _memo_now(known)
        with ThreadPoolExecutor(min(8, len(to_write))) as pool:
            list(pool.map(lambda dd: objects.put(object_key(dd[0]), dd[1]), to_write))
        _noted(known, (d for d, _ in to_write), started)
    meta = pa.table({
        "first_partition": [r.first_partition for r in ranges],
        "last_partition": [r.last_partition for r in ranges],
        "rows": [r.rows for r in ranges], "digest": [r.digest for r in ranges],
    }, schema=METARANGE_SCHEMA)
    meta_bytes = _parquet_bytes(meta)
    meta_digest = hashlib.sha256(meta_bytes).hexdigest()
    if meta_digest not in known:
        started = _memo_now(known)
        objects.put(object_key(meta_digest), meta_bytes)
        _noted(known, (meta_digest,), started)
    assert state.schema is not None
    pointer = {
        # a snapshot's deletions are an object of their own, read only through this pointer
        "format": max([BASE_FORMAT, *(d.format for d in state.deletions)]),
        "table_id": state.table_id, "version": state.version,
        "schema": state.schema.to_json(), "properties": state.properties,
        "online": state.online, "last_update": state.last_update,
        "metarange": meta_digest,
        "partitions": _json_object(objects, [p.to_json() for p in
                                             sorted(state.partitions.values(),
                                                    key=lambda p: p.id)], known),
        "unreferenced": _json_object(objects, sorted(state.unreferenced.items()), known),
        "jobs": {j: list(v) for j, v in sorted(state.jobs.items())},
        "expired_leases": dict(sorted(state.expired_leases.items())),
    }
    unreferenced_sums = [[f, s.to_json()] for f in sorted(state.unreferenced)
                         if (s := state.file_sums(f)) is not None]
    if unreferenced_sums:  # omitted when none: older readers ignore the key anyway
        pointer["unreferenced_sums"] = _json_object(objects, unreferenced_sums, known)
    if len(state.schemas) > 1:  # a table whose schema changed (else: its one schema, from v1)
        pointer["schemas"] = [[v, sch.to_json()] for v, sch in state.schemas]
    if state.streams:  # stream id -> [last batch, time]: one small entry per stream
        pointer["streams"] = {k: list(v) for k, v in sorted(state.streams.items())}
    if state.deletions:  # likewise (a delete by many keys makes a large list: an object)
        pointer["deletions"] = _json_object(objects, [d.to_json() for d in state.deletions],
                                            known)
    objects.put(snapshot_key(state.version), sealed(pointer))
    return pointer


def read_metarange(objects: ObjectStore, digest: str, where: str) -> list[RangeInfo]:
    """The ranges of a metarange object; CorruptMetadataError naming ``where`` and the key
    when it is missing, not Parquet, or lacks a column."""
    key = object_key(str(digest))
    t = _read_parquet(objects, key, where)
    try:
        return [RangeInfo(*row) for row in zip(*(t.column(n).to_pylist()
                                                for n in METARANGE_SCHEMA.names), strict=True)]
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptMetadataError(f"{where}: object {key} is not a metarange: {e!r}") from e


def _read_parquet(objects: ObjectStore, key: str, where: str) -> pa.Table:
    try:
        return pq.read_table(io.BytesIO(_get_object(objects, key, where)))
    except (pa.ArrowException, OSError) as e:
        raise CorruptMetadataError(f"{where}: object {key} is corrupt: {e}") from e


def _get_object(objects: ObjectStore, key: str, where: str) -> bytes:
    """The bytes of a content-addressed object (``objects/<sha256>.<ext>``), checked against
    the digest that names it and read again while they differ (a byte changed on the way),
    then CorruptMetadataError naming ``where`` and the key. Objects are named by their digest
    since they were first written, so every one is checked, the oldest too."""
    digest = key[len(OBJECT_PREFIX):].split(".", 1)[0]

    def check(data: bytes) -> bytes:
        if not checksums.VERIFY_READS:  # the checksum benchmark's unchecked runs
            return data
        got = hashlib.sha256(data).hexdigest()
        if got != digest:
            raise ChecksumMismatch(f"SHA-256 {got} of object {key}",
                                   f"its SHA-256 is {got}, not the digest that names it")
        return data

    try:
        return get_verified(objects, key, check, error_cls=CorruptMetadataError,
                            where=f"{where}: object {key}")
    except ObjectNotFoundError:
        raise CorruptMetadataError(f"{where}: object {key} is missing") from None


def _read_json(objects: ObjectStore, key: str, where: str) -> Any:
    return json_value(_get_object(objects, key, where), f"{where}: {key}")


def read_pointer(objects: ObjectStore, version: int, table_id: str, *,
                 name: str | None = None) -> dict[str, Any]:
    """The pointer document of the snapshot at ``version`` (``name``: the table's name for
    errors, default its id), its checksum checked (read again while it fails)."""
    where = f"snapshot {version} of table {name or table_id}"
    key = snapshot_key(version)
    try:
        doc = get_verified(objects, key, lambda data: open_sealed(data, f"{where}: {key}"),
                           error_cls=CorruptMetadataError, where=f"{where}: {key}")
    except ObjectNotFoundError:
        raise CorruptMetadataError(f"{where}: {key} is missing") from None
    check_format(doc, where)
    return doc


def read_snapshot(objects: ObjectStore, version: int, table_id: str,
                  known: KnownDigests | None = None, *, name: str | None = None) -> TableState:
    """Load the state stored by the snapshot at ``version`` (``known``: records the digests
    of the objects read, as of when the read started; ``name``: the table's name for errors,
    default its id)."""
    where = f"snapshot {version} of table {name or table_id}"
    started = _memo_now(known)
    doc = read_pointer(objects, version, table_id, name=name)
    try:
        ranges = read_metarange(objects, doc["metarange"], where)
        with ThreadPoolExecutor(8) as pool:
            tables = list(pool.map(
                lambda r: _read_parquet(objects, object_key(r.digest), where), ranges))
        state = TableState(table_id, name)
        state.version = int(doc["version"])
        state.schema = Schema.from_json(doc["schema"])
        state.schemas = tuple((int(v), Schema.from_json(sch)) for v, sch in doc["schemas"]) \
            if "schemas" in doc else ((1, state.schema),)
        state.properties = dict(doc["properties"])
        state.online = bool(doc["online"])
        state.last_update = float(doc.get("last_update", 0.0))
        parts = _read_json(objects, f"{OBJECT_PREFIX}{doc['partitions']}.json", where)
        state.partitions = {p["id"]: Partition.from_json(p) for p in parts}
        unref = _read_json(objects, f"{OBJECT_PREFIX}{doc['unreferenced']}.json", where)
        state.unreferenced = CowDict((f, float(t)) for f, t in unref)
        if "unreferenced_sums" in doc:
            sums = _read_json(objects, f"{OBJECT_PREFIX}{doc['unreferenced_sums']}.json", where)
            state.sums = CowDict((str(f), FileSums.from_json(v)) for f, v in sums)
        if "deletions" in doc:
            state.deletions = tuple(Deletion.from_json(d) for d in _read_json(
                objects, f"{OBJECT_PREFIX}{doc['deletions']}.json", where))
        state.jobs = {j: (str(p), float(t)) for j, (p, t) in doc.get("jobs", {}).items()}
        state.expired_leases = {str(k): float(t)
                                for k, t in doc.get("expired_leases", {}).items()}
        state.streams = {str(k): (int(b), float(t))
                         for k, (b, t) in doc.get("streams", {}).items()}
        if tables:
            refs = pa.concat_tables([_with_sequence_column(t) for t in tables],
                                    promote_options="default")
            refs = refs.select([*_STATE_COLUMNS, *(c for c in SUM_COLUMNS
                                                   if c in refs.schema.names)])
            state.load_references(refs)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError,
            pa.ArrowException) as e:
        raise CorruptMetadataError(f"{where} ({snapshot_key(version)}) is malformed: "
                                   f"{e!r}") from e
    if known is not None:
        _noted(known, [*(r.digest for r in ranges), doc["metarange"], doc["partitions"],
                       doc["unreferenced"],
                       *(doc[k] for k in ("unreferenced_sums", "deletions") if k in doc)],
                started)
    return state


def _with_sum_columns(table: pa.Table) -> pa.Table:
    """A snapshot's references from before checksums: null sums (the files read unchecked)."""
    for c in SUM_COLUMNS:
        if c not in table.schema.names:
            table = table.append_column(c, pa.nulls(table.num_rows, pa.int64()))
    return table


def _with_sequence_column(table: pa.Table) -> pa.Table:
    """A range written before file sequences existed: its references have sequence 0."""
    if "sequence" in table.schema.names:
        return table
    n = table.num_rows
    return table.append_column("sequence", pa.array(np.zeros(n, np.int64))) \
        .append_column("sequenced", pa.array(np.zeros(n, bool)))


def snapshot_versions(objects: ObjectStore) -> list[int]:
    """Versions that have a snapshot, ascending."""
    out = []
    for o in objects.list(SNAPSHOT_PREFIX):
        v = version_of_key(o.key, SNAPSHOT_PREFIX)
        if v is not None:
            out.append(v)
    return out
