"""Bulk load: verify a dump, then add its files to a table in one transaction.

Verification comes first and is complete: every manifest named by the job manifest exists and
matches its checksum, every data and sample file exists inside the dump root and matches its
checksum, and the task ranges tile the dumped range. Only then are the files copied (byte for
byte, never rewritten) into the table's data folder and committed:

- a new table is created with the dump's partition boundaries and the source table's
  properties (checked first: the job manifest carries them), each file referenced from its own
  leaf, and the catalog entry is written last, so the table appears whole or not at all;
- an existing table (same schema) gets each file referenced from every leaf its range covers,
  with counts estimated from the file's sample (reference splitting).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.model import FileReference, FileSums
from sediment.core.regions import Range
from sediment.core.transactions import AddFiles, KeyedWrite
from sediment.core.transactions.table import SCHEME_PROPERTIES
from sediment.dump.checked import CheckedFile, check_dump_file, check_keys, check_parquet, expected
from sediment.dump.manifest import range_from_json, read_manifest, safe_path, sha256, tiles
from sediment.errors import (
    CorruptDataError,
    CorruptMetadataError,
    ObjectNotFoundError,
    PropertyError,
    SchemaError,
)
from sediment.files.staging import Staging
from sediment.files.verified import reading
from sediment.files.writer import sample_name, write_key_filters
from sediment.ingest.idempotency import KeyIndex, KeyRecord, commit_keyed
from sediment.ingest.keyed import index_of
from sediment.partitioning import PARTITIONINGS
from sediment.properties import validate_properties
from sediment.schema import Schema, schema_difference
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import ChecksumMismatch, crc32, get_verified
from sediment.storage.transfer import Digest, Expected, transfer

if TYPE_CHECKING:
    from sediment.handle import TableHandle


@dataclass(frozen=True, slots=True)
class DumpedFile:
    data: str
    sample: str
    rows: int
    range: Range
    bytes: int = 0
    """Bytes of the data and sample files (as their manifest states and verification checked)."""
    checked: tuple[Expected, Expected] | None = None
    """The data and the sample file as their task manifest lists them (size, CRC-32,
    SHA-256): a load checks the bytes it copies against them (they are read again, or
    copied by the storage service, after verification)."""
    sums: CheckedFile | None = None
    """The data file's size, CRC-32 and footer CRC-32 as verification read them: the sums
    its copy is committed with."""
    manifest: str = ""
    """The task manifest listing the files (for errors)."""


COPIES = 4
"""Files copied at once: a streamed copy holds a part being read and the writer's part
buffers (``storage.streams``), so a few at a time keep a load far below 256 MiB."""
Progress = Callable[[int, int], None]
"""``progress(done, total)`` of a load: bytes copied of the total, the total first."""

def _split_uri(uri: str) -> tuple[str, str]:
    """(dump root, job manifest key) from ``<root>/<job>/job-manifest.json``."""
    parts = uri.rstrip("/").rsplit("/", 2)
    if len(parts) != 3:
        raise CorruptMetadataError(f"{uri!r} is not a <root>/<job>/job-manifest.json path")
    return parts[0], f"{parts[1]}/{parts[2]}"


def _read_manifest(src: ObjectStore, key: str, named_in: str, where: str, *,
                   sha: str | None = None) -> dict[str, Any]:
    """A manifest of the dump, checked (``read_manifest``); CorruptMetadataError naming
    ``named_in`` when it is missing."""
    return _read_manifest_bytes(src, key, named_in, where, sha=sha)[1]


def _read_manifest_bytes(src: ObjectStore, key: str, named_in: str, where: str, *,
                         sha: str | None = None) -> tuple[bytes, dict[str, Any]]:
    try:
        return read_manifest(src, key, where, sha=sha)
    except ObjectNotFoundError:
        raise CorruptMetadataError(f"{named_in}: file {key} is missing from {src.uri}") from None


def _read_dump_file(src: ObjectStore, path: str, mpath: str, want: Expected) -> bytes:
    """A small dump file's bytes (a sample), checked against what its manifest lists, read
    again while they differ (a byte changed on the way), then CorruptMetadataError."""
    def check(data: bytes) -> bytes:
        digest = Digest()
        digest.update(data)
        if want.problem(digest.size, digest.crc, digest.sha256) is not None:
            detail = f"it fails its checksum (named in {mpath})"
            raise ChecksumMismatch(f"dump file {path}: {detail}", detail)
        return data

    try:
        return get_verified(src, path, check, error_cls=CorruptMetadataError,
                            where=f"dump file {path}")
    except ObjectNotFoundError:
        raise CorruptMetadataError(f"task manifest {mpath}: file {path} is missing from "
                                   f"{src.uri}") from None


def verify_dump(src: ObjectStore, job_key: str
                ) -> tuple[dict[str, Any], list[DumpedFile], str]:
    """Check every manifest, checksum, path and the tiling; returns the job, its files and
    the SHA-256 of the job manifest's bytes (which name every task manifest by its SHA-256,
    each naming its files by theirs: the dump's identity)."""
    where = f"dump job manifest {src.uri}/{job_key}"
    raw, job = _read_manifest_bytes(src, job_key, where, where)
    try:
        dumped = Schema.from_json(job["schema"])
        fields = [(f.name, f.type) for f in dumped.to_arrow()]
    except (KeyError, TypeError, ValueError, SchemaError) as e:
        raise CorruptMetadataError(f"{where}: schema is malformed: {e!r}") from e
    try:
        whole = range_from_json(job["range"])
        tasks = job["tasks"]
        version = int(job["version"])
        out: list[DumpedFile] = []
        ranges = [range_from_json(t["range"]) for t in tasks]
        if not tiles(ranges, whole):  # first: the file checks below rely on the task ranges
            raise CorruptMetadataError(f"{where}: task ranges do not tile the dumped range")
        for t, trange in zip(tasks, ranges, strict=True):
            for m in t["manifests"]:
                mpath = safe_path(m["path"], where)
                doc = _read_manifest(src, mpath, where, f"task manifest {mpath}",
                                     sha=str(m["sha256"]))
                if int(doc["version"]) != version:
                    raise CorruptMetadataError(f"task manifest {mpath}: version "
                                               f"{doc['version']} is not the job's {version}")
                files = {f["kind"]: f for f in doc["files"]}
                checked: dict[str, CheckedFile] = {}
                for f in doc["files"]:
                    fpath = safe_path(f["path"], f"task manifest {mpath}")
                    if not fpath.startswith(mpath.rsplit("/", 1)[0] + "/"):
                        raise CorruptMetadataError(f"task manifest {mpath}: {fpath} is outside "
                                                   "its task's folder")
                    got = check_dump_file(src, fpath, mpath, f)
                    pf = check_parquet(got.source(src, fpath), fpath, mpath, int(f["rows"]),
                                       fields if f["kind"] == "data" else None)
                    if f["kind"] == "data":
                        check_keys(pf, fpath, mpath, dumped, trange)
                    checked[f["kind"]] = got
                if "data" in files:
                    d, s = files["data"], files["sample"]
                    out.append(DumpedFile(d["path"], s["path"], int(d["rows"]), trange,
                                          int(d["bytes"]) + int(s["bytes"]),
                                          (expected(d, mpath), expected(s, mpath)),
                                          checked["data"], mpath))
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptMetadataError(f"{where} is malformed: {e!r}") from e
    return job, out, sha256(raw)


