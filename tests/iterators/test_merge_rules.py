"""Merge rules (the ``merge`` and ``merge.functions`` table properties) against an independent
pandas reference (support.merge_reference), through a table: several ingests (several files per
leaf, equal record keys inside one ingest and across ingests, nulls, sort keys) read by
``query``, by ``scan`` in small batches (128-row row groups: runs of equal keys straddle
batches) and by exact-key lookups, before and after compactions that merge files that are not
consecutive in commit order, and after splits into several leaves. Then the order of the
iterators, raw reads, and every refusal (an unknown rule or function, a function naming an
unknown or key field or one its type does not fit, switching the rule on a table holding data).
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sediment as sd
from sediment.compaction.strategy import plan_compaction_jobs
from sediment.core.head import Head
from sediment.errors import PropertyError
from sediment.iterators import Aggregate
from sediment.iterators.merge_rules import KeepFirst, KeepLast, PartialUpdate
from sediment.properties import describe_properties
from sediment.query.prepare import table_iterators
from support.merge_reference import merged

SCHEMA = sd.Schema(row_keys=[("k", pa.string())], sort_keys=[("t", pa.int64())],
                   values=[("v", pa.int64()), ("s", pa.string()), ("f", pa.float64()),
                           ("u", pa.int32())])
KEYS = ["k", "t"]
FUNCTIONS = {"v": "sum", "s": "concat", "f": "max"}  # u: not named, takes last
SUMMED = {"v": "sum", "f": "min", "s": "last"}  # no concat: any files may merge
RULES = ["none", "last", "first", "partial", "aggregate"]
HOT = ["a", "b", "c"]
COLD = [f"k{i:02d}" for i in range(40)]


def _props(rule: str, **more: Any) -> dict[str, Any]:
    """A table's properties for ``rule`` ("summed": aggregate without concat)."""
    props: dict[str, Any] = {"merge": "aggregate" if rule == "summed" else rule,
                             "state.cache.refresh_seconds": 0,
                             "parquet.row_group_rows": 128, **more}
    if rule in ("aggregate", "summed"):
        props["merge.functions"] = json.dumps(FUNCTIONS if rule == "aggregate" else SUMMED)
    return props


def _table(store: sd.Store, rule: str, **more: Any) -> sd.Table:
    return store.create_table(f"t{uuid.uuid4().hex[:8]}", SCHEMA, properties=_props(rule, **more))


def _maybe(rng: random.Random, v: Any, p: float = 0.3) -> Any:
    return None if rng.random() < p else v


def _ingest(rng: random.Random, n: int, tag: str) -> pa.Table:
    """``n`` rows: half on three hot keys (long runs, straddling row groups), half on forty
    others; three sort-key values; every value field null now and then."""
    keys = [rng.choice(HOT) if rng.random() < 0.5 else rng.choice(COLD) for _ in range(n)]
    return pa.table({
        "k": keys, "t": [rng.randint(0, 2) for _ in range(n)],
        "v": [_maybe(rng, rng.randint(-50, 50)) for _ in range(n)],
        "s": [_maybe(rng, f"{tag}{i}") for i in range(n)],
        "f": [_maybe(rng, rng.randint(-40, 40) / 4) for _ in range(n)],
        "u": pa.array([_maybe(rng, i) for i in range(n)], pa.int32()),
    }, schema=SCHEMA.to_arrow())


def _expected(ingests: list[pa.Table], rule: str) -> list[dict[str, Any]]:
    if rule == "summed":
        return merged(ingests, KEYS, "aggregate", SUMMED)
    return merged(ingests, KEYS, rule, FUNCTIONS if rule == "aggregate" else None)


def _check(t: sd.Table, ingests: list[pa.Table], rule: str) -> bool:
    """query, a scan in small batches and exact-key lookups all answer the reference; True
    when a run of equal record keys straddled two batches of the stream the rule read."""
    want = _expected(ingests, rule)
    assert t.query().to_pylist() == want
    assert [r for b in t.scan() for r in b.to_pylist()] == want
    # the stream the rule reads (a raw read) comes in several batches, runs straddling them
    raw = list(t.prepare(sd.ReadRequest(raw=True)).to_batches())
    edges = [(raw[i][-1:].to_pylist()[0], raw[i + 1][:1].to_pylist()[0])
             for i in range(len(raw) - 1)]
    straddled = any((a["k"], a["t"]) == (b["k"], b["t"]) for a, b in edges)
    for keys in (["a"], ["k07", "c"], ["zz"]):
        assert t.query(keys=keys).to_pylist() == [r for r in want if r["k"] in keys]
    assert t.query(ranges=[sd.Range("b", "k10")]).to_pylist() == \
        [r for r in want if "b" <= r["k"] < "k10"]
    return straddled


