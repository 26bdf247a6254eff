"""``sediment.spark.co_join``: one task per leaf, no Exchange in the physical plan, and the
same rows as ``sd.join`` and as pandas.merge of the two tables' query results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from sediment.errors import NotCoShardedError

pytestmark = pytest.mark.spark

USERS = sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())])
ORDERS = sd.Schema(row_keys=[("user", pa.string())], values=[("item", pa.string())])
KEYS = [f"k{i:05d}" for i in range(2000)]


def members(root: Path) -> tuple[sd.Store, sd.Table, sd.Table]:
    store = sd.Store.open(str(root), create=True)
    store.create_scheme("users", row_keys=[("key", pa.string())], split_points=["k00500"],
                        properties={"partition.split.threshold": 700})
    props = {"state.cache.refresh_seconds": 0}  # the heads after store.maintain()
    u = store.create_table("u", USERS, scheme="users", properties=props)
    o = store.create_table("o", ORDERS, scheme="users", properties=props)
    u.ingest(pa.table({"key": KEYS, "v": list(range(len(KEYS)))}))
    o.ingest(pa.table({"user": KEYS[::3] + KEYS[:10],
                       "item": [f"i{i}" for i in range(len(KEYS[::3]) + 10)]}))
    store.maintain()
    return store, u, o


def rows(t: pa.Table) -> list[tuple[Any, ...]]:
    cols = sorted(t.column_names)
    return sorted(zip(*(t.column(c).to_pylist() for c in cols), strict=True), key=repr)


@pytest.mark.parametrize("how", ["inner", "left"])
def test_co_join_on_local_has_no_exchange(spark_local: Any, tmp_path: Path, how: str) -> None:
    from sediment.spark import co_join

    store, u, o = members(tmp_path / "s")
    leaves = store.describe_scheme("users").leaves
    assert leaves >= 3
    df = co_join(spark_local, u, o, how=how)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan, plan
    assert df.rdd.getNumPartitions() == leaves
    got = pa.Table.from_pandas(df.toPandas(), preserve_index=False)
    want = sd.join(u, o, how=how)
    assert rows(got) == rows(want)
    lm = u.query().to_pandas().merge(o.query().to_pandas().rename(columns={"user": "key"}),
                                     on="key", how=how)
    assert len(lm) == got.num_rows
    if how == "inner":  # big leaves become several tasks, each a key sub-range
        from sediment.schemes.join import prepare_join

        u.set_properties({"spark.read.target_partition_rows": 200})
        pieces = len(prepare_join(u, o).pieces)
        assert pieces > leaves
        cut = co_join(spark_local, u, o)
        assert cut.rdd.getNumPartitions() == pieces
        assert "Exchange" not in cut._jdf.queryExecution().executedPlan().toString()
        assert rows(pa.Table.from_pandas(cut.toPandas(), preserve_index=False)) == rows(want)


def test_co_join_of_tables_in_no_scheme_says_why(spark_local: Any, tmp_path: Path) -> None:
    from sediment.spark import co_join

    store, u, _ = members(tmp_path / "s")
    plain = store.create_table("plain", USERS)
    with pytest.raises(NotCoShardedError, match="ordinary join|Join their query results"):
        co_join(spark_local, u, plain)


def test_co_join_on_the_cluster(spark_cluster: Any, tmp_path: Path) -> None:
    from sediment.spark import co_join

    _, u, o = members(tmp_path / "s")
    df = co_join(spark_cluster, u, o)
    assert "Exchange" not in df._jdf.queryExecution().executedPlan().toString()
    got = pa.Table.from_pandas(df.toPandas(), preserve_index=False)
    assert rows(got) == rows(sd.join(u, o))


def test_bulk_import_into_a_member_takes_the_schemes_leaves(spark_local: Any,
                                                            tmp_path: Path) -> None:
    """Bulk import never pre-splits a member (only its scheme splits); the scheme's next
    split counts the imported records, and the Spark reader follows the scheme's tree."""
    from sediment.spark import bulk_import

    store, u, o = members(tmp_path / "s")
    before = [p.id for p in o.partitions() if p.is_leaf]
    o.set_properties({"bulk_import.target_leaf_rows": 100})
    df = spark_local.createDataFrame(
        [(k, f"bulk{i}") for i, k in enumerate(KEYS[1::3])], "user string, item string")
    bulk_import(spark_local, o, df)
    assert [p.id for p in o.partitions() if p.is_leaf] == before
    assert o.query().num_rows == len(KEYS[::3]) + 10 + len(KEYS[1::3])
    store.maintain()
    assert store.describe_scheme("users").leaves > len(before)
    read = (spark_local.read.format("sediment").option("store", store.uri)
            .option("table", "o").load())
    assert read.count() == o.query().num_rows
    assert rows(pa.Table.from_pandas(co_join_df(spark_local, u, o).toPandas(),
                                     preserve_index=False)) == rows(sd.join(u, o))


def co_join_df(spark: Any, u: sd.Table, o: sd.Table) -> Any:
    from sediment.spark import co_join

    return co_join(spark, u, o)
