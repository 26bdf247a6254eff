"""TableSettings: one typed field per registered property, and the values a state holds."""

from __future__ import annotations

import dataclasses

import pytest

from sediment.core.state import TableState
from sediment.errors import PropertyError
from sediment.properties import PROPERTIES, defaults
from sediment.settings import TableSettings, field_name, settings_fields, settings_of


def test_every_registered_property_has_a_typed_field_and_every_field_a_property() -> None:
    expected = {field_name(name): spec.type.__name__ for name, spec in PROPERTIES.items()}
    assert settings_fields() == expected
    assert len(set(expected)) == len(PROPERTIES)  # no two properties share a field


def test_defaults_fill_what_a_state_does_not_set_and_types_hold() -> None:
    state = TableState("t1")
    state.properties = {"compaction.batch_size": 5, "gc.delay_seconds": 60}
    s = settings_of(state)
    assert s.compaction_batch_size == 5
    assert s.gc_delay_seconds == 60.0 and type(s.gc_delay_seconds) is float
    assert s.retention_seconds == PROPERTIES["retention.seconds"].default
    for name, spec in PROPERTIES.items():
        assert type(getattr(s, field_name(name))) is spec.type, name


def test_settings_read_as_a_mapping_by_property_name() -> None:
    s = TableSettings.from_properties({"parquet.compression": "lz4"})
    assert s["parquet.compression"] == "lz4"
    assert dict(s) == {**defaults(), "parquet.compression": "lz4"}
    with pytest.raises(KeyError):
        s["no.such.property"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.compaction_batch_size = 3  # type: ignore[misc]


def test_a_stored_value_out_of_range_is_kept_and_one_of_another_kind_is_named() -> None:
    """A value an older Sediment committed that today's checks refuse is kept when it is of
    the property's kind (the table still works, as before); one that is not names the
    property and the table."""
    kept = TableSettings.from_properties({"gc.delay_seconds": float("inf")})
    assert kept.gc_delay_seconds == float("inf")
    with pytest.raises(PropertyError, match="compaction.batch_size.*table t"):
        TableSettings.from_properties({"compaction.batch_size": "many"}, context="table t")
