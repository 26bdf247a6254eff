"""Page-sized point reads: the rows of exact keys in one row group, read a page per column.

A lookup that has found the row group that may hold its key (statistics, key filters) used to
decode the whole group of every column it returns, for one record. With the file's Parquet
page index (sediment.files.pages) it now bisects the key column's pages for the key, decodes
that page alone, finds the key's rows in it by binary search (files.keys.sorted_span), and
decodes, for every other column, the page holding those rows; columns whose pages are cut at
the same rows (``parquet.page_rows``) are decoded together as one small file. Every decoded
page goes through the block cache (sediment.query.blocks), keyed by file, row group, page and
column, so a warm lookup decodes nothing.

Anything this path does not handle returns None and the caller reads the row group whole: a
file without a page index, a key whose records span pages, a run of rows that crosses a page
of another column, a key type :func:`sorted_span` does not search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sediment.files.keys import sorted_span
from sediment.files.page_index import ColumnPages
from sediment.files.pages import PageIndex, page_ranges, read_pages
from sediment.files.verified import reading
from sediment.query.blocks import BlockCache, KeyedPages
from sediment.storage import checksums
from sediment.storage.base import ObjectStore
from sediment.storage.rangereads import RangeReads


@dataclass(frozen=True, slots=True)
class _GroupPlan:
    """What a lookup of some columns in one row group needs of the file's page index."""

    key: int
    """The key column's index in the file."""
    key_pages: ColumnPages
    wanted: list[int]
    """The columns' indexes in the file, in the order asked."""
    aligned: bool
    """Whether the columns' pages are cut at the same rows (one small file per run)."""
    at: int
    """Where the key column is among the columns asked."""


