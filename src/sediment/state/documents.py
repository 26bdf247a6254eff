"""JSON metadata documents written to and read back from storage: sealed, checked, parsed.

Every writer of Sediment's own JSON objects (log entries, snapshot pointers, tags, catalog
entries, the store file, dump manifests and locks, leases, batcher documents) serialises
through :func:`sealed`, which adds a CRC-32 trailer (``storage.checksums``), and every reader
parses through :func:`open_sealed` (or :func:`read_sealed`, which reads the object again when
its seal fails: a byte may have changed on the way), so a damaged object always fails the same
way: CorruptMetadataError naming what it is (``where``). Objects written before seals existed
read as before, unchecked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sediment.errors import CorruptMetadataError
from sediment.storage import checksums
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import ChecksumMismatch, get_verified, seal_json, unseal_json

SEAL_FIELD = "crc32"
"""The seal's field: last in every sealed document, dropped from what readers are given."""


class MetadataChecksumMismatch(ChecksumMismatch, CorruptMetadataError):  # noqa: N818
    """A metadata object whose seal fails: a CorruptMetadataError to its readers, and a
    ChecksumMismatch to :func:`read_sealed` (and ``create_once``), which read it again."""


def json_value(data: bytes, where: str) -> Any:
    """``data`` parsed as JSON; CorruptMetadataError naming ``where`` when it is not JSON."""
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptMetadataError(f"{where} is not valid JSON: {e}") from e


def json_object(data: bytes, where: str) -> dict[str, Any]:
    """``data`` parsed as a JSON object; CorruptMetadataError naming ``where`` otherwise."""
    doc = json_value(data, where)
    if not isinstance(doc, dict):
        raise CorruptMetadataError(f"{where} is not a JSON object")
    return doc


def sealed(doc: Mapping[str, Any], **dumps_kw: Any) -> bytes:
    """``doc`` serialised by ``json.dumps(doc, **dumps_kw)`` and sealed with its CRC-32 (a
    ``"crc32"`` it carries from an unsealed read is dropped: the new seal replaces it)."""
    if SEAL_FIELD in doc:
        doc = {k: v for k, v in doc.items() if k != SEAL_FIELD}
    return seal_json(json.dumps(doc, **dumps_kw).encode())


def open_sealed(data: bytes, where: str) -> dict[str, Any]:
    """The JSON object in ``data``, its seal checked and dropped. CorruptMetadataError naming
    ``where`` when it is not a JSON object, when its CRC differs, and when it has a
    ``"crc32"`` field but no valid trailer (damaged, or edited and re-encoded: a checksum that
    cannot be checked is not taken on trust). An object without a seal (written before seals)
    reads unchecked."""
    return parse_sealed(data, where, check_seal(data, where))


def check_seal(data: bytes, where: str) -> bool | None:
    """The first half of :func:`open_sealed`: whether ``data``'s seal holds (True), or it has
    none (None); MetadataChecksumMismatch naming ``where`` when its CRC differs. Cheap (a
    CRC, which releases the GIL): a reader fetching many objects on threads checks them there
    and parses them in its own thread, where parsing in turn is faster than threads taking
    the GIL from each other."""
    try:
        return unseal_json(data)
    except ChecksumMismatch as e:
        raise MetadataChecksumMismatch(f"{where}: checksum mismatch: {e.detail}",
                                       e.detail) from None


def parse_sealed(data: bytes, where: str, verified: bool | None) -> dict[str, Any]:
    """The second half of :func:`open_sealed`: ``data`` parsed, given its
    :func:`check_seal` answer ``verified``."""
    doc = json_object(data, where)
    seal = doc.pop(SEAL_FIELD, None)
    if seal is not None and verified is None and checksums.VERIFY_READS:
        detail = f"a {SEAL_FIELD} field {seal!r} but no valid checksum trailer"
        raise MetadataChecksumMismatch(f"{where}: checksum mismatch: {detail}", detail)
    return doc


def read_sealed(objects: ObjectStore, key: str, where: str) -> dict[str, Any]:
    """:func:`open_sealed` of the object at ``key``, read again (three reads in all) while its
    seal fails, then CorruptMetadataError naming ``where`` and the key. ObjectNotFoundError
    and the store's errors pass through."""
    return get_verified(objects, key, lambda data: open_sealed(data, where),
                        error_cls=CorruptMetadataError, where=where)
