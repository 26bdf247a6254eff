"""One filter syntax (issue 36, item 4): ``filter=`` takes ``--where`` text everywhere it takes a
pyarrow expression, locally as the remote client and ``sediment query --where`` do. Every route
(``query``, ``scan``, ``prepare``, ``plan``, ``plan_files``, ``to_arrow``, ``to_pandas``,
``to_batches``, ``to_polars`` eager and lazy, ``register_datafusion``) given generated text
answers exactly as it does given the equivalent expression built by hand; text that does not
parse is a WhereError naming the table, on every route."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sediment as sd
from sediment.errors import QueryError, WhereError

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("status", pa.int64()), ("path", pa.string())])
ROWS = 120


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> sd.Table:
    """Three leaves, two files in some of them (a merge), nulls in both value fields, and a
    tag on the first state."""
    store = sd.Store.open(str(tmp_path_factory.mktemp("filter-text")), create=True)
    t = store.create_table("hits", SCHEMA, split_points=["k040", "k080"])

    def rows(n: int, ts: int) -> pa.Table:
        return pa.table({"key": [f"k{i:03d}" for i in range(n)], "ts": [ts] * n,
                         "status": [None if i % 11 == 0 else 200 + (i * 37) % 400
                                    for i in range(n)],
                         "path": [None if i % 13 == 0 else f"/p{i % 5}" for i in range(n)]},
                        schema=SCHEMA.to_arrow())

    t.ingest(rows(ROWS, 1))
    t.tag("first")
    t.ingest(rows(ROWS // 2, 2))
    return t


# ---- generated conditions: (text, the same condition as an expression) --------------------
def _cmp(op: str) -> Callable[[Any, Any], pc.Expression]:
    return {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge}[op]


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


OPS = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])
STATUS = st.integers(150, 650)
KEY = st.integers(0, ROWS + 5).map(lambda i: f"k{i:03d}")
PATH = st.sampled_from(["/p0", "/p3", "/p9", "it's"])


@st.composite
def atoms(draw: st.DrawFn) -> tuple[str, pc.Expression]:
    kind = draw(st.sampled_from(["status", "key", "path", "in", "between", "null", "ts"]))
    if kind in ("status", "key", "path", "ts"):
        op = draw(OPS)
        value: Any = draw({"status": STATUS, "key": KEY, "path": PATH,
                           "ts": st.integers(0, 3)}[kind])
        text = _quote(value) if isinstance(value, str) else str(value)
        return f"{kind} {op} {text}", _cmp(op)(pc.field(kind), value)
    if kind == "in":
        values = draw(st.lists(STATUS, min_size=1, max_size=4, unique=True))
        # SQL's IN: unknown (null) for a null status, where Arrow's is_in says false
        status = pc.field("status")
        return (f"status IN ({', '.join(map(str, values))})",
                pc.if_else(status.is_null(), pa.scalar(None, pa.bool_()), status.isin(values)))
    if kind == "between":
        lo, hi = sorted(draw(st.lists(KEY, min_size=2, max_size=2)))
        return (f"key BETWEEN {_quote(lo)} AND {_quote(hi)}",
                (pc.field("key") >= lo) & (pc.field("key") <= hi))
    negate = draw(st.booleans())
    name = draw(st.sampled_from(["status", "path"]))
    return (f"{name} IS {'NOT ' if negate else ''}NULL",
            pc.field(name).is_valid() if negate else pc.field(name).is_null())


def conditions() -> st.SearchStrategy[tuple[str, pc.Expression]]:
    def grow(inner: st.SearchStrategy[tuple[str, pc.Expression]]
             ) -> st.SearchStrategy[tuple[str, pc.Expression]]:
        both = st.tuples(inner, inner)
        return st.one_of(
            both.map(lambda ab: (f"({ab[0][0]}) AND ({ab[1][0]})", ab[0][1] & ab[1][1])),
            both.map(lambda ab: (f"({ab[0][0]}) OR ({ab[1][0]})", ab[0][1] | ab[1][1])),
            inner.map(lambda a: (f"NOT ({a[0]})", ~a[1])))

    return st.recursive(atoms(), grow, max_leaves=4)


# ---- routes: each gives rows (a sorted pa.Table) or a comparable plan ------------------------
def _sorted(data: pa.Table) -> pa.Table:
    return data.sort_by([(c, "ascending") for c in ("key", "ts", "path")
                         if c in data.column_names])


ROUTES: dict[str, Callable[[sd.Table, Any], Any]] = {
    "query": lambda t, f: t.query(filter=f),
    "query_keys": lambda t, f: t.query(keys=["k005", "k050", "k090"], filter=f),
    "query_range": lambda t, f: t.query(ranges=[sd.Range("k030", "k085")], filter=f),
    "query_version": lambda t, f: t.query(version="first", filter=f),
    "scan": lambda t, f: t.scan(filter=f).read_all(),
    "prepare": lambda t, f: t.prepare(columns=["key", "path"], filter=f).run(),
    "plan": lambda t, f: [(s.leaf_id, s.ranges, s.references)
                                 for s in t.plan(filter=f).subqueries],
    "plan_files": lambda t, f: [(p.leaf_id, p.filename, p.row_groups)
                                for p in t.plan_files(filter=f)],
    "to_arrow": lambda t, f: t.to_arrow(filter=f),
    "to_pandas": lambda t, f: pa.Table.from_pandas(t.to_pandas(filter=f),
                                                   preserve_index=False),
    "to_batches": lambda t, f: pa.Table.from_batches(list(t.to_batches(filter=f)),
                                                     schema=SCHEMA.to_arrow()),
    "to_polars": lambda t, f: t.to_polars(filter=f).to_arrow(),
    "to_polars_lazy": lambda t, f: t.to_polars(lazy=True, filter=f).collect().to_arrow(),
    "datafusion": lambda t, f: _datafusion(t, f),
}


def _datafusion(t: sd.Table, f: Any) -> pa.Table:
    import datafusion

    ctx = t.register_datafusion(datafusion.SessionContext(), "hits", filter=f)
    return ctx.sql("select * from hits").to_arrow_table()


def _answer(route: str, t: sd.Table, f: Any) -> Any:
    if route.startswith("to_polars"):
        pytest.importorskip("polars")
    if route == "datafusion":
        pytest.importorskip("datafusion")
    out = ROUTES[route](t, f)
    return _sorted(out).to_pylist() if isinstance(out, pa.Table) else out


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=conditions(), route=st.sampled_from(sorted(ROUTES)))
def test_text_answers_as_the_expression(table: sd.Table, case: tuple[str, pc.Expression],
                                        route: str) -> None:
    text, expression = case
    assert _answer(route, table, text) == _answer(route, table, expression), text


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_every_route_takes_text(table: sd.Table, route: str) -> None:
    """One fixed condition on each route, against a reference computed with pyarrow over the
    table's whole answer (so a route that ignored the filter would fail)."""
    text = "status >= 500 AND path IS NOT NULL"
    expression = (pc.field("status") >= 500) & pc.field("path").is_valid()
    got = _answer(route, table, text)
    assert got == _answer(route, table, expression)
    if route in ("query", "scan", "to_arrow", "to_pandas", "to_batches", "to_polars",
                 "to_polars_lazy", "datafusion"):
        want = _sorted(table.query().filter(expression)).to_pylist()
        assert got == want and 0 < len(want) < table.query().num_rows


