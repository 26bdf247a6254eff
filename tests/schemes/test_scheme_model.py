"""A model check of co-sharding: two member tables of one scheme under ingest, scheme
splits, compaction and joins, against a pandas model of each table.

Every join (at the head, and at versions tagged earlier) equals ``pandas.merge`` of the
model's frames, and each table's ``query()`` equals its model, whatever the order of splits
and compactions; the two tables' leaves always match the scheme's once followed."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import pandas as pd
import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import sediment as sd

USERS = sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())])
ORDERS = sd.Schema(row_keys=[("user", pa.string())], values=[("item", pa.int64())])
KEYS = [f"k{i:03d}" for i in range(60)]
keys_st = st.lists(st.sampled_from(KEYS), min_size=1, max_size=40)


def frame(t: pa.Table) -> pd.DataFrame:
    return t.to_pandas()


def merged(left: pd.DataFrame, right: pd.DataFrame, how: str) -> pd.DataFrame:
    r = right.rename(columns={"user": "key"})
    return left.merge(r, on="key", how=how)


def canonical(df: pd.DataFrame) -> list[tuple[Any, ...]]:
    cols = sorted(df.columns)
    return sorted((tuple(None if pd.isna(v) else v for v in row)
                   for row in df[cols].itertuples(index=False)), key=repr)


class SchemeModel(RuleBasedStateMachine):
    @initialize(threshold=st.integers(5, 40))
    def setup(self, threshold: int) -> None:
        self.root = tempfile.mkdtemp(prefix="sediment-scheme-model-")
        self.store = sd.Store.open(self.root, create=True)
        self.store.create_scheme("users", row_keys=[("key", pa.string())],
                                 properties={"partition.split.threshold": threshold})
        props = {"state.cache.refresh_seconds": 0}
        # small join pieces: big leaves are joined in key sub-ranges too
        self.left = self.store.create_table(
            "u", USERS, scheme="users",
            properties={**props, "spark.read.target_partition_rows": 15})
        self.right = self.store.create_table("o", ORDERS, scheme="users", properties=props)
        self.model = {"u": pd.DataFrame({"key": pd.Series([], dtype=object),
                                         "v": pd.Series([], dtype="int64")}),
                      "o": pd.DataFrame({"user": pd.Series([], dtype=object),
                                         "item": pd.Series([], dtype="int64")})}
        self.tags: dict[str, dict[str, pd.DataFrame]] = {}
        self.n = 0

    def teardown(self) -> None:
        shutil.rmtree(getattr(self, "root", ""), ignore_errors=True)

    @rule(keys=keys_st)
    def ingest_left(self, keys: list[str]) -> None:
        vals = list(range(self.n, self.n + len(keys)))
        self.n += len(keys)
        self.left.ingest(pa.table({"key": keys, "v": vals}))
        self.model["u"] = pd.concat([self.model["u"], pd.DataFrame({"key": keys, "v": vals})],
                                    ignore_index=True)

    @rule(keys=keys_st)
    def ingest_right(self, keys: list[str]) -> None:
        vals = list(range(self.n, self.n + len(keys)))
        self.n += len(keys)
        self.right.ingest(pa.table({"user": keys, "item": vals}))
        self.model["o"] = pd.concat(
            [self.model["o"], pd.DataFrame({"user": keys, "item": vals})], ignore_index=True)

    @rule()
    def split(self) -> None:
        self.store.split_scheme("users")

    @rule(which=st.sampled_from(["u", "o"]))
    def compact(self, which: str) -> None:
        self.store.table(which).compact()

    @rule()
    def tag(self) -> None:
        name = f"t{len(self.tags)}"
        self.left.tag(name)
        self.right.tag(name)
        self.tags[name] = {k: v.copy() for k, v in self.model.items()}

    @rule(how=st.sampled_from(["inner", "left"]))
    def join_head(self, how: str) -> None:
        got = sd.join(self.left, self.right, how=how).to_pandas()
        assert canonical(got) == canonical(merged(self.model["u"], self.model["o"], how))

    @precondition(lambda self: bool(self.tags))
    @rule(data=st.data(), how=st.sampled_from(["inner", "left"]))
    def join_tagged(self, data: st.DataObject, how: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.tags)))
        got = sd.join(self.left, self.right, how=how, version=name).to_pandas()
        want = self.tags[name]
        assert canonical(got) == canonical(merged(want["u"], want["o"], how))

    @invariant()
    def tables_match_their_models(self) -> None:
        if not hasattr(self, "store"):
            return
        for name, table in (("u", self.left), ("o", self.right)):
            assert canonical(frame(table.query())) == canonical(self.model[name])

    @invariant()
    def followed_members_share_the_schemes_leaves(self) -> None:
        if not hasattr(self, "store"):
            return
        version = self.store.describe_scheme("users").version
        for t in (self.left, self.right):
            if t.properties["partition.scheme.version"] == version:
                assert len([p for p in t.partitions() if p.is_leaf]) == \
                    self.store.describe_scheme("users").leaves


SchemeModel.TestCase.settings = settings(
    max_examples=15, stateful_step_count=20, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow])
test_scheme_model = SchemeModel.TestCase
