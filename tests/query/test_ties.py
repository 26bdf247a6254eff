"""Records with equal keys have one order: commit order, then input position.

Every reader of a version (the writer's own head, a fresh process reading snapshots, a reader of
the log alone, time travel) gives the same answer; the later record wins under ``last``
aggregation and keep-latest; compaction (local runner here, Spark in tests/integration/spark)
does not change the answer. The expected answers come from an independent pandas model: every record
numbered by (commit, position in its commit).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sediment as sd
from sediment.core.model import FileReference, file_sequence
from sediment.core.state import TableState
from sediment.core.transactions import AddFiles, ReplaceFileReferences, SplitFileReferences
from sediment.errors import SchemaError
from sediment.files import sort as sort_module
from sediment.files.merge import merge_sorted
from sediment.files.sequence import SEQ
from sediment.files.sort import sort_table

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.int64()), ("note", pa.string())])
ARROW = SCHEMA.to_arrow()
KEYS = ["a", "b", "c", "d", "e"]
LAST = {"type": "aggregate", "functions": {"v": "last", "note": "last"}}
LATEST = {"type": "keep_latest", "by": "ts"}


# ---- the independent model ------------------------------------------------------------------
def records(commit: int, rows: Sequence[tuple[str, int]]) -> pa.Table:
    """One commit's records; ``v`` numbers them by (commit, position): later is greater."""
    n = len(rows)
    return pa.table({"key": [k for k, _ in rows], "ts": [t for _, t in rows],
                     "v": [commit * 1_000_000 + i for i in range(n)],
                     "note": [None if i % 3 == 0 else f"{commit}.{i}" for i in range(n)]},
                    schema=ARROW)


def expected(batches: Sequence[pa.Table], how: str | None) -> list[dict[str, Any]]:
    """Every record in (key bytes, ts, commit, position) order, ``batches`` being the commits
    in commit order; with ``last``: the latest of each (key, ts); with ``latest``: per key,
    the latest record of its greatest ts."""
    if not batches:
        return []
    df = pa.concat_tables(batches).to_pandas()
    df["kb"] = df["key"].map(lambda s: s.encode())
    df["order"] = np.concatenate([np.arange(b.num_rows) + i * 10 ** 7
                                  for i, b in enumerate(batches)])
    df = df.sort_values(["kb", "ts", "order"], kind="stable")
    if how == "last":
        df = df.drop_duplicates(["key", "ts"], keep="last")
    elif how == "latest":
        df = df.drop_duplicates(["key"], keep="last")
    df = df.drop(columns=["kb", "order"])
    out = df.to_dict("records")
    for r in out:
        if not isinstance(r["note"], str):
            r["note"] = None
    return out


def answer(table: sd.Table, how: str | None, *, in_compaction: bool,
           version: int | None = None) -> list[dict[str, Any]]:
    its = [] if how is None or in_compaction else [LAST if how == "last" else LATEST]
    return table.query(version=version, iterators=its).to_pylist()


def log_only_copy(root: Path, dest: Path) -> sd.Store:
    """A copy of the store without snapshots: its readers replay the log from version 1."""
    shutil.copytree(root, dest, ignore=shutil.ignore_patterns("snapshots", "objects"))
    return sd.Store.open(str(dest), create=True)


# ---- file sequences in the state ------------------------------------------------------------
def _state() -> TableState:
    from sediment.core.state import build_partition_tree
    from sediment.core.transactions import InitialiseTable

    st_ = TableState("t")
    _commit(st_, InitialiseTable(SCHEMA, {}, build_partition_tree(SCHEMA, [("m",)])))
    return st_


def _commit(state: TableState, txn: Any) -> None:
    txn.validate(state)
    txn.apply(state, 1000.0)
    state.version += 1


def test_files_get_the_sequence_of_their_commit_and_rank() -> None:
    state = _state()
    leaves = [p.id for p in state.leaf_partitions()]
    _commit(state, AddFiles([FileReference("x", leaves[1], 3), FileReference("s", leaves[0], 1),
                             FileReference("s", leaves[1], 1)]))
    v = state.version
    assert state.references(leaves[1])["x"].sequence == file_sequence(v, 0)
    assert state.references(leaves[0])["s"].sequence == file_sequence(v, 1)
    assert state.references(leaves[1])["s"].sequence == file_sequence(v, 1)
    _commit(state, AddFiles([FileReference("y", leaves[0], 2, sequence=7)]))  # ignored
    y = state.references(leaves[0])["y"]
    assert y.sequence == file_sequence(v + 1, 0) > file_sequence(v, 1)
    assert not y.sequenced
    # a compaction output is sequenced, with its commit's sequence; splits carry both
    from sediment.core.transactions import AssignJobIds, JobAssignment

    _commit(state, AssignJobIds([JobAssignment("j", leaves[0], ["s", "y"])]))
    _commit(state, ReplaceFileReferences("j", leaves[0], ["s", "y"],
                                         FileReference("o", leaves[0], 3)))
    out = state.references(leaves[0])["o"]
    assert out.sequenced and out.sequence == file_sequence(state.version, 0)
    _commit(state, sd.core.transactions.SplitPartition(leaves[0], ("f",), "L0", "L1"))
    _commit(state, SplitFileReferences([
        sd.core.transactions.SplitReference("o", leaves[0], [FileReference("o", "L0", 2, True),
                                                             FileReference("o", "L1", 1, True)])]))
    for pid in ("L0", "L1"):
        ref = state.references(pid)["o"]
        assert (ref.sequence, ref.sequenced) == (out.sequence, True)


