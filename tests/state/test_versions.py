"""Versions: history, tags, time travel, diff (cost proportional to the change), restore, GC
protection of tagged and retained versions, and pruning of old log entries and snapshots.

Expected contents come from the independent reference in ``reference.py``; expected diffs are
computed from ``table.files(v)`` / ``table.partitions(v)`` of each version, never from the diff
code under test.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import sediment as sd
import sediment.state.snapshot as snapshot_mod
from helpers import make_table, rows
from reference import Reference, assert_matches
from sediment.errors import (
    CorruptMetadataError,
    QueryError,
    SedimentError,
    VersionExpiredError,
)
from sediment.files.writer import sample_name
from sediment.maintenance.gc import gc
from sediment.state.log import LOG_PREFIX
from sediment.state.snapshot import SNAPSHOT_PREFIX
from sediment.workload import benchmark_schema

SCHEMA = benchmark_schema()


def ingest(table: sd.Table, ref: Reference, n: int, seed: int, prefix: str = "") -> int:
    data = rows(n, seed, prefix=prefix)
    table.ingest(data)
    ref.add(data)
    return table.version


def refs_of(table: sd.Table, v: int) -> set[tuple[str, str, int]]:
    return {(r.partition_id, r.filename, r.records) for r in table.files(v)}


def version_state(table: sd.Table, v: int) -> tuple[set[tuple[str, str, int]], set[str]]:
    """(references, partition ids) of version ``v``, from the table's public listings."""
    return refs_of(table, v), {p.id for p in table.partitions(v)}


def expected_diff(table: sd.Table, v1: int, v2: int,
                  states: dict[int, tuple[set[tuple[str, str, int]], set[str]]] | None = None
                  ) -> dict[str, Any]:
    """The diff computed independently from the two versions' full file and partition lists."""
    (r1, p1), (r2, p2) = ((states[v] if states is not None else version_state(table, v))
                          for v in (v1, v2))
    f1, f2 = {f for _, f, _ in r1}, {f for _, f, _ in r2}
    return {"files_added": sorted(f2 - f1), "files_removed": sorted(f1 - f2),
            "partitions_added": sorted(p2 - p1), "partitions_removed": sorted(p1 - p2),
            "references_added": r2 - r1, "references_removed": r1 - r2,
            "records_change": sum(n for *_, n in r2) - sum(n for *_, n in r1)}


def actual_diff(d: Any) -> dict[str, Any]:
    return {"files_added": list(d.files_added), "files_removed": list(d.files_removed),
            "partitions_added": list(d.partitions_added),
            "partitions_removed": list(d.partitions_removed),
            "references_added": {(r.partition_id, r.filename, r.records)
                                 for r in d.references_added},
            "references_removed": {(r.partition_id, r.filename, r.records)
                                   for r in d.references_removed},
            "records_change": d.records_change}


def keys_of(table: sd.Table) -> set[str]:
    return {o.key for o in table._handle.objects.list("") if not o.key.endswith("/")}


# ---- history and time travel -----------------------------------------------------------------
def test_history_and_query_at_every_version(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s", split_points=["h", "q"],
                       **{"compaction.strategy": "basic", "compaction.batch_size": 4})
    ref = Reference(SCHEMA)
    versions = [ingest(table, ref, 200, seed) for seed in range(4)]
    assert versions == [2, 3, 4, 5]
    before = time.time()
    assert table.compact().jobs_committed == 3  # one job per leaf: 4 files each
    hist = table.history()
    assert [h.version for h in hist] == list(range(1, table.version + 1))
    assert hist[0].kind == "initialise"
    assert [h.kind for h in hist[1:5]] == ["add_files"] * 4
    assert all(h.summary for h in hist)
    assert all(a.time <= b.time for a, b in zip(hist, hist[1:], strict=False))
    assert hist[-1].time >= before - 1
    assert {h.kind for h in hist[5:]} and "add_files" not in {h.kind for h in hist[5:]}
    assert table.query(version=1).num_rows == 0
    for i, v in enumerate(versions):
        assert_matches(table.query(version=v), ref.upto(i + 1))
        assert_matches(table.query(version=str(v)), ref.upto(i + 1))  # digits mean a version
        r = sd.Range("c", "r")
        assert_matches(table.query(ranges=[r], version=v), ref.upto(i + 1), ranges=[r])
    assert_matches(table.query(), ref)
    # the compacted head reads fewer files than the version before compaction
    assert len(table.plan().files) < len(table.plan(version=versions[-1]).files)
    for bad in (0, table.version + 1, -3):
        with pytest.raises(QueryError):
            table.query(version=bad)


