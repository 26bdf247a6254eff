"""The change feed against reads of the versions it joins: random sequences of ingest, upsert,
delete (by key and by filter), compaction, splits, restore, clear and a column added, on
tables of each merge rule; after every step, the change rows of the new versions turn the
content read at the version before into the content read at the new one.

The reference is what a read of each version returns (proven against pandas references by
tests/ingest/test_upsert_delete_model.py and tests/query/test_schema_evolution_model.py), and
the rule every commit's change rows obey, written out:

- as multisets of whole records: content(v - 1) minus the ``delete`` and ``update_preimage``
  rows (each of which content(v - 1) holds) plus the ``insert`` and ``update_postimage`` rows
  is content(v); no record is both removed and added by one commit (nothing that did not
  change is reported);
- a commit that changes no record (compaction, job assignment, a split, a schema change) has
  no rows;
  a plain ingest on a table without a merge rule has exactly its input as ``insert`` rows;
- ``changes(a, b)`` is ``changes(a, m)`` then ``changes(m, b)`` (checked over the whole run).

Rows of a version before a column was added read null there (the end version's shape).
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import sediment as sd
import sediment.query.changes as changes_module

KEYS = ["a", "b", "é", "m", "z"]
SCHEMA = sd.Schema(row_keys=[("k", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.int64())])
SORTLESS = sd.Schema(row_keys=[("k", pa.string())], values=[("ts", pa.int64()), ("v", pa.int64())])
"""No sort key: a record key is its row key, and an upsert replaces every record of it."""
TWO_SORTS = sd.Schema(row_keys=[("k", pa.string())],
                      sort_keys=[("ts", pa.int64()), ("s", pa.int64())],
                      values=[("v", pa.int64())])
"""Two sort keys (``s`` is ``v % 2``): an upsert replaces only records equal on both."""
REMOVED = ("delete", "update_preimage")
ADDED = ("insert", "update_postimage")

records = st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 2), st.integers(0, 9)),
                   min_size=1, max_size=6)


def _rows(table: pa.Table, names: list[str]) -> Counter[tuple[Any, ...]]:
    cols = [table.column(n).to_pylist() if n in table.column_names else [None] * table.num_rows
            for n in names]
    return Counter(zip(*cols, strict=True)) if cols else Counter()


class ChangeFeedMachine(RuleBasedStateMachine):
    schema = SCHEMA

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="sediment-changes-")
        self.store = sd.Store.open(self.dir, create=True)
        self.checked = 0
        self.steps: list[pa.Table] = []
        self.plain_input: dict[int, pa.Table] = {}
        self.first = 0
        self.merge = "none"
        self.added = False

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize(merge=st.sampled_from(["none", "last", "first"]), split=st.booleans())
    def create(self, merge: str, split: bool) -> None:
        self.merge = merge
        self.t = self.store.create_table("t", self.schema,
                                         split_points=["m"] if split else None,
                                         properties={"merge": merge,
                                                     "partition.split.threshold": 6})
        self.first = self.checked = self.t.version

    def _batch(self, recs: list[tuple[str, int, int]]) -> pa.Table:
        data: dict[str, list[Any]] = {"k": [r[0] for r in recs], "ts": [r[1] for r in recs],
                                      "v": [r[2] for r in recs]}
        if "s" in self.schema.field_names:
            data["s"] = [r[2] % 2 for r in recs]
        if "c" in self.t.schema.field_names:  # added (a restore may take it away again)
            data["c"] = [f"c{r[2]}" for r in recs]
        return pa.table(data)

    @rule(recs=records)
    def ingest(self, recs: list[tuple[str, int, int]]) -> None:
        batch = self._batch(recs)
        self.t.ingest(batch)
        if self.merge == "none":
            self.plain_input[self.t.version] = batch

    @rule(recs=records)
    def upsert(self, recs: list[tuple[str, int, int]]) -> None:
        self.t.upsert(self._batch(recs))

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=2))
    def delete_keys(self, keys: list[str]) -> None:
        self.t.delete(keys=keys)

    @rule(limit=st.integers(0, 9))
    def delete_filter(self, limit: int) -> None:
        self.t.delete(filter=f"v > {limit}")

    @rule()
    def compact(self) -> None:
        self.t.compact(full=True)

    @rule()
    def split(self) -> None:
        self.t.split()  # leaves past 6 records split at their median

    @precondition(lambda self: self.t.version > self.first + 1)
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        self.t.restore(data.draw(st.integers(self.first + 1, self.t.version - 1)))

    @rule()
    def clear(self) -> None:
        self.t.clear()

    @precondition(lambda self: not self.added)
    @rule()
    def add_column(self) -> None:
        self.t.add_columns([("c", pa.string())])
        self.added = True

    @invariant()
    def changes_turn_each_version_into_the_next(self) -> None:
        if not hasattr(self, "t"):
            return
        head = self.t.version
        kinds = {e.version: e.kind for e in self.t.history()}
        for v in range(self.checked + 1, head + 1):
            rows = self.t.changes(v - 1, v).read_all()
            self.steps.append(rows)
            names = self.t.schema_at(v).field_names
            assert set(rows.column("_commit_version").to_pylist()) <= {v}
            before = _rows(self.t.query(version=v - 1), names)
            after = _rows(self.t.query(version=v), names)
            removed = _rows(rows.filter(_types(rows, REMOVED)), names)
            added = _rows(rows.filter(_types(rows, ADDED)), names)
            assert all(before[r] >= n for r, n in removed.items()), \
                f"version {v}: removed records the version before did not hold"
            assert before - removed + added == after, f"version {v}"
            assert not (removed & added), f"version {v}: a record both removed and added"
            kind = kinds[v]
            if kind in ("assign_job_ids", "replace_file_references", "alter_schema",
                        "split_partition", "split_file_references"):
                assert rows.num_rows == 0, f"version {v} ({kind}) changed no record"
            if v in self.plain_input:
                assert set(rows.column("_change_type").to_pylist()) <= {"insert"}
                assert _rows(rows, names) == _rows(self.plain_input[v], names)
        self.checked = head

    def check_composition(self) -> None:
        whole = self.t.changes(self.first, self.t.version).read_all()
        names = whole.column_names
        parts = Counter[tuple[Any, ...]]()
        for step in self.steps:
            parts += _rows(step, names)
        assert _rows(whole, names) == parts


def _types(rows: pa.Table, kinds: tuple[str, ...]) -> pa.Array:
    import pyarrow.compute as pc

    return pc.is_in(rows.column("_change_type"), pa.array(kinds))


class ComposedMachine(ChangeFeedMachine):
    def teardown(self) -> None:
        if hasattr(self, "t"):
            self.check_composition()
        super().teardown()


TestChangeFeed = ComposedMachine.TestCase
TestChangeFeed.settings = settings(max_examples=12, stateful_step_count=12, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])


class KeyedRunMachine(ComposedMachine):
    """Long runs of keyed commits on a table without a merge rule, which the feed reads
    together (sediment.query.change_runs): the whole run's rows must be each version's own,
    from any start inside it."""

    @initialize(split=st.booleans(), short_runs=st.booleans())
    def create(self, split: bool, short_runs: bool) -> None:  # type: ignore[override]
        # short runs: a run ends once it holds a few keys and records, so runs end
        # everywhere (the bound of memory a long run of big commits needs)
        self.bound = changes_module.RUN_ROWS
        if short_runs:
            changes_module.RUN_ROWS = 4
        super().create("none", split)

    def teardown(self) -> None:
        changes_module.RUN_ROWS = getattr(self, "bound", changes_module.RUN_ROWS)
        super().teardown()

    def check_composition(self) -> None:
        super().check_composition()
        head = self.t.version
        for start in range(self.first + 1, head, 3):
            whole = self.t.changes(start, head).read_all()
            names = whole.column_names
            parts = Counter[tuple[Any, ...]]()
            for v in range(start + 1, head + 1):
                parts += _rows(self.t.changes(v - 1, v).read_all(), names)
            assert _rows(whole, names) == parts, f"changes({start}, {head})"


TestKeyedRuns = KeyedRunMachine.TestCase
TestKeyedRuns.settings = settings(max_examples=10, stateful_step_count=16, deadline=None,
                                  suppress_health_check=[HealthCheck.too_slow])


class SortlessKeyedRunMachine(KeyedRunMachine):
    schema = SORTLESS


class TwoSortKeyedRunMachine(KeyedRunMachine):
    schema = TWO_SORTS


# the record key's shape matters to the runs' joins alone: fewer examples each
TestSortlessKeyedRuns = SortlessKeyedRunMachine.TestCase
TestSortlessKeyedRuns.settings = settings(max_examples=6, stateful_step_count=14, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
TestTwoSortKeyedRuns = TwoSortKeyedRunMachine.TestCase
TestTwoSortKeyedRuns.settings = settings(max_examples=6, stateful_step_count=14, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
