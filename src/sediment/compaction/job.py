"""Compaction job execution: a streaming k-way merge into one sorted file plus sample.

The merge is DataFusion's sort-preserving merge (what Sleeper's compactor uses): each input is
declared sorted (Parquet ``sorting_columns`` + ``file_sort_order``), so the plan is a
SortPreservingMergeExec over the inputs, streaming in memory proportional to the number of
inputs, not their size. Jobs with more inputs than ``compaction.max_merge_inputs`` merge in
rounds through local temporary files. Rows outside the partition's region are dropped, the
table's compaction iterators run on the merged stream, and the result is written with the
table's sorted writer. Inputs on S3 are copied whole to local disk when they fit
``compaction.local_disk_bytes``, else read in place with large ranged reads and merged by
Sediment's own k-way merge (sediment.compaction.sources).

Records with equal keys merge in sequence order (sediment.files.sequence): an input without
the hidden sequence column reads it as a constant, its reference's sequence (so it is sorted by
(keys, sequence) and the merge needs no sort), a compacted input has it; the output holds every
record's resolved sequence.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.compaction.ranged import block_bytes, read_footer, read_in_place
from sediment.compaction.sources import (
    InputFile,
    JobInputs,
    in_place_input,
    local_input,
    resolve_inputs,
)
from sediment.compaction.strategy import CompactionJob
from sediment.compaction.throttle import input_bytes_per_row, throttle_for, throttled
from sediment.core.deletions import Deletion
from sediment.core.model import RANK_BITS, is_upsert
from sediment.core.prefetch import prefetched
from sediment.core.regions import Region
from sediment.core.state import schema_in_force
from sediment.errors import JobError, SedimentError
from sediment.files.columns import IDENTITY, ColumnMap, column_map
from sediment.files.keys import bounds_inside, region_mask
from sediment.files.merge import merge_sorted
from sediment.files.sequence import SEQ, SEQ_FIELD, merge_names
from sediment.files.staging import Staging
from sediment.files.upserts import settle_batches, without_upsert_marks
from sediment.files.verified import Sums
from sediment.files.writer import SortedFileWriter, WrittenFile
from sediment.iterators.base import RecordIterator, apply_iterators
from sediment.query.deletes import Deletes, merge_of
from sediment.schema import Schema
from sediment.settings import as_settings
from sediment.storage.base import ObjectStore
from sediment.types import quote_identifier


@dataclass(frozen=True, slots=True)
class JobOutput:
    """What a job wrote: the file (None when every row was dropped), rows read, seconds.

    ``rows_in`` counts the records read inside the job's partition region (a pushed-down
    reference's file also holds records of other partitions, which the job skips), so
    ``rows_in - written.rows`` is exactly what the compaction iterators dropped.
    """

    written: WrittenFile | None
    rows_in: int
    seconds: float
    staging: Staging | None = field(default=None, compare=False, repr=False)
    """The staging holding ``written`` in this process until its commit settles (None for an
    output rebuilt from another process's answer: its committer adopts the file)."""
    settles: int = field(default=0, kw_only=True)
    """The version of the head whose deletions pending in the partition the job applied
    (0: none): its commit may settle them (``ReplaceFileReferences.settles``)."""
    upserts: bool = field(default=False, kw_only=True)
    """The output holds upserted records that may replace records outside it
    (``ReplaceFileReferences.upserts``)."""

    def handed_over(self) -> JobOutput:
        """This output for another process to adopt and commit (a pool worker's, for the
        maintainer): its file is no longer this process's to protect."""
        if self.staging is not None:
            self.staging.hand_over()
        return JobOutput(self.written, self.rows_in, self.seconds, settles=self.settles,
                         upserts=self.upserts)


def _coarse_region_filter(schema: Schema, region: Region | None) -> Any:
    """A DataFusion predicate on the first row-key field that keeps every row of ``region``
    (a superset for composite keys: the exact filter runs on the merged stream). Pushed into
    the Parquet scans, it prunes row groups by their statistics, so a job of a partition that
    holds part of a file (a reference pushed down after a split) reads only that part."""
    if region is None or (region.min is None and region.max is None):
        return None
    from datafusion import col, lit

    name = schema.row_key_names[0]
    typ = schema.to_arrow().field(name).type
    column = col(quote_identifier(name))
    expr = None
    if region.min is not None:
        expr = column >= lit(pa.scalar(region.min[0], type=typ))
    if region.max is not None:
        upper = column <= lit(pa.scalar(region.max[0], type=typ))
        expr = upper if expr is None else expr & upper
    return expr


def _merged_batches(inputs: Sequence[InputFile | str], schema: Schema, batch_rows: int,
                    memory_limit: int, region: Region | None = None,
                    schemas: Sequence[tuple[int, Schema]] = ()
                    ) -> Iterator[pa.RecordBatch]:
    """DataFusion sort-preserving merge of sorted Parquet files by (keys, sequence), the
    sequence column resolved (rows of ``region`` and possibly a few more: see
    ``_coarse_region_filter``). A bare path is a local input with its own sequences."""
    arrow = schema.to_arrow().append(SEQ_FIELD)
    df = _merge_frame(inputs, schema, batch_rows, memory_limit, region, schemas)
    for b in df.execute_stream():
        batch = b.to_pyarrow()
        if not batch.schema.equals(arrow):
            batch = pa.RecordBatch.from_arrays(
                [batch.column(i).cast(arrow.field(i).type) for i in range(len(arrow))],
                schema=arrow)
        yield batch


def _merge_frame(inputs: Sequence[InputFile | str], schema: Schema, batch_rows: int,
                 memory_limit: int, region: Region | None = None,
                 schemas: Sequence[tuple[int, Schema]] = ()) -> Any:
    """The DataFusion DataFrame of :func:`_merged_batches` (its plan is a
    SortPreservingMergeExec over the inputs, no SortExec, unless an input has some rows
    without a sequence)."""
    import datafusion
    from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext, col, functions, lit

    resolved = [i if isinstance(i, InputFile) else local_input(i) for i in inputs]
    # One stream per input: every file is sorted already, so letting DataFusion split each
    # file into byte ranges (repartition_file_scans) only multiplies the merge's fan-in and
    # its buffered batches: inputs x target_partitions streams, memory growing with the
    # square of the inputs (16 inputs: 1.3 GiB RSS with it, 0.37 GiB without).
    config = (SessionConfig().with_target_partitions(max(2, len(resolved)))
              .with_batch_size(batch_rows).with_repartition_file_scans(False)
              # likewise a filter would get a round-robin repartition per input (sort order
              # kept: inputs x target_partitions streams again)
              .set("datafusion.optimizer.enable_round_robin_repartition", "false"))
    runtime = RuntimeEnvBuilder().with_fair_spill_pool(memory_limit)
    ctx = SessionContext(config, runtime)
    keys = [col(quote_identifier(n)).sort() for n in schema.key_names]
    by_seq = [*keys, col(quote_identifier(SEQ)).sort()]
    user = schema.to_arrow()
    arrow = user.append(SEQ_FIELD)
    frames = []
    for inp in resolved:
        own = lit(pa.scalar(inp.sequence, pa.int64()))
        url = inp.url
        cmap = input_columns(inp, schema, schemas)
        if not cmap.identity:  # written under another schema: its columns mapped by id
            fields = [_field_expr(f, cmap) for f in user]
            seq = own.alias(SEQ)
            order = [keys]
            if inp.has_sequence:
                seq = functions.coalesce(col(quote_identifier(SEQ)), own).alias(SEQ)
                order = [by_seq] if inp.complete else [keys]
            f = ctx.read_parquet(url, file_sort_order=order).select(*fields, seq)
            if inp.has_sequence and not inp.complete:
                f = f.sort(*by_seq)
        elif not inp.has_sequence:
            # a constant sequence: DataFusion knows the input stays sorted by (keys, seq)
            f = ctx.read_parquet(url, schema=user, file_sort_order=[keys])
            f = f.select(*(col(quote_identifier(n)) for n in user.names), own.alias(SEQ))
        elif inp.complete:
            f = ctx.read_parquet(url, schema=arrow, file_sort_order=[by_seq])
        else:  # some rows without a sequence (not written by Sediment): resolve, then sort
            f = ctx.read_parquet(url, schema=arrow, file_sort_order=[keys])
            f = f.select(*(col(quote_identifier(n)) for n in user.names),
                         functions.coalesce(col(quote_identifier(SEQ)), own).alias(SEQ))
        frames.append(f)
    df = frames[0]
    for f in frames[1:]:
        df = df.union(f)
    coarse = _coarse_region_filter(schema, region)
    if coarse is not None:
        df = df.filter(coarse)
    return df.sort(*(datafusion.col(quote_identifier(n)).sort()
                     for n in merge_names(schema.key_names)))


def input_columns(inp: InputFile, schema: Schema, schemas: Sequence[tuple[int, Schema]]
                  ) -> ColumnMap:
    """How the job's schema is read from one input (identity unless the table's schema
    changed: sediment.files.columns)."""
    if len(schemas) <= 1:
        return IDENTITY
    md = inp.metadata if inp.metadata is not None else \
        pq.read_metadata(url2pathname(urlparse(inp.url).path))  # local_url's inverse
    return column_map(md.schema.to_arrow_schema(), schema,
                      schema_in_force(schemas, inp.sequence >> RANK_BITS))


def _field_expr(field: pa.Field, cmap: ColumnMap) -> Any:
    """DataFusion's expression of one field of the job's schema from an input (``cmap``)."""
    from datafusion import col, lit

    src = cmap.sources.get(field.name)
    if src is None:
        return lit(pa.scalar(None, field.type)).alias(field.name)
    expr = col(quote_identifier(src))
    if field.name in cmap.casts:
        expr = expr.cast(field.type)
    return expr.alias(field.name)


def _counted(batches: Iterator[pa.RecordBatch], counted: list[int]
             ) -> Iterator[pa.RecordBatch]:
    """``batches``, adding their rows to ``counted[0]``."""
    for b in batches:
        counted[0] += b.num_rows
        yield b


def _in_region(batches: Iterator[pa.RecordBatch], names: Sequence[str],
               region: Region, counted: list[int]) -> Iterator[pa.RecordBatch]:
    """The rows of ``region``; adds their number to ``counted[0]``."""
    for b in batches:
        mask = region_mask(b, names, region)
        out = b if mask is None else b.filter(mask)
        if out.num_rows:
            counted[0] += out.num_rows
            yield out


def _inside(inputs: Sequence[InputFile], region: Region) -> bool:
    """Whether every input's rows lie inside ``region`` by its footer's statistics (files
    written for this partition): then the merge needs no region filter, which otherwise
    compares every merged key with the region's ends (a tenth of a small merge's time)."""
    return all(f.bounds is not None and bounds_inside(*f.bounds, region) for f in inputs)


def _merged(objects: ObjectStore, inputs: Sequence[InputFile], schema: Schema,
            properties: Mapping[str, Any], region: Region, table: str = "",
            schemas: Sequence[tuple[int, Schema]] = ()) -> Iterator[pa.RecordBatch]:
    """The merged records of ``inputs``: DataFusion's merge of local files, or Sediment's own
    k-way merge of inputs read in place (both by (keys, sequence), stable in input order)."""
    settings = as_settings(properties)
    memory = settings.compaction_memory_limit_bytes
    batch_rows = settings.compaction_batch_rows
    if not any(f.key for f in inputs):
        return _merged_batches(inputs, schema, batch_rows, memory,
                               None if _inside(inputs, region) else region, schemas)
    limit = block_bytes(memory, len(inputs))
    # each input decoded on a thread of its own, a batch or two ahead of the merge (Arrow's
    # decoding releases the GIL, so inputs decode in parallel as DataFusion's scans would)
    streams = [prefetched(read_in_place(objects, f.key, f.metadata, f.size, schema, region,
                                        f.sequence, f.has_sequence, limit, batch_rows,
                                        table, input_columns(f, schema, schemas)),
                          depth=2, name="compaction-input")
               for f in inputs if f.metadata is not None]
    return merge_sorted(streams, merge_names(schema.key_names),
                        schema.to_arrow().append(SEQ_FIELD))


def _merge_rounds(objects: ObjectStore, schema: Schema, properties: Mapping[str, Any],
                  job: CompactionJob, region: Region, inputs: JobInputs, tmp: str,
                  staging: Staging, intermediates: list[str],
                  schemas: Sequence[tuple[int, Schema]] = ()) -> list[InputFile]:
    """Merge groups of ``compaction.max_merge_inputs`` inputs into one file each until no
    more are left than that (the merge's memory grows with its inputs). A round's files go
    where its inputs are: local disk for local or copied inputs, the store itself for inputs
    read in place (so local disk stays bounded whatever the leaf's size); files written to the
    store are staged in ``staging`` (GC leaves them alone while the job runs) and their names
    added to ``intermediates`` (the caller deletes them)."""
    max_inputs = as_settings(properties).compaction_max_merge_inputs
    arrow = schema.to_arrow(field_ids=True).append(SEQ_FIELD)
    sorting = [pq.SortingColumn(k) for k in [*range(len(schema.key_names)), len(arrow) - 1]]
    files, rounds = list(inputs.files), 0
    while len(files) > max_inputs:
        rounds += 1
        merged: list[InputFile] = []
        for i in range(0, len(files), max_inputs):
            group = files[i : i + max_inputs]
            if len(group) == 1:
                merged.append(group[0])
                continue
            batches = _merged(objects, group, schema, properties, region, staging.table,
                              schemas)
            if inputs.in_place:
                name = staging.new_file(job.partition_id)
                intermediates.append(name)
                fs, _ = objects.arrow_filesystem()
                with fs.open_output_stream(objects.path(name)) as sink, \
                        pq.ParquetWriter(sink, arrow, compression="lz4", write_page_checksum=True,
                                         write_page_index=True, sorting_columns=sorting) as w:
                    for b in batches:
                        w.write_batch(b)
                info = objects.head(name)
                size = 0 if info is None else info.size
                merged.append(in_place_input(name, 0, True, read_footer(objects, name, size),
                                             size))
            else:
                out = os.path.join(tmp, f"round-{rounds}-{i:05d}.parquet")
                with pq.ParquetWriter(out, arrow, compression="lz4", write_page_checksum=True,
                                      write_page_index=True, sorting_columns=sorting) as w:
                    for b in batches:
                        w.write_batch(b)
                merged.append(local_input(out))  # every row has its own sequence
        files = merged
    return files


def run_compaction_job(objects: ObjectStore, schema: Schema, properties: Mapping[str, Any],
                       job: CompactionJob, region: Region,
                       iterators: Sequence[RecordIterator] = (), *,
                       staging: Staging | None = None,
                       sums: Mapping[str, Sums] | None = None,
                       deletions: Sequence[Deletion] = (),
                       covered: Collection[int] = (), settles: int = 0,
                       complete: bool = False,
                       schemas: Sequence[tuple[int, Schema]] = ()) -> JobOutput:
    """Merge the job's inputs into one new file (not committed: see the runner), staged in
    ``staging`` (a new one when None), which the output carries to its commit. Inputs are
    verified before or as they are merged (against ``sums``, the inputs' sums by filename,
    where known): a damaged input fails the job with CorruptDataError. The records
    ``deletions`` remove (those pending in the partition at the head of version
    ``settles``) are dropped before the iterators run, and the output says ``settles``.
    Records an upsert replaced are dropped first (sediment.files.upserts). An upserted
    record a deletion removes still hides older records of its key in files the job does not
    merge, so it is kept (marked, for readers to settle and then delete) unless the deletion
    is ``covered`` (nothing older is left beside the inputs). ``complete``: the inputs are
    every record of the partition, so the output's upserted records have nothing left to
    replace and lose their mark. ``schemas``: the table's schema history
    (TableState.schemas): inputs written under another schema are read through their field
    ids, and the output is written under ``schema``."""
    started = time.perf_counter()
    properties = as_settings(properties)  # once: the helpers below take it as it is
    staging = Staging(objects) if staging is None else staging
    tmp = tempfile.mkdtemp(prefix="sediment-compact-")
    writer: SortedFileWriter | None = None
    intermediates: list[str] = []
    wrote = False
    try:
        sources = resolve_inputs(objects, job.inputs, tmp, job_id=job.job_id,
                                 local_disk_bytes=as_settings(properties).compaction_local_disk_bytes,
                                 first_key=schema.row_key_names[0], table=staging.table,
                                 sums=sums)
        inputs = _merge_rounds(objects, schema, properties, job, region, sources, tmp,
                               staging, intermediates, schemas)
        rows_in = [0]  # records read inside the region, before the iterators
        # DataFusion's stream runs only while next() is called: on a producer thread the
        # merge overlaps with the Parquet encoding below (both release the GIL)
        merged = prefetched(_merged(objects, inputs, schema, properties, region,
                                    staging.table, schemas),
                            name="compaction-merge")
        stream = _counted(merged, rows_in) if _inside(inputs, region) else \
            _in_region(merged, schema.row_key_names, region, rows_in)
        upserts = any(is_upsert(r.sequence) for r in job.inputs)
        if upserts:
            stream = settle_batches(stream, schema.key_names)
        stream = apply_iterators(
            Deletes(schema).apply_batches(stream, deletions,
                                          sparing={d.version for d in deletions} - set(covered),
                                          merge=merge_of(iterators)),
            iterators)
        if upserts and complete:
            stream = without_upsert_marks(stream)
        upserts = upserts and not complete
        writer = SortedFileWriter(objects, staging.new_file(job.partition_id), schema,
                                  properties, sequence=True)
        out = writer
        for b in throttled(stream, throttle_for(staging.table,
                                                properties.compaction_max_bytes_per_second),
                           input_bytes_per_row=input_bytes_per_row(job.inputs, sums),
                           rows_read=lambda: rows_in[0], written=lambda: out.bytes_written):
            writer.write(b)
        if writer.rows == 0:
            writer.abort()
            staging.delete([writer.filename])
            writer = None
            wrote = True
            return JobOutput(None, rows_in[0], time.perf_counter() - started, staging,
                             settles=settles, upserts=upserts)
        written = writer.close()
        writer = None
        wrote = True
        return JobOutput(written, rows_in[0], time.perf_counter() - started, staging,
                         settles=settles, upserts=upserts)
    except SedimentError:
        raise
    except Exception as e:
        raise JobError(f"compaction job {job.job_id} in partition {job.partition_id} "
                       f"failed: {e}") from e
    finally:
        if writer is not None:
            writer.abort()
        # the rounds' files go (a failed delete leaves them to GC's orphan pass), and after a
        # failure everything the job staged: nothing committed it
        staging.delete(intermediates if wrote else None)
        shutil.rmtree(tmp, ignore_errors=True)
