"""Reads of a ``merge="last"`` table after upserts: one large base file and a few small upserted
ones per leaf, the shape whose slabs the merge orders by placement (sediment.files.slab_order)
and gathers without the records the rule drops. Against pandas: the records sorted by key and
write, the last of each record key kept, deleted keys left out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sediment as sd
from helpers import make_table
from sediment.iterators.merge_rules import KeepFirst, KeepLast

SCHEMA = sd.Schema(row_keys=[("k", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.int64())])
# shared 8-byte prefixes ("prefix00…") and short keys: prefix ties the placement resolves
KEYS = [f"prefix00{i:02d}" for i in range(30)] + ["", "a", "a\x00", "b", "prefix00"]

WRITES = st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 2)), min_size=1,
                  max_size=12)


def _frame(records: list[tuple[str, int]], start: int) -> pd.DataFrame:
    return pd.DataFrame({"k": [k for k, _ in records], "ts": [t for _, t in records],
                         "v": range(start, start + len(records))})


@settings(max_examples=12, deadline=None)
@given(upserts=st.lists(WRITES, min_size=1, max_size=4),
       deleted=st.lists(st.sampled_from(KEYS), max_size=2),
       by_filter=st.booleans())
def test_scan_after_upserts_equals_keep_last(tmp_path_factory: object,
                                             upserts: list[list[tuple[str, int]]],
                                             deleted: list[str], by_filter: bool) -> None:
    path = tmp_path_factory.mktemp("last")  # type: ignore[attr-defined]
    t = make_table(Path(path), schema=SCHEMA, merge="last", **{"query.threads": 1})
    base = _frame([(k, ts) for k in KEYS for ts in range(3)] * 2, 0)  # repeated: merged
    t.ingest(pa.Table.from_pandas(base, preserve_index=False))
    t.maintain()  # one base file
    frames = [base]
    for i, records in enumerate(upserts):
        frame = _frame(records, 1000 * (i + 1))
        t.upsert(pa.Table.from_pandas(frame, preserve_index=False))
        frames.append(frame)
    want = pd.concat(frames, ignore_index=True)
    # (by the bytes' hex: pandas hashes "a" and "a\x00" alike)
    want["byte_key"] = want["k"].map(lambda k: k.encode().hex())
    want = want.sort_values(["byte_key", "ts"], kind="stable") \
        .drop_duplicates(["byte_key", "ts"], keep="last").drop(columns="byte_key")
    if deleted:
        if by_filter:
            t.delete(filter=pc.field("k").isin(deleted))
        else:
            t.delete(keys=[(k,) for k in deleted])
        want = want[~want["k"].isin(deleted)]
    want = want.reset_index(drop=True)
    assert len(t.files()) > 1  # the base and the upserts: a merge
    scanned = pa.Table.from_batches(list(t.scan()), schema=SCHEMA.to_arrow())
    for got in (scanned, t.query()):
        assert got.to_pandas().equals(want), (got.to_pandas(), want)


@pytest.mark.parametrize("rule", ["last", "first"])
def test_lookup_of_one_record_runs_no_merge_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 rule: str) -> None:
    """A lookup whose leaf answers one record returns it without running the merge rule
    (``last`` and ``first`` keep one record per key: one record has nothing to drop); one
    that finds a key's several writes (files not merged yet) still runs it."""
    kind = KeepLast if rule == "last" else KeepFirst
    t = make_table(tmp_path, schema=SCHEMA, merge=rule)
    t.ingest(pa.table({"k": ["a", "b"], "ts": [1, 1], "v": [1, 2]}))
    t.ingest(pa.table({"k": ["b"], "ts": [1], "v": [3]}))  # a second file: b written twice
    calls: list[str] = []
    real = kind.apply

    def spy(self: KeepLast | KeepFirst, batches: Iterator[pa.RecordBatch]
            ) -> Iterator[pa.RecordBatch]:
        calls.append(rule)
        return real(self, batches)

    monkeypatch.setattr(kind, "apply", spy)
    assert t.query(keys=["a"]).to_pylist() == [{"k": "a", "ts": 1, "v": 1}]
    assert calls == []
    assert t.query(keys=["b"]).to_pylist() == [{"k": "b", "ts": 1,
                                               "v": 3 if rule == "last" else 2}]
    assert calls == [rule]
