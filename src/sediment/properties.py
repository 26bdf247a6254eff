"""Every table and store property, its type, default and meaning, in one place.

Store properties (set at ``Store.open``/``sediment init``) give defaults for the tables of the
store; table properties override them. Unknown names and invalid values raise PropertyError.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sediment.errors import IteratorModuleError, PropertyError, did_you_mean
from sediment.iterators.merge_rules import MERGE_RULES

if TYPE_CHECKING:
    from sediment.schema import Schema


log = logging.getLogger(__name__)


def _retired_spill_dir(value: str) -> bool:
    """The check of the retired ``ingest.spill_dir`` property: a set value is accepted, so
    that stores which set it still open, and ignored with a warning saying where the setting
    moved (refusing it would fail every replay of the log entry that set it)."""
    if value:
        warnings.warn(
            f"property ingest.spill_dir = {value!r} is no longer read and is ignored: the "
            "spill folder belongs to the ingesting client; give table.ingest(..., spill_dir=...),"
            " `sediment ingest --spill-dir DIR` or $SEDIMENT_SPILL_DIR (default: the system temp "
            "folder)", UserWarning, stacklevel=2)
    return True


def _retired_min_leaf_partitions(value: int) -> bool:
    """The check of the retired ``bulk_import.min_leaf_partitions``: as
    :func:`_retired_spill_dir`, a set value is accepted (its log entry still replays) and
    ignored with a warning naming the property that replaced it."""
    if value:
        warnings.warn(
            f"property bulk_import.min_leaf_partitions = {value!r} is no longer read and is "
            "ignored: bulk import sizes leaves to the data; set bulk_import.target_leaf_rows "
            "(rows per leaf) instead", UserWarning, stacklevel=2)
    return True


@dataclass(frozen=True, slots=True)
class PropertySpec:
    """One property: name, Python type, default, documentation and constraints."""

    name: str
    type: type
    default: Any
    doc: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    check: Callable[[Any], bool] | None = None
    """Extra validation: raises PropertyError for a bad value."""
    check_in: Callable[[Any, str, Schema | None], object] | None = None
    """Extra validation given also whose value it is (``property NAME of table T``, for its
    messages) and the table's schema when known: raises PropertyError for a bad value."""

    def parse(self, value: Any, *, context: str = "", schema: Schema | None = None) -> Any:
        """Coerce a value (possibly a string from the CLI) and validate it (against the
        table's ``schema`` too, when given: iterator configurations name its fields)."""
        where = f" of {context}" if context else ""
        try:
            if self.type is bool and isinstance(value, str):
                low = value.strip().lower()
                if low not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                v: Any = low in ("true", "1", "yes")
            elif self.type is bool:
                if not isinstance(value, bool):
                    raise ValueError(value)
                v = value
            elif self.type is int:
                if isinstance(value, bool):
                    raise ValueError(value)
                if isinstance(value, float):
                    if not value.is_integer():
                        raise ValueError(value)
                    v = int(value)
                elif isinstance(value, str):
                    if "e" in value.lower():  # "1e6"; but "1.5e0" is no integer
                        f = float(value)
                        if not f.is_integer():
                            raise ValueError(value)
                        v = int(f)
                    else:
                        v = int(value)
                else:
                    v = int(value)
            elif self.type is float:
                if isinstance(value, bool):
                    raise ValueError(value)
                v = float(value)
                if not math.isfinite(v):  # NaN passes every minimum check, inf every maximum
                    raise ValueError(value)
            else:
                if not isinstance(value, str):
                    raise ValueError(value)
                v = value
        except (TypeError, ValueError):
            raise PropertyError(
                f"property {self.name!r}{where}: {value!r} is not a valid {self.type.__name__}"
            ) from None
        if self.choices is not None and v not in self.choices:
            raise PropertyError(
                f"property {self.name!r}{where}: {v!r} is not one of "
                f"{', '.join(map(str, self.choices))}"
            )
        if self.check is not None:
            self.check(v)
        if self.check_in is not None:
            self.check_in(v, f"property {self.name}{where}", schema)
        if self.minimum is not None and v < self.minimum:
            raise PropertyError(f"property {self.name!r}{where}: {v!r} is below {self.minimum}")
        if self.maximum is not None and v > self.maximum:
            raise PropertyError(f"property {self.name!r}{where}: {v!r} is above {self.maximum}")
        if self.type is int and not -_INT64 <= v < _INT64:
            # past int64 no Arrow, Parquet or DataFusion setting takes it
            raise PropertyError(f"property {self.name!r}{where}: {v!r} is out of range "
                                f"({-_INT64} to {_INT64 - 1})")
        return v