BAD = [("status >=", "position 10"), ("status >> 3", "position"),
       ("nope = 1", "unknown field 'nope'"), ("status = 'x'", "does not fit field 'status'"),
       ("(status = 1", "position")]


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize(("text", "says"), BAD[:1] + BAD[2:3])
def test_bad_text_names_the_table_on_every_route(table: sd.Table, route: str, text: str,
                                                 says: str) -> None:
    with pytest.raises(WhereError, match=f"filter on table hits: .*{says}"):
        _answer(route, table, text)


@pytest.mark.parametrize(("text", "says"), BAD)
def test_bad_text_is_a_where_error(table: sd.Table, text: str, says: str) -> None:
    with pytest.raises(WhereError) as info:
        table.query(filter=text)
    assert "table hits" in str(info.value) and says in str(info.value)


def test_text_past_the_limits_is_refused(table: sd.Table) -> None:
    text = " OR ".join(f"status = {i} AND path = '/p{i}'" for i in range(2_000))
    with pytest.raises(WhereError, match="filter on table hits: .*parts"):
        table.query(filter=text)


def test_neither_text_nor_expression_is_refused(table: sd.Table) -> None:
    with pytest.raises(QueryError, match="--where text") as info:
        table.query(filter=3)
    assert not isinstance(info.value, WhereError)


