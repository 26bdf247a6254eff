"""The iterator registry: every iterator type by name, the built-ins included, and the one
path from a JSON configuration to an iterator.

The built-in types are registered below, explicitly, in one table (age_off, filter,
aggregate, keep_latest, and python: a class by import path from a trusted module, see
:mod:`sediment.iterators.trust`); ``register_iterator`` adds another (or replaces one) at
run time. A configuration is checked the same way whatever its type: no option given twice,
every number finite, the factory's own checks, then (with a schema) the fields it names
and their types.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from sediment.errors import PropertyError
from sediment.iterators.base import (
    AgeOff,
    RecordIterator,
    RowFilter,
    age_off_from_config,
    json_object,
    repeated_names,
    row_filter_from_config,
)
from sediment.iterators.combine import aggregate_from_config, keep_latest_from_config
from sediment.iterators.trust import PYTHON_TYPE, python_iterator_from_config
from sediment.schema import Schema

IteratorFactory = Callable[[Mapping[str, Any], Schema | None], RecordIterator]
"""Builds an iterator from its JSON config and the table schema (None when not known, e.g. when
a property value is checked on its own: validate what can be checked without it). A
PropertyError it raises is reported after the property or argument at fault."""

_REGISTRY: dict[str, IteratorFactory] = {
    "age_off": age_off_from_config,
    "filter": row_filter_from_config,
    "aggregate": aggregate_from_config,
    "keep_latest": keep_latest_from_config,
    PYTHON_TYPE: python_iterator_from_config,
}


def register_iterator(kind: str, factory: IteratorFactory) -> None:
    """Make ``{"type": kind, ...}`` configs build iterators with ``factory(cfg, schema)``."""
    _REGISTRY[kind] = factory


def iterator_types() -> list[str]:
    """Every registered iterator type (the built-ins and those added), sorted."""
    return sorted(_REGISTRY)


def build_registered(cfg: Mapping[str, Any], schema: Schema | None = None, *,
                     where: str) -> RecordIterator:
    """The factory of ``cfg``'s type applied to it: PropertyError (after ``where``) for an
    unknown type, listing the registered ones, or for what the factory refuses."""
    kind = cfg.get("type")
    factory = _REGISTRY.get(str(kind))
    if factory is None:
        raise PropertyError(f"{where}: unknown iterator type {kind!r} "
                            f"({', '.join(iterator_types())})")
    try:
        return factory(cfg, schema)
    except PropertyError as e:  # (its class kept: IteratorModuleError stays one)
        raise type(e)(f"{where}: {e}") from None
    except KeyError as e:
        raise PropertyError(f"{where}: {kind} iterator needs {e}") from None
    except (TypeError, ValueError) as e:
        raise PropertyError(f"{where}: invalid {kind} iterator {dict(cfg)!r}: {e}") from None


def iterator_from_config(cfg: Mapping[str, Any], schema: Schema | None = None,
                         *, where: str = "iterator") -> RecordIterator:
    """Build an iterator from its JSON config (see the package docs)."""
    kind = cfg.get("type")
    twice = repeated_names(cfg)
    if twice:
        raise PropertyError(f"{where}: {kind} iterator gives {twice[0]!r} more than once")
    for name, value in cfg.items():
        _check_finite(value, f"{where}: {kind} iterator field {name!r}")
    it = build_registered(cfg, schema, where=where)
    if schema is not None:
        for f in it.fields():
            if f not in schema.field_names:
                raise PropertyError(f"{where}: iterator {kind} names unknown field {f!r}")
        _check_types(it, schema, where)
    return it


def _check_finite(value: Any, where: str) -> None:
    """Refuse NaN and infinities anywhere in a configuration value (Python's JSON parser
    reads ``NaN``, ``Infinity`` and ``1e999`` although JSON has no such numbers): no
    comparison or cutoff means anything with them."""
    if isinstance(value, float) and not math.isfinite(value):
        raise PropertyError(f"{where}: {value!r} is not a finite number")
    if isinstance(value, Mapping):
        for v in value.values():
            _check_finite(v, where)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            _check_finite(v, where)


def _check_types(it: RecordIterator, schema: Schema, where: str) -> None:
    """Fail at configuration time, not mid-query, when an iterator cannot fit its field."""
    if isinstance(it, AgeOff):
        t = schema.field(it.field).type
        if not (pa.types.is_integer(t) or pa.types.is_timestamp(t)):
            raise PropertyError(f"{where}: age_off field {it.field!r} has type {t}; it needs "
                                "an integer or timestamp field")
    elif isinstance(it, RowFilter) and it.op not in ("is_null", "not_null"):
        t = schema.field(it.field).type
        values = list(it.value) if it.op in ("in", "not_in") else [it.value]
        try:
            pa.array(values, type=t)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            raise PropertyError(f"{where}: filter on {it.field!r}: {it.value!r} is not a "
                                f"valid {t}") from None


def iterators_from_property(text: str, schema: Schema | None = None, *,
                            where: str = "iterators") -> list[RecordIterator]:
    """Parse a ``*.iterators`` property: a JSON list of configs ('' or '[]' for none)."""
    if not text.strip():
        return []
    try:
        doc = json.loads(text, object_pairs_hook=json_object)
        if not isinstance(doc, list) or not all(isinstance(d, dict) for d in doc):
            raise PropertyError(f"{where}: must be a JSON list of iterator objects")
        return [iterator_from_config(d, schema, where=where) for d in doc]
    except json.JSONDecodeError as e:
        raise PropertyError(f"{where}: not valid JSON: {e}") from None
    except RecursionError:  # json and the configs' checks recurse once per level
        raise PropertyError(f"{where}: JSON nested too deeply (no iterator configuration "
                            f"nests more than a few levels)") from None