@pytest.mark.parametrize("rule", [*RULES, "summed"])
def test_each_rule_over_ingests_compactions_and_splits(rule: str) -> None:
    store = sd.Store.open(f"memory://merge-{uuid.uuid4().hex}", create=True)
    # compaction merges the two smallest files, then the two others: with these sizes the
    # pairs are the 2nd and 4th ingests and the 1st and 3rd, neither consecutive in commit
    # order (partial and concat need consecutive inputs: their one job takes the whole leaf)
    t = _table(store, rule, **{"compaction.batch_size": 2, "compaction.ratio": 0})
    rng = random.Random(f"merge-{rule}")
    ingests = [_ingest(rng, n, f"i{i}-") for i, n in enumerate([3000, 1000, 3500, 1200])]
    for b in ingests:
        t.ingest(b)
    assert len(t.files()) == 4
    straddled = [_check(t, ingests, rule)]
    if rule != "none":
        assert len(_expected(ingests, rule)) < sum(b.num_rows for b in ingests)

    result = t.compact()
    assert not result.errors
    assert len(t.files()) == (1 if rule in ("partial", "aggregate") else 2)
    straddled.append(_check(t, ingests, rule))
    t.compact(full=True)
    assert len(t.files()) == 1
    straddled.append(_check(t, ingests, rule))

    # more writes on top of the compacted file, then splits into several leaves: the records
    # of a key stay in one leaf, whatever the order in which its files are merged
    ingests += [_ingest(rng, n, f"j{i}-") for i, n in enumerate([2000, 900])]
    for b in ingests[-2:]:
        t.ingest(b)
    t.set_properties({"partition.split.threshold": 1500})
    t.maintain()
    assert len(t.leaves()) > 1
    straddled.append(_check(t, ingests, rule))
    ingests.append(_ingest(rng, 1500, "x-"))
    t.ingest(ingests[-1])
    straddled.append(_check(t, ingests, rule))
    t.compact(full=True)
    straddled.append(_check(t, ingests, rule))
    assert any(straddled)


def test_equal_keys_inside_one_ingest_resolve_in_input_order() -> None:
    store = sd.Store.open(f"memory://merge-{uuid.uuid4().hex}", create=True)
    rows = [("a", 1, 1, "x", None, 7), ("b", 0, 5, None, 1.5, None), ("a", 1, None, "y", 2.0, None),
            ("a", 1, 3, None, None, 9), ("a", 0, 4, "z", None, None)]
    data = pa.Table.from_pylist([dict(zip(SCHEMA.field_names, r, strict=True)) for r in rows],
                                schema=SCHEMA.to_arrow())
    got = {rule: _table(store, rule) for rule in RULES}
    for t in got.values():
        t.ingest(data)
    a1 = {rule: [r for r in t.query(keys=["a"]).to_pylist() if r["t"] == 1]
          for rule, t in got.items()}
    assert a1["last"] == [{"k": "a", "t": 1, "v": 3, "s": None, "f": None, "u": 9}]
    assert a1["first"] == [{"k": "a", "t": 1, "v": 1, "s": "x", "f": None, "u": 7}]
    assert a1["partial"] == [{"k": "a", "t": 1, "v": 3, "s": "y", "f": 2.0, "u": 9}]
    assert a1["aggregate"] == [{"k": "a", "t": 1, "v": 4, "s": "xy", "f": 2.0, "u": 9}]
    assert len(a1["none"]) == 3
    for rule, t in got.items():  # (a, 0) and (b, 0) are one record each, as written
        assert t.query().num_rows == (5 if rule == "none" else 3)


def test_rule_runs_first_then_compaction_query_and_per_query_iterators_then_filter() -> None:
    """The latest record of ``a`` has v = -1, an earlier one v = 5. With the rule first, a
    "v > 0" iterator (at any of the three places) or filter drops ``a``; run before the
    rule it would let the earlier record through."""
    store = sd.Store.open(f"memory://merge-{uuid.uuid4().hex}", create=True)
    positive = {"type": "filter", "field": "v", "op": ">", "value": 0}
    old = pa.Table.from_pylist([{"k": "a", "t": 0, "v": 5}, {"k": "b", "t": 0, "v": 2}],
                               schema=SCHEMA.to_arrow())
    new = pa.Table.from_pylist([{"k": "a", "t": 0, "v": -1}], schema=SCHEMA.to_arrow())
    tables = [_table(store, "last", **{"compaction.iterators": json.dumps([positive])}),
              _table(store, "last", **{"query.iterators": json.dumps([positive])}),
              _table(store, "last"), _table(store, "last")]
    for t in tables:
        t.ingest(old)
        t.ingest(new)
    b = [{"k": "b", "t": 0, "v": 2, "s": None, "f": None, "u": None}]
    assert tables[0].query().to_pylist() == b
    assert tables[1].query().to_pylist() == b
    assert tables[2].query(iterators=[positive]).to_pylist() == b
    assert tables[3].query(filter=pc.field("v") > 0).to_pylist() == b
    assert tables[3].query(filter="v > 0").to_pylist() == b
    tables[0].compact(full=True)
    assert tables[0].query().to_pylist() == b
    # the rule heads both lists: every read's, and compaction's
    for t in tables[:2]:
        state = t.state()
        assert isinstance(table_iterators(state, t.name)[0], KeepLast)
        its = Head.of(state, t.name).iterators
        assert isinstance(its[0], KeepLast) and len(its) == (2 if t is tables[0] else 1)


