"""Iterators registered by type name beyond the built-ins (maintenance adds aggregation etc.)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sediment.errors import PropertyError
from sediment.iterators.base import RecordIterator

_REGISTRY: dict[str, Callable[[Mapping[str, Any]], RecordIterator]] = {}


def register_iterator(kind: str, factory: Callable[[Mapping[str, Any]], RecordIterator]) -> None:
    """Make ``{"type": kind, ...}`` configs build iterators with ``factory``."""
    _REGISTRY[kind] = factory


def build_registered(cfg: Mapping[str, Any], *, where: str) -> RecordIterator:
    factory = _REGISTRY.get(str(cfg.get("type")))
    if factory is None:
        known = ", ".join(["age_off", "filter", *sorted(_REGISTRY)])
        raise PropertyError(f"{where}: unknown iterator type {cfg.get('type')!r} ({known})")
    return factory(cfg)
