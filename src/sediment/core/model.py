"""Values of the model: regions of the row-key space, partitions and file references."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from sediment.core.keys import Key, decode_key, encode_key


@dataclass(frozen=True, slots=True)
class Region:
    """Half-open interval ``[min, max)`` of row-key tuples; ``None`` ends are unbounded.

    ``Region({"key1": Range("c", "p"), ...})`` (a mapping of field to range) is the other
    form, a range per row-key field: it makes a :class:`sediment.core.boxes.Box`."""

    min: Key | None = None
    max: Key | None = None

    per_field: ClassVar[Callable[[Mapping[str, Any]], Any] | None] = None
    """What makes the per-field form: ``Box``, registered by sediment.core.boxes (which
    builds on this module, so it cannot be imported here)."""

    def __new__(cls, min: Any = None, max: Any = None) -> Any:  # noqa: A002 (field names)
        if isinstance(min, Mapping) and max is None and Region.per_field is not None:
            return Region.per_field(min)
        return object.__new__(cls)

    def contains(self, key: Key) -> bool:
        if self.min is not None and key < self.min:
            return False
        return self.max is None or key < self.max

    def is_strictly_inside(self, key: Key) -> bool:
        """True when ``key`` can split this region into two non-empty halves."""
        if self.min is not None and key <= self.min:
            return False
        return self.max is None or key < self.max

    def to_json(self) -> dict[str, Any]:
        return {"min": encode_key(self.min), "max": encode_key(self.max)}

    cell_from_json: ClassVar[Callable[[dict[str, Any]], Region] | None] = None
    """Reads a box partition's region (``{"cell": ...}``): registered by sediment.core.cells."""

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Region:
        if "cell" in doc and Region.cell_from_json is not None:
            return Region.cell_from_json(doc)
        return cls(decode_key(doc.get("min")), decode_key(doc.get("max")))

    def __str__(self) -> str:
        lo = "-inf" if self.min is None else repr(self.min if len(self.min) > 1 else self.min[0])
        hi = "+inf" if self.max is None else repr(self.max if len(self.max) > 1 else self.max[0])
        return f"[{lo}, {hi})"


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


RANK_BITS = 24
"""Bits of a file sequence below the version: the rank of the file within its transaction."""


def file_sequence(version: int, rank: int) -> int:
    """The sequence of the ``rank``-th distinct file (0-based, in the order the transaction
    lists them) added by the commit at ``version``: later commits have greater sequences."""
    return (version << RANK_BITS) | min(rank, (1 << RANK_BITS) - 1)


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
