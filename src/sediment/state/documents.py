"""JSON metadata documents read back from storage: parsed, or CorruptMetadataError.

Every reader of Sediment's own JSON objects (log entries, snapshot pointers, the store file,
dump manifests) parses through here, so a damaged object always fails the same way, naming
what it is (``where``).
"""

from __future__ import annotations

import json
from typing import Any

from sediment.errors import CorruptMetadataError


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