_INT64 = 2**63
_MAX_SECONDS = 100 * 365 * 86400.0
"""The largest duration property: a century, beyond any promise of time travel or delay,
and within what ``time.sleep`` and datetimes take (a larger one failed there, not here)."""


def _check_iterators(text: str, where: str, schema: Schema | None) -> None:
    """Parse and check an iterator list when it is set (every number in it included; with the
    schema, its fields and their types too), so a configuration that cannot run is refused
    then, not by every later query."""
    from sediment.iterators import iterators_from_property

    iterators_from_property(text, schema, where=where)


def _check_merge_functions(text: str, where: str, schema: Schema | None) -> None:
    """Parse ``merge.functions`` when it is set: names of functions (with the schema, the
    fields they name and their types too), so a rule that cannot run is refused then."""
    from sediment.iterators.merge_rules import parse_functions

    parse_functions(text, schema, where)


def _check_bloom_columns(text: str, where: str, schema: Schema | None) -> None:
    """``parquet.bloom_columns``: value columns and row-key fields after the first (the first
    has the key filters), each of a type whose values Parquet hashes (with the schema)."""
    for name in (c.strip() for c in text.split(",")):
        if not name:
            continue
        problem = None if schema is None else bloom_column_problem(schema, name)
        if problem is not None:
            raise PropertyError(f"{where}: {problem}")


def hashable_type(typ: pa.DataType) -> bool:
    """Whether this module hashes values of ``typ`` as Parquet does."""
    if pa.types.is_time(typ) or pa.types.is_interval(typ) or pa.types.is_duration(typ):
        return False
    return bool(pa.types.is_string(typ) or pa.types.is_large_string(typ)
                or pa.types.is_binary(typ) or pa.types.is_large_binary(typ)
                or pa.types.is_integer(typ) or pa.types.is_temporal(typ)
                or pa.types.is_float32(typ) or pa.types.is_float64(typ))


def bloom_column_problem(schema: Schema, name: str) -> str | None:
    """What is wrong with naming ``name`` in ``parquet.bloom_columns`` of a table of
    ``schema``, or None."""
    first = schema.row_key_names[0]
    if name == first:
        return (f"{name!r} is the first row-key field, which has the key filters already "
                "(parquet.key_filter_bits)")
    if name not in schema.field_names:
        return f"no column {name!r} (columns: {', '.join(schema.field_names)})"
    typ = schema.to_arrow().field(name).type
    if not hashable_type(typ):
        return (f"column {name!r} is of type {typ}: bloom filters serve strings, binaries, "
                "integers, dates, timestamps and floats")
    return None


def bloom_columns(schema: Schema, text: str) -> list[str]:
    """The columns ``parquet.bloom_columns`` (``text``) names that the schema has and that
    take bloom filters (a column dropped since is left out)."""
    names = [c.strip() for c in str(text).split(",")]
    return [c for c in names if c and bloom_column_problem(schema, c) is None]


