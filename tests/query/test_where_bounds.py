"""Hostile ``--where`` text and huge filters never crash a process (issue 34, item 3).

Before: 10,000-20,000 ``OR`` terms segfaulted ``sediment query`` and the server (Arrow
recursing on the tree; a balanced tree of 20,000 terms crashes it too, as Arrow flattens
chains), and 3,000 parentheses or 5,000 ``NOT``s raised a raw RecursionError. Now an
OR-chain of ``=`` on one field is one ``is_in`` (and answers), and text past the limits of
length, nesting or size is a WhereError. Cases that would crash run in a child process (this
module run as a script), so a regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import functools
import json
import operator
import os
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sediment as sd

# the hostile cases run once in a child process (a module fixture): on one worker, once
pytestmark = pytest.mark.xdist_group("module:test_where_bounds.py")

ROWS = 5_000
SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.int64())])


def _data() -> pa.Table:
    return pa.table({"key": [f"k{i:05d}" for i in range(ROWS)], "ts": list(range(ROWS)),
                     "value": [i * 3 if i % 7 else None for i in range(ROWS)]},
                    schema=SCHEMA.to_arrow())


def _or(terms: list[str]) -> str:
    return " OR ".join(terms)


def _cases() -> dict[str, tuple[str, pc.Expression | None]]:
    """name -> (--where text, the filter it means as Arrow evaluates it directly; None:
    refused)."""
    keys = [f"k{i:05d}" for i in range(0, 40_000, 2)]  # 20,000 keys, 2,500 of them present
    values = list(range(0, 30_000, 6))  # 5,000 values, 834 of them present
    return {
        "20,000 = on the row key": (
            _or([f"key = '{k}'" for k in keys]), pc.field("key").isin(keys)),
        "5,000 = on each of two fields": (
            _or([f"key = '{k}' OR value = {v}"
                 for k, v in zip(keys[:5_000], values[:5_000], strict=True)]),
            pc.field("key").isin(keys[:5_000]) | pc.field("value").isin(values[:5_000])),
        "5,000 = in an AND": (
            "value > 100 AND (" + _or([f"key = '{k}'" for k in keys[:5_000]]) + ")",
            (pc.field("value") > 100) & pc.field("key").isin(keys[:5_000])),
        "20,000 < ": (_or([f"value < {i}" for i in range(20_000)]), None),
        "NOT of 5,000 =": ("NOT (" + _or([f"key = '{k}'" for k in keys[:5_000]]) + ")", None),
        "3,000 parentheses": ("(" * 3_000 + "value = 1" + ")" * 3_000, None),
        "5,000 NOTs": ("NOT " * 5_000 + "value = 1", None),
        "2 MB of text": ("value = 1 OR " * 170_000 + "value = 2", None),
    }


def _child(store_uri: str) -> None:
    """Run every case against the table; print one JSON line per case."""
    from sediment.errors import QueryError
    from sediment.query.where import parse_where

    table = sd.Store.open(store_uri).table("events")
    data = _data()
    for name, (text, meaning) in _cases().items():
        out: dict[str, Any] = {"case": name}
        try:
            got = table.query(filter=parse_where(text, data.schema))
            out["rows"] = got.num_rows
            if meaning is not None:
                out["correct"] = got.column("key").to_pylist() == \
                    data.filter(meaning).column("key").to_pylist()
        except QueryError as e:
            out["error"] = type(e).__name__
            out["message"] = str(e)
        print(json.dumps(out), flush=True)
    # local expressions past the limits: QueryError, never Arrow's crash or crawl
    for name, expr in {
        "left-deep OR of 5,000": functools.reduce(
            operator.or_, [pc.field("value") == i for i in range(5_000)]),
        "150 nested NOTs": functools.reduce(lambda e, _: ~e, range(150),
                                            pc.field("value") == 1),
    }.items():
        try:
            table.query(filter=expr)
            print(json.dumps({"case": name, "rows": "answered"}), flush=True)
        except QueryError as e:
            print(json.dumps({"case": name, "error": type(e).__name__, "message": str(e)}),
                  flush=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> sd.Store:
    s = sd.Store.open(str(tmp_path_factory.mktemp("where") / "s"), create=True)
    s.create_table("events", SCHEMA, split_points=["k02000"]).ingest(_data())
    return s


@pytest.fixture(scope="module")
def outcomes(store: sd.Store) -> dict[str, dict[str, Any]]:
    proc = subprocess.run([sys.executable, __file__, store.uri], capture_output=True,
                          text=True, timeout=300, env={**os.environ})
    assert proc.returncode == 0, f"the child died ({proc.returncode}): {proc.stderr[-3000:]}"
    return {doc["case"]: doc for doc in map(json.loads, proc.stdout.splitlines())}


@pytest.mark.parametrize("case", ["20,000 = on the row key", "5,000 = on each of two fields",
                                  "5,000 = in an AND"])
def test_or_chains_of_equalities_answer_correctly(outcomes: dict[str, dict[str, Any]],
                                                  case: str) -> None:
    got = outcomes[case]
    assert "error" not in got, got
    assert got["correct"] is True and got["rows"] > 0


@pytest.mark.parametrize(("case", "message"), [
    ("20,000 < ", "parts (at most 4096)"),
    ("NOT of 5,000 =", "parts (at most 4096)"),
    ("3,000 parentheses", "nests more than 100 levels of parentheses and NOTs at position 101"),
    ("5,000 NOTs", "nests more than 100 levels of parentheses and NOTs at position 401"),
    ("2 MB of text", "characters long (at most 1000000)"),
])
def test_hostile_where_text_is_a_where_error(outcomes: dict[str, dict[str, Any]], case: str,
                                             message: str) -> None:
    got = outcomes[case]
    assert got.get("error") == "WhereError", got
    assert message in got["message"]
    assert len(got["message"]) < 300  # never the text itself


@pytest.mark.parametrize(("case", "message"), [
    ("left-deep OR of 5,000", "filter on table events has 15001 parts (at most 4096)"),
    ("150 nested NOTs", "filter on table events nests 152 levels deep (at most 100)"),
])
def test_huge_local_expressions_are_a_query_error(outcomes: dict[str, dict[str, Any]],
                                                  case: str, message: str) -> None:
    got = outcomes[case]
    assert got.get("error") == "QueryError", got
    assert message in got["message"]


def test_where_in_list_and_or_chain_mean_the_same_with_nulls(store: sd.Store) -> None:
    """The OR-chain becomes ``is_in`` only outside NOT: a null ``value`` is dropped by
    ``value = 3 OR value = 6`` and by its negation, as SQL's three-valued logic says."""
    from sediment.query.where import parse_where

    table, data = store.table("events"), _data()
    arrow = data.schema
    eq = (pc.field("value") == 3) | (pc.field("value") == 6)
    for text, meaning in [("value = 3 OR value = 6", eq),
                          ("NOT (value = 3 OR value = 6)", ~eq),
                          ("NOT NOT (value = 3 OR value = 6)", ~~eq)]:
        got = table.query(filter=parse_where(text, arrow))
        assert got.column("key").to_pylist() == data.filter(meaning).column("key").to_pylist()
    assert table.query(filter=parse_where("NOT (value = 3 OR value = 6)", arrow)) \
        .column("value").null_count == 0


