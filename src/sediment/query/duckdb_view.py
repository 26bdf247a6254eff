"""``Scan.to_duckdb``: a DuckDB view of a scan at its pinned version, equal to its records.

The view is a ``UNION ALL`` of two kinds of branch:

* **Native**: a leaf whose answer is one file's rows as they are (one reference, no
  iterators, written under the version's schema or mapping to it as it is) on a store of
  local files, with a single-field row key of a type whose literals
  render exactly (strings, integers). The branch is DuckDB's own ``read_parquet`` of that file
  restricted to the leaf's region (``key >= min AND key < max``): DuckDB decodes in parallel
  without Python, prunes row groups by statistics, and drops the branches whose region
  contradicts a query's key predicate before opening their files. The connection's
  ``parquet_metadata_cache`` is turned on (the files are immutable), so a lookup reads a
  footer once per connection.
* **Sediment**: every other leaf (several files to merge, iterators, keys whose literals do
  not render, object stores DuckDB cannot reach) is read by a :class:`SedimentSource`:
  DuckDB takes it for a ``pyarrow.dataset.Dataset`` and calls its ``scanner(columns=,
  filter=)`` on every query; the source prepares a fresh read of the pinned version with
  those columns and that filter (row-key constraints narrow leaves, files and row groups).

Measured on 10M rows in 8 compacted leaves (``benchmarks/engines.py``): a group-by over the
native view runs at 0.8-0.9x of DuckDB over one plain Parquet file, against 0.45x when every
leaf went through the source (Arrow's decoding of our small row groups and the handover to
DuckDB cost more than DuckDB's reader).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from sediment.core.regions import Region
from sediment.query.engines import Scan


def quote_identifier(name: str) -> str:
    """``name`` as a DuckDB identifier (double quotes doubled inside)."""
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Any, type_: pa.DataType) -> str | None:
    """``value`` as a DuckDB literal of the column's type, or None where no literal
    compares exactly as Arrow does (then the leaf goes through the source)."""
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        if not isinstance(value, str) or "\x00" in value:
            return None
        return "'" + value.replace("'", "''") + "'"
    if pa.types.is_integer(type_) and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _region_predicate(column: str, type_: pa.DataType, region: Region) -> str | None:
    """The SQL restricting a single-field key to ``region`` (``TRUE`` when unbounded), or
    None when a bound has no exact literal."""
    parts = []
    # strings in binary order, as Arrow's, whatever the connection's default collation
    col = f'({quote_identifier(column)} COLLATE "binary")' if pa.types.is_string(type_) \
        or pa.types.is_large_string(type_) else quote_identifier(column)
    for bound, op in ((region.min, ">="), (region.max, "<")):
        if bound is None:
            continue
        lit = _literal(bound[0], type_)
        if lit is None:
            return None
        parts.append(f"{col} {op} {lit}")
    return " AND ".join(parts) or "TRUE"


def register_view(scan: Scan, con: Any, name: str) -> None:
    """Register ``name`` in ``con``: the view described in the module docstring. A scan that
    narrows its rows (keys, ranges, a filter, extra iterators) is read through the source
    only: a native branch knows the leaf's region, not the request."""
    assert scan.source is not None, "a view reads its table again on every query"
    schema = scan.schema
    objects = scan.source.objects
    columns = ", ".join(quote_identifier(c) for c in scan.wanted)
    branches: list[str] = []
    through_source: list[str] = []
    key = schema.row_keys[0] if len(schema.row_keys) == 1 else None
    native = key is not None and not scan.iterators and not scan.request.narrows
    for sub in scan.plan.subqueries:
        # (a file written under another schema than the version's is read through the
        # source, which maps its columns by field id)
        path = objects.local_path(sub.references[0].filename) \
            if native and sub.as_stored and \
            scan.executor.file_map(sub.references[0], sub).identity else None
        where = _region_predicate(key.name, key.type, sub.region) \
            if key is not None and path is not None else None
        if path is None or where is None:
            through_source.append(sub.leaf_id)
            continue
        file = "'" + str(path).replace("'", "''") + "'"
        branches.append(f"SELECT {columns} FROM read_parquet({file}) WHERE {where}")
    helper = f"__sediment_source_{name}"
    for old in (name, helper):  # a view or source registered under these names before
        con.execute(f"DROP VIEW IF EXISTS {quote_identifier(old)}")
    source = SedimentSource(scan, frozenset(through_source))
    if not branches:
        con.register(name, source)
        return
    if through_source:
        con.register(helper, source)
        branches.append(f"SELECT {columns} FROM {quote_identifier(helper)}")
    con.execute("SET parquet_metadata_cache = true")
    con.execute(f"CREATE OR REPLACE TEMP VIEW {quote_identifier(name)} AS "
                + " UNION ALL ".join(branches))


class SedimentSource(ds.Dataset):
    """The leaves of a scan that DuckDB reads through Sediment: DuckDB scans a
    ``pyarrow.dataset.Dataset`` by calling ``scanner(columns=, filter=)`` and reading the
    scanner's batches, so this makes a fresh scan of the scan's request at its version (only
    the ``leaves`` given; None: all), with those columns and that filter conjoined with the
    request's, on every scan. Only ``schema`` and ``scanner`` are meant to be called (DuckDB
    calls nothing else)."""

    def __init__(self, scan: Scan,
                 leaves: frozenset[str] | None = None) -> None:  # no Dataset.__init__
        self._scan = scan
        self._base = scan.pinned()
        name = scan.source.name if scan.source is not None else "?"
        self._filter = self._base.filter_expression(scan.schema, name)
        self._leaves = leaves
        self._schema = scan.arrow_schema

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def scanner(self, columns: Sequence[str] | None = None,
                filter: pc.Expression | None = None, **kw: Any) -> ds.Scanner:  # noqa: A002
        wanted = list(columns) if columns is not None else self._schema.names
        both = filter if self._filter is None else \
            self._filter if filter is None else self._filter & filter
        scan = self._scan.again(self._base.replace(columns=wanted, filter=both))
        if self._leaves is not None:
            scan = scan.only_leaves(self._leaves)
        return ds.Scanner.from_batches(scan.to_batches(),
                                       **{k: v for k, v in kw.items() if k == "batch_size"})

    def count_rows(self, **kw: Any) -> int:
        return int(self.scanner(columns=[], filter=kw.get("filter")).count_rows())

    def __reduce__(self) -> Any:  # a source is not meant to leave the process
        raise TypeError("a Sediment DuckDB source cannot be pickled")
