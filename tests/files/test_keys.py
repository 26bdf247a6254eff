"""files/keys.py: the binary-search range read (sorted_rows_in, sorted_bound) against the
compute-mask one (rows_in) on random sorted data, regions and ranges."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.core.regions import Box, Cell, Range, Region
from sediment.files.keys import rows_in, sorted_bound, sorted_rows_in

STRINGS = st.text(alphabet="abcz\u00e9", max_size=3)
INTS = st.integers(-50, 50)


@st.composite
def cases(draw: st.DrawFn) -> tuple[pa.Table, Region, list[Range] | None]:
    """A table sorted by its key ``k`` (strings or ints, repeats, several chunks, an
    offset), a leaf region and ranges (None: every range), of that key's kind."""
    values = draw(st.sampled_from([STRINGS, INTS]))
    keys = sorted(draw(st.lists(values, max_size=40)),
                  key=lambda v: v.encode() if isinstance(v, str) else v)
    typ = pa.string() if values is STRINGS else pa.int64()
    cut = draw(st.integers(0, len(keys)))
    table = pa.concat_tables([
        pa.table({"k": pa.array(keys[:cut], typ), "v": pa.array(range(cut), pa.int64())}),
        pa.table({"k": pa.array(keys[cut:], typ),
                  "v": pa.array(range(cut, len(keys)), pa.int64())})])
    if draw(st.booleans()) and len(keys) > 1:
        table = table.slice(1)
    ends = st.none() | values
    lo, hi = draw(ends), draw(ends)
    region = Region(None if lo is None else (lo,), None if hi is None else (hi,))
    ranges = None
    if draw(st.booleans()):
        ranges = [Range(draw(ends), draw(ends), start_inclusive=draw(st.booleans()),
                        end_inclusive=draw(st.booleans()))
                  for _ in range(draw(st.integers(0, 3)))]
    return table, region, ranges


@settings(max_examples=300, deadline=None)
@given(cases())
def test_a_sorted_range_read_finds_what_the_masks_find(
        case: tuple[pa.Table, Region, list[Range] | None]) -> None:
    table, region, ranges = case
    got = sorted_rows_in(table, "k", region, ranges)
    assert got is not None
    want = rows_in(table, ["k"], region, ranges)
    assert got.to_pylist() == want.to_pylist()


@settings(max_examples=100, deadline=None)
@given(st.lists(INTS, max_size=30).map(sorted), INTS | st.just(2**70) | st.just(-2**70),
       st.booleans())
def test_a_bound_is_where_bisection_of_the_values_puts_it(values: list[int], probe: Any,
                                                        right: bool) -> None:
    import bisect

    want = (bisect.bisect_right if right else bisect.bisect_left)(values, probe)
    assert sorted_bound(pa.array(values, pa.int64()), probe, right=right) == want
    texts = sorted(str(v) for v in values)
    want = (bisect.bisect_right if right else bisect.bisect_left)(texts, str(probe))
    assert sorted_bound(pa.array(texts, pa.string()), str(probe), right=right) == want


def test_what_it_does_not_search_is_left_to_the_masks() -> None:
    floats = pa.table({"k": [1.0, 2.0], "v": [1, 2]})  # a type it does not search
    assert sorted_rows_in(floats, "k", Region((1.5,), None), None) is None
    ints = pa.table({"k": [1, 2, 3]})
    assert sorted_rows_in(ints, "k", Region(), [Range((1,), (2,))]).to_pylist() == [{"k": 1}]
    assert sorted_rows_in(ints, "k", Cell([(1, 3)]), None) is None  # a box partition
    assert sorted_rows_in(ints, "k", Region(), [Box({"k": Range(1, 3)})]) is None
