"""Write stalls (``ingest.stall_files``): an ingest waits for compaction before adding a file to
a crowded leaf, and commits anyway after ``ingest.stall_max_seconds``."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

import sediment as sd
from helpers import make_table, rows
from sediment.core.model import FileReference, Partition, Region
from sediment.core.state import TableState
from sediment.ingest.stall import crowded_leaves, wait_for_room


def leaf_files(table: sd.Table) -> dict[str, int]:
    """Own references per leaf."""
    st = table.state()
    return {p.id: len(st.references(p.id)) for p in st.leaf_partitions()}


def test_crowded_leaves_counts_a_leafs_own_files_and_those_its_ancestors_hold(
        tmp_path: Path) -> None:
    t = make_table(tmp_path, **{"partition.split.threshold": 100})
    t.ingest(rows(300, 1))
    t.ingest(rows(300, 2))
    t.split()  # the root's two files stay in the root until compaction pushes them down
    st = t.state()
    left, right = st.partitions["root"].children
    assert crowded_leaves(st, [left], 2) == {left: 2}
    assert crowded_leaves(st, [left], 3) == {}
    # a reference to a partition that split meanwhile lands above every leaf under it
    assert crowded_leaves(st, ["root"], 2) == {left: 2, right: 2}
    assert crowded_leaves(st, ["no-such-partition"], 1) == {}
    t.ingest(rows(50, 3).filter(pc.less(rows(50, 3).column("key"),
                                        st.partitions["root"].split_key[0])))
    st = t.state()
    assert crowded_leaves(st, [left, right], 3) == {left: 3}


def test_wait_for_room_returns_at_once_when_no_leaf_is_crowded(tmp_path: Path) -> None:
    t = make_table(tmp_path)
    t.ingest(rows(10, 1))
    calls: list[float] = []
    waited, crowded = wait_for_room(t._handle.states.head, ["root"], 2, 10.0,
                                    sleep=calls.append)
    assert (waited, crowded, calls) == (0.0, {}, [])


def test_wait_for_room_looks_again_until_the_leaf_has_room() -> None:
    crowded_state, roomy_state = TableState(), TableState()
    for st, n in ((crowded_state, 3), (roomy_state, 1)):
        st.partitions["root"] = Partition("root", None, Region())
        for i in range(n):
            st.put_reference(FileReference(f"f{i}.parquet", "root", 10))
    heads = iter([crowded_state, crowded_state, roomy_state])
    pauses: list[float] = []
    waited, crowded = wait_for_room(lambda: next(heads), ["root"], 3, 60.0,
                                    sleep=pauses.append)
    assert crowded == {} and 0 <= waited < 1
    assert pauses == [0.02, 0.04]  # short at first, doubling


def test_an_ingest_into_a_crowded_leaf_waits_then_commits_anyway(tmp_path: Path) -> None:
    t = make_table(tmp_path, **{"ingest.stall_files": 3, "ingest.stall_max_seconds": 0.3})
    for seed in range(3):
        assert t.ingest(rows(20, seed)).stalled_seconds == 0.0
    started = time.monotonic()
    result = t.ingest(rows(20, 3))
    assert 0.3 <= result.stalled_seconds <= time.monotonic() - started
    assert list(leaf_files(t).values()) == [4]  # nobody compacted: committed regardless
    assert t.query().num_rows == 80
    event = t.events("ingest")[-1]
    assert event.details["stalled_seconds"] >= 0.3
    assert (event.details["crowded_leaf"], event.details["crowded_leaf_files"]) == ("root", 3)


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_stalled_ingest_commits_once_compaction_makes_room(
        store: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    where: Any
    options: dict[str, Any] = {}
    if store == "s3":
        where, options = request.getfixturevalue("s3_store_uri")
    else:
        where = tmp_path / "store"
    t = make_table(where, options, **{"ingest.stall_files": 3,
                                      "ingest.stall_max_seconds": 60})
    for seed in range(3):
        t.ingest(rows(200, seed))
    compactor = sd.Store.open(str(where), **options).table(t.name)
    peaks: list[int] = []

    def compact_later() -> None:
        time.sleep(0.5)
        peaks.append(max(leaf_files(compactor).values()))
        compactor.compact(full=True)

    thread = threading.Thread(target=compact_later)
    thread.start()
    result = t.ingest(rows(200, 3))
    thread.join()
    assert 0.4 <= result.stalled_seconds < 60
    assert peaks == [3]  # the waiting ingest had not added its file
    assert list(leaf_files(t).values()) == [2]  # the compacted file and the new one
    expected = sum(rows(200, s).num_rows for s in range(4))
    assert t.query().num_rows == expected
    assert "crowded_leaf" not in t.events("ingest")[-1].details


def test_the_stall_is_off_by_default(tmp_path: Path) -> None:
    t = make_table(tmp_path, **{"ingest.stall_max_seconds": 30})
    for seed in range(20):
        assert t.ingest(rows(5, seed)).stalled_seconds == 0.0
    assert list(leaf_files(t).values()) == [20]
