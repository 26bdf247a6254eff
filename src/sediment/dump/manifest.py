"""Dump manifests: what each task wrote, and the job manifest listing every task.

Paths in manifests are relative to the dump root and checked on load: absolute paths, ``..``
and anything that would leave the root are rejected (a hostile manifest cannot make a load read
or copy files from elsewhere).
"""

from __future__ import annotations

import hashlib
from typing import Any

from sediment.core.keys import decode_key, encode_key
from sediment.core.regions import Range
from sediment.errors import CorruptMetadataError
from sediment.state.documents import open_sealed, sealed
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import ChecksumMismatch, crc32, get_verified

JOB_MANIFEST = "job-manifest.json"
FORMAT = 1


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_entry(path: str, kind: str, rows: int, raw: bytes) -> dict[str, Any]:
    """A task manifest's entry for a file whose bytes are in hand: its CRC-32 (the project's
    checksum of a file, which every entry carries) and its SHA-256."""
    return {"path": path, "kind": kind, "rows": rows, "bytes": len(raw),
            "crc32": f"{crc32(raw):08x}", "sha256": sha256(raw)}


def range_to_json(r: Range) -> dict[str, Any]:
    return {"start": encode_key(r.start), "end": encode_key(r.end),
            "start_inclusive": r.start_inclusive, "end_inclusive": r.end_inclusive}


def range_from_json(doc: dict[str, Any]) -> Range:
    return Range(decode_key(doc.get("start")), decode_key(doc.get("end")),
                 start_inclusive=bool(doc.get("start_inclusive", True)),
                 end_inclusive=bool(doc.get("end_inclusive", False)))


def safe_path(path: Any, where: str) -> str:
    """A manifest path, checked to stay inside the dump root."""
    if not isinstance(path, str) or not path or path.startswith(("/", "\\")) or \
            "://" in path or any(p in ("..", ".", "") for p in path.replace("\\", "/").split("/")):
        raise CorruptMetadataError(f"{where}: path {path!r} is outside the dump root")
    return path


def dumps(doc: dict[str, Any]) -> bytes:
    """A manifest's bytes: indented, sorted, sealed with its CRC-32 (``state.documents``)."""
    return sealed(doc, indent=1, sort_keys=True)


def loads(data: bytes, where: str) -> dict[str, Any]:
    """The manifest in ``data``, its seal checked (a manifest written before seals reads
    unchecked); CorruptMetadataError naming ``where`` otherwise."""
    doc = open_sealed(data, where)
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise CorruptMetadataError(f"{where}: unsupported dump format {fmt!r}")
    return doc


def read_manifest(objects: ObjectStore, key: str, where: str, *,
                  sha: str | None = None) -> tuple[bytes, dict[str, Any]]:
    """The bytes and document of the manifest at ``key``: its seal checked, and its SHA-256
    against ``sha`` (what the job manifest lists for a task manifest) when given, read again
    while either fails, then CorruptMetadataError naming ``where`` and the key.
    ObjectNotFoundError when it is missing."""
    def check(raw: bytes) -> tuple[bytes, dict[str, Any]]:
        if sha is not None and sha256(raw) != sha:
            detail = f"it fails its checksum (SHA-256 {sha256(raw)}, listed {sha})"
            raise ChecksumMismatch(f"{where}: {detail}", detail)
        return raw, loads(raw, where)

    return get_verified(objects, key, check, error_cls=CorruptMetadataError, where=where)


def tiles(ranges: list[Range], whole: Range) -> bool:
    """Do the (sorted) task ranges cover ``whole`` exactly, without gaps or overlaps?"""
    if not ranges or any(r.is_empty() for r in ranges):  # e.g. out of order: ["p", "g")
        return False
    if ranges[0].start != whole.start or ranges[-1].end != whole.end:
        return False
    if ranges[0].start_inclusive != whole.start_inclusive or \
            ranges[-1].end_inclusive != whole.end_inclusive:
        return False
    for a, b in zip(ranges, ranges[1:], strict=False):
        if a.end is None or a.end != b.start or a.end_inclusive == b.start_inclusive:
            return False
    return True
