"""Status events: every job kind Sediment records shows up in reports."""

from __future__ import annotations

from pathlib import Path

from sediment.status import StatusStore
from sediment.status.events import KINDS
from sediment.storage import LocalObjectStore


def test_every_recorded_kind_is_reported(tmp_path: Path) -> None:
    status = StatusStore(LocalObjectStore(tmp_path))
    for i, kind in enumerate(KINDS):
        status.record(kind, f"job-{i}", "committed", rows=i)
    assert {e.kind for e in status.events()} == set(KINDS)
    assert "bulk_import" in KINDS  # bulk imports commit with kind="bulk_import"
    jobs = status.jobs("bulk_import")
    assert [j["status"] for j in jobs] == ["committed"]
