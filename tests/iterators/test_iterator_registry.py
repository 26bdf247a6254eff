"""The iterator registry: one table holds every type, the built-ins included; a type
registered at run time is built, checked and applied as a built-in is (checked against pandas
through a real table); an unknown type is refused listing every registered type."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sediment as sd
from sediment.errors import PropertyError
from sediment.iterators import AgeOff, Aggregate, KeepLatest, RecordIterator, RowFilter
from sediment.iterators.base import row_filter_from_config
from sediment.iterators.registry import (
    iterator_from_config,
    iterator_types,
    iterators_from_property,
    register_iterator,
)

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string()), ("n", pa.int64())])

BUILT_INS = {
    "age_off": ({"field": "ts", "ttl_seconds": 60}, AgeOff),
    "filter": ({"field": "n", "op": ">", "value": 1}, RowFilter),
    "aggregate": ({"functions": {"n": "sum"}}, Aggregate),
    "keep_latest": ({"by": "ts"}, KeepLatest),
}


class DropValue(RecordIterator):
    """A type from outside the library: drop the rows whose ``value`` is ``dropped``."""

    def __init__(self, dropped: str) -> None:
        self.dropped = dropped

    def fields(self) -> set[str]:
        return {"value"}

    def apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            keep = pc.fill_null(pc.not_equal(b.column("value"), self.dropped), True)
            yield b.filter(keep)


def drop_value_from_config(cfg: Mapping[str, Any], schema: sd.Schema | None) -> DropValue:
    if not isinstance(cfg["dropped"], str):
        raise PropertyError(f"drop_value: 'dropped' must be a string, not {cfg['dropped']!r}")
    return DropValue(cfg["dropped"])


@pytest.mark.parametrize("kind", sorted(BUILT_INS))
def test_every_built_in_is_an_entry_of_the_registry(kind: str) -> None:
    options, cls = BUILT_INS[kind]
    assert kind in iterator_types()
    assert isinstance(iterator_from_config({"type": kind, **options}, SCHEMA), cls)


def test_an_unknown_type_is_refused_listing_every_registered_type() -> None:
    kind = f"probe_{uuid.uuid4().hex[:6]}"
    register_iterator(kind, drop_value_from_config)
    types = iterator_types()
    assert types == sorted(types) and set(BUILT_INS) | {kind} <= set(types)
    text = json.dumps([{"type": "nope"}])
    with pytest.raises(PropertyError) as e:
        iterators_from_property(text, SCHEMA, where="query.iterators")
    assert str(e.value) == (f"query.iterators: unknown iterator type 'nope' "
                            f"({', '.join(types)})")


def test_every_type_is_refused_after_the_property_it_came_from() -> None:
    """Built-in or registered, what the factory refuses is reported after ``where``."""
    kind = f"probe_{uuid.uuid4().hex[:6]}"
    register_iterator(kind, drop_value_from_config)
    cases = [
        ({"type": "filter", "field": "n", "op": "~"}, "where: filter on 'n': unknown op '~'"),
        ({"type": "age_off", "field": "ts", "ttl_seconds": 1, "unit": "h"},
         "where: unknown unit 'h' (units: s, ms, us, ns)"),
        ({"type": kind, "dropped": 3}, "where: drop_value: 'dropped' must be a string, not 3"),
        ({"type": kind}, f"where: {kind} iterator needs 'dropped'"),
        ({"type": kind, "dropped": "x", "dropped_too": float("nan")},
         f"where: {kind} iterator field 'dropped_too': nan is not a finite number"),
    ]
    for cfg, message in cases:
        with pytest.raises(PropertyError) as e:
            iterator_from_config(cfg, SCHEMA, where="where")
        assert str(e.value) == message


def test_a_registered_type_runs_in_queries_and_compactions(tmp_path: Path) -> None:
    kind = f"drop_value_{uuid.uuid4().hex[:6]}"
    register_iterator(kind, drop_value_from_config)
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties={"state.cache.refresh_seconds": 0})
    data = pa.table({"key": [f"k{i % 7}" for i in range(60)], "ts": list(range(60)),
                     "value": [["a", "b", None][i % 3] for i in range(60)],
                     "n": list(range(60))}, schema=SCHEMA.to_arrow())
    table.ingest(data)
    frame = data.to_pandas()
    expected = frame[frame["value"] != "a"].sort_values(["key", "ts"]).reset_index(drop=True)

    def got(t: pa.Table) -> Any:
        return t.to_pandas().sort_values(["key", "ts"]).reset_index(drop=True)

    # at query time, as an argument and from the property
    argument = table.query(iterators=[{"type": kind, "dropped": "a"}])
    assert got(argument).equals(expected)
    table.set_properties({"query.iterators": json.dumps([{"type": kind, "dropped": "a"}])})
    assert got(table.query()).equals(expected)
    # at compaction time: the rows are gone from the files, not only from answers
    table.set_properties({"query.iterators": "",
                          "compaction.iterators": json.dumps([{"type": kind,
                                                               "dropped": "a"}])})
    table.ingest(data.slice(0, 3))
    assert table.compact(full=True).jobs_committed >= 1
    both = pa.concat_tables([data, data.slice(0, 3)]).to_pandas()
    assert got(table.query()).equals(got(pa.Table.from_pandas(
        both[both["value"] != "a"], schema=SCHEMA.to_arrow(), preserve_index=False)))
    # a field the type names is checked against the schema when the property is set
    with pytest.raises(PropertyError, match="names unknown field 'value'"):
        store.create_table("u", sd.Schema(row_keys=[("key", pa.string())],
                                          values=[("n", pa.int64())]),
                           properties={"query.iterators": json.dumps([{"type": kind,
                                                                       "dropped": "a"}])})


def test_a_built_in_is_replaced_like_any_entry() -> None:
    seen: list[dict[str, Any]] = []

    def recording(cfg: Mapping[str, Any], schema: sd.Schema | None) -> RecordIterator:
        seen.append(dict(cfg))
        return row_filter_from_config(cfg, schema)

    register_iterator("filter", recording)
    try:
        it = iterator_from_config({"type": "filter", "field": "n", "op": "is_null"}, SCHEMA)
    finally:
        register_iterator("filter", row_filter_from_config)
    assert isinstance(it, RowFilter) and seen == [{"type": "filter", "field": "n",
                                                   "op": "is_null"}]
