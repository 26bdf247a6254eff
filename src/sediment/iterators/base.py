"""The iterator interface and the row-local built-ins (age-off, row filters); configurations
become iterators in :mod:`sediment.iterators.registry`."""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.errors import PropertyError
from sediment.schema import Schema


class RecordIterator(ABC):
    """Transforms a sorted stream of batches of one partition; output stays sorted."""

    @abstractmethod
    def apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield the transformed stream."""

    def fields(self) -> set[str]:
        """Fields the iterator reads (so queries fetch them even when not requested)."""
        return set()

    def needs_consecutive_inputs(self) -> bool:
        """Whether combining records depends on their order across files (``concat``): a
        compaction job must then merge files consecutive in commit order, or a file committed
        between its inputs would read as coming after all of them (see compaction.strategy)."""
        return False


class _RowLocal(RecordIterator):
    """An iterator that keeps or drops each row on its own: a mask per batch."""

    @abstractmethod
    def mask(self, batch: pa.RecordBatch) -> pa.Array:
        """Rows to keep."""

    def apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            out = b.filter(self.mask(b))
            if out.num_rows:
                yield out


_UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@dataclass(frozen=True)
class AgeOff(_RowLocal):
    """Drop records older than ``ttl_seconds`` by ``field`` (timestamp or integer epoch).

    A record whose ``field`` is null has no age to keep it by and is dropped, as Sleeper's
    ``AgeOffFilter`` drops it.
    """

    field: str
    ttl_seconds: float
    unit: str = "ms"
    now: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        if self.unit not in _UNITS:
            raise PropertyError(f"age_off on {self.field!r}: unknown unit {self.unit!r} "
                                f"(units: {', '.join(_UNITS)})")
        check_ttl(self.ttl_seconds, self.unit, f"age_off on {self.field!r}")

    def fields(self) -> set[str]:
        return {self.field}

    def cutoff(self, column_type: pa.DataType) -> int:
        """The oldest value kept in a column of ``column_type``, in the column's own integer
        scale (a timestamp's unit, else ``unit``): what :meth:`mask` compares with, and
        what compaction compares Parquet statistics with to estimate what age-off drops."""
        scale = _UNITS[column_type.unit] if pa.types.is_timestamp(column_type) \
            else _UNITS[self.unit]
        return int((self.now() - self.ttl_seconds) * scale)

    def mask(self, batch: pa.RecordBatch) -> pa.Array:
        col = batch.column(self.field)
        cutoff = self.cutoff(col.type)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.int64())
        # a cutoff the field's type cannot hold (a ttl of centuries, an int32 field in ms)
        # keeps every value or none: compared as it is, it would overflow the scalar
        lo, hi = _int_range(col.type)
        if cutoff <= lo:
            return pc.is_valid(col)
        if cutoff > hi:
            return pa.array(np.zeros(len(col), dtype=bool))
        return pc.fill_null(pc.greater_equal(col, pa.scalar(cutoff, col.type)), False)


_INT64_MAX = 2**63 - 1


def _int_range(t: pa.DataType) -> tuple[int, int]:
    """The values an integer type (or a timestamp's int64) holds."""
    if pa.types.is_unsigned_integer(t):
        return 0, 2**t.bit_width - 1
    if pa.types.is_integer(t):
        return -(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1
    return -(2**63), _INT64_MAX


def max_ttl_seconds(unit: str) -> int:
    """The largest ``ttl_seconds`` an age-off in ``unit`` takes: its cutoff, now - ttl, stays
    an int64 in that unit until 2262 (292 years of ns, 292 million years of ms)."""
    return _INT64_MAX // _UNITS[unit]


def check_ttl(value: Any, unit: str, where: str | None = None) -> float:
    """``ttl_seconds`` of an age-off as a float, refused (PropertyError naming the field and
    the allowed range, after ``where`` when given) when it is not a number, not finite,
    negative or too large for ``unit``: such a value would be accepted and then fail every
    query."""
    field = f"{where}: " if where else ""
    field += "age_off iterator field 'ttl_seconds'"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PropertyError(f"{field}: {value!r} is not a number")
    try:
        ttl = float(value)
    except ValueError:
        raise PropertyError(f"{field}: {value!r} is not a number") from None
    top = max_ttl_seconds(unit)
    if not (math.isfinite(ttl) and 0 <= ttl <= float(top)):  # as the float the ttl is
        raise PropertyError(f"{field}: {value!r} is out of range; give 0 to {top} seconds "
                            f"(unit {unit!r})")
    return ttl


_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "==": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
    ">": pc.greater, ">=": pc.greater_equal,
}


@dataclass(frozen=True)
class RowFilter(_RowLocal):
    """Keep rows where ``field op value`` holds (nulls compare false except for is_null)."""

    field: str
    op: str
    value: Any = None

    def __post_init__(self) -> None:
        if self.op not in (*_OPS, "in", "not_in", "is_null", "not_null"):
            raise PropertyError(f"filter on {self.field!r}: unknown op {self.op!r}")
        if self.op in ("in", "not_in") and not isinstance(self.value, list | tuple | set |
                                                          frozenset):
            raise PropertyError(f"filter on {self.field!r}: op {self.op!r} needs a list "
                                f"value, not {self.value!r}")

    def fields(self) -> set[str]:
        return {self.field}

    def mask(self, batch: pa.RecordBatch) -> pa.Array:
        col = batch.column(self.field)
        if self.op == "is_null":
            return pc.is_null(col)
        if self.op == "not_null":
            return pc.is_valid(col)
        if self.op in ("in", "not_in"):
            m = pc.is_in(col, value_set=pa.array(list(self.value), type=col.type))
            return m if self.op == "in" else pc.invert(m)
        return pc.fill_null(_OPS[self.op](col, pa.scalar(self.value, type=col.type)), False)


# ---- configs (registered in sediment.iterators.registry) -----------------------------------
def age_off_from_config(cfg: Mapping[str, Any], schema: Schema | None = None) -> AgeOff:
    """``{"type": "age_off", "field": ..., "ttl_seconds": ..., "unit": "ms"}``."""
    unit = str(cfg.get("unit", "ms"))
    if unit not in _UNITS:
        raise PropertyError(f"unknown unit {cfg.get('unit')!r} (units: {', '.join(_UNITS)})")
    return AgeOff(str(cfg["field"]), check_ttl(cfg["ttl_seconds"], unit), unit)


def row_filter_from_config(cfg: Mapping[str, Any], schema: Schema | None = None) -> RowFilter:
    """``{"type": "filter", "field": ..., "op": ..., "value": ...}``."""
    return RowFilter(str(cfg["field"]), str(cfg["op"]), cfg.get("value"))


class JsonObject(dict[str, Any]):
    """A parsed JSON object that remembers the keys it held more than once (``duplicates``):
    ``json.loads`` alone keeps the last, so a configuration naming a field twice would be
    silently resolved to one of them."""

    duplicates: tuple[str, ...] = ()


def json_object(pairs: list[tuple[str, Any]]) -> JsonObject:
    """``object_pairs_hook`` for configurations: a JsonObject noting repeated keys."""
    obj = JsonObject(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        repeated: dict[str, None] = {}  # in the order they repeat
        for k, _ in pairs:
            if k in seen:
                repeated[k] = None
            seen.add(k)
        obj.duplicates = tuple(repeated)
    return obj


def repeated_names(obj: Any) -> tuple[str, ...]:
    """Names a configuration object gave more than once (a JsonObject's repeated keys, or the
    repeated first items of a sequence of pairs); () for a plain mapping."""
    if isinstance(obj, Mapping):
        return tuple(getattr(obj, "duplicates", ()))
    names = [k for k, _ in obj]
    return tuple(dict.fromkeys(k for i, k in enumerate(names) if k in names[:i]))


def apply_iterators(batches: Iterator[pa.RecordBatch],
                    iterators: Sequence[RecordIterator]) -> Iterator[pa.RecordBatch]:
    for it in iterators:
        batches = it.apply(batches)
    return batches
