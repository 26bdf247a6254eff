"""Versions are numbers or tag names: anything else is refused naming the table, where Python
would quietly read ``True`` as version 1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import make_table, rows
from sediment.errors import QueryError


def test_versions_must_be_numbers_or_tags(tmp_path: Path) -> None:
    t = make_table(tmp_path / "store", name="events")
    t.ingest(rows(10, 1))
    t.ingest(rows(10, 2))
    for bad in (True, False, 1.0, 1.5, b"1", [1]):
        with pytest.raises(QueryError, match="table events: a version is a version number"):
            t.query(version=bad)  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="table events has no version -1"):
        t.query(version=-1)
    v = t.version
    assert t.query(version=np.int64(v - 1)).num_rows == 10  # numpy integers are numbers
    assert t.query(version=str(v - 1)).num_rows == 10
    assert t.to_arrow(version=v).num_rows == 20
    with pytest.raises(QueryError, match="events"):
        t.plan_files(version=True)  # type: ignore[arg-type]
