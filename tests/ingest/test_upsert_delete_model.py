"""Upserts and deletes against a reference: random sequences of writes, deletes, compactions,
splits and restores, every version read back exactly as the reference says.

The reference holds each version's records as a list in the order a read returns them:
sorted by record key (row key ``k``, sort key ``ts``), records of one record key in commit
order, one commit's in input order. Its semantics, written out:

- ingest: the records are added (equal keys kept, each one);
- upsert: of equal record keys in the input the last is kept; every older record of those
  record keys is removed; the records are added;
- delete by keys: every record of those row keys is removed; by range ``[lo, hi)``: every
  record whose row key is in it; by filter: every record it matches (a null comparison
  matches nothing; with a merge rule, every record of a key whose merged record it
  matches); records written later are never touched;
- compact, split: no change; restore v: version v's records.

Then the table's merge rule (``merge``) applies to what is left, as
``support.merge_reference`` computes it: the machine runs once per rule.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import sediment as sd
from support.merge_reference import merged

SCHEMA = sd.Schema(row_keys=[("k", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.string()), ("n", pa.int64())])
KEYS = ["", "a", "ab", "b", "m", "z", "é"]
Record = tuple[str, int, str, int | None]

record = st.tuples(st.sampled_from(KEYS), st.integers(0, 2), st.sampled_from(["x", "y", "w"]),
                   st.one_of(st.none(), st.integers(-3, 3)))
records = st.lists(record, min_size=1, max_size=8)


def _order(r: tuple[Record, int, int]) -> tuple[bytes, int, int, int]:
    (k, ts, _, _), seq, pos = r
    return k.encode(), ts, seq, pos


def as_table(rows: list[Record]) -> pa.Table:
    return pa.table({"k": pa.array([r[0] for r in rows], pa.string()),
                     "ts": pa.array([r[1] for r in rows], pa.int64()),
                     "v": pa.array([r[2] for r in rows], pa.string()),
                     "n": pa.array([r[3] for r in rows], pa.int64())})


def as_records(t: pa.Table) -> list[Record]:
    d = t.select(["k", "ts", "v", "n"]).to_pydict()
    return list(zip(d["k"], d["ts"], d["v"], d["n"], strict=True))


class UpsertDeleteModel(RuleBasedStateMachine):
    RULE = "none"

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="sediment-upserts-")
        store = sd.Store.open(self.dir, create=True)
        self.table = store.create_table(
            "m", SCHEMA, properties={
                "partition.split.threshold": 10, "compaction.strategy": "basic",
                "compaction.batch_size": 2, "parquet.row_group_rows": 128,
                "state.snapshot.interval": 4, "state.cache.refresh_seconds": 0,
                "merge": self.RULE})
        # (record, sequence, position): sequence is the committing version
        self.live: list[tuple[Record, int, int]] = []
        self.versions: dict[int, list[Record]] = {self.table.version: []}

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _now(self) -> list[Record]:
        """The records the reference holds, in read order (before the merge rule)."""
        return [r for r, _, _ in sorted(self.live, key=_order)]

    def _answer(self, rows: list[Record]) -> list[Record]:
        """What a read returns of ``rows`` (in read order): the merge rule applied."""
        if self.RULE == "none":
            return rows
        out = merged([as_table(rows)], ["k", "ts"], self.RULE)
        return [(r["k"], r["ts"], r["v"], r["n"]) for r in out]

    def _committed(self, version: int) -> None:
        head = self.table.version
        assert head >= version
        for v in range(max(self.versions) + 1, head + 1):
            self.versions[v] = self._now()

    def _same_until_now(self) -> None:
        self._committed(max(self.versions))

    # ---- writes --------------------------------------------------------------------------
    @rule(rows=records)
    def ingest(self, rows: list[Record]) -> None:
        v = self.table.ingest(as_table(rows)).version
        self.live += [(r, v, i) for i, r in enumerate(rows)]
        self._committed(v)

    @rule(rows=records)
    def upsert(self, rows: list[Record]) -> None:
        v = self.table.upsert(as_table(rows)).version
        last = {(r[0], r[1]): (i, r) for i, r in enumerate(rows)}
        self.live = [x for x in self.live if (x[0][0], x[0][1]) not in last]
        self.live += [(r, v, i) for i, r in last.values()]
        self._committed(v)

    @rule(keys=st.lists(st.sampled_from([*KEYS, "q"]), min_size=1, max_size=3))
    def delete_keys(self, keys: list[str]) -> None:
        v = self.table.delete(keys=keys)
        self.live = [x for x in self.live if x[0][0] not in keys]
        self._committed(v)

    @rule(lo=st.sampled_from([None, *KEYS]), hi=st.sampled_from([None, *KEYS, "zz"]))
    def delete_range(self, lo: str | None, hi: str | None) -> None:
        if lo is not None and hi is not None and lo.encode() > hi.encode():
            lo, hi = hi, lo
        v = self.table.delete(ranges=[sd.Range(lo, hi)])

        def inside(k: str) -> bool:
            return (lo is None or k.encode() >= lo.encode()) and \
                (hi is None or k.encode() < hi.encode())

        self.live = [x for x in self.live if not inside(x[0][0])]
        self._committed(v)

    @rule(n=st.integers(-3, 3), text=st.booleans(), key=st.sampled_from([None, "a", "m"]))
    def delete_filter(self, n: int, text: bool, key: str | None) -> None:
        if key is None:
            where: Any = f"n > {n}" if text else pc.field("n") > n
        else:  # constraints on the row key too: they narrow the leaves it covers
            where = f"n > {n} AND k >= '{key}'" if text else \
                (pc.field("n") > n) & (pc.field("k") >= key)
        v = self.table.delete(filter=where)

        def matches(r: Record) -> bool:
            return r[3] is not None and r[3] > n and \
                (key is None or r[0].encode() >= key.encode())

        if self.RULE == "none":  # record by record
            self.live = [x for x in self.live if not matches(x[0])]
        else:  # the record the rule makes of a key's records matches: all of them go
            gone = {(r[0], r[1]) for r in self._answer(self._now()) if matches(r)}
            self.live = [x for x in self.live if (x[0][0], x[0][1]) not in gone]
        self._committed(v)

    # ---- maintenance and versions ------------------------------------------------------
    @rule(full=st.booleans())
    def compact(self, full: bool) -> None:
        self.table.compact(full=full)
        self._same_until_now()

    @rule()
    def maintain(self) -> None:
        self.table.maintain()
        self._same_until_now()

    @precondition(lambda self: len(self.versions) > 1)
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        old = data.draw(st.sampled_from(sorted(self.versions)))
        v = self.table.restore(old)
        rows = self.versions[old]
        # the restored records read as written at their old sequences: keep their order
        self.live = [(r, 0, i) for i, r in enumerate(rows)]
        self._committed(v)

    @rule(data=st.data())
    def time_travel(self, data: st.DataObject) -> None:
        v = data.draw(st.sampled_from(sorted(self.versions)))
        assert as_records(self.table.query(version=v)) == self._answer(self.versions[v])

    # ---- every read of the head -------------------------------------------------------
    @invariant()
    def reads_match(self) -> None:
        want = self._answer(self._now())
        assert as_records(self.table.query()) == want
        streamed = pa.Table.from_batches(list(self.table.scan()), schema=SCHEMA.to_arrow())
        assert as_records(streamed) == want
        for k in ("a", "m", "q"):
            assert as_records(self.table.query(keys=[k])) == [r for r in want if r[0] == k]


UpsertDeleteModel.TestCase.settings = settings(
    max_examples=25, stateful_step_count=12, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestUpsertDeleteModel = UpsertDeleteModel.TestCase


class UpsertDeleteModelLast(UpsertDeleteModel):
    RULE = "last"


class UpsertDeleteModelFirst(UpsertDeleteModel):
    RULE = "first"


class UpsertDeleteModelPartial(UpsertDeleteModel):
    RULE = "partial"


for _rule in (UpsertDeleteModelLast, UpsertDeleteModelFirst, UpsertDeleteModelPartial):
    _rule.TestCase.settings = settings(
        max_examples=12, stateful_step_count=10, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestUpsertDeleteModelLast = UpsertDeleteModelLast.TestCase
TestUpsertDeleteModelFirst = UpsertDeleteModelFirst.TestCase
TestUpsertDeleteModelPartial = UpsertDeleteModelPartial.TestCase


@pytest.mark.parametrize("rule", ["first", "last"])
def test_a_key_deleted_then_written_again_is_judged_by_its_new_records(
        tmp_path: Path, rule: str) -> None:
    """Found by the machine above (merge ``first``): a filter delete removed a key whose only
    live record failed the filter, because the rule's record was made of the record an
    earlier delete had removed too."""
    table = sd.Store.open(str(tmp_path), create=True).create_table(
        "t", SCHEMA, properties={"merge": rule})

    def write(n: int | None) -> None:
        table.ingest(pa.table({"k": ["m"], "ts": [1], "v": ["x"],
                               "n": pa.array([n], pa.int64())}))

    write(0)
    table.delete(filter="n > -3")  # removes it
    write(None)
    table.delete(filter="n > -1")  # the live record's n is null: it stays
    assert table.query().to_pylist() == [{"k": "m", "ts": 1, "v": "x", "n": None}]
    table.compact(full=True)
    assert table.query().to_pylist() == [{"k": "m", "ts": 1, "v": "x", "n": None}]
