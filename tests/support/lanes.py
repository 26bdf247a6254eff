"""The quick lane's rules that are code (``./dev test --quick`` sets
``SEDIMENT_TEST_LANE=quick``; ``tests/conftest.py`` applies them; CONTRIBUTING.md)."""

from __future__ import annotations

from typing import Any

QUICK_EXAMPLES_DIVISOR = 4
_FEWER_EXAMPLES: set[int] = set()
"""The tests (and stateful models) whose examples the quick lane has already cut: one function
serves every parametrised item of a test, and is cut once."""


def quick_examples(item: Any) -> None:
    """In the quick lane, a hypothesis property runs a quarter of its examples (at least 5): the
    edit loop checks every property, the full lane with its whole power."""
    from hypothesis import settings

    def fewer(current: settings) -> settings:
        fewest = max(5, current.max_examples // QUICK_EXAMPLES_DIVISOR)
        return settings(current, max_examples=min(current.max_examples, fewest))

    test = getattr(item, "obj", None)
    if (getattr(test, "hypothesis", None) is not None and id(test) not in _FEWER_EXAMPLES
            and hasattr(test, "_hypothesis_internal_use_settings")):
        _FEWER_EXAMPLES.add(id(test))
        test._hypothesis_internal_use_settings = fewer(test._hypothesis_internal_use_settings)
    cls = getattr(item, "cls", None)
    if (cls is not None and isinstance(getattr(cls, "settings", None), settings)
            and id(cls) not in _FEWER_EXAMPLES):
        _FEWER_EXAMPLES.add(id(cls))
        cls.settings = fewer(cls.settings)  # a stateful model's TestCase