class PointReader:
    """Reads the rows of exact keys from one row group of a file, a page per column."""

    def __init__(self, objects: ObjectStore, table: str,
                 reads: Callable[..., RangeReads] | None = None) -> None:
        self.objects = objects
        self.table = table
        self._reads = reads or (lambda fresh=False: RangeReads(objects, None, fresh=fresh))
        """``reads(fresh=...)``: ranged reads for one checked read (the footer cache's,
        through the disk cache when it is on)."""
        self._plans: dict[tuple[str, int, str, tuple[str, ...]], _GroupPlan] = {}

    def rows(self, index: PageIndex, group: int, key_column: str, keys: Sequence[Any],
             columns: list[str], schema: pa.Schema, blocks: BlockCache | None,
             checked: bool = True) -> pa.Table | None:
        """The rows of row group ``group`` whose ``key_column`` equals one of ``keys``
        (sorted, distinct), of ``columns`` (the file's names; ``schema`` their fields), in
        key order; None when this path cannot answer (the caller reads the group).
        ``checked``: the file's pages carry CRCs (it has sums; else the disk cache keeps a
        page's bytes only when a second read gives the same)."""
        plan = self._plan(index, group, key_column, columns)
        kc, key_pages, wanted = plan.key, plan.key_pages, plan.wanted
        # the key's page and, with it, every wanted column's page of the same first row:
        # with pages cut at the same rows (parquet.page_rows) one small file holds the
        # answer, decoded once
        together = [kc, *(c for c in wanted if c != kc)]
        parts = []
        for key in keys:
            holding = key_pages.pages_holding(key)
            if len(holding) == 0:
                continue
            if len(holding) > 1:
                return None  # a key whose records span pages: the row group is read
            first = int(key_pages.first_rows[holding[0]])
            if plan.aligned:
                page = self._page_table(index, group, wanted, first, schema, plan.at, blocks,
                                        checked)
                span = page.span(key)
                if span is None:
                    return None
                if span[1] > span[0]:
                    parts.append(page.table.slice(span[0], span[1] - span[0]))
                continue
            got = dict(zip(together, self._pages(index, group, together, first, blocks,
                                                 checked), strict=True))
            span = sorted_span(got[kc][0], key)
            if span is None:
                return None
            start, end = first + span[0], first + span[1]
            if end == start:
                continue
            arrays = []
            for c in wanted:
                values, at = got[c]
                if start < at or end > at + len(values):  # pages cut at other rows
                    pages = index.pages(group, c)
                    if pages.page_of_row(end - 1) != pages.page_of_row(start):
                        return None  # the rows cross a page of this column
                    values, at = self._pages(index, group, [c], start, blocks, checked)[0]
                arrays.append(values.slice(start - at, end - start))
            parts.append(pa.Table.from_arrays(arrays, schema=schema))
        if not parts:
            return schema.empty_table()
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def _plan(self, index: PageIndex, group: int, key_column: str, columns: list[str]
              ) -> _GroupPlan:
        """What a lookup of these columns in the row group needs of the page index, worked
        out once per file, group and columns (kept: a warm lookup then asks the index for
        nothing but the key's page)."""
        memo = (index.filename, group, key_column, tuple(columns))
        got = self._plans.get(memo)
        if got is None:
            kc = index.column(key_column)
            wanted = [index.column(name) for name in columns]
            base = index.pages(group, wanted[0]).first_rows
            aligned = all(np.array_equal(index.pages(group, c).first_rows, base)
                          for c in wanted[1:])
            got = _GroupPlan(kc, index.pages(group, kc), wanted, aligned,
                             columns.index(key_column))
            if len(self._plans) > 100_000:  # a bound, not a policy: plans are small
                self._plans.clear()
            self._plans[memo] = got
        return got

    def _page_table(self, index: PageIndex, group: int, columns: list[int], first: int,
                    schema: pa.Schema, key_at: int, blocks: BlockCache | None,
                    checked: bool) -> KeyedPages:
        """The pages (cut at the same rows) holding row ``first`` of the columns, as one
        table with its key column (``key_at``) searchable: cached so, a warm lookup only
        bisects a list and slices the table (building a table or batch, or searching Arrow
        buffers, gives up and takes back the GIL, which collapses threads' throughput)."""
        filename = index.filename
        uri = self.objects.uri
        key = (uri, filename, group, first, tuple(columns))
        if blocks is not None:
            page = blocks.get(key)
            if isinstance(page, KeyedPages):
                return page

        def read(attempt: int) -> list[pa.Array]:
            return [p.values for p in self._read_pages(index, group, columns, first, attempt,
                                                       checked)]

        table = pa.Table.from_arrays(reading(self.table, filename, uri, read), schema=schema)
        page = KeyedPages.of(table, key_at)
        if blocks is not None and checksums.VERIFY_READS:  # verified pages only
            blocks.put(key, page)
        return page

    def _pages(self, index: PageIndex, group: int, columns: list[int], row: int,
               blocks: BlockCache | None, checked: bool) -> list[tuple[pa.Array, int]]:
        """The page of each column (by index) of row group ``group`` holding ``row``,
        decoded, with its first row: from the block cache where it is, else read (verified,
        pages of the same rows as one small file) and cached."""
        filename = index.filename
        uri = self.objects.uri
        pages = [index.pages(group, c) for c in columns]
        numbers = [p.page_of_row(row) for p in pages]
        firsts = [p.rows(n)[0] for p, n in zip(pages, numbers, strict=True)]
        keys = [(uri, filename, group, n, index.columns[c].name)
                for c, n in zip(columns, numbers, strict=True)]
        got: list[pa.Array | None] = blocks.get_many(list(keys)) if blocks is not None \
            else [None] * len(columns)
        missing = [i for i, a in enumerate(got) if a is None]
        if missing:
            cols = [columns[i] for i in missing]

            def read(attempt: int) -> list[pa.Array]:
                return [p.values for p in self._read_pages(index, group, cols, row, attempt,
                                                           checked)]

            decoded = reading(self.table, filename, uri, read)
            for i, values in zip(missing, decoded, strict=True):
                got[i] = values
                if blocks is not None and checksums.VERIFY_READS:  # verified pages only
                    blocks.put(keys[i], values)
        return [(a, first) for a, first in zip(got, firsts, strict=True) if a is not None]

    def _read_pages(self, index: PageIndex, group: int, columns: list[int], row: int,
                    attempt: int, checked: bool) -> list[Any]:
        """:func:`read_pages` through this reader's ranged reads: on an object store every
        page's bytes are asked for at once (coalesced into one GET where they lie close),
        and they enter the disk cache only once the pages decoded (CRCs verified); a second
        attempt (after a failed check) takes nothing from the cache."""
        reads = self._reads(fresh=attempt > 0)
        reads.prefetch(index.filename, [
            span for c in dict.fromkeys(columns)
            for span in page_ranges(index, group, c, index.pages(group, c).page_of_row(row))])
        pages = read_pages(index, reads.reader(index.filename), group, columns, row)
        reads.keep(checked=checked)
        return pages
