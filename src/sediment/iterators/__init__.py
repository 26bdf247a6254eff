"""Record iterators: vectorised transformations of sorted record-batch streams.

An iterator takes the sorted stream of one partition and yields batches (still sorted). Query-time
iterators come from the ``query.iterators`` table property (and the ``iterators=`` argument of
``query``/``scan``); compaction-time ones from ``compaction.iterators``. Each is configured by a
JSON object with a ``type``:

- ``{"type": "age_off", "field": "ts", "ttl_seconds": 86400}``: drop rows whose ``field``
  (a timestamp, or an integer in ``unit``: "s", "ms", "us", "ns"; default "ms") is older than
  ``ttl_seconds`` before now.
- ``{"type": "filter", "field": "value", "op": "==", "value": "x"}``: keep rows where the
  comparison holds (ops ==, !=, <, <=, >, >=, in, not_in, is_null, not_null).
"""

from sediment.iterators.base import (
    AgeOff,
    RecordIterator,
    RowFilter,
    apply_iterators,
    iterator_from_config,
    iterators_from_property,
)

__all__ = ["AgeOff", "RecordIterator", "RowFilter", "apply_iterators", "iterator_from_config",
           "iterators_from_property"]
