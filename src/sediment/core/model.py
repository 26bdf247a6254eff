"""Values of the model: partitions and file references (their regions: sediment.core.regions)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sediment.core.keys import Key, decode_key, encode_key
from sediment.core.regions import Region


@dataclass(frozen=True, slots=True)
class Partition:
    """A node of the partition tree. Leaves tile the key space; a split makes two children."""

    id: str
    parent_id: str | None
    region: Region
    children: tuple[str, ...] = field(default=())
    split_key: Key | None = None

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "parent_id": self.parent_id,
            "region": self.region.to_json(),
            "children": list(self.children),
            "split_key": encode_key(self.split_key),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Partition:
        return cls(
            id=doc["id"],
            parent_id=doc.get("parent_id"),
            region=Region.from_json(doc["region"]),
            children=tuple(doc.get("children", ())),
            split_key=decode_key(doc.get("split_key")),
        )


class FileSums(NamedTuple):
    """Checksums of one data file, taken by its writer from the bytes it wrote and kept in
    the state (never in the file), so a reader can tell damaged bytes from good ones.

    ``size``: the file's length in bytes. ``footer``: CRC-32 (``zlib.crc32``) of the file's
    last ``footer_len + 8`` bytes (the Parquet footer, its length and the magic), checked
    whenever a footer is read. ``crc``: CRC-32 of the whole file, for readers that take it
    whole (copies, local merges, verify). ``sample``: CRC-32 of the sample sidecar's bytes,
    or None when the file has none.
    """

    size: int
    footer: int
    crc: int
    sample: int | None = None

    def to_json(self) -> list[Any]:
        return [self.size, self.footer, self.crc, self.sample]

    @classmethod
    def from_json(cls, doc: list[Any]) -> FileSums:
        size, footer, crc, sample = doc
        return cls(int(size), int(footer), int(crc), None if sample is None else int(sample))


RANK_BITS = 24
"""Bits of a file sequence below the version: the rank of the file within its transaction."""


UPSERT_BIT = 1 << (RANK_BITS - 1)
"""The bit of a sequence that marks a record written by an upsert: it replaces every record
of its record key (row keys + sort keys) with a smaller sequence (sediment.files.upserts).
Above any rank a transaction reaches, so it only orders an upsert's files after the plain
files of the same commit."""


def file_sequence(version: int, rank: int, *, upsert: bool = False) -> int:
    """The sequence of the ``rank``-th distinct file (0-based, in the order the transaction
    lists them) added by the commit at ``version``: later commits have greater sequences.
    ``upsert``: the file's records replace older records of their record keys."""
    seq = (version << RANK_BITS) | min(rank, UPSERT_BIT - 1)
    return seq | UPSERT_BIT if upsert else seq


def is_upsert(sequence: int) -> bool:
    """Whether records of this sequence replace older records of their record keys."""
    return bool(sequence & UPSERT_BIT)


class FileReference(NamedTuple):
    """The part of one data file inside one partition's region.

    A NamedTuple rather than a frozen dataclass: states hold up to millions of these and a
    tuple is several times cheaper to build when a snapshot is loaded.

    ``sequence`` orders the file's records against other files' records with equal keys
    (``sediment.files.sequence``): the state gives it when the file is first added
    (``version << 24 | rank`` of the file in its transaction), so a later commit's records
    sort after an earlier one's. References built by writers leave it 0; 0 in a state is a
    reference from before sequences existed. ``sequenced``: the file is this table's
    compaction output, whose hidden sequence column gives each record its own sequence (the
    column of any other file, e.g. one loaded from a dump of another table, is ignored).
    """

    filename: str
    partition_id: str
    records: int
    approximate: bool = False
    job_id: str | None = None
    sequence: int = 0
    sequenced: bool = False

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.filename, "partition": self.partition_id,
                             "records": self.records}
        if self.approximate:
            d["approximate"] = True
        if self.job_id is not None:
            d["job_id"] = self.job_id
        if self.sequence:
            d["sequence"] = self.sequence
        if self.sequenced:
            d["sequenced"] = True
        return d

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FileReference:
        return cls(doc["file"], doc["partition"], int(doc["records"]),
                   bool(doc.get("approximate", False)), doc.get("job_id"),
                   int(doc.get("sequence", 0)), bool(doc.get("sequenced", False)))
