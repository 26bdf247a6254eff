"""A small, independent reference of what Sediment queries must return, plus test data.

The reference keeps every ingested record as a plain Python row and answers exact-key, range
(inclusive, exclusive and open ends, prefixes of multi-field row keys, unions of many ranges)
per-field regions (a range on each named field, :class:`RefRegion`) and column-subset
queries by testing each row with Python tuple comparisons. It shares no code
with Sediment: strings compare by their UTF-8 bytes (the order Sediment documents), binaries by
bytes, integers numerically. Results are rows sorted by (row keys, sort keys), ties broken by
every other column so two correct answers compare equal.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd
import pyarrow as pa

import sediment as sd

Row = dict[str, Any]

# Awkward strings for keys: empty, accents (composed and decomposed), non-BMP, control and
# high code points, prefixes of one another.
AWKWARD_STRINGS = [
    "", "a", "aa", "ab", "a\x00", "A", "Z", "z", "zz", "é", "e\u0301", "ü", "ñandú", "Ω",
    "日本", "日本語", "😀", "😀😀", "🐍x", "\U0010fffd", "\uffff", "\u00ff", "~", " ", "a b",
]
AWKWARD_BINARIES = [b"", b"\x00", b"\x00\x00", b"\x01", b"\x7f", b"\x80", b"\xff", b"\xff\xff",
                    b"a", b"ab", b"\xc3\xa9", b"\xf0\x9f\x98\x80"]
INT64_EXTREMES = [-(2**63), -(2**63) + 1, -1, 0, 1, 2**63 - 2, 2**63 - 1]
INT32_EXTREMES = [-(2**31), -(2**31) + 1, -1, 0, 1, 2**31 - 2, 2**31 - 1]


# ---- ordering ------------------------------------------------------------------------------
def order_value(v: Any) -> Any:
    """A value's place in Sediment's order: str by UTF-8 bytes, bytes and ints as they are."""
    if isinstance(v, str):
        return v.encode("utf-8")
    return v


def order_key(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(order_value(v) for v in values)


def total_order(v: Any) -> tuple[Any, ...]:
    """A total order over any value a test column holds (None first; lists/dicts by repr)."""
    if v is None:
        return (0,)
    if isinstance(v, bool):
        return (1, int(v))
    if isinstance(v, int | float):
        return (2, v)
    if isinstance(v, str):
        return (3, v.encode("utf-8"))
    if isinstance(v, bytes):
        return (4, v)
    return (5, repr(v))


# ---- input conversion ----------------------------------------------------------------------
def as_rows(data: Any, arrow_schema: pa.Schema | None = None) -> list[Row]:
    """Rows of a pa.Table, RecordBatch, pandas DataFrame or a list of row dicts."""
    if isinstance(data, list) and (not data or isinstance(data[0], dict)):
        return [dict(r) for r in data]
    if isinstance(data, list):
        return [r for part in data for r in as_rows(part, arrow_schema)]
    if isinstance(data, pd.DataFrame):
        data = pa.Table.from_pandas(data, schema=arrow_schema, preserve_index=False)
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return data.to_pylist()
    raise TypeError(f"reference cannot read {type(data).__name__}")


# ---- key predicates --------------------------------------------------------------------------
def _as_tuple(k: Any) -> tuple[Any, ...]:
    if isinstance(k, tuple):
        return k
    if isinstance(k, list):
        return tuple(k)
    return (k,)


def _cmp_prefix(key: tuple[Any, ...], bound: tuple[Any, ...]) -> int:
    """Compare a full key with a bound on the bound's length (a prefix)."""
    a, b = order_key(key[: len(bound)]), order_key(bound)
    return (a > b) - (a < b)