def test_each_rule_builds_its_iterator_and_whole_leaf_jobs_only_where_order_matters() -> None:
    store = sd.Store.open(f"memory://merge-{uuid.uuid4().hex}", create=True)
    kinds = {"none": type(None), "last": KeepLast, "first": KeepFirst,
             "partial": PartialUpdate, "aggregate": Aggregate}
    for rule, kind in kinds.items():
        t = _table(store, rule)
        its = table_iterators(t.state(), t.name)
        assert isinstance(its[0] if its else None, kind)
    concat = _table(store, "none", **{"merge": "aggregate",
                                      "merge.functions": json.dumps({"s": "concat"})})
    summed = _table(store, "none", **{"merge": "aggregate",
                                      "merge.functions": json.dumps({"v": "sum", "f": "min"})})
    rng = random.Random(1)
    # four files in one leaf, the two smallest (the 1st and 3rd) not consecutive
    for t in (concat, summed, _table(store, "partial"), _table(store, "last"),
              _table(store, "first")):
        for n in (20, 60, 30, 70):
            t.ingest(_ingest(rng, n, "w"))
        head = t.state()
        jobs = plan_compaction_jobs(head, {**head.properties, "compaction.batch_size": 2,
                                           "compaction.ratio": 0})
        whole = t.properties["merge"] == "partial" or t is concat
        assert [len(j.inputs) for j in jobs] == ([4] if whole else [2, 2]), t.properties


def test_a_raw_read_skips_the_rule() -> None:
    """A raw read (internal: change feeds) is the records as stored: the rule is not
    applied, so it shows every write compaction has not merged yet."""
    store = sd.Store.open(f"memory://merge-{uuid.uuid4().hex}", create=True)
    t = _table(store, "last")
    rng = random.Random(2)
    ingests = [_ingest(rng, 50, "r"), _ingest(rng, 50, "s")]
    for b in ingests:
        t.ingest(b)
    raw = t.prepare(sd.ReadRequest(raw=True)).to_arrow()
    assert raw.to_pylist() == _expected(ingests, "none")
    assert t.query().to_pylist() == _expected(ingests, "last")
    t.compact(full=True)  # compaction merged them: the stored records are the merged ones
    assert t.prepare(sd.ReadRequest(raw=True)).to_arrow().to_pylist() == \
        _expected(ingests, "last")


def test_the_rule_is_set_while_the_table_is_empty_and_shown() -> None:
    store = sd.Store.open(f"memory://merge-{uuid.uuid4().hex}", create=True)
    t = _table(store, "none")
    assert t.describe()["properties"]["merge"] == "none"
    t.set_properties({"merge": "aggregate", "merge.functions": json.dumps(FUNCTIONS)})
    assert t.describe()["properties"]["merge"] == "aggregate"
    assert json.loads(t.describe()["properties"]["merge.functions"]) == FUNCTIONS
    rng = random.Random(4)
    ingests = [_ingest(rng, 80, "p"), _ingest(rng, 80, "q")]
    for b in ingests:
        t.ingest(b)
    _check(t, ingests, "aggregate")
    # the same value again is no change; cleared, the table takes another rule
    t.set_properties({"merge": "aggregate",
                      "merge.functions": json.dumps(dict(reversed(FUNCTIONS.items())))})
    t.clear()
    t.set_properties({"merge": "first"}, remove=["merge.functions"])
    for b in ingests:
        t.ingest(b)
    _check(t, ingests, "first")
    listed = {p["name"]: p for p in describe_properties()}
    assert listed["merge"]["choices"] == RULES and listed["merge"]["default"] == "none"
    assert "Paimon" in listed["merge"]["doc"] and "concat" in listed["merge.functions"]["doc"]


