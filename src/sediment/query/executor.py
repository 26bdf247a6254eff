"""Query execution: read planned files with row-group pruning, filter, merge, iterate.

Parquet footers are cached per table together with the min/max of the first row-key field of
every row group, so an exact-key lookup reads one footer-free row group per file; with the
file's key filters (sediment.files.keyfilter) it skips the row groups, and so the files, that
cannot hold the key, so its cost hardly grows with the files in a leaf.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sediment.core.model import RANK_BITS, FileReference
from sediment.core.prefetch import prefetched, read_ahead
from sediment.core.state import schema_in_force
from sediment.files.columns import IDENTITY, ColumnMap, column_map, conform
from sediment.files.keyfilter import hash_key_values, hash_keys
from sediment.files.keys import rows_in, sort_indices, sorted_rows_in, sorted_span
from sediment.files.merge import merge_sorted
from sediment.files.sequence import SEQ, SEQ_FIELD, merge_names, with_sequence, without_sequence
from sediment.files.upserts import settle_batches, settle_table
from sediment.files.verified import reading
from sediment.iterators.base import RecordIterator, apply_iterators
from sediment.query.blocks import BlockCache
from sediment.query.cached_files import keep_reads, prefetch_reads
from sediment.query.deletes import Deletes, merge_of
from sediment.query.filters import QueryFilter
from sediment.query.footers import FileFooter, FooterCache
from sediment.query.planner import QueryPlan, SubQuery
from sediment.query.pointread import PointReader
from sediment.query.readplan import (
    RUN_GROUPS,
    bounds_on_first,
    boxes,
    exact_single_keys,
    first_field_points,
    inside,
    last_of,
    one_record_kept,
    row_groups_meeting,
    runs,
    settles,
)
from sediment.query.regions import box_row_groups
from sediment.schema import Schema
from sediment.storage import checksums
from sediment.storage.base import ObjectStore


class Executor:
    """Runs query plans for one table."""

    def __init__(self, objects: ObjectStore, schema: Schema, footers: FooterCache,
                 threads: int, schemas: Sequence[tuple[int, Schema]] = (),
                 blocks: BlockCache | None = None) -> None:
        self.objects = objects
        self.blocks = blocks
        """The process's block cache (sediment.query.blocks), or None: the table's
        ``query.block_cache_bytes`` is 0 or the process's bound is."""
        self._file_schemas: dict[tuple[str, tuple[str, ...]], pa.Schema] = {}
        self._column_schemas: dict[tuple[str, ...], pa.Schema] = {}
        self._point_hash = functools.lru_cache(maxsize=4096)(self._hash_one)
        self.points = PointReader(objects, footers.table, footers.reads)
        self.schema = schema
        self.schemas = tuple(schemas)
        """(version, schema) history of the version read (TableState.schemas): with more
        than one, files are read through their field ids (sediment.files.columns)."""
        self._column_maps: dict[str, ColumnMap] = {}
        self._arrow = schema.to_arrow()
        self.footers = footers
        self.threads = threads or (os.cpu_count() or 2)
        self.single_field_key = len(schema.row_keys) == 1
        self.deletes = Deletes(schema)
        first = schema.row_keys[0].type
        # query values are the model's: temporal keys as integers, hashed as int64 like the
        # files' (see keyfilter.hash_keys)
        self._point_type = first if (pa.types.is_string(first) or pa.types.is_binary(first)) \
            else pa.int64()

    def point_hashes(self, sub: SubQuery) -> np.ndarray | None:
        points = first_field_points(sub.ranges)
        if points is None:
            return None
        if len(points) == 1:  # a lookup: hot keys come again, their hash is kept
            return self._point_hash(points[0])
        return hash_keys(pa.array(points, type=self._point_type))

    def _hash_one(self, point: Any) -> np.ndarray:
        # a point is already the model's value (str, bytes or int): hashed as one, without
        # an Arrow array of one Python value (whose conversion imports pandas: 0.25 s of a
        # command's first lookup)
        if isinstance(point, (str, bytes, int)) and not isinstance(point, bool):
            return hash_key_values([point])
        return hash_keys(pa.array([point], type=self._point_type))

    def columns_schema(self, columns: Sequence[str]) -> pa.Schema:
        """The schema of ``columns`` of this version's records (kept per column list)."""
        key = tuple(columns)
        schema = self._column_schemas.get(key)
        if schema is None:
            if len(self._column_schemas) > 1000:  # a bound, not a policy
                self._column_schemas.clear()
            schema = self._column_schemas[key] = pa.schema([self._arrow.field(c)
                                                            for c in columns])
        return schema

    def _filter(self, data: pa.Table, sub: SubQuery) -> pa.Table:
        names = self.schema.row_key_names
        keys = exact_single_keys(sub.ranges) if self.single_field_key else None
        if keys is not None and data.column(names[0]).num_chunks == 1:
            # (a decoded row group is sorted by key: the keys' rows are found by binary
            # search, those outside the leaf dropped first)
            col = data.column(names[0]).chunk(0)
            slices = []
            for key in sorted(set(keys)):
                span = sorted_span(col, key) if sub.region.contains((key,)) else (0, 0)
                if span is None:
                    break
                if span[1] > span[0]:
                    slices.append(data.slice(span[0], span[1] - span[0]))
            else:
                return slices[0] if len(slices) == 1 else \
                    pa.concat_tables(slices) if slices else data.slice(0, 0)
        if keys is not None:
            col = data.column(names[0])
            data = data.filter(pc.is_in(col, value_set=pa.array(keys, type=col.type)))
            return rows_in(data, names, sub.region, None)
        if self.single_field_key:  # (a run of a file's row groups is sorted by key)
            got = sorted_rows_in(data, names[0], sub.region, sub.ranges)
            if got is not None:
                return got
        return rows_in(data, names, sub.region, sub.ranges)

    def row_groups(self, ref: FileReference, sub: SubQuery, hashes: np.ndarray | None,
                   query_filter: QueryFilter | None = None
                   ) -> tuple[pq.ParquetFile | None, FileFooter, list[int]]:
        """The row groups of the file that may hold rows of the sub-query, by the statistics
        of the first key field, the key filters (``hashes``: the sub-query's point hashes)
        and ``query_filter``; with the file when it had to be opened for its footer."""
        footer = self.footers.cached(ref.filename)
        pf = None
        if footer is None:
            pf, footer = self.footers.open(ref.filename, sub.sums.get(ref.filename),
                                           cache_rows=sub.ranges is not None)
        groups = row_groups_meeting(footer, bounds_on_first(sub.region, sub.ranges))
        if sub.ranges:  # per-field regions: every limited field's statistics
            groups = box_row_groups(self.schema, footer.metadata, groups, sub.ranges)
        layout = self.footers.layout(ref.filename) if hashes is not None and groups else None
        if hashes is not None and layout is not None:
            groups = [g for g in groups
                      if self.footers.may_contain(ref.filename, layout, g, hashes)]
        if query_filter is not None and not sub.upserts and \
                self.column_map(ref, footer).identity:
            # (an upserted record hides older ones of its key whatever the filter says of
            # it: the row group holding it is read even where its statistics rule it out;
            # the filter names this version's columns, not those of a file written under
            # another schema)
            if query_filter.blooms and query_filter.tree is not None:
                # Parquet's bloom filters on the filter's point values (query/skipindex.py):
                # record by record, a row group without them holds no record that passes
                # (first: a check of every row group at once, before statistics one by one)
                for column, values in query_filter.blooms.items():
                    blooms = self.footers.blooms(ref.filename, column,
                                                 sub.sums.get(ref.filename))
                    if blooms is not None and groups and \
                            len(blooms.starts) == footer.metadata.num_row_groups:
                        keep = blooms.may_contain(values)
                        groups = [g for g in groups if keep[g]]
            groups = query_filter.row_groups(footer.metadata, groups)
        return pf, footer, groups

    def column_map(self, ref: FileReference, footer: FileFooter) -> ColumnMap:
        """How this version's fields are read from the file (identity unless the table's
        schema changed: then by the file's field ids, or by name as of the schema at the
        version that added it)."""
        if len(self.schemas) <= 1:
            return IDENTITY
        cmap = self._column_maps.get(ref.filename)
        if cmap is None:
            under = schema_in_force(self.schemas, ref.sequence >> RANK_BITS)
            cmap = column_map(footer.metadata.schema.to_arrow_schema(), self.schema, under)
            if len(self._column_maps) > 100_000:  # a bound, not a policy: maps are cheap
                self._column_maps.clear()
            self._column_maps[ref.filename] = cmap
        return cmap

    def file_map(self, ref: FileReference, sub: SubQuery) -> ColumnMap:
        """:meth:`column_map` of a file of ``sub``, its footer opened when not cached: what an
        engine reading the file itself must map (identity: the file reads as it is)."""
        if len(self.schemas) <= 1:
            return IDENTITY
        footer = self.footers.cached(ref.filename) or \
            self.footers.open(ref.filename, sub.sums.get(ref.filename))[1]
        return self.column_map(ref, footer)

    def _file_row_groups(self, ref: FileReference, sub: SubQuery, columns: list[str],
                         hashes: np.ndarray | None, *, sequence: bool = False,
                         query_filter: QueryFilter | None = None,
                         blocks: BlockCache | None = None, eager: bool = False
                         ) -> Iterator[pa.Table]:
        """The file's wanted rows, one (filtered) run of row groups at a time; with
        ``sequence``, each row's resolved sequence in a last column (files/sequence.py).
        ``query_filter`` prunes row groups by their statistics (when it may: see
        sediment.query.filters); it is applied to rows later, after the iterators.

        Pages are verified (their CRCs) as they are read; a run that fails is read again
        from a freshly opened file before it is yielded (a run is read whole first, so no
        row is yielded twice), then raises CorruptDataError naming the table and the file:
        a damaged file ends the read with that error, never a shorter answer.

        Exact keys of a one-field row key are read a page per column when the file has a
        page index (sediment.query.pointread). With ``blocks`` (the block cache), a run of
        row groups whose wanted columns are all cached is taken from it (the file is not
        even opened); a run that is not is read whole and its groups cached: at once when
        ``eager`` (the read asked for the cache), else those read before
        (:meth:`BlockCache.admit`)."""
        pf, footer, groups = self.row_groups(ref, sub, hashes, query_filter)
        yield from self.read_groups(ref, sub, columns, groups, pf, footer,
                                    sequence=sequence, blocks=blocks, eager=eager)

    def read_groups(self, ref: FileReference, sub: SubQuery, columns: list[str],
                    groups: list[int], pf: pq.ParquetFile | None, footer: FileFooter, *,
                    sequence: bool = False, blocks: BlockCache | None = None,
                    eager: bool = False) -> Iterator[pa.Table]:
        """Row groups ``groups`` of the file (chosen by :meth:`row_groups`; ``pf``: the file
        if it opened it), their rows inside the sub-query's leaf and ranges, a run at a time
        (see :meth:`_file_row_groups`)."""
        cmap = self.file_map(ref, sub)
        if sequence and footer.sequenced and ref.sequenced:
            columns = [*columns, SEQ]
        if not groups:
            return  # a file the key filters rule out is not even opened
        wanted, columns = columns, cmap.file_columns(columns)
        sums = sub.sums.get(ref.filename)
        opened = [pf]

        def read(run: list[int], names: list[str], attempt: int) -> pa.Table:
            if attempt or opened[0] is None:  # a fresh file: nothing of a first read reused
                # (the disk cache keeps the row groups of lookups and ranges; a whole scan
                # would flush it)
                opened[0], _ = self.footers.open(ref.filename, sums, fresh=attempt > 0,
                                                 cache_rows=sub.ranges is not None)
            pfile = opened[0]
            assert pfile is not None
            prefetch_reads(pfile, run, names)
            if len(run) == 1:
                # use_threads=False: a small row group decodes faster on this thread than
                # it is dispatched to Arrow's pool (sub-queries already run in parallel)
                got = pfile.read_row_group(run[0], columns=names, use_threads=False)
            else:
                got = pfile.read_row_groups(run, columns=names, use_threads=True)
            keep_reads(pfile)  # decoded, so verified: its bytes may enter the disk cache
            return got

        def load(run: list[int], names: list[str]) -> pa.Table:
            return reading(self.footers.table, ref.filename, self.objects.uri,
                           functools.partial(read, run, names))

        points = self._points(sub)
        index = None if points is None else self.footers.page_index(ref.filename, sums)
        key = cmap.file_columns([self.schema.row_key_names[0]])[0]
        for run in ([[g] for g in groups] if index is not None
                    else runs(groups, RUN_GROUPS)):
            t = None if index is None or points is None else self.points.rows(
                index, run[0], key, points, columns,
                self._file_schema(ref.filename, footer, columns), blocks, sums is not None)
            exact = t is not None  # (a point read finds exactly the keys' rows)
            if t is None:
                t = load(run, columns) if blocks is None else \
                    self._cached_run(blocks, ref.filename, footer, run, columns, load, eager)
            t = conform(t, cmap, wanted, self._arrow)
            if not exact and (sub.ranges is not None or
                              not inside(footer, run[0], run[-1], sub.region)):
                t = self._filter(t, sub)
            if t.num_rows:
                yield with_sequence(t, ref.sequence) if sequence else t

    def _cached_run(self, blocks: BlockCache, filename: str, footer: FileFooter,
                    run: list[int], columns: list[str],
                    load: Callable[[list[int], list[str]], pa.Table],
                    eager: bool) -> pa.Table:
        """Consecutive row groups ``run`` of the file's ``columns`` (the file's names): from
        the block cache when every column of every group is there; else read as one run
        (Arrow decodes it on its threads), each group's columns then cached as compact
        copies (a slice would hold the whole run's buffers): all when ``eager``, else those
        the cache admits (read before)."""
        uri, n = self.objects.uri, len(columns)
        keys = [(uri, filename, g, -1, c) for g in run for c in columns]
        got = blocks.get_many(keys)
        schema = self._file_schema(filename, footer, columns)
        if all(a is not None for a in got):
            tables = [pa.Table.from_arrays(got[i * n:(i + 1) * n], schema=schema)
                      for i in range(len(run))]
            return tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        read = load(run, columns)
        if checksums.VERIFY_READS:  # only verified pages are kept
            missed = [k for k, a in zip(keys, got, strict=True) if a is None]
            admitted = set(missed) if eager else \
                {k for k, yes in zip(missed, blocks.admit(missed), strict=True) if yes}
            at = 0
            for i, g in enumerate(run):
                rows = footer.metadata.row_group(g).num_rows
                for j, c in enumerate(columns):
                    if keys[i * n + j] in admitted:
                        part = read.column(c).slice(at, rows)
                        blocks.put(keys[i * n + j], pa.concat_arrays(part.chunks))
                at += rows
        return read.select(columns)

    def _file_schema(self, filename: str, footer: FileFooter, columns: list[str]
                     ) -> pa.Schema:
        """The fields of ``columns`` as the file stores them (what reading it gives)."""
        key = (filename, tuple(columns))
        schema = self._file_schemas.get(key)
        if schema is None:
            whole = footer.metadata.schema.to_arrow_schema()
            schema = pa.schema([whole.field(c) for c in columns])
            if len(self._file_schemas) > 100_000:  # a bound, not a policy: schemas are cheap
                self._file_schemas.clear()
            self._file_schemas[key] = schema
        return schema

    def _points(self, sub: SubQuery) -> list[Any] | None:
        """The sub-query's exact keys inside its leaf, sorted and distinct, when it asks
        for exact values of a one-field row key (a lookup: page-sized reads); else None."""
        keys = exact_single_keys(sub.ranges) if self.single_field_key else None
        if keys is None:
            return None
        try:
            return sorted({k for k in keys if sub.region.contains((k,))})
        except TypeError:  # values that do not order together: read row groups
            return None

    def block_cache(self, sub: SubQuery, asked: bool | None) -> BlockCache | None:
        """The block cache a read of ``sub`` uses: ``asked`` is the read request's switch
        (None: reads of keys or ranges use it, whole-leaf scans do not)."""
        if self.blocks is None or asked is False or (asked is None and sub.ranges is None):
            return None
        return self.blocks

    def read_subquery(self, sub: SubQuery, columns: list[str],
                      iterators: Sequence[RecordIterator],
                      query_filter: QueryFilter | None = None,
                      block_cache: bool | None = None) -> pa.Table:
        """All wanted rows of one leaf, sorted, iterators then ``query_filter`` applied;
        ``block_cache``: the read request's switch (:meth:`block_cache`)."""
        schema = self.columns_schema(columns)
        hashes = self.point_hashes(sub)
        # the files with row groups the read may want (by their bounds, key filters and
        # statistics): a lookup or range in a leaf of files apart in key (a large ingest's
        # runs, upserts of other keys) reads one, as from a one-file leaf
        wanted = [(ref, *found) for ref in sub.references
                  if (found := self.row_groups(ref, sub, hashes, query_filter))[2]]
        # several files: merged by (keys, sequence) so equal keys come out in commit order
        # (one file's rows are in that order already); upserts and deletions judge records
        # by sequence
        settle = settles(sub, iterators)
        sequence = len(wanted) > 1 or bool(sub.deletions) or settle
        blocks = self.block_cache(sub, block_cache)
        per_file = [p for ref, pf, footer, groups in wanted
                    if (p := list(self.read_groups(ref, sub, columns, groups, pf, footer,
                                                   sequence=sequence, blocks=blocks,
                                                   eager=block_cache is True)))]
        if not per_file:
            return schema.empty_table()
        if len(per_file) == 1:
            # one file's row groups are already in key order: no sort
            data = per_file[0][0] if len(per_file[0]) == 1 else pa.concat_tables(per_file[0])
        else:
            streams = [(b for t in p for b in t.to_batches()) for p in per_file]
            data = pa.Table.from_batches(
                list(merge_sorted(streams, merge_names(self.schema.key_names),
                                  schema.append(SEQ_FIELD),
                                  last_of=last_of(sub, iterators, self.schema.key_names))),
                schema=schema.append(SEQ_FIELD))
        if settle:
            data = settle_table(data, self.schema.key_names)
        if sequence:
            data = without_sequence(self.deletes.apply(data, sub.deletions,
                                                       merge=merge_of(iterators)))
        if iterators and (data.num_rows > 1 or not one_record_kept(iterators)):
            # (a leaf's answer of one record, a lookup's, has nothing a merge rule that
            # keeps one record per key could drop: its batches are not rebuilt for it)
            batches = apply_iterators(iter(data.to_batches()), iterators)
            data = pa.Table.from_batches(list(batches), schema=schema)
        if query_filter is not None:
            data = query_filter.apply(data)
        return data

    def run(self, plan: QueryPlan, columns: list[str],
            iterators: Sequence[RecordIterator],
            query_filter: QueryFilter | None = None,
            block_cache: bool | None = None) -> pa.Table:
        subs = plan.subqueries
        if len(subs) <= 1 or self.threads == 1:
            tables = [self.read_subquery(s, columns, iterators, query_filter, block_cache)
                      for s in subs]
        else:
            with ThreadPoolExecutor(min(self.threads, len(subs))) as pool:
                tables = list(pool.map(
                    lambda s: self.read_subquery(s, columns, iterators, query_filter,
                                                 block_cache), subs))
        if not tables:
            return self.columns_schema(columns).empty_table()
        out = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        if boxes(subs):  # box leaves interleave in key order; one key lives in one leaf,
            # so a stable sort keeps each key's records in the order the leaf gave them
            out = out.take(sort_indices(out, self.schema.key_names))
        return out

    def stream(self, plan: QueryPlan, columns: list[str],
               iterators: Sequence[RecordIterator],
               query_filter: QueryFilter | None = None,
               block_cache: bool | None = None) -> Iterator[pa.RecordBatch]:
        """Leaf by leaf in key order, a k-way merge of each file's row-group stream; with
        several leaves, up to ``threads`` leaves are read at once, each on its own thread and
        a few batches ahead (Arrow decodes without the GIL), so memory stays bounded."""
        subs = plan.subqueries
        if boxes(subs):  # box leaves interleave in key order: merged, one batch at a time
            arrow = self.schema.to_arrow()
            yield from merge_sorted(
                [self._stream_leaf(s, columns, iterators, query_filter, block_cache)
                 for s in subs],
                self.schema.key_names, pa.schema([arrow.field(c) for c in columns]))
            return
        if len(subs) <= 1 or self.threads == 1:
            for sub in subs:
                yield from self._stream_leaf(sub, columns, iterators, query_filter,
                                             block_cache)
            return
        yield from read_ahead(
            (functools.partial(self._stream_leaf, s, columns, iterators, query_filter,
                               block_cache) for s in subs),
            width=self.threads, name="sediment-scan")

    def _stream_leaf(self, sub: SubQuery, columns: list[str],
                     iterators: Sequence[RecordIterator],
                     query_filter: QueryFilter | None,
                     block_cache: bool | None = None) -> Iterator[pa.RecordBatch]:
        arrow = self.schema.to_arrow()
        schema = pa.schema([arrow.field(c) for c in columns])
        hashes = self.point_hashes(sub)
        settle = settles(sub, iterators)
        sequence = len(sub.references) > 1 or bool(sub.deletions) or settle
        blocks = self.block_cache(sub, block_cache)
        streams: list[Iterator[pa.RecordBatch]] = [
            (b for t in self._file_row_groups(ref, sub, columns, hashes, sequence=sequence,
                                              query_filter=query_filter, blocks=blocks,
                                              eager=block_cache is True)
             for b in t.to_batches())
            for ref in sub.references
        ]
        if len(streams) > 1:
            # the largest file (a leaf's base, beside a few small upserted ones) is decoded a
            # run ahead on its own thread while this one merges the run before: the merge's
            # work overlaps Arrow's decoding instead of following it
            big = max(range(len(streams)), key=lambda i: sub.references[i].records)
            streams[big] = prefetched(streams[big], depth=2, name="sediment-merge-read")
        merged: Iterator[pa.RecordBatch]
        if sequence:
            merged = merge_sorted(streams, merge_names(self.schema.key_names),
                                  schema.append(SEQ_FIELD),
                                  last_of=last_of(sub, iterators, self.schema.key_names))
            if settle:
                merged = settle_batches(merged, self.schema.key_names)
            merged = (without_sequence(b) for b in self.deletes.apply_batches(
                merged, sub.deletions, merge=merge_of(iterators)))
        else:
            merged = merge_sorted(streams, self.schema.key_names, schema)
        out = apply_iterators(merged, iterators)
        yield from (out if query_filter is None else query_filter.apply_batches(out))