def test_schema_refuses_the_reserved_prefix() -> None:
    with pytest.raises(SchemaError, match="reserved"):
        sd.Schema(row_keys=[("key", pa.string())], values=[(SEQ, pa.int64())])
    with pytest.raises(SchemaError, match="reserved"):
        sd.Schema(row_keys=[("__sediment_x", pa.string())])


# ---- stable sorts and merges ------------------------------------------------------------------
def _reference_order(table: pa.Table, names: Sequence[str]) -> pa.Table:
    pos = table.append_column("__pos", pa.array(np.arange(table.num_rows)))
    idx = pc.sort_indices(pos, sort_keys=[*((n, "ascending") for n in names),
                                         ("__pos", "ascending")])
    return table.take(idx)


@pytest.mark.parametrize("case", ["small", "normalised", "ties", "int_key"])
def test_sort_table_keeps_equal_keys_in_input_order(case: str, monkeypatch: Any) -> None:
    rng = np.random.default_rng(5)
    n = 1_000 if case == "small" else 70_000
    if case == "int_key":
        keys: Any = pa.array(rng.integers(0, 500, n))
    elif case == "ties":  # most rows share a prefix: the DataFusion fallback
        keys = pa.array([f"prefix-{k:04d}" for k in rng.integers(0, 300, n)])
    else:  # 8-byte keys, 1.5% of them repeated: the normalised-key sort with tie runs
        base = [f"{k:08d}" for k in rng.integers(0, 10 ** 8, n)]
        for i in rng.integers(0, n, n * 15 // 1000):
            base[i] = base[(i * 7) % n]
        keys = pa.array(base)
    table = pa.table({"k": keys, "ts": rng.integers(0, 2, n), "pos": np.arange(n)})
    used: list[str] = []
    real = sort_module._datafusion_sort
    monkeypatch.setattr(sort_module, "_datafusion_sort",
                        lambda t, names: used.append("df") or real(t, names))
    got = sort_table(table, ["k", "ts"])
    assert got.equals(_reference_order(table, ["k", "ts"]))
    assert bool(used) == (case in ("ties", "int_key"))


@given(st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), max_size=12),
                min_size=1, max_size=4), st.integers(1, 4))
@settings(max_examples=60, deadline=None)
def test_merge_sorted_keeps_ties_in_stream_order(streams: list[list[tuple[int, int]]],
                                                 chunk: int) -> None:
    """Ties come out stream by stream, each stream in its own order, even where runs of
    equal keys straddle the batches of several streams."""
    schema = pa.schema([("k", pa.int64()), ("stream", pa.int64()), ("pos", pa.int64())])
    tables = []
    for s, rows in enumerate(streams):
        ks = sorted(k for k, _ in rows)
        tables.append(pa.table({"k": ks, "stream": [s] * len(ks), "pos": range(len(ks))},
                               schema=schema))

    def batches(t: pa.Table) -> Iterator[pa.RecordBatch]:
        return iter(t.to_batches(max_chunksize=chunk))

    merged = pa.Table.from_batches(list(merge_sorted([batches(t) for t in tables], ["k"],
                                                     schema)), schema=schema)
    want = pa.concat_tables(tables)
    want = want.take(pc.sort_indices(want, sort_keys=[("k", "ascending"),
                                                      ("stream", "ascending"),
                                                      ("pos", "ascending")]))
    assert merged.to_pylist() == want.to_pylist()


# ---- tables: every reader, the later record wins, compaction changes nothing --------------------
@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    commits = draw(st.lists(
        st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 2)), min_size=1, max_size=10),
        min_size=2, max_size=6))
    return {
        "commits": commits,
        "compact_after": draw(st.lists(st.booleans(), min_size=len(commits),
                                       max_size=len(commits))),
        "how": draw(st.sampled_from(["last", "latest", None])),
        "in_compaction": draw(st.booleans()),
        "split_points": draw(st.sampled_from([[], [("c",)]])),
        "strategy": draw(st.sampled_from(["per_partition", "shared_file"])),
        "snapshot_interval": draw(st.integers(1, 4)),
        "split_threshold": draw(st.sampled_from([1_000_000, 12])),
    }


