"""An independent reference of the merge rules (the ``merge`` table property), in pandas.

Records are given as the ingests of a table in commit order; within one ingest, in input
order. The reference orders them as the semantics say (record key = row keys + sort keys, then
write order) with a stable pandas sort, groups by record key and keeps, per rule:

- ``none``: every record;
- ``last``: the group's last record (``tail(1)``: whole, nulls included);
- ``first``: the group's first record;
- ``partial``: per value field, the last non-null value of the group (null when none is);
- ``aggregate``: per value field its function (sum, min, max: nulls skipped, null when every
  value is; concat: non-null strings joined in order, null when none; last: the last record's
  value, null or not; fields not named take last).

It shares no code with Sediment: keys must be ASCII (pandas orders strings by code point, which
is Sediment's UTF-8 byte order for them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import pyarrow as pa

Row = dict[str, Any]


def _none(v: Any) -> Any:
    """pandas' missing values (NaN, NA, None) as None; numpy scalars as Python values."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    return v.item() if hasattr(v, "item") else v


def _valid(values: pd.Series) -> list[Any]:
    return [x for x in map(_none, values) if x is not None]


_FUNCTIONS: dict[str, Callable[[pd.Series], Any]] = {
    "sum": lambda s: sum(_valid(s)) if _valid(s) else None,
    "min": lambda s: min(_valid(s)) if _valid(s) else None,
    "max": lambda s: max(_valid(s)) if _valid(s) else None,
    "concat": lambda s: "".join(_valid(s)) if _valid(s) else None,
    "last": lambda s: _none(s.iloc[-1]),
    "partial": lambda s: _valid(s)[-1] if _valid(s) else None,  # the last non-null value
}


def merged(ingests: Sequence[pa.Table | Sequence[Row]], keys: Sequence[str], rule: str,
           functions: Mapping[str, str] | None = None) -> list[Row]:
    """What a table of merge rule ``rule`` (record key ``keys``: row keys then sort keys)
    holding ``ingests`` answers, in key order, as rows."""
    rows = [r for b in ingests for r in (b.to_pylist() if isinstance(b, pa.Table) else b)]
    if not rows:
        return []
    columns = list(rows[0])
    df = pd.DataFrame(rows, columns=columns, dtype=object)
    df["_order"] = range(len(df))
    df = df.sort_values([*keys, "_order"], kind="stable")
    groups = df.groupby(list(keys), sort=False)
    if rule == "none":
        out = df
    elif rule == "last":
        out = groups.tail(1)
    elif rule == "first":
        out = groups.head(1)
    elif rule in ("partial", "aggregate"):
        fns = {c: "last" for c in columns if c not in keys}
        if rule == "partial":
            fns = dict.fromkeys(fns, "partial")
        else:
            fns.update(functions or {})
        out = groups.agg({c: _FUNCTIONS[fn] for c, fn in fns.items()}).reset_index()
    else:
        raise ValueError(rule)
    return [{c: _none(r[c]) for c in columns} for r in out[columns].to_dict("records")]