@dataclass(frozen=True, slots=True)
class VerifiedDump:
    """A dump whose every checksum and range has been verified: where its files are read
    from, the schema and partition boundaries it was dumped with, and its data files."""

    source: ObjectStore
    schema: Schema
    boundaries: list[Any]
    files: list[DumpedFile]
    partitioning: str = "lexicographic"
    """How the dumped table was partitioned (a new table is made alike)."""
    properties: dict[str, Any] = field(default_factory=dict)
    """The dumped table's properties, checked (a new table is made with them; a dump written
    before dumps carried them has none, and its table takes the store's defaults)."""
    digest: str = ""
    """SHA-256 of the job manifest: the dump's identity (:func:`load_key`)."""

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


def open_dump(job_manifest_uri: str, open_root: Callable[[str], ObjectStore]) -> VerifiedDump:
    """Verify the dump of ``<root>/<job>/job-manifest.json`` (``open_root`` opens its root
    the way the destination store reaches storage); nothing is written."""
    root, job_key = _split_uri(job_manifest_uri)
    src = open_root(root)
    job, files, digest = verify_dump(src, job_key)
    boundaries = [range_from_json(t["range"]).start for t in job["tasks"][1:]]
    partitioning = str(job.get("partitioning", "lexicographic"))
    if partitioning not in PARTITIONINGS:
        raise CorruptMetadataError(f"dump job manifest {src.uri}/{job_key}: unknown "
                                   f"partitioning {partitioning!r}")
    schema = Schema.from_json(job["schema"])
    return VerifiedDump(src, schema, boundaries, files, partitioning,
                        _properties(job, schema, f"dump job manifest {src.uri}/{job_key}"),
                        digest)