@given(scenarios())
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_every_reader_agrees_and_the_later_record_wins(sc: dict[str, Any]) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sediment-ties-"))
    try:
        _run_scenario(tmp, sc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_scenario(tmp: Path, sc: dict[str, Any]) -> None:
    how, in_compaction = sc["how"], sc["in_compaction"] and sc["how"] is not None
    props: dict[str, Any] = {
        "compaction.strategy": "basic", "compaction.batch_size": 2,
        "state.snapshot.interval": sc["snapshot_interval"], "state.cache.refresh_seconds": 0,
        "ingest.write_strategy": sc["strategy"], "partition.split.threshold":
            sc["split_threshold"], "parquet.row_group_rows": 128, "sample.size": 16}
    if in_compaction:
        props["compaction.iterators"] = json.dumps([LAST if how == "last" else LATEST])
    root = tmp / "store"
    store = sd.Store.open(str(root), create=True)
    table = store.create_table("t", SCHEMA, split_points=sc["split_points"], properties=props)
    batches: list[pa.Table] = []
    seen: dict[int, list[dict[str, Any]]] = {}
    for c, (rows, compact) in enumerate(zip(sc["commits"], sc["compact_after"], strict=True)):
        batches.append(records(c + 1, rows))
        table.ingest(batches[-1])
        want = expected(batches, how)
        assert answer(table, how, in_compaction=in_compaction) == want
        seen[table.version] = want
        if compact:
            table.split()
            table.compact()
            assert answer(table, how, in_compaction=in_compaction) == want
            seen[table.version] = want
    for _ in range(3):  # compact fully: the answer never moves
        table.split()
        if not table.compact().did_work:
            break
        assert answer(table, how, in_compaction=in_compaction) == want
    seen[table.version] = want
    # every reader of every version gives the recorded answer
    fresh = sd.Store.open(str(root)).table("t")
    log_only = log_only_copy(root, tmp / "copy").table("t")
    for v, want_v in seen.items():
        for reader in (table, fresh, log_only):
            assert answer(reader, how, in_compaction=in_compaction, version=v) == want_v, \
                (v, reader)
    assert answer(fresh, how, in_compaction=in_compaction) == want
    assert answer(log_only, how, in_compaction=in_compaction) == want
    assert fresh._handle.states.head() == log_only._handle.states.head()  # sequences included


def test_compaction_of_files_not_adjacent_in_commit_order(tmp_path: Path) -> None:
    """Files 1 and 3 merge while 2 stays: the merged file's records keep their sequences, so
    2's records still sort between them."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties={"state.cache.refresh_seconds": 0})
    batches = [records(c, [("k", 1)] * 3 + [("j", c)]) for c in (1, 2, 3)]
    for b in batches:
        table.ingest(b)
    files = {r.sequence: r for r in table.files()}
    first, _, third = (files[s] for s in sorted(files))
    from sediment.compaction.runner import run_job
    from sediment.compaction.strategy import CompactionJob
    from sediment.core.transactions import AssignJobIds, JobAssignment

    table._handle.states.commit(AssignJobIds([JobAssignment("j", first.partition_id,
                                                    [first.filename, third.filename])]))
    state = table._handle.states.head()
    result = run_job(table._handle, state, CompactionJob("j", first.partition_id,
                                                 tuple(state.job_inputs("j"))))
    assert result.committed
    assert len(table.files()) == 2
    for how in ("last", "latest", None):
        assert answer(table, how, in_compaction=False) == expected(batches, how)
    store2 = sd.Store.open(str(tmp_path / "s"), create=True)
    assert answer(store2.table("t"), "last", in_compaction=False) == expected(batches, "last")


@pytest.mark.parametrize("variant", ["normalised", "ties", "spill"])
def test_one_big_ingest_keeps_input_order(tmp_path: Path, variant: str) -> None:
    """Past 65,536 rows (the normalised-key sort, its DataFusion fallback, spilled runs),
    equal keys keep their input order within one write: the later row wins."""
    rng = np.random.default_rng(11)
    n = 80_000
    if variant == "ties":
        keys = [f"key-{k:03d}" for k in rng.integers(0, 200, n)]
    else:
        keys = [f"{k:09d}" for k in rng.integers(0, 10 ** 9, n)]
        for i in rng.integers(0, n, n // 50):  # 2% repeat an earlier key (same ts below)
            keys[i] = keys[i // 2]
    ts = [0] * n if variant != "ties" else rng.integers(0, 3, n).tolist()
    data = pa.table({"key": keys, "ts": ts, "v": np.arange(n),
                     "note": [f"n{i % 97}" for i in range(n)]}, schema=ARROW)
    props: dict[str, Any] = {"parquet.row_group_rows": 4096}
    if variant == "spill":
        props["ingest.memory_limit_bytes"] = 1024 * 1024
    table = sd.Store.open(str(tmp_path / "s"), create=True).create_table(
        "t", SCHEMA, split_points=[("5",)], properties=props)
    table.ingest(data.to_batches(max_chunksize=5_000) if variant == "spill" else data)
    for how in ("last", None):
        assert answer(table, how, in_compaction=False) == expected([data], how)


def test_a_later_ingest_wins_over_a_compacted_one_and_restore_keeps_order(
        tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties={
        "compaction.strategy": "basic", "compaction.batch_size": 2,
        "state.cache.refresh_seconds": 0, "state.snapshot.interval": 2})
    batches = [records(c, [(k, 0) for k in KEYS] * 2) for c in (1, 2)]
    for b in batches:
        table.ingest(b)
    table.compact()
    assert len(table.files()) == 1
    tagged = table.version
    table.tag("two")
    batches.append(records(3, [(k, 0) for k in KEYS[:2]]))
    table.ingest(batches[-1])
    assert answer(table, "last", in_compaction=False) == expected(batches, "last")
    table.restore("two")
    assert answer(table, "last", in_compaction=False) == expected(batches[:2], "last")
    assert answer(table, "last", in_compaction=False, version=tagged) == \
        expected(batches[:2], "last")


def test_dump_and_load_keep_the_order_of_ties(tmp_path: Path) -> None:
    """A dump of a compacted table (its file copied whole, hidden column and all) loads into
    a table that answers the same; the loaded file's own column is ignored there."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties={
        "compaction.strategy": "basic", "compaction.batch_size": 2,
        "state.cache.refresh_seconds": 0})
    batches = [records(c, [(k, t) for k in KEYS for t in (0, 1)] * 2) for c in (1, 2)]
    for b in batches:
        table.ingest(b)
    table.compact()
    job = table.dump(str(tmp_path / "dump"))
    other = store.create_table("other", SCHEMA, properties={"state.cache.refresh_seconds": 0})
    later = records(3, [(k, 1) for k in KEYS])  # before the load: the load is later
    other.ingest(later)
    loaded = store.load(job.manifest_uri, "other")
    for how in ("last", None):
        assert answer(loaded, how, in_compaction=False) == expected([later, *batches], how)
    assert answer(table, None, in_compaction=False) == expected(batches, None)
    assert SEQ not in loaded.query().column_names