# ---- refusals ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("props", "match"), [
    ({"merge": "latest"}, r"'merge' of table bad: 'latest' is not one of none, last"),
    ({"merge": "aggregate", "merge.functions": '{"v": "avg"}'},
     r"merge.functions of table bad: unknown function 'avg' for field 'v'"),
    ({"merge": "aggregate", "merge.functions": '{"nope": "sum"}'},
     r"merge.functions of table bad: unknown field 'nope'"),
    ({"merge": "aggregate", "merge.functions": '{"k": "sum"}'},
     r"merge.functions of table bad: field 'k' is a key field"),
    ({"merge": "aggregate", "merge.functions": '{"t": "max"}'},
     r"merge.functions of table bad: field 't' is a key field"),
    ({"merge": "aggregate", "merge.functions": '{"s": "sum"}'},
     r"merge.functions of table bad: sum on field 's' needs a numeric type, not string"),
    ({"merge": "aggregate", "merge.functions": '{"v": "concat"}'},
     r"merge.functions of table bad: concat on field 'v' needs a string"),
    ({"merge": "aggregate", "merge.functions": '{"v": "sum", "v": "max"}'},
     r"merge.functions of table bad: field 'v' is given more than one function"),
    ({"merge": "aggregate", "merge.functions": '["v"]'},
     r"merge.functions of table bad: must be a JSON object"),
    ({"merge": "aggregate", "merge.functions": '{"v": 1}'},
     r"merge.functions of table bad: must be a JSON object"),
    ({"merge": "aggregate", "merge.functions": '{"v": '},
     r"merge.functions of table bad: not a JSON object"),
    ({"merge": "last", "merge.functions": '{"v": "sum"}'},
     r"'merge.functions' of table bad: only the aggregate merge rule reads it, and merge is "
     r"'last'"),
])
def test_a_bad_rule_or_function_is_refused_naming_the_table_and_field(
        props: dict[str, Any], match: str) -> None:
    store = sd.Store.open(f"memory://merge-{uuid.uuid4().hex}", create=True)
    with pytest.raises(PropertyError, match=match):
        store.create_table("bad", SCHEMA, properties=props)
    assert "bad" not in store.tables()
    t = store.create_table("bad", SCHEMA)
    before = t.version
    with pytest.raises(PropertyError, match=match.replace("of table bad", "of table bad")):
        t.set_properties(props)
    assert t.version == before and t.properties["merge"] == "none"


@pytest.mark.parametrize(("rule", "updates", "remove", "match"), [
    ("none", {"merge": "last"}, [], "property merge cannot change from 'none' to 'last'"),
    ("last", {"merge": "first"}, [], "property merge cannot change from 'last' to 'first'"),
    ("last", {}, ["merge"], "property merge cannot change from 'last' to 'none'"),
    ("aggregate", {"merge": "first"}, ["merge.functions"], "property merge cannot change"),
    ("aggregate", {}, ["merge", "merge.functions"], "property merge cannot change"),
    ("aggregate", {"merge.functions": json.dumps({"v": "max"})}, [],
     "property merge.functions cannot change"),
    # the functions left behind are refused first (they would be read by no rule)
    ("aggregate", {"merge": "last"}, [], "'merge.functions' of table .*: only the aggregate"),
])
def test_switching_the_rule_on_a_table_holding_data_is_refused(
        rule: str, updates: dict[str, Any], remove: list[str], match: str) -> None:
    store = sd.Store.open(f"memory://merge-{uuid.uuid4().hex}", create=True)
    t = _table(store, rule)
    t.ingest(_ingest(random.Random(5), 60, "d"))
    before, answer, props = t.version, t.query(), t.properties
    with pytest.raises(PropertyError, match=f"table {t.name}"):
        t.set_properties(updates, remove=remove)
    with pytest.raises(PropertyError, match=match) as refused:
        t.set_properties(updates, remove=remove)
    if "cannot change" in match:
        assert "once the table holds data" in str(refused.value)
    assert t.version == before and t.query().equals(answer) and t.properties == props


def test_switching_the_rule_on_a_table_holding_data_is_refused_by_the_commit_too() -> None:
    """The check is the transaction's, against the head it follows: a handle that read the
    table empty, with data committed since by another, is refused too."""
    from sediment.core.transactions import SetProperties

    store = sd.Store.open(f"memory://merge-{uuid.uuid4().hex}", create=True)
    t = _table(store, "none")
    t.ingest(_ingest(random.Random(6), 10, "e"))
    with pytest.raises(PropertyError, match=rf"table {t.name}: property merge cannot change "
                                            r"from 'none' to 'last'"):
        t._handle.states.commit(SetProperties({"merge": "last"}))
    # the switch off a rule is refused as well; a non-merge property is not
    t.set_properties({"query.threads": 2})
