"""Dump manifests: what each task wrote, and the job manifest listing every task.

Paths in manifests are relative to the dump root and checked on load: absolute paths, ``..``
and anything that would leave the root are rejected (a hostile manifest cannot make a load read
or copy files from elsewhere).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sediment.core.keys import decode_key, encode_key
from sediment.core.regions import Range
from sediment.errors import CorruptMetadataError
from sediment.state.documents import json_object

JOB_MANIFEST = "job-manifest.json"
FORMAT = 1


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def loads(data: bytes, where: str) -> dict[str, Any]:
    doc = json_object(data, where)
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise CorruptMetadataError(f"{where}: unsupported dump format {fmt!r}")
    return doc


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