def _properties(job: dict[str, Any], schema: Schema, where: str) -> dict[str, Any]:
    """The job manifest's table properties, checked as ``set_properties`` checks them (names,
    values, iterator configurations against the schema): a property this Sediment does not
    know, or a value it refuses, would make the loaded table answer otherwise than its
    source, so the load is refused before anything is written."""
    props = job.get("properties", {})
    if not isinstance(props, dict):
        raise CorruptMetadataError(f"{where}: properties must be an object, not "
                                   f"{type(props).__name__}")
    if SCHEME_PROPERTIES & set(props):
        raise CorruptMetadataError(f"{where}: a dump carries no partition scheme membership "
                                   f"({', '.join(sorted(SCHEME_PROPERTIES & set(props)))})")
    try:
        return validate_properties(props, schema=schema)
    except PropertyError as e:
        raise CorruptMetadataError(f"{where}: {e}") from None


def load_key(dump: VerifiedDump) -> KeyedWrite:
    """The idempotency key a load of ``dump`` commits with: the dump's identity (the SHA-256
    of its job manifest), so a load retried (after a lost answer, a crash, a second run of the
    same command) within the table's ``write.idempotency_window_seconds`` finds the first
    one's commit and writes nothing again, as a keyed ingest does."""
    return KeyedWrite(f"dump:{dump.digest}", dump.digest, dump.rows)


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a load did: the ``version`` that holds the dump's records, their count and
    files; ``replayed`` when that version was an earlier load's (nothing was written)."""

    version: int
    rows: int
    files: int
    replayed: bool = False


class KeyedLoad:
    """One load of a verified dump, committed exactly once under :func:`load_key` (the
    claim, the log check and the key's record are ``sediment.ingest.idempotency``'s)."""

    def __init__(self, dump: VerifiedDump, progress: Progress | None = None) -> None:
        self.dump = dump
        self.progress = progress
        self.write = load_key(dump)

    def _claim(self, table: TableHandle, since: int) -> tuple[KeyIndex, KeyRecord]:
        index = index_of(table, table.states.head())
        record = index.claim(self.write, since)
        record.check(table.name, self.write.payload)
        return index, record

    def into_new(self, table: TableHandle) -> tuple[AddFiles, Staging]:
        """The initial files of a table being created for the dump (``create_table``'s
        ``initial_files``), its key claimed first: a later load of the same dump into it
        finds the key (in its record, or in this commit's log entry)."""
        add, staging = copy_and_reference(self.dump, table, progress=self.progress)
        if not self.dump.rows:  # nothing to add twice: no key, as a keyed write of no records
            return add, staging
        self._claim(table, 0)
        return replace(add, keys=(self.write,)), staging

    def created(self, table: TableHandle) -> Loaded:
        """Record the new table's commit under the key (its version read from the log: the
        table is open to other writers once created)."""
        if not self.dump.rows:
            return Loaded(table.states.head().version, 0, len(self.dump.files))
        index, record = self._claim(table, 0)
        version = next(v for v in range(1, table.states.head().version + 1)
                       if any(k.key == self.write.key for k in table.states.log.keys_at(v) or ()))
        index.record_all([record], version, [self._result()])
        return Loaded(version, self.dump.rows, len(self.dump.files))

    def _result(self) -> dict[str, Any]:
        return {"rows": self.dump.rows, "files": len(self.dump.files)}

    def into(self, table: TableHandle) -> Loaded:
        """Add the dump's files to an existing table of the same schema, in one transaction
        (each file referenced from every leaf its range covers), unless the table already
        holds this dump under its key: then its version is answered and nothing is copied."""
        dump = self.dump
        if table.schema.to_arrow() != dump.schema.to_arrow():
            why = schema_difference(table.schema, dump.schema) or "the fields' metadata differ"
            raise SchemaError(f"table {table.name}: schema differs from the dump's ({why}; "
                              "the dump's is 'the one given'): load it into a new table")
        if not dump.rows:  # nothing to add twice: committed as it is, under no key
            add, staging = copy_and_reference(dump, table, progress=self.progress)
            state = staging.commit(table.states, add)
            return Loaded(state.version, 0, len(dump.files))
        index, record = self._claim(table, table.states.head().version)
        if record.version is not None:
            return Loaded(record.version, dump.rows, len(dump.files), replayed=True)
        add, staging = copy_and_reference(dump, table, progress=self.progress)
        # refused for certain: the copies go now; an unknown outcome: left to GC
        outcome = commit_keyed(table, [self.write], record.since,
                               replace(add, keys=(self.write,)), staging)
        if not outcome.committed:  # an earlier attempt's commit is in the log
            staging.delete([f for f in add.new_files() if f not in outcome.state.refcount
                            and f not in outcome.state.unreferenced])
            return Loaded(outcome.found[self.write.key], dump.rows, len(dump.files),
                          replayed=True)
        index.record_all([record], outcome.version, [self._result()])
        return Loaded(outcome.version, dump.rows, len(dump.files))