_SPECS = [
    # --- state store -------------------------------------------------------------------
    PropertySpec("state.snapshot.interval", int, 100,
                 "Transactions between state snapshots; loading replays at most this many.",
                 minimum=1),
    PropertySpec("state.commit.max_attempts", int, 200,
                 "Attempts at the next log version before a commit gives up (CommitConflictError).",
                 minimum=1),
    PropertySpec("state.commit.backoff_seconds", float, 0.005,
                 "Base of the jittered exponential backoff between commit attempts.", minimum=0,
                 maximum=_MAX_SECONDS),
    PropertySpec("state.cache.refresh_seconds", float, 1.0,
                 "How long queries trust the state they read before checking the log for "
                 "other processes' commits (this process's own commits show at once). A read "
                 "past half of it has the log re-read on a background thread, so a table "
                 "read steadily is kept current off its readers' path.",
                 minimum=0, maximum=_MAX_SECONDS),
    PropertySpec("retention.seconds", float, 172800.0,
                 "How far back time travel is promised: versions younger than this stay "
                 "readable (GC keeps their files, prune their log entries); reading an older "
                 "one whose files or log are gone raises VersionExpiredError. 2 days, so "
                 "yesterday's versions read at any time today: shorter than Delta's 7-day "
                 "deletedFileRetentionDuration (Sediment replaces files far more often, every "
                 "compaction, and a week of them costs storage), far longer than Sleeper's "
                 "15-minute GC delay (sleeper.table.gc.delay.minutes), which only protects "
                 "running queries. 0: only gc.delay_seconds protects old versions.",
                 minimum=0, maximum=_MAX_SECONDS),
    PropertySpec("status.retention.seconds", float, 604800.0,
                 "How long job and task events (the ``status/`` folder: reports, the "
                 "dashboard's jobs) are kept one by one: the maintainer rolls older ones up "
                 "into one totals object per kind of job (counts by status, rows and bytes) "
                 "and deletes them, so reports read a bounded number of events however long "
                 "the table runs. 7 days: a week of per-job detail for a look back at an "
                 "incident; totals are kept for ever.",
                 minimum=0, maximum=_MAX_SECONDS),
    # --- data files ----------------------------------------------------------------------
    PropertySpec("parquet.row_group_rows", int, 4096,
                 "Rows per Parquet row group: small groups make exact-key reads fast (measured "
                 "on 2M rows: 4096 -> 1.1 ms per lookup, 16384 -> 3.9 ms; scans unchanged). "
                 "At most 1,048,576 (pyarrow's own cap on a row group): a writer holds a whole "
                 "group in memory, and every file's key filter has a block sized for a whole "
                 "group (1.3 MB for a 2-row file at the cap, 21 MB at 2^24 rows).",
                 minimum=128, maximum=1 << 20),
    PropertySpec("parquet.page_size_bytes", int, 64 * 1024,
                 "Target Parquet data page size.", minimum=1024),
    PropertySpec("parquet.page_rows", int, 1024,
                 "Most rows in a Parquet data page (pyarrow's max_rows_per_page; 0: pages "
                 "cut by parquet.page_size_bytes alone). A lookup decodes one page per column "
                 "(its row group's page index), and pages of every column cut at the same "
                 "rows decode as one, so small pages keep lookups fast whatever the row-group "
                 "size (measured on the benchmark schema: a 4-column 1,024-row point read "
                 "1.6-1.9x faster than a whole 4,096-row group; files 0.4% smaller).",
                 minimum=0),
    PropertySpec("parquet.compression", str, "zstd", "Parquet compression codec.",
                 choices=("zstd", "snappy", "lz4", "gzip", "none")),
    PropertySpec("parquet.compression_level", int, 1,
                 "Codec level of zstd (0-22; 1 keeps writes fast, raise for smaller files) "
                 "and gzip (0-9); the other codecs have none.", minimum=0, maximum=22),
    PropertySpec("parquet.dictionary_columns", str, "",
                 "Comma-separated value columns written with dictionary encoding (worth it for "
                 "low-cardinality columns only; keys are always plain)."),
    PropertySpec("parquet.key_filter_bits", int, 10,
                 "Bits per key of the Bloom filter written for each row group on the first "
                 "row-key field (sidecar _<file>.keys): exact-key lookups skip files that "
                 "cannot hold the key (10 bits: ~1% false positives; 0: no filters).",
                 minimum=0, maximum=64),
    PropertySpec("parquet.bloom_columns", str, "",
                 "Comma-separated value columns (and row-key fields after the first) given "
                 "Parquet's own split-block bloom filter in every row group (read by "
                 "Sediment, DuckDB, DataFusion and Spark): a filter of == or is_in on such a "
                 "column skips the row groups and files that cannot hold its values "
                 "(docs/performance.md, \"Skip indexes\"). Costs about 2 bytes a row per "
                 "column at write.", check_in=_check_bloom_columns),
    PropertySpec("sample.size", int, 1024,
                 "Keys kept in each data file's sidecar sample (every k-th key, with counts).",
                 minimum=2),
    # --- ingest -------------------------------------------------------------------------
    PropertySpec("ingest.memory_limit_bytes", int, 512 * 1024 * 1024,
                 "In-memory buffer of one ingest; past it sorted runs spill to local disk.",
                 minimum=1024 * 1024),
    PropertySpec("ingest.write_strategy", str, "per_partition",
                 "per_partition: one file per touched leaf; shared_file: one sorted file "
                 "referenced from every leaf it covers.",
                 choices=("per_partition", "shared_file")),
    PropertySpec("ingest.stall_files", int, 0,
                 "Back-pressure (RocksDB's level0_stop_writes_trigger, Paimon's "
                 "num-sorted-run.stop-trigger): an ingest whose commit would add a file to a "
                 "leaf already read from this many files waits for compaction to bring it "
                 "down, up to ingest.stall_max_seconds, then commits anyway. Set it to "
                 "compaction.batch_size to hold every leaf within a batch while a maintainer "
                 "runs on a machine that ingest can outrun. 0: ingest never waits.",
                 minimum=0),
    PropertySpec("ingest.stall_max_seconds", float, 60.0,
                 "The longest an ingest waits for room in a crowded leaf (ingest.stall_files) "
                 "before it commits regardless: a stopped maintainer slows ingest down, it "
                 "never stops it.", minimum=0),
    PropertySpec("ingest.spill_dir", str, "",
                 "No longer read: the spill folder is the ingesting client's choice, not the "
                 "store's (table.ingest(..., spill_dir=...), `sediment ingest --spill-dir`, or "
                 "SEDIMENT_SPILL_DIR; default the system temp folder). Still accepted, with a "
                 "warning, so that stores which set it keep opening.",
                 check=lambda v: _retired_spill_dir(v)),
    PropertySpec("bulk_import.target_leaf_rows", int, 1_000_000,
                 "Rows a bulk import aims to put in each leaf: a table with fewer leaves than "
                 "its input's rows / this is first split at quantiles of a sample of the input "
                 "(in the import's one commit). A leaf is sorted and written by one Spark task "
                 "within ingest.memory_limit_bytes, so 1M rows (~100 MB of typical rows) sorts "
                 "in memory, a few hundred thousand rows stay one leaf, and a "
                 "partition.split.threshold's worth (1e9) makes a thousand leaves: Spark "
                 "parallelism without leaves too small to be worth a compaction each.",
                 minimum=1),
    PropertySpec("bulk_import.min_leaf_partitions", int, 0,
                 "No longer read: bulk import sizes its leaves to the data "
                 "(bulk_import.target_leaf_rows); a fixed 256 leaves made every small import "
                 "hundreds of files and commits. Still accepted, with a warning, so that "
                 "stores and tables which set it keep opening.",
                 minimum=0, check=lambda v: _retired_min_leaf_partitions(v)),
    # --- records with equal keys ----------------------------------------------------------
    PropertySpec("merge", str, "none",
                 "The merge rule: what the table keeps of the records sharing a record key "
                 "(row keys plus sort keys), applied on every read and compaction before the "
                 "iterators. none: every record; last: the latest write (Paimon's "
                 "deduplicate); first: the earliest write; partial: each value field the "
                 "latest non-null value written to it (Paimon's partial-update); aggregate: "
                 "each value field combined by its function in merge.functions. Writes are "
                 "ordered by commit, then by position within one write. Fixed once the table "
                 "holds data (set it at create_table or while the table is empty).",
                 choices=MERGE_RULES),
    PropertySpec("merge.functions", str, "",
                 "For merge = aggregate: a JSON object {field: function} giving value fields "
                 "the aggregate iterator's functions (sum, min, max, last, concat, map_sum, "
                 "map_min, map_max); fields not named take last. Fixed once the table holds "
                 "data.",
                 check_in=_check_merge_functions),
    # --- query --------------------------------------------------------------------------
    PropertySpec("query.iterators", str, "",
                 "JSON list of iterators applied at query time (see sediment.iterators).",
                 check_in=_check_iterators),
    PropertySpec("query.footer_cache_files", int, 4096,
                 "Parquet footers kept in memory per table (0 disables the cache).", minimum=0),
    PropertySpec("query.key_filter_cache_bytes", int, 64 * 1024 * 1024,
                 "Key-filter blocks kept in memory per table for exact-key lookups (0: read "
                 "them from storage on every lookup).", minimum=0),
    PropertySpec("query.block_cache_bytes", int, 256 * 1024 * 1024,
                 "Bytes of decoded column data (per file, row group, page and column) kept in "
                 "the process's block cache for lookups and ranges (sediment.query.blocks): "
                 "the cache of a process reading this table is sized by it unless "
                 "SEDIMENT_BLOCK_CACHE_BYTES bounds the process; 0: this table's reads "
                 "bypass the cache. Files never change, so an entry is never stale.",
                 minimum=0),
    PropertySpec("query.disk_cache_bytes", int, 1024 * 1024 * 1024,
                 "Bytes of object-store reads (ranges of data files and their sidecars: "
                 "footers, page indexes, key-filter blocks, pages) kept on local disk under "
                 "$SEDIMENT_CACHE_DIR (default: sediment in the user's cache folder), least "
                 "recently used evicted, shared by the processes of the machine "
                 "(sediment.storage.diskcache). Only bytes that passed their checks are kept, "
                 "and files never change, so an entry is never stale. Local-disk stores do not "
                 "use it. 0: off.", minimum=0),
    PropertySpec("query.threads", int, 0,
                 "Threads for parallel sub-queries (0: number of CPUs).", minimum=0),
    PropertySpec("spark.read.target_partition_rows", int, 1_000_000,
                 "Records per Spark partition of a spark.read.format(\"sediment\") read: a "
                 "leaf holding more (by its files' exact samples) is read as several key "
                 "sub-ranges cut at whole row keys, so a heavy read of a one-leaf table uses "
                 "every executor core while a one-key read still touches one sub-range. 1M "
                 "records (~100 MB of typical rows) keeps a task to seconds, enough to amortise "
                 "Spark's per-task cost; bulk_import.target_leaf_rows uses the same figure.",
                 minimum=1),
    # --- partitions, compaction, gc -------------------------------------------------------
    PropertySpec("partitioning", str, "lexicographic",
                 "lexicographic: a partition is an interval of the row-key order and a split "
                 "cuts that order; dimensions: a partition is a box (a range on each row-key "
                 "field) and a split cuts the first field whose median is neither its minimum "
                 "nor its maximum in the leaf, at that median (as Sleeper does), so queries on "
                 "any key field prune partitions. Split points of a dimensions table cut the "
                 "first field. Fixed once the table holds data.",
                 choices=("lexicographic", "dimensions")),
    PropertySpec("partition.split.dimension", str, "first",
                 "Which row-key field a split of a dimensions table cuts (lexicographic tables "
                 "ignore it). first: the first field whose median is neither its minimum nor "
                 "its maximum in the leaf (Sleeper's rule), so a second field is cut only where "
                 "the first is nearly constant; cycle: a k-d tree's rule, a leaf d levels below "
                 "the root trying field d mod n first, then the next ones as first does, so "
                 "every field is bounded and a query on any one field reads a fraction of the "
                 "leaves (benchmarks/regions.py). Changing it affects later splits only.",
                 choices=("first", "cycle")),
    PropertySpec("partition.scheme", str, "",
                 "The id of the partition scheme (co-sharding) whose tree this table follows; "
                 "empty for a table with its own tree. Set by store.create_table(..., "
                 "scheme=name) and never changed afterwards."),
    PropertySpec("partition.scheme.version", int, 0,
                 "The version of the partition scheme's log that this table's tree matches "
                 "(and that its later transactions were validated against); moved only by "
                 "follow_scheme transactions.", minimum=0),
    PropertySpec("partition.split.threshold", int, 1_000_000_000,
                 "A leaf partition known to hold more records than this (strictly more, as "
                 "Sleeper documents it) is split at its median. Only exact counts are known: "
                 "an estimate for a file spanning several leaves does not count. A member "
                 "of a partition scheme has its scheme's, one value for all members (their "
                 "records in a leaf summed): setting it on a member sets the scheme's.",
                 minimum=1),
    PropertySpec("compaction.strategy", str, "size_ratio", "Compaction strategy.",
                 choices=("size_ratio", "basic")),
    PropertySpec("compaction.ratio", float, 3.0,
                 "size_ratio: files merge when ratio x the largest <= the sum of the others "
                 "(0: any files merge, up to a batch: a full compaction).", minimum=0),
    PropertySpec("compaction.batch_size", int, 12, "Files per compaction job.", minimum=2),
    PropertySpec("compaction.max_concurrent_jobs_per_partition", int, 0,
                 "Cap on running compaction jobs per partition (0: no cap).", minimum=0),
    PropertySpec("compaction.max_jobs_per_pass", int, 0,
                 "Most compaction jobs one pass creates (0: no cap); the rest wait for the next "
                 "pass. Taken round robin over the leaves, the most fragmented first.",
                 minimum=0),
    PropertySpec("compaction.max_merge_inputs", int, 16,
                 "Inputs merged at once; jobs with more merge in rounds (bounds memory).",
                 minimum=2),
    PropertySpec("compaction.memory_limit_bytes", int, 1024 * 1024 * 1024,
                 "Memory pool of one compaction merge (DataFusion spills past it).",
                 minimum=64 * 1024 * 1024),
    PropertySpec("compaction.local_disk_bytes", int, 256 * 1024 * 1024,
                 "Local disk one compaction job on S3 may use: inputs that fit are copied whole "
                 "(one GET each); larger jobs read them in place with ranged reads, their merge "
                 "rounds written to the store (0: always in place).", minimum=0),
    PropertySpec("compaction.batch_rows", int, 65536, "Rows per batch in the merge stream.",
                 minimum=1024),
    PropertySpec("compaction.job_timeout_seconds", float, 600.0,
                 "A job assigned this long ago and not committed is run again by the next "
                 "pass (its first commit wins; a late duplicate leaves an orphan).", minimum=0,
                 maximum=_MAX_SECONDS),
    PropertySpec("compaction.threads", int, 0,
                 "Compaction jobs run at once by the local runner (0: number of CPUs).",
                 minimum=0),
    PropertySpec("compaction.max_bytes_per_second", int, 0,
                 "I/O throttle of compaction: the bytes per second that this table's "
                 "compaction jobs in one process read and write together (0: no throttle); "
                 "each process (a maintainer, a worker, a Spark executor) has its own.",
                 minimum=0),
    PropertySpec("compaction.expired_fraction", float, 0.5,
                 "With an age-off iterator among compaction.iterators: the maintainer "
                 "rewrites a file once at least this fraction of its records are past their "
                 "TTL (estimated from the age-off field's Parquet statistics, per row group), "
                 "so storage shrinks as records expire instead of when their leaf happens to "
                 "be compacted; records that pending deletes and purges remove count the same "
                 "way. At 1 only files whose every record expired are rewritten.",
                 minimum=0.01, maximum=1.0),
    PropertySpec("compaction.iterators", str, "",
                 "JSON list of iterators applied when compacting (and at query time, so "
                 "results do not depend on how far compaction got).",
                 check_in=_check_iterators),
    PropertySpec("gc.delay_seconds", float, 900.0,
                 "Unreferenced files younger than this are kept (readers may still use them).",
                 minimum=0, maximum=_MAX_SECONDS),
    PropertySpec("gc.orphan_timeout_seconds", float, 3600.0,
                 "Files no transaction added, and no live writer holds, are deleted once older "
                 "than this (by the object store's clock; at least an hour).", minimum=3600,
                 maximum=_MAX_SECONDS),
    PropertySpec("gc.clock_skew_seconds", float, 300.0,
                 "The largest difference between the clocks of machines using this store "
                 "(the documented assumption is 5 minutes): added to every delay that compares "
                 "times written by one machine with another's clock.", minimum=0,
                 maximum=_MAX_SECONDS),
    PropertySpec("gc.batch_size", int, 1000,
                 "Files recorded deleted by one DeleteFiles transaction, and deleted from "
                 "storage by one delete request, in a garbage-collection pass (Sleeper's "
                 "sleeper.gc.batch.size).", minimum=1),
    PropertySpec("gc.max_files_per_run", int, 100_000,
                 "Most unreferenced files one garbage-collection pass deletes (oldest first); "
                 "the rest wait for the next pass (Sleeper's limit on deletions per "
                 "invocation).", minimum=1),
    # --- streams ----------------------------------------------------------------------------
    PropertySpec("stream.retention_seconds", float, 30 * 86400.0,
                 "How long the state keeps a streaming writer's entry (its last committed "
                 "batch, by which a replayed batch is recognised: Delta's SetTransaction) "
                 "after its last commit: a stream commit drops other streams' entries older "
                 "than this, so dead streams (a deleted checkpoint starts a new one) leave "
                 "the state. A stream stopped longer than this and restarted from its "
                 "checkpoint may commit its last batch twice. 30 days.",
                 minimum=0, maximum=_MAX_SECONDS),
    # --- idempotent writes ------------------------------------------------------------------
    PropertySpec("write.idempotency_window_seconds", float, 86400.0,
                 "How long a keyed write's idempotency key is kept (``idempotency_key=`` on "
                 "ingest, upsert, delete and a writer's write): a retry within it with the "
                 "same key and payload returns the first write's version and writes nothing; "
                 "the same key with another payload is refused (IdempotencyKeyReusedError). "
                 "Past it the key may be used again, and GC deletes its record. Independent "
                 "of retention.seconds. A day; at least an hour.",
                 minimum=3600, maximum=_MAX_SECONDS),
    PropertySpec("write.group_commit_ms", float, 20.0,
                 "Group commit in ``sediment serve``: puts (ingest and upsert) into this table "
                 "arriving within this many milliseconds of the first are written as one "
                 "sorted set of files and committed as one transaction; each put is "
                 "acknowledged once that commit has landed. 0 turns it off (each put its own "
                 "commit). Unset on the table, the server's ``--group-commit-ms`` applies "
                 "(default 20). A group is also cut at a quarter of the server's "
                 "``--group-commit-max-bytes``. This is the least a group gathers: under "
                 "load the window grows (write.group_commit_max_rate).",
                 minimum=0, maximum=10_000),
    PropertySpec("write.group_commit_max_rate", float, 8.0,
                 "Group commit in ``sediment serve``: the most groups a server commits into "
                 "this table per second. A group is cut no sooner than 1/rate seconds after "
                 "the one before it, so under a load that would commit more often the window "
                 "grows past write.group_commit_ms and each commit carries more puts (fewer, "
                 "bigger files per leaf, fewer commits for the log and for compaction); "
                 "while compaction falls behind in a leaf (more than half of "
                 "compaction.batch_size files once its running jobs land, or more than "
                 "two thirds counting every file), the spacing stretches up to 4 times "
                 "(at the batch size). N clients that each "
                 "wait for their answer put at most N x rate times a second. "
                 "0: no limit (the window alone decides).", minimum=0, maximum=10_000),
    # --- ingest batcher ---
    PropertySpec("batcher.max_files", int, 100,
                 "Most files in one ingest job made by the ingest batcher.", minimum=1),
    PropertySpec("batcher.max_bytes", int, 1024 ** 3,
                 "Most input bytes in one batcher job (a larger file makes a job alone).",
                 minimum=1),
    PropertySpec("batcher.max_age_seconds", float, 300.0,
                 "A batcher group that is not full waits until its oldest request is this old.",
                 minimum=0, maximum=_MAX_SECONDS),
    PropertySpec("batcher.bulk_import_min_bytes", int, 256 * 1024 ** 2,
                 "Batcher jobs of at least this many bytes go to Spark bulk import (when the "
                 "batcher runs with Spark); smaller ones to standard ingest.", minimum=0),
    PropertySpec("batcher.job_timeout_seconds", float, 3600.0,
                 "An unfinished batcher job this old is presumed dead: the next run settles it "
                 "(committed, or its requests go back to the queue).", minimum=1,
                 maximum=_MAX_SECONDS),
]

