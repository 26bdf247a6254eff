"""Record iterators: vectorised transformations of sorted record-batch streams.

An iterator takes the sorted stream of one partition and yields batches (still sorted). Query-time
iterators come from the ``query.iterators`` table property (and the ``iterators=`` argument of
``query``/``scan``); compaction-time ones from ``compaction.iterators``. Each is configured by a
JSON object with a ``type``:

- ``{"type": "age_off", "field": "ts", "ttl_seconds": 86400}``: drop rows whose ``field``
  (a timestamp, or an integer in ``unit``: "s", "ms", "us", "ns"; default "ms") is older than
  ``ttl_seconds`` before now, and rows whose ``field`` is null (as Sleeper's age-off does).
  ``ttl_seconds`` is a finite number from 0 to what ``unit`` holds (9223372036 s, 292 years,
  for "ns"; ``max_ttl_seconds``), checked when the property is set.
- ``{"type": "filter", "field": "value", "op": "==", "value": "x"}``: keep rows where the
  comparison holds (ops ==, !=, <, <=, >, >=, in, not_in, is_null, not_null).
- ``{"type": "aggregate", "functions": {"count": "sum", "lo": "min", "hi": "max",
  "value": "last", "tags": "map_sum"}}``: rows with equal row keys and sort keys combine into
  one; each listed value field gets its function (sum, min, max: nulls skipped; last: the last
  row's value; concat: string or binary values joined in record order, nulls skipped; map_sum,
  map_min, map_max: maps combined key by key); unlisted fields take last. ``"group_by":
  ["region", ...]`` (value fields) groups by those fields besides the keys: rows combine only
  when they are equal too, and they keep their value.
  A field named twice (a JSON object with a repeated key) is refused, naming the field, rather
  than resolved to the last function as plain JSON parsing would; so is any option given twice.
- ``{"type": "keep_latest", "by": "timestamp"}``: one row per row key, the one with the greatest
  ``by`` (nulls lowest; ties: the last in stream order).

A table's merge rule (the ``merge`` property: last, first, partial, aggregate) is an iterator
too, built from the properties by :mod:`sediment.iterators.merge_rules` and run before all of
these on every read and compaction.

Every number in a configuration must be finite: ``NaN``, ``Infinity`` and ``1e999``, which
Python's JSON parser reads, are refused naming the field.

- ``{"type": "python", "class": "package.module:Name", ...}``: an iterator of your own, a
  subclass of :class:`RecordIterator` called with the other options as keyword arguments;
  loaded only when this process trusts the module (``--trust-iterator-module PREFIX``,
  ``$SEDIMENT_TRUSTED_ITERATOR_MODULES``), else IteratorModuleError naming the module (see
  :mod:`sediment.iterators.trust`).

Every type, the five above included, is one entry of the registry
(``sediment.iterators.registry``); more are added with ``register_iterator(kind, factory)``,
whose factory gets the config and the table schema (None when a property is checked on its
own). An unknown type is refused listing the registered ones.
"""

from sediment.iterators.base import AgeOff, RecordIterator, RowFilter, apply_iterators
from sediment.iterators.combine import Aggregate, KeepLatest
from sediment.iterators.registry import iterator_from_config, iterators_from_property
from sediment.iterators.trust import trust_iterator_modules, trusted_iterator_modules

__all__ = ["AgeOff", "Aggregate", "KeepLatest", "RecordIterator", "RowFilter", "apply_iterators",
           "iterator_from_config", "iterators_from_property", "trust_iterator_modules",
           "trusted_iterator_modules"]
