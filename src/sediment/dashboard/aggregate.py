"""Per-partition figures of one table version, computed once on the server.

The pages never receive file references: a table of 10,000 leaves and 100,000 references
is summed here into a few numbers per partition (records and files held, records and
references below, files a read of each leaf merges), and the browser gets only the partition
nodes it draws (see :func:`tree`) and a histogram of files per leaf. A state at a version
never changes, so the figures are kept per (table id, version) in a small LRU cache.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sediment.core.model import Partition
from sediment.core.state import ROOT_PARTITION_ID, TableState
from sediment.core.units import iso_time
from sediment.types import key_end_text, region_text

TREE_BUDGET = 600
"""At most this many partition nodes go to the browser per tree view (whole levels only):
deeper levels are one click away (the view is re-rooted at the clicked node)."""


@dataclass(frozen=True, slots=True)
class Figures:
    """What the pages show of a table version's partition tree."""

    version: int
    partitions: dict[str, Partition]
    depth: dict[str, int]
    own_files: dict[str, int]
    own_records: dict[str, int]
    total_records: dict[str, int]
    """Records referenced in a partition and every partition below it."""
    leaves_below: dict[str, int]
    leaf_files: dict[str, int]
    """Files a read of each leaf merges: its own references and its ancestors'."""
    key_types: tuple[pa.DataType, ...] = ()
    """The row-key fields' types, which region ends are shown under (a date as a date)."""

    @property
    def leaves(self) -> int:
        return len(self.leaf_files)

    @property
    def records(self) -> int:
        return sum(self.own_records.values())

    @property
    def references(self) -> int:
        return sum(self.own_files.values())

    @property
    def max_files_per_leaf(self) -> int:
        return max(self.leaf_files.values(), default=0)


def compute(state: TableState) -> Figures:
    """Sum a state's references per partition, then down (files read) and up (records)."""
    parts = state.partitions
    own_files: dict[str, int] = dict.fromkeys(parts, 0)
    own_records: dict[str, int] = dict.fromkeys(parts, 0)
    for pid, (files, records) in state.partition_totals().items():
        own_files[pid], own_records[pid] = files, records
    order: list[str] = []  # parents before children
    depth: dict[str, int] = {}
    above: dict[str, int] = {}  # files held by a partition's ancestors
    if ROOT_PARTITION_ID in parts:
        stack = [(ROOT_PARTITION_ID, 0, 0)]
        while stack:
            pid, d, files_above = stack.pop()
            order.append(pid)
            depth[pid], above[pid] = d, files_above
            for child in parts[pid].children:
                stack.append((child, d + 1, files_above + own_files[pid]))
    total = dict(own_records)
    leaves_below: dict[str, int] = {}
    for pid in reversed(order):
        p = parts[pid]
        if p.is_leaf:
            leaves_below[pid] = 1
        else:
            leaves_below[pid] = sum(leaves_below[c] for c in p.children)
            total[pid] += sum(total[c] for c in p.children)
    leaf_files = {pid: above[pid] + own_files[pid] for pid in order if parts[pid].is_leaf}
    types = tuple(f.type for f in state.schema.row_keys) if state.schema is not None else ()
    return Figures(state.version, dict(parts), depth, own_files, own_records, total,
                   leaves_below, leaf_files, types)


class FiguresCache:
    """:func:`compute` per (table id, version), the most recent few kept."""

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._items: OrderedDict[tuple[str, int], Figures] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, table_id: str, state: TableState) -> Figures:
        key = (table_id, state.version)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        figures = compute(state)  # outside the lock: other tables need not wait
        with self._lock:
            self._items[key] = figures
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return figures


def iso(epoch: float | None) -> str | None:
    """A time for the pages: :func:`sediment.core.units.iso_time` (ISO 8601 UTC with
    milliseconds, the CLI's ``--json`` format and what Plotly's date axes read); None for
    none. Every time a page shows passes through here (the script's own clock through its
    ``isoTime``, which writes the same format)."""
    return None if not epoch else iso_time(epoch)


def histogram(figures: Figures) -> list[dict[str, int]]:
    """Leaves per count of files read: ``[{"files": n, "leaves": count}, ...]`` by n."""
    counts = Counter(figures.leaf_files.values())
    return [{"files": n, "leaves": counts[n]} for n in sorted(counts)]


def tree(figures: Figures, root: str = ROOT_PARTITION_ID,
         budget: int = TREE_BUDGET) -> dict[str, Any]:
    """The partition subtree under ``root``, whole levels while they fit in ``budget`` nodes.

    Each node: id, parent (None for the view's root), region, split key, depth, records
    (held here and below), files held, leaves below, files read for a leaf, and ``more``
    when it has children not sent (click to re-root the view there). ``path`` lists the
    view root's ancestors, root first, for a way back up.
    """
    parts = figures.partitions
    if root not in parts:
        raise KeyError(root)
    level = [root]
    chosen: list[str] = []
    while level and len(chosen) + len(level) <= budget:
        chosen.extend(level)
        level = [c for pid in level for c in parts[pid].children]
    if not chosen:  # the root alone is always shown
        chosen = [root]
    sent = set(chosen)
    nodes = []
    for pid in chosen:
        p = parts[pid]
        nodes.append({
            "id": pid,
            "parent": None if pid == root else p.parent_id,
            "region": region_text(p.region, figures.key_types),
            "min": key_end_text(p.region.min, figures.key_types),
            "max": key_end_text(p.region.max, figures.key_types),
            "split_key": key_end_text(p.split_key, figures.key_types),
            "depth": figures.depth.get(pid, 0),
            "leaf": p.is_leaf,
            "records": figures.total_records.get(pid, 0),
            "files": figures.own_files.get(pid, 0),
            "leaves": figures.leaves_below.get(pid, 0),
            "files_read": figures.leaf_files.get(pid),
            "more": bool(p.children) and p.children[0] not in sent,
        })
    path: list[dict[str, str]] = []
    p = parts[root]
    while p.parent_id is not None:
        p = parts[p.parent_id]
        path.append({"id": p.id, "region": region_text(p.region, figures.key_types)})
    path.reverse()
    return {"version": figures.version, "root": root, "path": path, "nodes": nodes,
            "partitions": len(parts), "budget": budget}
