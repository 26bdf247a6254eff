"""Keyed ingest, upsert and delete: one write each, committed exactly once per key.

``Table.ingest(data, idempotency_key=K)`` (and ``upsert``, ``delete``) run here; the index,
the claim and the log check are :mod:`sediment.ingest.idempotency`'s. An ingest or upsert:

1. reads the head and the key's record; a committed record and an input that can be read
   twice (an Arrow table or batch, a DataFrame, a list of them) is answered after hashing
   the input alone: the original result for the same payload, IdempotencyKeyReusedError for
   another, nothing written either way;
2. otherwise stages the records (validated, sorted, written, not committed) while hashing
   them, claims the key, and commits the files with the key in one transaction unless the
   log already holds it (then the staged files are deleted and the original version
   answered);
3. records the version in the key's record.

A delete claims its key first (its payload, what it names, needs no staging), then commits
the same way. A write of no records (or a delete naming nothing) commits nothing and
records no key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sediment.core.deletions import selection_to_json
from sediment.core.head import schema_of
from sediment.core.regions import Range
from sediment.core.state import TableState
from sediment.core.transactions import AddFiles, DeleteRecords, KeyedWrite
from sediment.errors import DataError
from sediment.ingest.idempotency import (
    KeyIndex,
    KeyRecord,
    PayloadHash,
    check_key,
    commit_keyed,
    delete_payload,
)
from sediment.ingest.sources import IngestInput, expand_paths, iter_input, read_file
from sediment.ingest.spill import SpillDir, resolve_spill_dir
from sediment.ingest.standard import IngestResult, Progress, StagedFiles, stage_batches, verb_of
from sediment.settings import settings_of

if TYPE_CHECKING:
    from sediment.handle import TableHandle


def index_of(table: TableHandle, state: TableState) -> KeyIndex:
    """The key index of ``table`` with the window ``state``'s settings give."""
    return KeyIndex(table, settings_of(state, table.name).write_idempotency_window_seconds)


def _answer(record: KeyRecord, started: float) -> IngestResult:
    """The original result of a committed keyed write (its version; rows, files, bytes as
    recorded)."""
    r = record.result
    assert record.version is not None
    return IngestResult(int(r.get("rows", 0)), int(r.get("files", 0)), int(r.get("bytes", 0)),
                        record.version, time.perf_counter() - started, replayed=True)


def keyed_ingest(table: TableHandle, data: IngestInput, key: str, *,
                 progress: Progress | None = None, spill_dir: SpillDir = None,
                 upsert: bool = False) -> IngestResult:
    """Ingest (``upsert``: upsert) ``data`` under idempotency key ``key`` (see the module).
    Raises IdempotencyKeyReusedError for a key recorded with another payload; otherwise as
    ``ingest``."""
    return _keyed(table, lambda: (("input", b) for b in iter_input(data, table.name,
                                                                    verb=verb_of(upsert))), key,
                  progress=progress, spill_dir=spill_dir, upsert=upsert)


def keyed_ingest_files(table: TableHandle, paths: Sequence[str] | str, key: str, *,
                       progress: Progress | None = None, spill_dir: SpillDir = None,
                       upsert: bool = False) -> IngestResult:
    """:func:`keyed_ingest` of Parquet, CSV or JSON-lines files (as ``ingest_files`` reads
    them; the payload is their records, in file order)."""
    if isinstance(paths, str):
        paths = [paths]
    files = expand_paths(paths, table.objects)
    if not files:
        raise DataError(f"{verb_of(upsert)} into table {table.name}: no input files given")

    def batches() -> Iterator[tuple[str, pa.RecordBatch]]:
        schema = schema_of(table.states.cached_head(), table.name)
        for fs, path in files:
            for b in read_file(fs, path, schema):
                yield path, b

    return _keyed(table, batches, key, progress=progress, spill_dir=spill_dir, upsert=upsert)


