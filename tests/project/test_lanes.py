"""The quick lane's own rules (tests/conftest.py): a property keeps a quarter of its examples
there, cut once however many parametrised items share its function, and a stateful model's
settings are cut the same way."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from support.lanes import quick_examples as _quick_examples


@settings(max_examples=60, deadline=None)
@given(st.integers())
def _property(x: int) -> None:
    pass


@settings(max_examples=12, deadline=None)
@given(st.integers())
def _small_property(x: int) -> None:
    pass


class _Model(RuleBasedStateMachine):
    @rule()
    def step(self) -> None:
        pass


_Model.TestCase.settings = settings(max_examples=40, stateful_step_count=5)


def _item(obj: Any, cls: Any = None) -> Any:
    return SimpleNamespace(obj=obj, cls=cls)


def test_a_property_keeps_a_quarter_of_its_examples_once() -> None:
    for _ in range(3):  # three parametrised items of one function: cut once
        _quick_examples(_item(_property))
    assert _property._hypothesis_internal_use_settings.max_examples == 15  # type: ignore[attr-defined]
    _quick_examples(_item(_small_property))  # never below 5, never above the test's own
    assert _small_property._hypothesis_internal_use_settings.max_examples == 5  # type: ignore[attr-defined]


def test_a_stateful_model_keeps_a_quarter_of_its_examples() -> None:
    _quick_examples(_item(None, _Model.TestCase))
    _quick_examples(_item(None, _Model.TestCase))
    assert _Model.TestCase.settings.max_examples == 10
    assert _Model.TestCase.settings.stateful_step_count == 5  # the rest kept