PROPERTIES: dict[str, PropertySpec] = {p.name: p for p in _SPECS}
"""All properties by name."""


def defaults() -> dict[str, Any]:
    """The built-in default of every property."""
    return {p.name: p.default for p in _SPECS}


def validate_properties(values: Mapping[str, Any], *, context: str = "",
                        schema: Schema | None = None, stored: bool = False) -> dict[str, Any]:
    """Check names and coerce values; returns a new dict of parsed values. With the table's
    ``schema``, iterator configurations are checked against its fields as well (a filter
    value its field's type cannot hold, an unknown field).

    ``stored``: the values were committed already (a log replayed, a store file read): a
    value that today's checks refuse (written by an older Sediment) is kept as it was and
    logged, so the table still opens; whatever reads it reports it, and setting a valid
    value mends it. Nothing committed is refused after the fact.
    """
    out: dict[str, Any] = {}
    for name, value in values.items():
        spec = PROPERTIES.get(name)
        if spec is None:
            where = f" for {context}" if context else ""
            raise PropertyError(
                f"unknown property {name!r}{where}{did_you_mean(name, PROPERTIES)}; see "
                "`sediment properties` for the list")
        try:
            out[name] = spec.parse(value, context=context, schema=schema)
        except IteratorModuleError:
            if not stored:
                raise
            # a python iterator this process does not trust (or cannot import): the value
            # is the table's, and valid where the module is trusted; the reads and
            # compactions that need it say so
            out[name] = value
        except PropertyError as e:
            if not stored:
                raise
            log.warning("%s (a stored value, kept as it is: set a valid one)", e)
            out[name] = value
    return out