class RefRange:
    """A key range: ends are tuples (possibly prefixes) or None (open)."""

    def __init__(self, start: Any = None, end: Any = None, start_inclusive: bool = True,
                 end_inclusive: bool = False) -> None:
        self.start = None if start is None else _as_tuple(start)
        self.end = None if end is None else _as_tuple(end)
        if self.start is not None and self.end is not None:
            n = min(len(self.start), len(self.end))
            if self.start[:n] > self.end[:n]:  # Sediment refuses it: the ends are swapped
                self.start, self.end = self.end, self.start
                start_inclusive, end_inclusive = end_inclusive, start_inclusive
        self.start_inclusive = start_inclusive
        self.end_inclusive = end_inclusive

    @classmethod
    def of(cls, r: Any) -> RefRange:
        """From a sediment.Range (its fields only) or a RefRange."""
        if isinstance(r, RefRange):
            return r
        return cls(r.start, r.end, r.start_inclusive, r.end_inclusive)

    def to_sediment(self) -> sd.Range:
        return sd.Range(self.start, self.end, start_inclusive=self.start_inclusive,
                        end_inclusive=self.end_inclusive)

    def contains(self, key: tuple[Any, ...]) -> bool:
        if self.start is not None:
            c = _cmp_prefix(key, self.start)
            if c < 0 or (c == 0 and not self.start_inclusive):
                return False
        if self.end is not None:
            c = _cmp_prefix(key, self.end)
            if c > 0 or (c == 0 and not self.end_inclusive):
                return False
        return True

    def __repr__(self) -> str:
        lb = "[" if self.start_inclusive else "("
        rb = "]" if self.end_inclusive else ")"
        return f"{lb}{self.start!r}, {self.end!r}{rb}"


class RefRegion:
    """A per-field region: for each named row-key field, a range of single values (ends None:
    open); a row is inside when each named field is inside its range (the order of the whole
    key does not matter)."""

    def __init__(self, fields: dict[str, tuple[Any, bool, Any, bool]]) -> None:
        self.fields = dict(fields)

    @classmethod
    def of(cls, region: Any) -> RefRegion:
        """From a sediment per-field Region (its user ranges only) or a RefRegion."""
        if isinstance(region, RefRegion):
            return region
        return cls({name: (None if r.start is None else r.start[0], r.start_inclusive,
                           None if r.end is None else r.end[0], r.end_inclusive)
                    for name, r in region.given})

    def to_sediment(self) -> Any:
        return sd.Region({name: sd.Range(lo, hi, min_inclusive=lo_inc, max_inclusive=hi_inc)
                          for name, (lo, lo_inc, hi, hi_inc) in self.fields.items()})

    def contains_row(self, row: Row) -> bool:
        for name, (lo, lo_inc, hi, hi_inc) in self.fields.items():
            v = order_value(row[name])
            if lo is not None and (v < order_value(lo) or (v == order_value(lo) and not lo_inc)):
                return False
            if hi is not None and (v > order_value(hi) or (v == order_value(hi) and not hi_inc)):
                return False
        return True

    def __repr__(self) -> str:
        return "RefRegion(" + ", ".join(
            f"{n}{'[' if a else '('}{lo!r}, {hi!r}{']' if b else ')'}"
            for n, (lo, a, hi, b) in self.fields.items()) + ")"


def _selects(x: Any, ref: Reference, row: Row) -> bool:
    if isinstance(x, RefRegion):
        return x.contains_row(row)
    return bool(x.contains(ref.row_key(row)))


def _ref_item(r: Any) -> RefRange | RefRegion:
    if isinstance(r, RefRegion) or hasattr(r, "given"):  # a sediment per-field Region
        return RefRegion.of(r)
    return RefRange.of(r)


class Reference:
    """Everything ingested, answering queries the slow, obvious way."""

    def __init__(self, schema: sd.Schema) -> None:
        self.schema = schema
        self.arrow = pa.schema([*schema.row_keys, *schema.sort_keys, *schema.values])
        self.row_keys = [f.name for f in schema.row_keys]
        self.key_names = self.row_keys + [f.name for f in schema.sort_keys]
        self.names = self.arrow.names
        self.rows: list[Row] = []
        self.history: list[int] = []
        """Row count after each add (for versioned queries)."""

    def add(self, data: Any) -> None:
        self.rows.extend(as_rows(data, self.arrow))
        self.history.append(len(self.rows))

    def upto(self, adds: int) -> Reference:
        """The reference as it was after the first ``adds`` additions."""
        r = Reference(self.schema)
        r.rows = self.rows[: self.history[adds - 1]] if adds else []
        r.history = self.history[:adds]
        return r

    def row_key(self, row: Row) -> tuple[Any, ...]:
        return tuple(row[n] for n in self.row_keys)

    def query(self, keys: Sequence[Any] | None = None, ranges: Sequence[Any] | None = None,
              columns: Sequence[str] | None = None,
              where: Any = None) -> list[tuple[Any, ...]]:
        """Expected rows (tuples of ``columns``), in canonical order (see :func:`canonical`)."""
        rs = None
        if keys is not None or ranges is not None:
            rs: list[RefRange | RefRegion] = [RefRange(k, k, True, True) for k in (keys or ())]
            rs += [_ref_item(r) for r in (ranges or ())]
        out = [r for r in self.rows
               if (rs is None or any(_selects(x, self, r) for x in rs))
               and (where is None or where(r))]
        cols = list(columns) if columns is not None else self.names
        return canonical([tuple(r[c] for c in cols) for r in out],
                         [cols.index(k) for k in self.key_names if k in cols])

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=self.names)