def test_the_cli_where_and_filter_text_agree(table: sd.Table) -> None:
    """``sediment query --where`` and ``filter=`` read one syntax: the same rows."""
    from sediment.query.where import parse_where

    text = "key BETWEEN 'k010' AND 'k070' AND NOT status IN (200, 237)"
    expression = parse_where(text, SCHEMA.to_arrow())
    assert table.query(filter=text) == table.query(filter=expression)
    assert functools.reduce(operator.add, [b.num_rows for b in table.to_batches(filter=text)],
                            0) == table.query(filter=expression).num_rows


@pytest.mark.parametrize("text", [
    "status NOT IN (200, 237)", "NOT (status IN (200, 237))", "path NOT IN ('/p1', '/p2')",
    "NOT (path IN ('/p1') OR status = 274)", "path IN ('/p1', '/p3') OR status IS NULL",
    "NOT (path != '/p1')", "status NOT BETWEEN 300 AND 500"])
def test_nulls_answer_as_sql_says(table: sd.Table, text: str) -> None:
    """A null field makes a comparison, IN and BETWEEN unknown, and NOT of unknown is unknown:
    a record with a null is never matched by NOT IN (Arrow's is_in says false for a null,
    and NOT turned that true: ``delete --where "c NOT IN (...)"`` deleted every null c).
    DuckDB's SQL over the same records is the reference."""
    import duckdb

    records = table.query()  # noqa: F841 (read by DuckDB's replacement scan)
    want = sorted(duckdb.sql(f"SELECT key, ts FROM records WHERE {text}").fetchall())
    got = table.query(filter=text, columns=["key", "ts"])
    assert sorted(zip(got["key"].to_pylist(), got["ts"].to_pylist(), strict=True)) == want


@pytest.mark.parametrize("tz", ["UTC", "Europe/Paris"])
def test_a_time_without_an_offset_is_a_wall_time_in_the_fields_zone(
        tmp_path_factory: pytest.TempPathFactory, tz: str) -> None:
    """``ts >= '2024-01-02'`` on a field with a time zone reads the literal as a wall time
    in that zone (as SQL reads a plain timestamp against a zoned column; it was refused as
    "does not fit"); a literal with an offset is that instant. pandas is the reference."""
    import datetime as dt

    import pandas as pd

    typ = pa.timestamp("us", tz=tz)
    schema = sd.Schema(row_keys=[("k", pa.string())], values=[("ts", typ)])
    store = sd.Store.open(str(tmp_path_factory.mktemp("zoned")), create=True)
    t = store.create_table("zoned", schema)
    stamps = pd.date_range("2024-01-01", periods=48, freq="h", tz=tz)
    t.ingest(pa.table({"k": [f"k{i:02d}" for i in range(48)],
                       "ts": pa.array(stamps.to_pydatetime(), typ)}))
    for text, since in (("ts >= '2024-01-02'", pd.Timestamp("2024-01-02", tz=tz)),
                        ("ts >= '2024-01-01T12:30:00'", pd.Timestamp("2024-01-01 12:30", tz=tz)),
                        ("ts >= '2024-01-01T12:00:00Z'",
                         pd.Timestamp(dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)))):
        want = sorted(f"k{i:02d}" for i, s in enumerate(stamps) if s >= since)
        assert sorted(t.query(filter=text).column("k").to_pylist()) == want, text