_GZIP_MAX_LEVEL = 9


def check_combined(values: Mapping[str, Any], *, context: str = "") -> None:
    """Refuse values valid one by one but not together (PropertyError naming both), checked
    over every property a table or store would have after a change: a gzip level above 9
    (zstd's go to 22) failed every later write as a storage error; ``merge.functions`` set
    while ``merge`` is not ``aggregate`` would be ignored."""
    merged = {**defaults(), **values}
    where = f" of {context}" if context else ""
    level = merged["parquet.compression_level"]
    if merged["parquet.compression"] == "gzip" and isinstance(level, int) \
            and level > _GZIP_MAX_LEVEL:
        raise PropertyError(f"property 'parquet.compression_level'{where}: {level} is above "
                            f"gzip's maximum {_GZIP_MAX_LEVEL} (parquet.compression is gzip)")
    functions = merged["merge.functions"]
    if isinstance(functions, str) and functions.strip() and merged["merge"] != "aggregate":
        # read by no other rule: kept, it would look like it applied
        raise PropertyError(f"property 'merge.functions'{where}: only the aggregate merge rule "
                            f"reads it, and merge is {merged['merge']!r}; set merge to "
                            "'aggregate' with it, or leave merge.functions unset")


def describe_properties() -> list[dict[str, Any]]:
    """Rows for documentation and the CLI's property listing."""
    return [
        {"name": p.name, "type": p.type.__name__, "default": p.default, "doc": p.doc,
         "choices": list(p.choices) if p.choices else None}
        for p in _SPECS
    ]
