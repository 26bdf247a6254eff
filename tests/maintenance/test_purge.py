"""Purge: after it and GC, no stored data file or sidecar holds a purged record; until then
the result names what still holds one."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sediment as sd
from helpers import make_table
from sediment.core.transactions import ReplaceFileReferencesBatch

SCHEMA = sd.Schema(row_keys=[("user", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.string()), ("n", pa.int64())])
NO_DELAY = {"gc.delay_seconds": 0, "retention.seconds": 0, "gc.clock_skew_seconds": 0}


def _rows(ts: int, users: range) -> pa.Table:
    return pa.table({"user": [f"u{j:03d}" for j in users], "ts": [ts] * len(users),
                     "v": [f"secret-{j:03d}" for j in users],
                     "n": pa.array(list(users), pa.int64())})


def _table(root: Path, **props: object) -> sd.Table:
    t = make_table(root, schema=SCHEMA, **{"partition.split.threshold": 150, **NO_DELAY,
                                           **props})
    for ts in range(3):
        t.ingest(_rows(ts, range(100)))
    t.maintain()  # several leaves, compacted files with hidden sequences
    t.ingest(_rows(9, range(40, 50)))  # a newer file beside them
    return t


def _stored_values(root: Path) -> set[str]:
    """Every ``v`` value in every Parquet object under the store (data files, samples are
    keys only), read independently of Sediment, plus every raw byte match of a secret in
    any other object (key filters hash keys; log entries hold only keys)."""
    found: set[str] = set()
    for path in Path(root).rglob("*"):
        if not path.is_file():
            continue
        raw = path.read_bytes()
        if raw[:4] == b"PAR1":
            t = pq.read_table(path)
            if "v" in t.column_names:
                found |= {v for v in t.column("v").to_pylist() if v is not None}
        elif b"secret-" in raw:
            found.add(f"raw:{path.name}")
    return found


def _files_stored(root: Path) -> int:
    return sum(1 for p in Path(root).rglob("*.parquet") if "data" in p.parts)


def test_after_purge_and_gc_no_stored_file_holds_a_purged_record(tmp_path: Path) -> None:
    t = _table(tmp_path)
    before = t.query()
    assert "secret-042" in _stored_values(tmp_path)
    r = t.purge(keys=["u042"])
    assert r.version == t.version
    # the delete, the rewrite's jobs claimed, then every rewrite in one commit
    assert [e.kind for e in t.history()[-3:]] == \
        ["delete_records", "assign_job_ids", ReplaceFileReferencesBatch.kind]
    assert t.query(keys=["u042"]).num_rows == 0
    want = before.filter(pa.compute.not_equal(before.column("user"), "u042"))
    assert t.query().equals(want)
    # the old files still hold it (older versions read it) until GC collects them
    assert r.held_by_tags == () and r.expires is not None
    deleted = r.version - 2  # the delete, the jobs' claim, the rewrite
    assert r.held_by_versions and r.held_by_versions[-1] == deleted - 1
    assert t.query(keys=["u042"], version=deleted - 1).num_rows == 4
    assert t.query(keys=["u042"], version=deleted).num_rows == 0
    t.gc(orphan_timeout=0)
    stored = _stored_values(tmp_path)
    assert not {s for s in stored if "042" in s}, stored
    assert {f"secret-{j:03d}" for j in range(100) if j != 42} <= stored
    assert t.query().equals(want)
    assert not t._handle.states.head().deletions  # settled everywhere by the rewrite


@pytest.mark.parametrize("how", ["range", "filter"])
def test_purge_by_range_or_filter(tmp_path: Path, how: str) -> None:
    t = _table(tmp_path)
    if how == "range":
        t.purge(ranges=[sd.Range("u010", "u020")])
        gone = {f"secret-{j:03d}" for j in range(10, 20)}
    else:
        t.purge(filter="n >= 90 AND n < 95")
        gone = {f"secret-{j:03d}" for j in range(90, 95)}
    assert not set(t.query().column("v").to_pylist()) & gone
    t.gc(orphan_timeout=0)
    assert not _stored_values(tmp_path) & gone


def test_a_tag_holds_the_purged_files_until_it_goes(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.tag("audit")
    r = t.purge(keys=["u007"])
    assert r.held_by_tags == ("audit",) and r.expires is None
    t.gc(orphan_timeout=0)
    assert "secret-007" in _stored_values(tmp_path)  # the tag still reads it
    assert t.query(keys=["u007"], version="audit").num_rows == 3
    t.delete_tag("audit")
    t.gc(orphan_timeout=0)
    assert "secret-007" not in _stored_values(tmp_path)


def test_a_split_point_equal_to_a_purged_key_is_reported(tmp_path: Path) -> None:
    t = _table(tmp_path)
    points = [p.split_key for p in t.partitions() if p.split_key is not None]
    assert points, "the table split"
    key = points[0][0]
    r = t.purge(keys=[key])
    assert r.split_keys == ((key,),)
    assert t.query(keys=[key]).num_rows == 0


def test_purge_of_nothing_commits_only_the_delete(tmp_path: Path) -> None:
    t = _table(tmp_path)
    v = t.version
    files = _files_stored(tmp_path)
    r = t.purge(keys=["nobody"])
    assert r.version == v + 1 and r.held_by_versions == () and r.held_by_tags == ()
    assert _files_stored(tmp_path) == files
    assert os.path.isdir(tmp_path)


def test_files_an_earlier_compaction_replaced_are_reported_with_the_tags_that_read_them(
        tmp_path: Path) -> None:
    """A record compacted into a new file before the purge is also in the file it came from,
    kept by the retained versions and by a tag whose version reads it: the purge reports
    that tag (and no tag that keeps such a file without reading a purged record), the
    retained versions from the oldest, and no expiry while the tag stands."""
    t = sd.Store.open(str(tmp_path / "s"), create=True).create_table(
        "events", sd.Schema(row_keys=[("user", pa.string())], values=[("v", pa.int64())]))
    t.ingest(pa.table({"user": ["ann"], "v": [1]}))
    t.tag("ann-only")  # keeps ann's first file, which never held bob
    t.ingest(pa.table({"user": ["bob"], "v": [2]}))
    t.tag("with-bob")
    t.compact(full=True)
    r = t.purge(keys=["bob"])
    assert r.held_by_tags == ("with-bob",)
    assert r.expires is None
    deleted = next(e.version for e in t.history() if e.kind == "delete_records")
    assert r.held_by_versions == tuple(range(1, deleted))  # every retained version before it
    assert t.query(keys=["bob"], version="with-bob").num_rows == 1
    assert t.query(keys=["bob"]).num_rows == 0
