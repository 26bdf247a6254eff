"""Where a compaction job reads its inputs from: in place, a local copy, or ranged S3 reads.

A job on local disk reads its inputs where they are (DataFusion's sort-preserving merge of the
files). On S3 it has two ways, chosen by ``compaction.local_disk_bytes``, the local disk one job
may use:

- inputs whose total size fits are copied whole to a temporary folder (one GET per input, the
  fewest requests), then merged from local disk as above;
- larger jobs read their inputs in place (sediment.compaction.ranged: large coalesced ranged
  GETs, one block ahead, in bounded memory) and merge them with Sediment's own vectorised k-way
  merge (sediment.files.merge), so nothing of the inputs lands on local disk whatever the leaf's
  size.

Both merges order records by (keys, sequence), stable in input order, so both ways write the
same output.

DataFusion verifies no page CRC, so a local or copied input is checked before the merge: its
whole-file CRC-32 against the file's sums when they are known (a copy is checked as it is
fetched, and fetched again once on a mismatch), else every page decoded once by pyarrow with
page verification (:func:`sediment.files.verified.decode_all`). Inputs read in place verify
their pages as they are decoded (sediment.compaction.ranged). An input that fails is
CorruptDataError naming the table and the file: the job fails and commits nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.compaction.ranged import read_footer
from sediment.core.model import FileReference
from sediment.errors import CorruptMetadataError, JobError, ObjectNotFoundError
from sediment.files.keys import first_field_bounds
from sediment.files.sequence import SEQ
from sediment.files.verified import (
    READS,
    Sums,
    damaged,
    decode_all,
    file_crc,
    reading,
    whole_problem,
)
from sediment.storage import checksums
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import crc32


@dataclass(frozen=True, slots=True)
class InputFile:
    """One merge input: a local file (its ``file://`` URL, for DataFusion) or an object read in
    place (its key, footer and size); the sequence of its records without their own, and what
    its footer says of the hidden sequence column."""

    url: str
    sequence: int
    has_sequence: bool = False
    """The file holds the sequence column (and the reference says its values are its own)."""
    complete: bool = False
    """... and no row of it is null there (so the file is sorted by (keys, sequence))."""
    key: str = ""
    """The object's key in the table's store, for an input read in place (``url`` empty)."""
    metadata: pq.FileMetaData | None = None
    size: int = 0
    bounds: tuple[Any, Any] | None = None
    """[min, max] of the first row-key field by the footer's statistics (None: unknown)."""


@dataclass(frozen=True, slots=True)
class JobInputs:
    """A job's inputs, and whether they are read in place from a remote store."""

    files: list[InputFile]
    in_place: bool = False


def local_url(path: str) -> str:
    """The ``file://`` URL of a local file (percent-encoded, so DataFusion takes '?', '*' and
    '[' literally, not as a glob), refusing a path that is not a file: a compaction must never
    read a missing input as empty."""
    p = Path(path).resolve()
    if not p.is_file():
        raise JobError(f"compaction input {path} is not a file")
    return p.as_uri()


def _sequence_facts(md: pq.FileMetaData) -> tuple[bool, bool]:
    """(has the sequence column, every value of it non-null) from a Parquet footer."""
    idx = next((i for i in range(md.num_columns) if md.schema.column(i).path == SEQ), None)
    if idx is None:
        return False, False
    for g in range(md.num_row_groups):
        st = md.row_group(g).column(idx).statistics
        if st is None or st.null_count is None or st.null_count:
            return True, False
    return True, True


def _bounds(md: pq.FileMetaData, first_key: str) -> tuple[Any, Any] | None:
    """The first key field's [min, max] over a sorted file (None: no statistics to tell)."""
    if not first_key or not md.num_row_groups or first_key not in md.schema.names:
        return None
    mins, maxs = first_field_bounds(md, first_key)
    return None if mins[0] is None or maxs[-1] is None else (mins[0], maxs[-1])


def _input(url: str, ref: FileReference, md: pq.FileMetaData, first_key: str) -> InputFile:
    present, complete = _sequence_facts(md) if ref.sequenced else (False, False)
    return InputFile(url, ref.sequence, present, complete, bounds=_bounds(md, first_key))


def local_input(path: str, *, sequence: int = 0, sequenced: bool = True) -> InputFile:
    """An input on local disk (a merge round's output, a test's file): its footer read here."""
    md = pq.read_metadata(path)
    present, complete = _sequence_facts(md) if sequenced else (False, False)
    return InputFile(local_url(path), sequence, present, complete)


def _footers(objects: ObjectStore, refs: Sequence[FileReference], open_input: Callable[[int], Any],
             job_id: str) -> list[pq.FileMetaData]:
    """Every input's footer (``open_input(i)``: a path or an open file of input ``i``), read in
    parallel; an input that is not Parquet fails here."""
    def footer(i: int) -> pq.FileMetaData:
        try:
            return pq.read_metadata(open_input(i))
        except (pa.ArrowInvalid, OSError) as e:
            raise CorruptMetadataError(f"compaction job {job_id}: input {refs[i].filename} in "
                                       f"{objects.uri} is not valid Parquet: {e}") from e

    with ThreadPoolExecutor(min(8, max(1, len(refs)))) as pool:
        return list(pool.map(footer, range(len(refs))))


def resolve_inputs(objects: ObjectStore, refs: Sequence[FileReference], tmp: str, *,
                   local_disk_bytes: int, job_id: str, first_key: str = "", table: str = "",
                   sums: Mapping[str, Sums] | None = None) -> JobInputs:
    """The inputs of a job as DataFusion will read them (see the module's docstring), with
    the bounds of the row-key field ``first_key`` where given, each verified (against its
    ``sums`` by filename where known); ``table`` names the table in errors."""
    sums = sums or {}
    direct = [objects.local_path(r.filename) for r in refs]
    if all(p is not None for p in direct):
        paths = [p for p in direct if p is not None]
        mds = _footers(objects, refs, paths.__getitem__, job_id)
        _parallel(lambda i: verify_local(paths[i], refs[i].filename, sums.get(refs[i].filename),
                                         table, objects.uri), len(refs))
        return JobInputs([_input(local_url(p), r, md, first_key)
                          for p, r, md in zip(paths, refs, mds, strict=True)])
    sizes = [objects.head(r.filename) for r in refs]
    if sum(0 if s is None else s.size for s in sizes) > local_disk_bytes:
        for r, info in zip(refs, sizes, strict=True):
            if info is None:
                raise ObjectNotFoundError(f"compaction job {job_id}: input {r.filename} is "
                                          f"missing from {objects.uri}")
        mds = _in_place_footers(objects, refs, [s.size for s in sizes if s is not None],
                                job_id, table, sums)
        files = [in_place_input(r.filename, r.sequence, r.sequenced, md,
                                0 if s is None else s.size, first_key)
                 for r, md, s in zip(refs, mds, sizes, strict=True)]
        # rows without a sequence among rows with one (files not written by Sediment) need a
        # sort, which only the copying path's DataFusion plan does
        if all(f.complete or not f.has_sequence for f in files):
            return JobInputs(files, in_place=True)
    return _copied(objects, refs, tmp, job_id, first_key, table, sums)


def _parallel(fn: Callable[[int], None], n: int) -> None:
    """``fn(i)`` for every input ``i``, eight at a time; the first error raised."""
    with ThreadPoolExecutor(min(8, max(1, n))) as pool:
        list(pool.map(fn, range(n)))


def verify_local(path: str, filename: str, sums: Sums | None, table: str, where: str) -> None:
    """Check a local input before DataFusion (which verifies nothing) reads it: its whole
    CRC-32 against ``sums``, or without sums every page decoded with verification; read
    again once, then CorruptDataError naming ``filename`` (the input's name in the table)."""
    if not checksums.VERIFY_READS:  # the checksum benchmark's unchecked runs
        return
    if sums is not None:
        problem = None
        for _ in range(READS):
            problem = whole_problem(*file_crc(path), sums)
            if problem is None:
                return
        raise damaged(table, filename, where, OSError(problem))
    reading(table, filename, where, lambda _: decode_all(path))


def _in_place_footers(objects: ObjectStore, refs: Sequence[FileReference], sizes: list[int],
                      job_id: str, table: str = "",
                      sums: Mapping[str, Sums] | None = None) -> list[pq.FileMetaData]:
    """Every input's footer by ranged reads (read again on a failure), in parallel, checked
    against the inputs' sums where known."""
    def footer(i: int) -> pq.FileMetaData:
        try:
            return read_footer(objects, refs[i].filename, sizes[i],
                               (sums or {}).get(refs[i].filename), table)
        except CorruptMetadataError as e:
            raise CorruptMetadataError(f"compaction job {job_id}: input {e}") from e

    with ThreadPoolExecutor(min(8, max(1, len(refs)))) as pool:
        return list(pool.map(footer, range(len(refs))))


def in_place_input(key: str, sequence: int, sequenced: bool, md: pq.FileMetaData,
                   size: int, first_key: str = "") -> InputFile:
    """An input read in place from the store (``key``), its footer ``md`` read already."""
    present, complete = _sequence_facts(md) if sequenced else (False, False)
    return InputFile("", sequence, present, complete, key=key, metadata=md, size=size,
                     bounds=_bounds(md, first_key))


def _copied(objects: ObjectStore, refs: Sequence[FileReference], tmp: str,
            job_id: str, first_key: str, table: str = "",
            sums: Mapping[str, Sums] | None = None) -> JobInputs:
    """Whole copies of the inputs in ``tmp`` (one GET each, eight at a time), each verified:
    against its sums as fetched, else by decoding it; a copy that fails is fetched again
    once (the store, or the way to it, may have handed over bad bytes once)."""
    def fetch(item: tuple[int, FileReference]) -> str:
        i, ref = item
        path = os.path.join(tmp, f"in-{i:04d}.parquet")
        want = (sums or {}).get(ref.filename)

        def copy(attempt: int) -> None:
            data = objects.get(ref.filename)
            if want is not None and checksums.VERIFY_READS:
                problem = whole_problem(len(data), crc32(data), want)
                if problem is not None:
                    raise OSError(problem)  # read again, then CorruptDataError
            with open(path, "wb") as f:
                f.write(data)
            if want is None:
                decode_all(path)

        reading(table, ref.filename, objects.uri, copy)
        return path

    with ThreadPoolExecutor(min(8, max(1, len(refs)))) as pool:
        paths = list(pool.map(fetch, enumerate(refs)))
    mds = _footers(objects, refs, paths.__getitem__, job_id)
    return JobInputs([_input(local_url(p), r, md, first_key)
                      for p, r, md in zip(paths, refs, mds, strict=True)])