# ---- comparing results -----------------------------------------------------------------------
def canonical(rows: Iterable[tuple[Any, ...]], key_positions: Sequence[int]
              ) -> list[tuple[Any, ...]]:
    """Rows sorted by the key columns in Sediment's order, then by every column."""
    return sorted(rows, key=lambda r: (order_key(r[i] for i in key_positions),
                                       tuple(total_order(v) for v in r)))


def result_rows(table: pa.Table, key_names: Sequence[str]) -> list[tuple[Any, ...]]:
    """A query result's rows, canonically ordered (ties between equal keys broken)."""
    cols = table.column_names
    rows = list(zip(*(table.column(c).to_pylist() for c in cols), strict=True)) \
        if cols and table.num_rows else []
    return canonical(rows, [cols.index(k) for k in key_names if k in cols])


def assert_key_order(table: pa.Table, key_names: Sequence[str]) -> None:
    """The result's (row keys, sort keys) never decrease from one row to the next.

    Only the leading key fields the result holds can be checked (no key field: nothing).
    """
    names: list[str] = []
    for k in key_names:
        if k not in table.column_names:
            break
        names.append(k)
    keys = [order_key(k) for k in zip(*(table.column(n).to_pylist() for n in names),
                                      strict=True)] if table.num_rows else []
    for i in range(1, len(keys)):
        assert keys[i - 1] <= keys[i], f"rows {i - 1} and {i} out of order: " \
                                       f"{keys[i - 1]!r} > {keys[i]!r}"


def assert_matches(table: pa.Table, ref: Reference, *, keys: Sequence[Any] | None = None,
                   ranges: Sequence[Any] | None = None, columns: Sequence[str] | None = None,
                   where: Any = None) -> None:
    """A query result equals the reference's answer, and comes in key order."""
    cols = list(columns) if columns is not None else ref.names
    assert table.column_names == cols
    assert_key_order(table, ref.key_names)
    got = result_rows(table, ref.key_names)
    want = ref.query(keys, ranges, cols, where)
    if got != want:
        missing = [r for r in want if r not in got][:5]
        extra = [r for r in got if r not in want][:5]
        raise AssertionError(f"query (keys={keys!r}, ranges={ranges!r}) returned "
                             f"{len(got)} rows, expected {len(want)}; missing e.g. {missing}, "
                             f"unexpected e.g. {extra}")


# ---- random data -----------------------------------------------------------------------------
def random_string(rng: random.Random, alphabet: str = "abcde", max_len: int = 4) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_len)))


def string_key_pool(rng: random.Random, n: int) -> list[str]:
    """Keys with many duplicates and every awkward string."""
    pool = list(AWKWARD_STRINGS)
    pool += [random_string(rng, "abcé😀", 3) for _ in range(n)]
    return pool


def random_batch(rng: random.Random, schema: sd.Schema, n: int,
                 pools: dict[str, list[Any]]) -> pa.Table:
    """``n`` random rows; key fields drawn from ``pools`` (so keys repeat), values random."""
    cols: dict[str, list[Any]] = {}
    for f in schema.row_keys + schema.sort_keys:
        cols[f.name] = [rng.choice(pools[f.name]) for _ in range(n)]
    for f in schema.values:
        cols[f.name] = [_random_value(rng, f.type) for _ in range(n)]
    arrow = pa.schema([*schema.row_keys, *schema.sort_keys, *schema.values])
    return pa.table(cols, schema=arrow)


def _random_value(rng: random.Random, t: pa.DataType) -> Any:
    if rng.random() < 0.1:
        return None
    if pa.types.is_string(t):
        return random_string(rng, "xyz😀", 5)
    if pa.types.is_binary(t):
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 4)))
    if pa.types.is_integer(t):
        return rng.randint(-(2**31), 2**31)
    if pa.types.is_floating(t):
        return rng.uniform(-1e6, 1e6)
    raise TypeError(t)


def random_range(rng: random.Random, pool: Sequence[Any]) -> RefRange:
    """A range whose ends come from (or near) the key pool, any end possibly open."""
    def end() -> Any:
        return None if rng.random() < 0.15 else rng.choice(pool)

    return RefRange(end(), end(), rng.random() < 0.5, rng.random() < 0.5)
