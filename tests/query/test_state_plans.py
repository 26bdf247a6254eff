"""A state's kept lookup plans (sediment.query.state_plans) against the planner's own."""

from __future__ import annotations

import random
from pathlib import Path

from helpers import make_table, rows
from sediment.core.regions import Range
from sediment.query.planner import normalise_ranges, plan_query
from sediment.query.state_plans import StatePlans


def test_exact_keys_plan_as_the_planner_plans_them(tmp_path: Path) -> None:
    """Leaves split at several points, files in leaves and their parent, a pending delete:
    every set of exact keys (inside, on and between split points, absent) plans alike."""
    table = make_table(tmp_path, name="t")
    data = rows(400, seed=1)
    table.ingest(data)  # the root's file, which every leaf inherits
    split = make_table(tmp_path, name="s", split_points=["f", "m", "t"])
    split.ingest(data)
    split.ingest(rows(300, seed=2))
    split.delete(keys=[data.column("key")[3].as_py()])
    keys = sorted(set(data.column("key").to_pylist()))
    rng = random.Random(5)
    for t in (table, split):
        state = t._handle.states.cached_head()
        plans = StatePlans(state)
        assert len(plans.leaves) == (1 if t is table else 4)
        for n in (1, 1, 2, 5):
            asked = [*rng.sample(keys, n), "f", "m", "zzz", "a"][:n + 1]
            ranges = normalise_ranges(state, asked, None)
            assert ranges is not None
            assert plans.plan(ranges) == plan_query(state, ranges)
        # anything but exact whole keys is left to the planner
        assert plans.plan((Range("a", "c"),)) is None
    # and the answers: a pinned version's read is planned by the planner alone
    got = split.query(keys=keys[:9])
    assert got.num_rows and got.equals(split.query(keys=keys[:9], version=split.version))