# ---- tags ------------------------------------------------------------------------------------
def test_tags_create_list_delete_and_reject_bad_names(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    ref = Reference(SCHEMA)
    v2 = ingest(table, ref, 50, 1)
    tg = table.tag("first")
    assert (tg.name, tg.version) == ("first", v2)
    v3 = ingest(table, ref, 50, 2)
    table.tag("v.1-beta_2", v3)
    table.tag("empty", 1)
    assert [(t.name, t.version) for t in table.tags()] == [
        ("empty", 1), ("first", v2), ("v.1-beta_2", v3)]
    assert table.tag_version("first") == v2
    assert_matches(table.query(version="first"), ref.upto(1))
    assert_matches(table.query(version="v.1-beta_2"), ref)
    assert table.query(version="empty").num_rows == 0
    assert table.state("first").version == v2

    with pytest.raises(QueryError, match="already exists"):
        table.tag("first", v3)
    assert table.tag_version("first") == v2  # unchanged by the refused duplicate
    before = keys_of(table)
    for bad in ("12", "0", "../x", "..", "a/b", "", "x..y", ".hidden", "-x", "a b", "t\n",
                "a" * 129, "/abs", "a\\b"):
        with pytest.raises(QueryError):
            table.tag(bad)
    assert keys_of(table) == before  # nothing written anywhere, inside the table or out
    assert not (tmp_path / "s" / "x.json").exists()
    with pytest.raises(QueryError):
        table.tag("late", table.version + 5)  # no such version
    with pytest.raises(QueryError):
        table.query(version="nosuch")
    with pytest.raises(QueryError):
        table.diff("nosuch")

    table.delete_tag("first")
    assert [t.name for t in table.tags()] == ["empty", "v.1-beta_2"]
    with pytest.raises(QueryError):
        table.delete_tag("first")
    with pytest.raises(QueryError):
        table.query(version="first")
    table.tag("first", v3)  # the name is free again
    assert table.tag_version("first") == v3
    # another handle on the same table sees the same tags
    other = sd.Store.open(str(tmp_path / "s")).table(table.name)
    assert [(t.name, t.version) for t in other.tags()] == [
        (t.name, t.version) for t in table.tags()]


# ---- diff ------------------------------------------------------------------------------------
@pytest.mark.parametrize("interval", [1, 3, 100])
def test_diff_matches_independent_states(tmp_path: Path, interval: int) -> None:
    """Every pair of versions of a history with ingests, a split, compactions and GC; with
    snapshots at every version (digest path), some (mixed) and none (log replay)."""
    table = make_table(tmp_path / "s", split_points=["m"],
                       **{"state.snapshot.interval": interval, "gc.delay_seconds": 0,
                          "retention.seconds": 0, "gc.clock_skew_seconds": 0,
                          "compaction.strategy": "basic", "compaction.batch_size": 2})
    ref = Reference(SCHEMA)
    ingest(table, ref, 300, 1)
    ingest(table, ref, 300, 2)
    table.set_properties({"partition.split.threshold": 200})
    assert table.split().splits >= 1
    ingest(table, ref, 100, 3)
    table.compact()
    table.gc()
    ingest(table, ref, 100, 4, prefix="b")
    head = table.version
    assert head >= 9
    assert_matches(table.query(), ref)
    states = {v: version_state(table, v) for v in range(1, head + 1)}
    pairs = [(a, b) for a in range(1, head + 1) for b in range(a, head + 1)]
    pairs += [(b, a) for a, b in pairs if b - a in (1, 3)] + [(head, 1)]
    for v1, v2 in pairs:
        d = table.diff(v1, v2)
        assert (d.from_version, d.to_version) == (v1, v2)
        assert actual_diff(d) == expected_diff(table, v1, v2, states), (v1, v2)
    # the default second version is the latest; tags work as versions
    table.tag("start", 2)
    assert actual_diff(table.diff("start")) == expected_diff(table, 2, head)
    assert table.diff(2, 2).files_added == () and table.diff(2, 2).records_change == 0
    with pytest.raises(QueryError):
        table.diff(0, 2)
    with pytest.raises(QueryError):
        table.diff(2, head + 1)


def test_diff_records_change_matches_reference_rows(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s", split_points=["g", "p"])
    ref = Reference(SCHEMA)
    ingest(table, ref, 120, 1)
    v = ingest(table, ref, 80, 2, prefix="k")
    d = table.diff(v - 1, v)
    assert d.records_change == 80
    assert len(d.files_added) == 1 and d.files_removed == ()
    assert d.partitions_added == () and d.partitions_removed == ()
    [added] = d.references_added
    leaf = next(p for p in table.partitions() if p.is_leaf and p.region.min == ("g",))
    assert added.partition_id == leaf.id
    back = table.diff(v, v - 1)  # reversed: the same change, the other way round
    assert back.files_removed == d.files_added and back.records_change == -80


def test_diff_cost_proportional_to_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    monkeypatch.setattr(snapshot_mod, "RANGE_MIN_ROWS", 2)
    monkeypatch.setattr(snapshot_mod, "RANGE_MAX_ROWS", 6)
    points = [chr(97 + i // 2) + ("m" if i % 2 else "") for i in range(1, 52)]  # 52 leaves
    table = make_table(tmp_path / "s", split_points=points,
                       **{"state.snapshot.interval": 1})
    ref = Reference(SCHEMA)
    ingest(table, ref, 3000, 1)
    ingest(table, ref, 3000, 2)
    snaps = [o.key for o in table._handle.objects.list(SNAPSHOT_PREFIX)]
    assert len(snaps) == table.version  # a snapshot at every version
    v = ingest(table, ref, 40, 3, prefix="qa")  # one leaf: [q, qm)
    d = table.diff(v - 1, v)
    total = d.ranges_compared + d.ranges_skipped
    assert total >= 20, total
    assert d.ranges_skipped > 0
    # a change moves at most the boundaries up to the next content-defined cut (partition ids
    # are random, so how far varies: 12 of 40 ranges seen at worst): a part, never the table
    assert d.ranges_compared <= total // 3, (d.ranges_compared, d.ranges_skipped)
    assert d.ranges_skipped >= 2 * total // 3, (d.ranges_compared, d.ranges_skipped)
    assert actual_diff(d) == expected_diff(table, v - 1, v)
    assert len(d.files_added) == 1 and d.records_change == 40
    # a change to every leaf compares (nearly) every range
    w = ingest(table, ref, 3000, 4)
    wide = table.diff(w - 1, w)
    wide_total = wide.ranges_compared + wide.ranges_skipped
    assert wide.ranges_compared >= 3 * wide_total // 4, (wide.ranges_compared, wide_total)
    assert wide.ranges_compared > 2 * d.ranges_compared
    assert actual_diff(wide) == expected_diff(table, w - 1, w)
    assert wide.records_change == 3000


# ---- restore ---------------------------------------------------------------------------------
def test_restore_after_compactions_and_splits(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s", **{"compaction.strategy": "basic",
                                          "compaction.batch_size": 2,
                                          "state.snapshot.interval": 4})
    ref = Reference(SCHEMA)
    ingest(table, ref, 300, 1)
    v = ingest(table, ref, 300, 2)
    files_v, parts_v = refs_of(table, v), {(p.id, p.region) for p in table.partitions(v)}
    table.set_properties({"partition.split.threshold": 150})
    table.maintain()  # splits and compactions
    assert sum(p.is_leaf for p in table.partitions()) >= 3
    ingest(table, ref, 100, 3)
    table.compact()
    before = table.version
    assert_matches(table.query(), ref)

    restored = table.restore(v)
    assert restored == before + 1 == table.version
    assert table.history()[-1].kind == "restore"
    assert_matches(table.query(), ref.upto(2))
    assert refs_of(table, restored) == files_v
    assert {(p.id, p.region) for p in table.partitions()} == parts_v
    # older versions are untouched and still readable
    assert_matches(table.query(version=before), ref)
    assert_matches(table.query(version=v), ref.upto(2))
    # the table works on from the restored content
    after = ref.upto(2)
    data = rows(100, 4)
    table.ingest(data)
    after.add(data)
    table.maintain()
    assert_matches(table.query(), after)
    # restore forward again, by tag
    table.tag("full", before)
    table.restore("full")
    assert_matches(table.query(), ref)
    assert actual_diff(table.diff(before, table.version))["records_change"] == 0


def test_restore_of_garbage_collected_version_fails(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s", **{"gc.delay_seconds": 0, "retention.seconds": 0,
                                          "gc.clock_skew_seconds": 0,
                                          "compaction.strategy": "basic",
                                          "compaction.batch_size": 3})
    ref = Reference(SCHEMA)
    for i in range(3):
        v = ingest(table, ref, 100, i)
    assert table.compact().jobs_committed == 1
    assert table.gc().deleted == 3
    head = table.version
    with pytest.raises(VersionExpiredError, match="garbage collection deleted"):
        table.restore(v)
    assert table.version == head
    assert_matches(table.query(), ref)
    with pytest.raises(SedimentError):  # its files are gone
        table.query(version=v)


# ---- GC keeps what tags and retention need -----------------------------------------------------
def test_gc_never_deletes_files_a_tag_needs(store_uri: tuple[str, dict[str, Any]]) -> None:
    uri, options = store_uri
    table = make_table(uri, options, **{"gc.delay_seconds": 0, "retention.seconds": 0,
                                        "gc.clock_skew_seconds": 0, "compaction.strategy": "basic",
                                        "compaction.batch_size": 3})
    ref = Reference(SCHEMA)
    for i in range(3):
        ingest(table, ref, 100, i)
    table.tag("keep")
    inputs = {r.filename for r in table.files()}
    assert table.compact().jobs_committed == 1
    assert table.gc().deleted == 0
    stored = keys_of(table)
    assert all(f in stored and sample_name(f) in stored for f in inputs)
    assert_matches(table.query(version="keep"), ref)
    # a later far-future GC still keeps them: tags protect for ever
    assert gc(table._handle, now=time.time() + 10 * 86400).deleted == 0
    assert_matches(table.query(version="keep"), ref)
    # restore of the tag works since its files exist
    table.restore("keep")
    assert_matches(table.query(), ref)
    assert {r.filename for r in table.files()} == inputs
    # the compacted file is now unreferenced; without the tag the inputs would be collectable
    table.compact()
    table.delete_tag("keep")
    assert table.gc().deleted >= 3
    assert_matches(table.query(), ref)
    assert not inputs & keys_of(table)


def test_retention_keeps_files_of_recent_versions(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s", **{"gc.delay_seconds": 0,
                                          "gc.clock_skew_seconds": 0, "retention.seconds": 3600,
                                          "compaction.strategy": "basic",
                                          "compaction.batch_size": 3})
    ref = Reference(SCHEMA)
    for i in range(3):
        v = ingest(table, ref, 100, i)
    assert table.compact().jobs_committed == 1
    assert table.gc().deleted == 0
    assert gc(table._handle, now=time.time() + 1800).deleted == 0  # still inside the window
    assert_matches(table.query(version=v), ref)
    table.restore(v)  # possible: the files are kept
    assert_matches(table.query(), ref)
    table.compact()
    assert gc(table._handle, now=time.time() + 7200).deleted >= 3  # past the window
    assert_matches(table.query(), ref)


# ---- pruning ---------------------------------------------------------------------------------
def test_prune_below_oldest_tag_and_retained_version(tmp_path: Path,
                                                    no_prune_grace: None) -> None:
    table = make_table(tmp_path / "s", **{"state.snapshot.interval": 3,
                                          "retention.seconds": 0})
    ref = Reference(SCHEMA)
    for i in range(8):
        ingest(table, ref, 30, i)  # versions 2..9; snapshots at 3, 6, 9
    head = table.version
    assert head == 9
    table.tag("t5", 5)
    r = table.prune()
    # the oldest needed version is the tag's (5): the snapshot at 3 becomes the base
    assert (r.log_entries, r.snapshots) == (3, 0)
    assert table._handle.states.earliest_version() == 3
    assert [h.version for h in table.history()][0] == 4
    assert [h.version for h in table.history()][-1] == head
    with pytest.raises(QueryError, match="oldest readable version is 3"):
        table.query(version=2)
    for v in range(3, head + 1):
        assert_matches(table.query(version=v), ref.upto(v - 1))
    assert_matches(table.query(version="t5"), ref.upto(4))
    with pytest.raises(QueryError):
        table.tag("old", 2)

    # a fresh handle (no cached head) loads the pruned table from its snapshots
    other = sd.Store.open(str(tmp_path / "s")).table(table.name)
    assert_matches(other.query(), ref)
    assert_matches(other.query(version=4), ref.upto(3))

    # without the tag, pruning goes up to the last snapshot below the head
    table.delete_tag("t5")
    r = table.prune()
    assert r.log_entries == 3 and r.snapshots == 1
    with pytest.raises(QueryError, match="oldest readable version is 6"):
        table.query(version=5)
    assert_matches(table.query(version=6), ref.upto(5))
    assert table.history()[0].version == 7
    assert table.prune().log_entries == 0  # the head's log entry always stays
    logs = [o.key for o in table._handle.objects.list(LOG_PREFIX)]
    assert logs and logs[-1].endswith(f"{head:020d}.json")
    # the table carries on committing and reading after pruning
    v = ingest(table, ref, 30, 99)
    assert v == head + 1
    assert_matches(table.query(), ref)
    assert_matches(sd.Store.open(str(tmp_path / "s")).table(table.name).query(), ref)


def test_prune_never_below_a_tag_or_inside_retention(tmp_path: Path,
                                                     no_prune_grace: None) -> None:
    table = make_table(tmp_path / "s", **{"state.snapshot.interval": 3})
    ref = Reference(SCHEMA)
    for i in range(8):
        ingest(table, ref, 20, i)
    table.tag("early", 2)  # below every snapshot: nothing can go
    r = table.prune()
    assert (r.log_entries, r.snapshots) == (0, 0)
    assert [h.version for h in table.history()] == list(range(1, table.version + 1))
    for v in range(2, table.version + 1):
        assert_matches(table.query(version=v), ref.upto(v - 1))
    table.delete_tag("early")
    table.set_properties({"retention.seconds": 3600})  # every version is recent
    r = table.prune()
    assert (r.log_entries, r.snapshots) == (0, 0)
    assert_matches(table.query(version=2), ref.upto(1))
    # the snapshots exist, so pruning with no retention would have removed entries
    table.set_properties({"retention.seconds": 0})
    assert table.prune().log_entries > 0


def test_tag_deleted_while_listing_and_corrupt_tag_objects(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    table = make_table(tmp_path / "s", **{"gc.delay_seconds": 0,
                                          "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    ref = Reference(SCHEMA)
    ingest(table, ref, 50, 1)
    table.tag("a")
    table.tag("b")
    objects = table._handle.states.objects
    real_get = objects.get

    def racing_get(key: str) -> bytes:
        if key == "tags/a.json":  # deleted between the listing and the read
            objects.delete_many([key])
        return real_get(key)

    monkeypatch.setattr(objects, "get", racing_get)
    assert [t.name for t in table.tags()] == ["b"]
    assert table.gc().deleted == 0  # GC lists tags too: the race must not fail it
    monkeypatch.setattr(objects, "get", real_get)
    objects.put("tags/bad.json", b'{"name": "bad", "vers')
    with pytest.raises(CorruptMetadataError, match="tags/bad.json"):
        table.tags()
    with pytest.raises(CorruptMetadataError, match="tags/bad.json"):
        table.query(version="bad")
    assert_matches(table.query(version="b"), ref)
