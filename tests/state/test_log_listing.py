"""A log listing with a gap is taken again once before the gap counts as damage: listings
carry no checksum, and a key damaged on the way reads as a missing version."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from sediment.errors import CorruptMetadataError

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())])


def _table(tmp_path: Path) -> sd.Table:
    table = sd.Store.open(str(tmp_path), create=True).create_table(
        "t", SCHEMA, properties={"state.snapshot.interval": 1000})
    for i in range(4):
        table.ingest(pa.table({"key": [f"k{i}"], "v": [i]}, schema=SCHEMA.to_arrow()))
    return table


def _dropping(table: sd.Table, monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """The log's listings drop version 3's key the first ``times`` times."""
    objects = table._handle.states.log.objects
    real = objects.list
    calls = [0]

    def listing(prefix: str, **kwargs: Any) -> Iterator[Any]:
        items = list(real(prefix, **kwargs))
        if "log/" in prefix and calls[0] < times:
            calls[0] += 1
            items = [o for o in items if not o.key.endswith("00000000000000000003.json")]
        return iter(items)

    monkeypatch.setattr(objects, "list", listing)
    return calls


def test_a_gap_in_one_listing_is_listed_again(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path)
    want = [e.version for e in table.history()]
    calls = _dropping(table, monkeypatch, 1)
    assert [e.version for e in table.history()] == want
    assert calls[0] == 1


def test_a_gap_in_every_listing_is_damage(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path)
    _dropping(table, monkeypatch, 10)
    with pytest.raises(CorruptMetadataError, match="table t has a gap: version 3 is missing"):
        table.history()