def _keyed(table: TableHandle, batches: Callable[[], Iterator[tuple[str, pa.RecordBatch]]],
           key: str, *, progress: Progress | None, spill_dir: SpillDir, upsert: bool
           ) -> IngestResult:
    check_key(table.name, key)
    started = time.perf_counter()
    folder = resolve_spill_dir(spill_dir, table.name)
    kind = verb_of(upsert)
    state = table.states.head()
    index = index_of(table, state)
    record = index.get(key)
    hasher = PayloadHash(kind)
    if record is not None and record.version is not None:
        # a retry of a committed write: its records are hashed as given, nothing is staged
        # (it is answered with the first attempt's version, or refused as another payload)
        for _src, batch in batches():
            hasher.update(batch)
        record.check(table.name, hasher.hexdigest())
        return _answer(record, started)
    staged = stage_batches(table, state, batches(), progress, spill_dir=folder, verb=kind,
                           on_batch=hasher.update)
    if staged.rows == 0:  # nothing to commit, nothing to remember
        return IngestResult(0, 0, 0, state.version, time.perf_counter() - started)
    write = KeyedWrite(key, hasher.hexdigest(), staged.rows)
    return commit_staged_keyed(table, staged, [write], state.version, upsert=upsert,
                               started=started, index=index)[0]


def commit_staged_keyed(table: TableHandle, staged: StagedFiles, writes: Sequence[KeyedWrite],
                        since: int, *, upsert: bool, started: float,
                        index: KeyIndex, unkeyed: bool = False) -> list[IngestResult]:
    """Claim ``writes`` (``since``: a head version read before the records were staged) and
    commit ``staged`` with them as one transaction, exactly once: one IngestResult per
    write (the rows each brought; files and bytes of the whole commit). All or none: a key
    claimed for another payload raises IdempotencyKeyReusedError and a key already
    committed returns its original result only when every key is (a replay); a mix of
    committed and new keys raises :class:`PartlyCommitted` (the buffered writer drops the
    committed writes and commits the rest), as does any committed key when ``unkeyed``
    (the staged files also hold writes without a key, which must still be committed). The
    staged files are deleted whenever they are not committed."""
    staging = staged.staging
    assert staging is not None
    with staging:  # an error deletes the files (or keeps them when the outcome is unknown)
        records = index.claim_all(writes, since)
        for w, rec in zip(writes, records, strict=True):
            rec.check(table.name, w.payload)
        done = {r.key: r for r in records if r.version is not None}
        if done and len(done) == len(records) and not unkeyed:
            staging.delete()
            return [_answer(r, started) for r in records]
        if done:
            staging.delete()
            raise PartlyCommitted({k: r.version for k, r in done.items()
                                   if r.version is not None})
        txn = AddFiles(staged.references, checksums=staged.checksums, upsert=upsert,
                       keys=tuple(writes))
        outcome = commit_keyed(table, writes, min(r.since for r in records), txn, staging)
    if not outcome.committed:
        state = outcome.state
        staging.delete([w.filename for w in staged.written
                        if w.filename not in state.refcount
                        and w.filename not in state.unreferenced])
        if len(outcome.found) != len(writes) or unkeyed:
            raise PartlyCommitted(outcome.found)
        version = next(iter(outcome.found.values()))
        return [IngestResult(w.rows, 0, 0, version, time.perf_counter() - started,
                             replayed=True) for w in writes]
    seconds = time.perf_counter() - started
    results = [IngestResult(w.rows, len(staged.written), staged.bytes, outcome.version,
                            seconds) for w in writes]
    index.record_all(records, outcome.version,
                     [{"rows": r.rows, "files": r.files, "bytes": r.bytes} for r in results])
    table.status.record("upsert" if upsert else "ingest", f"v{outcome.version}", "committed",
                        rows=staged.rows, files=len(staged.written), bytes=staged.bytes,
                        seconds=seconds, keys=len(writes))
    return results


class PartlyCommitted(Exception):  # noqa: N818 - a signal inside the ingest room, not an error
    """Some keys of a multi-key commit were already committed (``found``: key -> version);
    nothing was committed by this attempt."""

    def __init__(self, found: dict[str, int]) -> None:
        super().__init__(f"keys already committed: {sorted(found)[:5]}")
        self.found = found


def keyed_delete(table: TableHandle, state: TableState, key: str,
                 ranges: tuple[Range, ...] | None, tree: Any) -> int:
    """Commit ``DeleteRecords(ranges, tree)`` under idempotency key ``key``, exactly once;
    returns its version (the original one for a retry). ``state``: the head the delete was
    checked against."""
    check_key(table.name, key)
    payload = delete_payload(selection_to_json(ranges, tree, compact=False))
    write = KeyedWrite(key, payload)
    index = index_of(table, state)
    record = index.claim(write, state.version)
    record.check(table.name, payload)
    if record.version is not None:
        return record.version
    outcome = commit_keyed(table, [write], record.since,
                           DeleteRecords(ranges, tree, keys=(write,)))
    version = outcome.version if outcome.committed else outcome.found[key]
    index.record_all([record], version, [{}])
    return version
