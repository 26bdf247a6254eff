"""The wire form of filters (``sediment.query.wire``): a pyarrow expression sent as a JSON tree
and rebuilt selects exactly the rows the original selects (checked by pyarrow evaluating both
on data with nulls, NaN, -0.0 and extremes); literals of every supported type come back with
their type and value; what the form cannot say is refused before sending, naming the function;
hostile trees are refused with FilterError, never an Arrow or Python error. Also the local
``filter=``'s own refusals (an unknown function, a non-boolean filter): QueryError."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sediment as sd
from sediment.errors import FilterError, QueryError
from sediment.query.expressions import Call, Literal, decompose
from sediment.query.filters import compile_filter
from sediment.query.wire import CALLS, from_wire, to_wire

TS = pa.timestamp("ns", tz="Europe/Paris")
DEC = pa.decimal128(9, 2)
I64 = (-(2**63), 2**63 - 1)
I32 = (-(2**31), 2**31 - 1)

DATA = pa.table({
    "k": pa.array([f"k{i:02d}" for i in range(12)]),
    "i": pa.array([None, 0, -1, 1, I64[1], I64[0], 7, 7, 42, None, 3, -5], pa.int64()),
    "n": pa.array([1, None, 2, 3, I32[1], I32[0], 0, -1, 5, 6, None, 8], pa.int32()),
    "f": pa.array([math.nan, -0.0, 0.0, math.inf, -math.inf, None, 1.5, -2.25, 1e300,
                   5e-324, 3.0, math.nan], pa.float64()),
    "s": pa.array(["", "a", "b", None, "é", "日本", "a\x00b", "Z", "zz", "a", None, "\U0001f600"]),
    "b": pa.array([b"", b"\x00", b"\xff\xfe", None, b"a", b"ab", b"\x80", b"z", None, b"a",
                   b"\x00\x00", b"q"], pa.binary()),
    "t": pa.array([True, False, None, True, False, True, None, False, True, True, False,
                   None]),
    "ts": pa.array([0, 1, -1, None, 10**18, -(10**18), 1_700_000_000_123_456_789, 5, 5,
                    None, 2, 3], pa.int64()).view(TS),
    "d": pa.array([0, 1, -1, None, 19_000, -719_162, 2_932_896, 3, 3, None, 4, 5],
                  pa.int32()).view(pa.date32()),
    "dec": pa.array([decimal.Decimal(x) if x is not None else None for x in
                     ["0", "1.25", "-1.25", None, "9999999.99", "-9999999.99", "0.01", "3",
                      "3", None, "2.50", "-0.01"]], DEC),
})
SCHEMA = sd.Schema(row_keys=[("k", pa.string())],
                   values=[(f.name, f.type) for f in DATA.schema if f.name != "k"])

VALUES: dict[str, st.SearchStrategy[Any]] = {
    "i": st.integers(*I64),
    "n": st.integers(*I32),
    # one NaN: the wire form sends every NaN as "NaN" (strict JSON has no other), while
    # Arrow's is_in tells NaNs apart by sign and payload (is_in(f, [-nan]) matches no NaN)
    "f": st.floats(allow_nan=True, allow_infinity=True).map(
        lambda x: math.nan if math.isnan(x) else x),
    "s": st.text(max_size=6),
    "b": st.binary(max_size=6),
    "t": st.booleans(),
    "ts": st.integers(*I64),
    "d": st.integers(*I32),
    "dec": st.decimals(min_value=-9999999, max_value=9999999, places=2, allow_nan=False),
}


def _scalar(name: str, value: Any) -> pa.Scalar:
    typ = DATA.schema.field(name).type
    if value is None:
        return pa.scalar(None, typ)
    if pa.types.is_temporal(typ):  # values are the stored integers
        storage = pa.int32() if typ.bit_width == 32 else pa.int64()
        return pa.array([value], storage).view(typ)[0]
    return pa.scalar(value, typ)


@st.composite
def literals(draw: st.DrawFn, name: str) -> pa.Scalar:
    """A literal for field ``name``: often a value the data holds, else any of its type."""
    column = DATA.column(name)
    if draw(st.integers(0, 3)) == 0:
        return column[draw(st.integers(0, len(column) - 1))]
    return _scalar(name, draw(st.none() | VALUES[name]))


@st.composite
def leaves(draw: st.DrawFn) -> pc.Expression:
    name = draw(st.sampled_from(sorted(VALUES)))
    f = pc.field(name)
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "is_null", "is_valid", "is_in", "bool"]))
    if kind == "cmp":
        op = draw(st.sampled_from(["equal", "not_equal", "less", "less_equal", "greater",
                                   "greater_equal"]))
        lit = pc.scalar(draw(literals(name)))
        args = [f, lit] if draw(st.booleans()) else [lit, f]
        return getattr(pc, op)(*args)
    if kind == "is_null":
        return pc.is_null(f, nan_is_null=draw(st.booleans()))
    if kind == "is_valid":
        return f.is_valid()
    if kind == "is_in":
        values = draw(st.lists(literals(name), max_size=4))
        return pc.is_in(f, value_set=pa.array(values, DATA.schema.field(name).type),
                        skip_nulls=draw(st.booleans()))
    return pc.field("t")


expressions = st.recursive(
    leaves(),
    lambda kids: st.one_of(
        st.tuples(kids, kids).map(lambda p: p[0] & p[1]),
        st.tuples(kids, kids).map(lambda p: p[0] | p[1]),
        kids.map(lambda e: ~e)),
    max_leaves=8)


def _selected(expr: pc.Expression) -> list[str]:
    """The keys of the rows ``expr`` selects (rows hold NaN, so tables never compare equal)."""
    return DATA.filter(expr).column("k").to_pylist()


def _through_the_wire(expr: pc.Expression) -> pc.Expression:
    text = json.dumps(to_wire(expr), allow_nan=False)  # strict JSON: no NaN tokens
    return from_wire(json.loads(text), DATA.schema)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions)
def test_a_filter_through_the_wire_selects_what_the_original_selects(
        expr: pc.Expression) -> None:
    assert _selected(_through_the_wire(expr)) == _selected(expr)


@settings(max_examples=30, deadline=None)
@given(st.lists(expressions, min_size=2, max_size=25), st.sampled_from(["and", "or"]))
def test_long_chains_travel_shallow_and_select_the_same(parts: list[pc.Expression],
                                                       how: str) -> None:
    expr = parts[0]
    for p in parts[1:]:  # left-deep, as functools.reduce builds it
        expr = expr & p if how == "and" else expr | p
    wire = to_wire(expr)
    assert wire["call"] == how and len(wire["args"]) >= len(parts)  # one flat node
    assert _selected(from_wire(wire, DATA.schema)) == _selected(expr)


EXACT = [
    pa.scalar(None, pa.null()), pa.scalar(True), pa.scalar(False),
    *(pa.scalar(v, t) for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64())
      for v in (0, -1, 2 ** (t.bit_width - 1) - 1, -(2 ** (t.bit_width - 1)))),
    *(pa.scalar(v, t) for t in (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())
      for v in (0, 2**t.bit_width - 1)),
    *(pa.array([v], pa.float64()).cast(t)[0] for t in (pa.float16(), pa.float32(), pa.float64())
      for v in (0.0, -0.0, 1.5, math.inf, -math.inf, math.nan, 65504.0)),
    pa.scalar(5e-324), pa.scalar(1.7976931348623157e308), pa.scalar(0.1, pa.float32()),
    pa.scalar("", pa.string()), pa.scalar("a'\"\\\n\x00é日\U0001f600", pa.string()),
    pa.scalar("big", pa.large_string()), pa.scalar("view", pa.string_view()),
    pa.scalar(b"\x00\xff", pa.binary()), pa.scalar(b"", pa.large_binary()),
    pa.scalar(b"v", pa.binary_view()), pa.scalar(b"abc", pa.binary(3)),
    pa.scalar(dt.date(2024, 2, 29)), pa.array([-719_162], pa.int32()).view(pa.date32())[0],
    pa.array([1_700_000_000_000], pa.int64()).view(pa.date64())[0],
    *(pa.array([v], pa.int64()).view(pa.timestamp(unit, tz))[0]
      for unit in ("s", "ms", "us", "ns") for tz in (None, "UTC", "+05:30", "America/New_York")
      for v in (0, -1, I64[1], I64[0] + 1)),
    pa.array([86_399], pa.int32()).view(pa.time32("s"))[0],
    pa.array([86_399_999], pa.int32()).view(pa.time32("ms"))[0],
    pa.array([1], pa.int64()).view(pa.time64("us"))[0],
    pa.array([86_399_999_999_999], pa.int64()).view(pa.time64("ns"))[0],
    *(pa.array([v], pa.int64()).view(pa.duration(u))[0] for u in ("s", "ms", "us", "ns")
      for v in (-1, I64[1])),
    pa.scalar(decimal.Decimal("-12.50"), pa.decimal128(5, 2)),
    pa.scalar(decimal.Decimal("1E+3"), pa.decimal128(6, -2)),
    pa.scalar(decimal.Decimal("0.0001"), pa.decimal32(5, 4)),
    pa.scalar(decimal.Decimal("123456789012.345678"), pa.decimal64(18, 6)),
    pa.scalar(decimal.Decimal("9" * 40 + ".5"), pa.decimal256(41, 1)),
    pa.scalar(None, pa.int64()), pa.scalar(None, TS), pa.scalar(None, pa.decimal128(5, 2)),
]


@pytest.mark.parametrize("value", EXACT, ids=lambda v: f"{v.type}")
def test_literals_come_back_with_their_type_and_value(value: pa.Scalar) -> None:
    tree = decompose(_through_the_wire(pc.field("x") == value))
    assert isinstance(tree, Call)
    back = tree.args[1]
    assert isinstance(back, Literal)
    assert back.value.type == value.type
    if value.is_valid and pa.types.is_floating(value.type) and math.isnan(value.as_py()):
        assert math.isnan(back.value.as_py())
    else:
        assert back.value.equals(value)
        if pa.types.is_floating(value.type):  # -0.0 keeps its sign
            assert math.copysign(1, back.value.as_py()) == math.copysign(1, value.as_py())


def test_an_is_in_keeps_its_value_type_and_null_matching() -> None:
    values = pa.array([0, None, 1_700_000_000_123_456_789], pa.int64()).view(TS)
    for skip in (False, True):
        expr = pc.is_in(pc.field("ts"), value_set=values, skip_nulls=skip)
        wire = to_wire(expr)
        assert wire["type"] == "timestamp[ns, tz=Europe/Paris]"
        assert wire.get("skip_nulls", False) is skip
        assert _selected(from_wire(wire)) == _selected(expr)


def test_untyped_literals_take_the_type_of_the_field_they_meet() -> None:
    schema = DATA.schema
    cases = {
        "ts >= 2023-01-01": ({"call": "greater_equal", "args": [
            {"field": "ts"}, {"literal": "2023-01-01T00:00:00+01:00"}]}, pc.field("ts") >=
            pa.scalar("2023-01-01T00:00:00+01:00").cast(TS)),
        "n = 3": ({"call": "equal", "args": [{"literal": 3}, {"field": "n"}]},
                  pc.scalar(pa.scalar(3, pa.int32())) == pc.field("n")),
        "dec in": ({"call": "is_in", "args": [{"field": "dec"}], "values": ["3", 2.5, None]},
                   pc.is_in(pc.field("dec"), value_set=pa.array(
                       [decimal.Decimal("3"), decimal.Decimal("2.5"), None], DEC))),
        "b = 'a'": ({"call": "equal", "args": [{"field": "b"}, {"literal": "a"}]},
                    pc.field("b") == b"a"),
    }
    for name, (wire, expected) in cases.items():
        got = from_wire(wire, schema)
        assert _selected(got) == _selected(expected), name
        assert _selected(got), name
    # without a schema, JSON's own types
    tree = decompose(from_wire({"call": "less", "args": [{"field": "i"}, {"literal": 2.5}]}))
    assert isinstance(tree, Call) and isinstance(tree.args[1], Literal)
    assert tree.args[1].value.type == pa.float64()


@pytest.mark.parametrize(("expr", "named"), [
    (pc.field("i") + 1 > 3, "'add_checked'"),
    (pc.utf8_upper(pc.field("s")) == "A", "'utf8_upper'"),
    (pc.field("s").cast(pa.binary()) == b"a", "'cast'"),
    (pc.starts_with(pc.field("s"), "a"), "'starts_with'"),
    (pc.and_(pc.field("t"), pc.field("t")), "null-propagating"),
    (pc.Expression._call("no_such_function", [pc.field("i")]), "'no_such_function'"),
    (pc.field("a", "b") == 1, "nested field reference"),
    (pc.field(0) == 1, "field reference by position"),
    (pc.field("i") == pa.scalar([1, 2]), "list<item: int64>"),
    (pc.is_in(pc.field("i"), value_set=pa.array([[1]])), "list<item: int64>"),
])
def test_what_the_form_cannot_say_is_refused_naming_it(expr: pc.Expression,
                                                        named: str) -> None:
    with pytest.raises(FilterError) as e:
        to_wire(expr)
    assert named in str(e.value)


def _deep(depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"call": "equal", "args": [{"field": "i"}, {"literal": 1}]}
    for _ in range(depth):
        doc = {"call": "not", "args": [doc]}
    return doc


_CMP = {"call": "less", "args": [{"field": "i"}, {"literal": 1}]}


@pytest.mark.parametrize(("doc", "message"), [
    (3, "a node is a JSON object"),
    ([_CMP], "a node is a JSON object"),
    ({}, "has 'field', 'literal' or 'call'"),
    ({"call": "add", "args": [{"field": "i"}, {"literal": 1}]}, "unknown function 'add'"),
    ({"call": ["equal"], "args": []}, "unknown function"),
    ({"call": "equal", "args": [{"field": "i"}]}, "equal takes 2 arguments"),
    ({"call": "and", "args": []}, "and takes one or more"),
    ({"call": "not", "args": {"field": "t"}}, "not takes 1 arguments in a list"),
    ({"call": "equal", "args": [{"field": "i"}, {"literal": 1}], "extra": 1}, "unknown key"),
    ({"field": 3}, "a field node"), ({"field": ""}, "a field node"),
    ({"field": "i", "type": "int64"}, "a field node"),
    ({"literal": [1]}, "a literal is a JSON string"),
    ({"literal": {"base64": "AA=="}}, "a literal is a JSON string"),
    ({"literal": 1, "type": "list<item: int64>"}, "unsupported type"),
    ({"literal": 1, "type": 5}, "a type is a name"),
    ({"literal": 1, "type": "x" * 10_000}, "a type is a name"),
    ({"literal": 0, "type": "timestamp[s, tz=Bogus/Zone]"}, "unknown time zone"),
    ({"literal": 0, "type": "decimal128(99, 2)"}, "decimal128(99, 2)"),
    ({"literal": 2**64, "type": "int64"}, "literal"),
    ({"literal": 10**5000, "type": "int64"}, "literal"),
    ({"literal": True, "type": "int64"}, "is not a int64 value"),
    ({"literal": 1.5, "type": "int64"}, "is not a int64 value"),
    ({"literal": "1", "type": "int64"}, "is not a int64 value"),
    ({"literal": "\ud800", "type": "string"}, "literal"),
    ({"literal": "\ud800"}, "literal"),
    ({"literal": "!!not base64", "type": "binary"}, "literal"),
    ({"literal": "abcd", "type": "fixed_size_binary[2]"}, "literal"),
    ({"literal": "NaN", "type": "decimal128(5, 2)"}, "literal"),
    ({"literal": "1e999999999", "type": "decimal128(5, 2)"}, "literal"),
    ({"literal": "9" * 100_000, "type": "decimal128(5, 2)"}, "is not a decimal128(5, 2)"),
    ({"literal": "yesterday", "type": "date32[day]"}, "literal"),
    ({"literal": I64[1], "type": "date32[day]"}, "literal"),
    ({"literal": "inf", "type": "double"}, "is not a double value"),
    ({"call": "is_in", "args": [{"field": "i"}], "values": 3}, "values in a list"),
    ({"call": "is_in", "args": [{"field": "i"}], "values": [[1]]}, "untyped value"),
    ({"call": "is_in", "args": [{"field": "i"}], "values": [1], "skip_nulls": "yes"},
     "skip_nulls must be true or false"),
    ({"call": "is_in", "args": [{"field": "i"}], "values": ["x"], "type": "int64"},
     "is_in values"),
    ({"call": "is_null", "args": [{"field": "f"}], "nan_is_null": 1}, "nan_is_null"),
    (_deep(10_000), "nests deeper than 100 levels"),
    ({"call": "or", "args": [_CMP] * 20_000}, "more than 4096 parts"),
    ({"call": "is_in", "args": [{"field": "i"}], "values": [1] * 1_000_001},
     "more than 1000000 is_in values"),
])
def test_hostile_trees_are_refused_with_filter_error(doc: Any, message: str) -> None:
    with pytest.raises(FilterError) as e:
        from_wire(doc, DATA.schema)
    assert message in str(e.value)
    assert len(str(e.value)) < 400  # a bounded quote of the input, never all of it


_JSON_KEYS = st.sampled_from(["call", "args", "field", "literal", "type", "values",
                              "skip_nulls", "nan_is_null"]) | st.text(max_size=3)
_JSON_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats()
                 | st.sampled_from([*CALLS, "i", "f", "s", "ts", "int64", "string", "double",
                                    "timestamp[ns, tz=Europe/Paris]", "NaN", "AAE="])
                 | st.text(max_size=5))
_JSON = st.recursive(_JSON_SCALARS, lambda kids: st.lists(kids, max_size=3)
                     | st.dictionaries(_JSON_KEYS, kids, max_size=4), max_leaves=12)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_JSON)
def test_any_json_gives_a_filter_or_a_filter_error(doc: Any) -> None:
    """Whatever JSON arrives: a FilterError, or an expression that the table's check
    (``compile_filter``) refuses with a QueryError or that evaluates."""
    try:
        expr = from_wire(doc, DATA.schema)
    except FilterError:
        return
    try:
        compiled = compile_filter(expr, SCHEMA, "t", record_by_record=True)
    except QueryError:
        return
    compiled.apply(DATA)


# ---- the local filter=: an unknown function, a filter that is not boolean -----------------


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> sd.Table:
    store = sd.Store.open(str(tmp_path_factory.mktemp("wire") / "s"), create=True)
    t = store.create_table("things", SCHEMA)
    t.ingest(DATA)
    return t


@pytest.mark.parametrize(("expr", "message"), [
    (pc.Expression._call("no_such_function", [pc.field("i")]), "no_such_function"),
    (pc.scalar(3), "int64"),
    (pc.scalar("x"), "string"),
    (pc.scalar(None), "null"),
    (pc.field("i"), "int64"),
    (pc.field("i") & pc.field("n"), "and_kleene"),
    (~pc.field("s"), "invert"),
    (pc.Expression._call("and_kleene", [pc.field("t")]), "and_kleene"),
])
def test_a_local_filter_arrow_cannot_evaluate_to_booleans_is_a_query_error(
        table: sd.Table, expr: pc.Expression, message: str) -> None:
    with pytest.raises(QueryError, match="filter on table things cannot be evaluated") as e:
        table.query(filter=expr)
    assert message in str(e.value)


def test_a_boolean_literal_and_a_boolean_field_are_filters(table: sd.Table) -> None:
    assert table.query(filter=pc.scalar(True)).num_rows == DATA.num_rows
    assert table.query(filter=pc.scalar(False)).num_rows == 0
    assert table.query(filter=pc.field("t")).num_rows == DATA.filter(pc.field("t")).num_rows
    assert table.query(filter=_through_the_wire(pc.field("t") & (pc.field("i") > 0))) \
        .equals(table.query(filter=pc.field("t") & (pc.field("i") > 0)))


def test_only_json_leaves_the_client() -> None:
    """The Python client's query descriptor carries the tree (plain JSON), never bytes."""
    from sediment.serve.protocol import dumps, encode_query

    doc = encode_query("things", filter=(pc.field("b") == b"\x00") | (pc.field("i") > 3))
    text = dumps(doc).decode()
    assert json.loads(text)["filter"]["call"] == "or"
    assert "expression" not in text
    with pytest.raises(FilterError, match="'is_nan'"):
        encode_query("things", filter=pc.field("f").is_nan())
