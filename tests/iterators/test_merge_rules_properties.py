"""Hypothesis: the merge rules resolve ordering and ties as the reference does, however the
records are written, batched and compacted.

- The iterators on their own: random records (few keys, so equal record keys abound; nulls
  everywhere) in write order, sorted stably by record key as readers merge them, cut into
  random batches (sizes down to 1, empty ones mixed in) and carrying the hidden sequence column
  as compaction's stream does: the answer is the reference's, and each merged record keeps
  the sequence the rule promises (``first``: its own; the others: the latest record's).
- Through a table: random ingests with compactions in between (pairs of the smallest files,
  not consecutive in commit order, or everything): ``query`` answers the reference.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import sediment as sd
from sediment.files.sequence import SEQ
from sediment.iterators.merge_rules import merge_rule
from support.merge_reference import merged

SCHEMA = sd.Schema(row_keys=[("k", pa.string())], sort_keys=[("t", pa.int32())],
                   values=[("v", pa.int64()), ("s", pa.string()), ("f", pa.float64())])
KEYS = ["k", "t"]
# (merge, merge.functions): every rule, aggregate with and without an order-dependent function
RULES: dict[str, tuple[str, dict[str, str] | None]] = {
    "none": ("none", None), "last": ("last", None), "first": ("first", None),
    "partial": ("partial", None),
    "aggregate": ("aggregate", {"v": "sum", "s": "concat", "f": "max"}),
    "aggregate-last": ("aggregate", {"v": "min", "f": "last"}),
}

rows = st.lists(st.fixed_dictionaries({
    "k": st.sampled_from(["a", "b", "bb", "c"]),
    "t": st.integers(0, 1),
    "v": st.none() | st.integers(-5, 5),
    "s": st.none() | st.sampled_from(["x", "y", "zz", ""]),
    "f": st.none() | st.sampled_from([-1.5, 0.0, 2.25]),
}), max_size=25)


def _sorted(records: list[dict[str, Any]]) -> pa.Table:
    """``records`` (in write order) as a reader's stream: sorted stably by record key, each
    with its write position as the sequence."""
    table = pa.Table.from_pylist(records, schema=SCHEMA.to_arrow())
    table = table.append_column(SEQ, pa.array(range(len(records)), pa.int64()))
    return table.sort_by([("k", "ascending"), ("t", "ascending"), (SEQ, "ascending")])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule=st.sampled_from(sorted(RULES)), records=rows, cuts=st.lists(st.integers(0, 25)))
def test_the_iterators_match_the_reference_in_any_batches(
        rule: str, records: list[dict[str, Any]], cuts: list[int]) -> None:
    kind, functions = RULES[rule]
    stream = _sorted(records)
    whole = pa.RecordBatch.from_arrays([c.combine_chunks() for c in stream.columns],
                                       schema=stream.schema)
    bounds = sorted([0, whole.num_rows, *(min(c, whole.num_rows) for c in cuts)])
    flat = [whole.slice(a, b - a) for a, b in zip(bounds, bounds[1:], strict=False)]
    it = merge_rule(kind, json.dumps(functions) if functions else "", SCHEMA)
    out = pa.Table.from_batches(list(it.apply(iter(flat))) if it else flat,
                                schema=stream.schema)
    assert out.drop_columns([SEQ]).to_pylist() == merged([records], KEYS, kind, functions)
    # the sequence each merged record keeps: its own for first, the latest record's otherwise
    by_key: dict[tuple[Any, Any], list[int]] = {}
    for i, r in enumerate(records):
        by_key.setdefault((r["k"], r["t"]), []).append(i)
    seqs = [(r["k"], r["t"], r[SEQ]) for r in out.to_pylist()]
    if kind == "none":
        assert sorted(s for *_, s in seqs) == list(range(len(records)))
    else:
        pick = min if kind == "first" else max
        assert seqs == [(k, t, pick(by_key[(k, t)])) for k, t, _ in seqs]


ingests = st.lists(st.fixed_dictionaries({
    "k": st.sampled_from(["a", "b"]),
    "t": st.integers(0, 1),
    "v": st.none() | st.integers(-5, 5),
    "s": st.none() | st.sampled_from(["x", "y", "zz", ""]),
    "f": st.none() | st.sampled_from([-1.5, 0.0, 2.25]),
}), min_size=1, max_size=10)
ops = st.lists(st.one_of(ingests.map(lambda r: ("ingest", r)),
                         st.sampled_from([("compact", None), ("full", None)])),
               min_size=1, max_size=9)


def _a(v: int | None, s: str | None) -> dict[str, Any]:
    return {"k": "a", "t": 0, "v": v, "s": s, "f": None}


# the 1st and 3rd files are the smallest, so compaction merges them first: the order-dependent
# rules must merge the whole leaf instead, or the 2nd file's values would read as the latest
_SKIPPED = [("ingest", [_a(1, "x")]), ("ingest", [_a(2, "y"), *[{**_a(1, None), "k": "b"}] * 3]),
            ("ingest", [_a(None, None)]), ("compact", None)]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rule=st.sampled_from(sorted(RULES)), steps=ops)
@example(rule="partial", steps=_SKIPPED)
@example(rule="aggregate", steps=_SKIPPED)
def test_a_table_answers_the_reference_through_ingests_and_compactions(
        rule: str, steps: list[tuple[str, Any]]) -> None:
    kind, functions = RULES[rule]
    props: dict[str, Any] = {"merge": kind, "compaction.batch_size": 2, "compaction.ratio": 0,
                             "state.cache.refresh_seconds": 0}
    if functions:
        props["merge.functions"] = json.dumps(functions)
    store = sd.Store.open(f"memory://props-{uuid.uuid4().hex}", create=True)
    t = store.create_table("t", SCHEMA, properties=props)
    written: list[list[dict[str, Any]]] = []
    for op, records in steps:
        if op == "ingest":
            if records:
                t.ingest(pa.Table.from_pylist(records, schema=SCHEMA.to_arrow()))
                written.append(records)
        else:
            assert not t.compact(full=op == "full").errors
        assert t.query().to_pylist() == merged(written, KEYS, kind, functions)
