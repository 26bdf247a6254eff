"""Deletions: records removed by key, range or predicate, as metadata in the state.

A delete commits no data and reads none: ``DeleteRecords`` adds a :class:`Deletion` to the
state, and every reader (queries, scans, compaction) drops the records it covers. What it
covers is fixed by sequence, as every other order between writes in an LSM tree is
(``sediment.files.sequence``): a deletion made by the commit at version ``v`` removes the
records of its ranges (and, with a filter, those matching it) whose sequence is below
``v << RANK_BITS``, i.e. every record committed before it, and never one committed after it,
whatever order compactions, splits and concurrent writers commit in. So a compaction that
merged records before a delete and commits after it cannot bring them back, and an insert
of a deleted key after the delete is kept.

A deletion stays in the state while a leaf may still hold a record it covers: ``pending``
names those leaves. A compaction of a leaf applies every deletion pending there and, when its
output leaves nothing older in the leaf or its ancestors (``settle_leaf``), settles them in
that leaf; a split hands a leaf's pending deletions to its children; a deletion pending
nowhere is gone (the rules that read a state: ``sediment.core.settling``). Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sediment.core.keys import decode_key, decode_value, encode_key, encode_value
from sediment.core.model import RANK_BITS
from sediment.core.regions import Box, FieldRange, Range, Region


@dataclass(frozen=True, slots=True)
class Deletion:
    """Records removed by the commit at ``version``: those in ``ranges`` (None: every row key)
    matching ``filter`` (a filter's wire tree, sediment.query.wire; None: every record),
    committed before it. ``pending``: the leaves that may still hold such records."""

    version: int
    ranges: tuple[Range, ...] | None
    filter: Mapping[str, Any] | None
    pending: frozenset[str]

    @property
    def bound(self) -> int:
        """Records with a sequence below this are covered (every commit before ``version``
        has smaller sequences; the deleting commit's own files, such as an overwrite's new
        records, have sequences from this up)."""
        return self.version << RANK_BITS

    def filter_fields(self) -> set[str]:
        """The field names its filter reads (the ``{"field": name}`` leaves of the tree)."""
        out: set[str] = set()
        todo: list[Any] = [self.filter]
        while todo:
            node = todo.pop()
            if isinstance(node, Mapping):
                if isinstance(node.get("field"), str):
                    out.add(node["field"])
                todo.extend(node.values())
            elif isinstance(node, list | tuple):
                todo.extend(node)
        return out

    def overlaps(self, region: Region) -> bool:
        """Whether a record of ``region`` may be covered (its ranges meet the region)."""
        return self.ranges is None or any(r.overlaps(region) for r in self.ranges)

    @property
    def format(self) -> int:
        """The metadata format a document holding it needs (:data:`KEYS_FORMAT` for a
        delete by many keys, written compactly; else 1)."""
        return selection_format(self.ranges)

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "pending": sorted(self.pending),
                **selection_to_json(self.ranges, self.filter)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Deletion:
        ranges, filter_ = selection_from_json(doc)
        return cls(int(doc["version"]), ranges, filter_,
                   frozenset(str(p) for p in doc.get("pending", ())))


KEYS_FORMAT = 2
"""The metadata format (sediment.state.log.FORMAT_VERSION) that writes a delete by many whole
keys compactly (:func:`compact_keys`): ``"ranges": {"keys": [key, ...]}``, each key once, in
place of a list of ranges each naming it twice with its bounds (a 5,000-key delete: ~75 kB
against ~460 kB, and decoded several times faster, which every reader of the log after it
pays). A document holding one
says so in its ``"format"``, so a Sediment that predates the form refuses it ("upgrade
Sediment") rather than reading the dictionary as no ranges, i.e. every record."""

COMPACT_KEYS = 16
"""A selection of at least this many whole keys is written compactly; fewer stay in the
form every version of Sediment reads (a small delete gains nothing from the new form)."""


def whole_keys(ranges: tuple[Range, ...] | None) -> bool:
    """Whether ``ranges`` is written compactly (:data:`KEYS_FORMAT`): at least
    :data:`COMPACT_KEYS` ranges, each a whole key or key prefix (both ends the same key,
    inclusive)."""
    if ranges is None or len(ranges) < COMPACT_KEYS:
        return False
    return all(is_key(r) for r in ranges)


def is_key(r: Range) -> bool:
    """Whether ``r`` is one key or key prefix (both ends the same, inclusive): what a delete
    by keys names."""
    return r.per_field is None and r.start is not None and r.start == r.end and \
        r.start_inclusive and r.end_inclusive


def compact_keys(ranges: tuple[Range, ...]) -> dict[str, Any]:
    """The compact JSON form of :func:`whole_keys` ranges: ``{"keys": [key, ...]}``, each
    key a list of its values, and ``"binary": true`` when a value is bytes (written as
    ``{"b64": ...}``), so that a reader of keys without bytes takes each list as it is."""
    keys = [encode_key(r.start) for r in ranges]
    doc: dict[str, Any] = {"keys": keys}
    if any(type(v) is dict for k in keys for v in k):  # type: ignore[union-attr]
        doc["binary"] = True
    return doc


def selection_format(ranges: tuple[Range, ...] | None) -> int:
    """The metadata format a selection of ``ranges`` is written in (:data:`KEYS_FORMAT`)."""
    return KEYS_FORMAT if whole_keys(ranges) else 1


def selection_to_json(ranges: tuple[Range, ...] | None, filter: Mapping[str, Any] | None,  # noqa: A002
                      *, compact: bool = True) -> dict[str, Any]:
    """What a delete selects, as JSON: ``ranges`` and ``filter`` keys, each omitted when
    None (the log's ``DeleteRecords`` and the state's ``Deletion`` both write it). Many whole
    keys are written compactly (:data:`KEYS_FORMAT`) unless ``compact`` is False (a form that
    must never change, such as what an idempotency key's payload hash covers)."""
    doc: dict[str, Any] = {}
    if ranges is not None:
        doc["ranges"] = compact_keys(ranges) if compact and whole_keys(ranges) else \
            [range_to_json(r) for r in ranges]
    if filter is not None:
        doc["filter"] = dict(filter)
    return doc


def selection_from_json(doc: Mapping[str, Any]
                        ) -> tuple[tuple[Range, ...] | None, Mapping[str, Any] | None]:
    """The inverse of :func:`selection_to_json`."""
    ranges = doc.get("ranges")
    if isinstance(ranges, Mapping):  # KEYS_FORMAT: each key is the start and end of a range
        keys = ranges["keys"]
        return (Range.exact_many(map(decode_key if ranges.get("binary") else tuple, keys)),
                doc.get("filter"))
    return (None if ranges is None else tuple(range_from_json(r) for r in ranges),
            doc.get("filter"))


def range_to_json(r: Range) -> dict[str, Any]:
    """A key range's JSON form (prefix ends kept as given); a per-field region (a bound
    ``Box``) as its fields' ranges by name."""
    box = r.per_field
    if box is not None:
        assert box.names is not None, "a delete's regions are bound to the row keys"
        return {"box": [[n, encode_value(f.lo), f.lo_inc, encode_value(f.hi), f.hi_inc]
                        for n, f in zip(box.names, box.fields, strict=True)]}
    return {"start": encode_key(r.start), "end": encode_key(r.end),
            "start_inclusive": r.start_inclusive, "end_inclusive": r.end_inclusive}


def range_from_json(doc: Mapping[str, Any]) -> Range:
    if "box" in doc:
        names = [str(f[0]) for f in doc["box"]]
        fields = [FieldRange(decode_value(lo), bool(lo_inc), decode_value(hi), bool(hi_inc))
                  for _, lo, lo_inc, hi, hi_inc in doc["box"]]
        return Box({}).bind(names, fields)
    start, end = doc.get("start"), doc.get("end")
    first = decode_key(start)
    # a delete by keys logs one exact range per key: both ends are decoded once
    return Range.of(first, first if end == start else decode_key(end),
                    bool(doc.get("start_inclusive", True)), bool(doc.get("end_inclusive", False)))


def applicable(deletions: Iterable[Deletion], leaf_id: str, region: Region
               ) -> tuple[Deletion, ...]:
    """The deletions a read of ``region`` in leaf ``leaf_id`` applies."""
    return tuple(d for d in deletions if leaf_id in d.pending and d.overlaps(region))


def split_leaf(deletions: Sequence[Deletion], leaf_id: str, children: Sequence[str]
               ) -> tuple[Deletion, ...]:
    """``deletions`` after leaf ``leaf_id`` split into ``children`` (those that may hold
    records): what was pending in the leaf is pending in each; one pending nowhere is gone."""
    out = []
    for d in deletions:
        if leaf_id in d.pending:
            d = replace(d, pending=(d.pending - {leaf_id}) | frozenset(children))
        if d.pending:
            out.append(d)
    return tuple(out)