def copy_and_reference(dump: VerifiedDump, table: TableHandle, *,
                       progress: Progress | None = None
                       ) -> tuple[AddFiles, Staging]:
    """Copy a dump's files byte for byte into the table and build their references;
    returns the AddFiles of them (with the checksums of the bytes copied) and the staging
    holding the copies (protected from GC until committed: ``Staging.commit`` settles them).
    ``progress(done, total)``: bytes copied (data and sample files) of the dump's total,
    ``(0, total)`` first, then as each file is copied, on the calling thread."""
    src, files = dump.source, dump.files
    from sediment.files.sample import estimate_count

    state = table.states.head()
    assert state.schema is not None
    schema = state.schema
    props = table.properties
    names = schema.row_key_names
    leaves = state.leaf_partitions()
    refs: list[FileReference] = []
    copies: list[tuple[DumpedFile, str]] = []
    for f in files:
        hit = [leaf for leaf in leaves if f.range.overlaps(leaf.region)]
        target = hit[0].id if len(hit) == 1 else "loaded"
        copies.append((f, f"data/{target}/{uuid.uuid4().hex}.parquet"))

    sums: dict[str, FileSums] = {}
    samples: dict[str, bytes] = {}  # the sample bytes copied (checked), for the estimates

    def copy(item: tuple[DumpedFile, str]) -> None:
        f, name = item
        want_data, want_sample = f.checked or (Expected(), Expected())
        checked = f.sums
        if checked is None:
            raise CorruptMetadataError(f"task manifest {f.manifest}: file {f.data} was not "
                                       "verified (open_dump verifies a dump)")
        # copied by the storage service where both ends are on it, else streamed part by
        # part; checked against what verification read either way (what is copied is
        # what was checked)
        want = Expected(checked.size, checked.crc, want_data.sha256)
        try:
            reading(table.name, f.data, src.uri, lambda _: transfer(
                src, f.data, table.objects, name, size=checked.size, expect=want))
        except CorruptDataError as e:
            raise CorruptMetadataError(f"dump file {f.data}: checksum mismatch: it fails its "
                                       f"checksum (named in {f.manifest}): {e}") from e
        sample = _read_dump_file(src, f.sample, f.manifest, want_sample)
        table.objects.put(sample_name(name), sample)
        write_key_filters(table.objects, name, checked.source(table.objects, name), schema,
                          props)
        sums[name] = FileSums(checked.size, checked.footer, checked.crc,
                              crc32(sample))  # of the bytes copied, for the commit
        samples[name] = sample

    staging = Staging(table.objects, table.name)
    # uncommitted until loaded; a failure before the commit deletes the copies at once
    with staging:
        staging.stage(name for _, name in copies)
        total = sum(f.bytes for f in files)
        if progress is not None:
            progress(0, total)
        done = 0
        with ThreadPoolExecutor(COPIES) as pool:
            futures = {pool.submit(copy, c): c[0].bytes for c in copies}
            for fut in as_completed(futures):
                fut.result()
                done += futures[fut]
                if progress is not None:
                    progress(done, total)
        for f, name in copies:
            hit = [leaf for leaf in leaves if f.range.overlaps(leaf.region)]
            if len(hit) == 1:
                refs.append(FileReference(name, hit[0].id, f.rows))
                continue
            sample = pq.read_table(pa.BufferReader(samples[name]))
            for leaf in hit:
                n = estimate_count(sample, names, leaf.region)
                refs.append(FileReference(name, leaf.id, min(n, f.rows), True))
    return AddFiles(refs, checksums=sums), staging