_SMALL = pa.table({"key": ["a", "b", "c", "d", "e", "f"],
                   "value": pa.array([1, 2, None, 2, 3, None], pa.int64()),
                   "flag": [True, None, False, True, False, None]})


@st.composite
def _conditions(draw: st.DrawFn, depth: int = 0) -> tuple[str, pc.Expression]:
    """A random condition as --where text and as the expression it means, built the plain
    way (binary, left-deep, no IN): the parser's balancing and OR-chain collapsing must not
    change which rows pass, in or out of NOT, with nulls."""
    kind = draw(st.sampled_from(["eq", "eq", "cmp", "null"] + (["or", "or", "and", "not"]
                                                                if depth < 3 else [])))
    if kind in ("eq", "cmp"):
        name = draw(st.sampled_from(["value", "value", "key", "flag"]))
        values = {"key": st.sampled_from(list("abcz")), "value": st.integers(0, 4),
                  "flag": st.booleans()}[name]
        v = draw(values)
        text = f"'{v}'" if name == "key" else str(v).lower()
        if kind == "eq":
            return f"{name} = {text}", pc.field(name) == v
        return f"{name} < {text}", pc.field(name) < v
    if kind == "null":
        return "value IS NULL", pc.field("value").is_null()
    if kind == "not":
        t, e = draw(_conditions(depth + 1))
        return f"NOT ({t})", ~e
    parts = draw(st.lists(_conditions(depth + 1), min_size=2, max_size=5))
    word = " OR " if kind == "or" else " AND "
    expr = parts[0][1]
    for _, e in parts[1:]:
        expr = expr | e if kind == "or" else expr & e
    return word.join(f"({t})" for t, _ in parts), expr


@settings(max_examples=100, deadline=None)
@given(_conditions())
def test_balancing_and_collapsing_keep_the_meaning(condition: tuple[str, pc.Expression]) -> None:
    from sediment.query.where import parse_where

    text, meaning = condition
    got = _SMALL.filter(parse_where(text, _SMALL.schema)).column("key").to_pylist()
    assert got == _SMALL.filter(meaning).column("key").to_pylist(), text


def test_sediment_query_answers_a_long_or_chain_and_refuses_deep_text(store: sd.Store) -> None:
    """The CLI in a child process: 7,000 ORs (as many as one argument can carry, 128 KiB)
    answer; 3,000 parentheses are one line of error, exit status 1, no traceback."""
    keys = [f"k{i:05d}" for i in range(0, 14_000, 2)]
    cli = [sys.executable, "-m", "sediment.cli", "query", "events", "--store", store.uri]
    proc = subprocess.run([*cli, "--where", _or([f"key = '{k}'" for k in keys]),
                           "--format", "csv", "--columns", "key"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [k.strip("\"") for k in proc.stdout.split()] == \
        ["key", *[k for k in keys if k < f"k{ROWS:05d}"]]
    proc = subprocess.run([*cli, "--where", "(" * 3_000 + "value = 1" + ")" * 3_000],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "nests more than 100 levels" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr) < 500


if __name__ == "__main__":
    _child(sys.argv[1])
