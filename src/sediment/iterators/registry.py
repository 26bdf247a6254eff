"""Iterators registered by type name beyond the built-ins (maintenance adds aggregation etc.)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sediment.errors import PropertyError
from sediment.iterators.base import RecordIterator
from sediment.schema import Schema

IteratorFactory = Callable[[Mapping[str, Any], Schema | None], RecordIterator]
"""Builds an iterator from its JSON config and the table schema (None when not known, e.g. when
a property value is checked on its own: validate what can be checked without it)."""

_REGISTRY: dict[str, IteratorFactory] = {}


def register_iterator(kind: str, factory: IteratorFactory) -> None:
    """Make ``{"type": kind, ...}`` configs build iterators with ``factory(cfg, schema)``."""
    _REGISTRY[kind] = factory


def build_registered(cfg: Mapping[str, Any], schema: Schema | None = None, *,
                     where: str) -> RecordIterator:
    factory = _REGISTRY.get(str(cfg.get("type")))
    if factory is None:
        known = ", ".join(["age_off", "filter", *sorted(_REGISTRY)])
        raise PropertyError(f"{where}: unknown iterator type {cfg.get('type')!r} ({known})")
    try:
        return factory(cfg, schema)
    except PropertyError as e:
        raise PropertyError(f"{where}: {e}") from None
