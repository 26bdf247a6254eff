"""TableSettings: every property of a table at one state, typed, built once per operation.

The property registry (:mod:`sediment.properties`) says what each property is; a state holds
the values set on the table. An operation (an ingest, a compaction pass, a maintenance tick, a
GC, a dump) builds its settings once from the state it read (``settings_of(state)``) and reads
typed attributes from then on (``settings.compaction_batch_size`` is an ``int``), where code
used to turn an untyped property dict back into numbers at every use, each time re-reading the
table's head. The settings are also a read-only mapping by property name, for what shows or
passes on the raw values (``dict(settings)``, a writer that takes a property mapping).

One field per registered property, named after it with dots as underscores
(``compaction.batch_size`` -> ``compaction_batch_size``): ``from_properties`` fills them from
the registry, so a property added there without a field here fails at once (and
tests/core/test_settings.py pins the two to each other, types included).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from sediment.errors import PropertyError
from sediment.properties import PROPERTIES, PropertySpec


class TableState(Protocol):
    """What settings read of a ``sediment.core.state.TableState`` (core sits above this
    module, so it is named by its shape)."""

    name: str
    properties: dict[str, Any]


def field_name(property_name: str) -> str:
    """The settings attribute of a property: ``compaction.batch_size`` ->
    ``compaction_batch_size``."""
    return property_name.replace(".", "_")


@dataclass(frozen=True, slots=True)
class TableSettings(Mapping[str, Any]):
    """The effective value of every property (the table's own, else the default), typed.
    See the module docstring; each property's meaning is in :mod:`sediment.properties`."""

    # --- state store
    state_snapshot_interval: int
    state_commit_max_attempts: int
    state_commit_backoff_seconds: float
    state_cache_refresh_seconds: float
    retention_seconds: float
    status_retention_seconds: float
    # --- data files
    parquet_row_group_rows: int
    parquet_page_size_bytes: int
    parquet_page_rows: int
    parquet_compression: str
    parquet_compression_level: int
    parquet_dictionary_columns: str
    parquet_key_filter_bits: int
    parquet_bloom_columns: str
    sample_size: int
    # --- ingest
    ingest_memory_limit_bytes: int
    ingest_write_strategy: str
    ingest_stall_files: int
    ingest_stall_max_seconds: float
    ingest_spill_dir: str
    bulk_import_target_leaf_rows: int
    bulk_import_min_leaf_partitions: int
    # --- records with equal keys
    merge: str
    merge_functions: str
    # --- query
    query_iterators: str
    query_footer_cache_files: int
    query_key_filter_cache_bytes: int
    query_block_cache_bytes: int
    query_disk_cache_bytes: int
    query_threads: int
    spark_read_target_partition_rows: int
    # --- partitions, compaction, gc
    partitioning: str
    partition_split_dimension: str
    partition_scheme: str
    partition_scheme_version: int
    partition_split_threshold: int
    compaction_strategy: str
    compaction_ratio: float
    compaction_batch_size: int
    compaction_max_concurrent_jobs_per_partition: int
    compaction_max_jobs_per_pass: int
    compaction_max_merge_inputs: int
    compaction_memory_limit_bytes: int
    compaction_local_disk_bytes: int
    compaction_batch_rows: int
    compaction_job_timeout_seconds: float
    compaction_threads: int
    compaction_expired_fraction: float
    compaction_iterators: str
    compaction_max_bytes_per_second: int
    gc_delay_seconds: float
    gc_orphan_timeout_seconds: float
    gc_clock_skew_seconds: float
    gc_batch_size: int
    gc_max_files_per_run: int
    # --- streams
    stream_retention_seconds: float
    # --- idempotent writes
    write_idempotency_window_seconds: float
    write_group_commit_ms: float
    write_group_commit_max_rate: float
    # --- ingest batcher
    batcher_max_files: int
    batcher_max_bytes: int
    batcher_max_age_seconds: float
    batcher_bulk_import_min_bytes: int
    batcher_job_timeout_seconds: float

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], *, context: str = ""
                        ) -> TableSettings:
        """The settings of a table whose own properties are ``properties`` (parsed values, as
        a state holds them; missing ones take their defaults). ``context`` names whose they
        are in errors (``table T``).

        A stored value that today's checks refuse (see ``validate_properties(stored=True)``)
        is kept as it is when it has, or converts to, the property's type, as the reads this
        replaces did; one that cannot raises PropertyError naming the property."""
        return cls(**{field_name(name): _typed(spec, properties.get(name, spec.default),
                                               context)
                      for name, spec in PROPERTIES.items()})

    @classmethod
    def from_state(cls, state: TableState, name: str | None = None) -> TableSettings:
        """The settings of ``state`` (no I/O: the state holds its properties); ``name``: the
        table's, for errors (else the one the state carries)."""
        return cls.from_properties(state.properties, context=f"table {name or state.name}")

    # ---- a read-only mapping by property name ---------------------------------------------
    def __getitem__(self, name: str) -> Any:
        if name not in PROPERTIES:
            raise KeyError(name)
        return getattr(self, field_name(name))

    def __iter__(self) -> Iterator[str]:
        return iter(PROPERTIES)

    def __len__(self) -> int:
        return len(PROPERTIES)


def settings_of(state: TableState, name: str | None = None) -> TableSettings:
    """``TableSettings.from_state(state, name)``: what an operation reads its properties
    from."""
    return TableSettings.from_state(state, name)


def as_settings(properties: Mapping[str, Any]) -> TableSettings:
    """``properties`` as settings: themselves when they are, else built from them (the planners
    that take a property mapping: callers and tests may give a plain dict)."""
    if isinstance(properties, TableSettings):
        return properties
    return TableSettings.from_properties(properties)


def settings_fields() -> dict[str, str]:
    """Field name -> its annotated type name (for the test pinning fields to the registry)."""
    return {f.name: str(f.type) for f in fields(TableSettings)}


def _typed(spec: PropertySpec, value: Any, context: str) -> Any:
    if type(value) is spec.type:
        return value
    if spec.type is float and type(value) is int:
        return float(value)
    try:
        return spec.parse(value, context=context)
    except PropertyError:
        pass
    try:  # a stored value out of today's range: kept, when it is of the property's kind
        if spec.type is str or isinstance(value, (bool, str)):
            raise ValueError(value)
        return spec.type(value)
    except (TypeError, ValueError):
        where = f" of {context}" if context else ""
        raise PropertyError(f"property {spec.name!r}{where}: the stored value {value!r} is "
                            f"not of type {spec.type.__name__}; set a valid one") from None