def test_users_never_see_the_hidden_column(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties={
        "compaction.strategy": "basic", "compaction.batch_size": 2})
    for c in (1, 2, 3):
        table.ingest(records(c, [("a", 0), ("b", 1)]))
    table.compact()
    for t in (table.query(), table.scan().read_all(), table.query(keys=["a"]),
              table.query(columns=["key", "v"])):
        assert SEQ not in t.column_names
    assert SEQ not in table.schema.field_names


def test_uuid_names_do_not_decide(tmp_path: Path) -> None:
    """Whatever the file names, the later commit wins, also when the state comes from a
    snapshot (which stores references sorted by file name)."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties={"state.snapshot.interval": 1,
                                                        "state.cache.refresh_seconds": 0})
    batches = []
    for c in range(1, 9):
        batches.append(records(c, [(k, 0) for k in KEYS]))
        table.ingest(batches[-1])
    fresh = sd.Store.open(str(tmp_path / "s")).table("t")
    for t in (table, fresh):
        assert answer(t, "last", in_compaction=False) == expected(batches, "last")
        got = pd.DataFrame(answer(t, None, in_compaction=False))
        assert got["v"].tolist() == [r["v"] for r in expected(batches, None)]


def test_compaction_merge_needs_no_sort(tmp_path: Path) -> None:
    """Inputs without the column (a constant sequence) and compacted inputs (sorted by keys
    then sequence) merge with DataFusion's streaming sort-preserving merge, never a sort."""
    from sediment.compaction.job import _merge_frame
    from sediment.compaction.sources import resolve_inputs
    from sediment.core.model import Region

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties={
        "compaction.strategy": "basic", "compaction.batch_size": 2})
    for c in (1, 2):
        table.ingest(records(c, [("a", 0), ("b", 1)]))
    table.compact()
    table.ingest(records(3, [("a", 0)]))
    refs = table.files()
    assert sorted(r.sequenced for r in refs) == [False, True]
    inputs = resolve_inputs(table._handle.objects, refs, str(tmp_path), local_disk_bytes=0,
                            job_id="j").files
    for region in (None, Region(("a",), ("b",))):
        plan = str(_merge_frame(inputs, SCHEMA, 1024, 64 << 20, region)
                   .execution_plan().display_indent())
        assert "SortPreservingMergeExec" in plan and "SortExec" not in plan, plan
