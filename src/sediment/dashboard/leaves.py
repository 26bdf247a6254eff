"""The list beside the partition icicle: the leaves under the view's root in key order, each
with its id, key range, files, records and bytes, numbered as the icicle labels them (a tree
of hundreds of leaves draws each too narrow for its text; ``#n`` still fits).

Bytes are the sizes of the data files a leaf's own references point to (a file shared by
several leaves after a split counts in each), from listings of the files' folders. A data file
never changes, so its size is listed once and kept; a refresh lists only the folders of files
not seen before (compaction writes a leaf's files into the leaf's own folder).
"""

from __future__ import annotations

import posixpath
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sediment.core.state import TableState
from sediment.dashboard.aggregate import Figures
from sediment.storage.base import ObjectStore
from sediment.types import key_end_text, region_text

LEAF_LIST = 200
"""Leaves listed per view (key order from the view's root): the icicle's first ones."""


def leaves_under(figures: Figures, root: str, limit: int = LEAF_LIST) -> list[str]:
    """The first ``limit`` leaves under ``root`` in key order (a depth-first walk, lower child
    first, that stops once it has them: a few hundred nodes whatever the tree's size)."""
    parts = figures.partitions
    out: list[str] = []
    stack = [root]
    while stack and len(out) < limit:
        p = parts[stack.pop()]
        if p.is_leaf:
            out.append(p.id)
        else:
            stack.extend(reversed(p.children))
    return out


class FileSizes:
    """Sizes of one store's data files seen so far, by filename."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        self._sizes: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, filenames: set[str]) -> dict[str, int]:
        """Each file's size (a file no longer listed is left out), listing the folders of
        the files not seen before, 16 at a time."""
        with self._lock:
            unknown = filenames - self._sizes.keys()
        folders = sorted({posixpath.dirname(f) + "/" for f in unknown})
        if folders:
            with ThreadPoolExecutor(min(16, len(folders))) as pool:
                listed = pool.map(lambda folder: [(o.key, o.size)
                                                  for o in self.objects.list(folder)], folders)
                found = dict(pair for chunk in listed for pair in chunk)
            with self._lock:
                self._sizes.update(found)
        with self._lock:
            return {f: self._sizes[f] for f in filenames if f in self._sizes}


def leaf_list(figures: Figures, state: TableState, sizes: FileSizes, root: str,
              limit: int = LEAF_LIST) -> dict[str, Any]:
    """``rows``: the first ``limit`` leaves under ``root`` (``n`` their number in key order,
    as the icicle labels them; ``files`` held, ``files_read`` with the ancestors', ``records``
    held, ``bytes`` of the files held, ``region``, ``min``, ``max``); ``total``: the leaves
    under ``root``."""
    ids = leaves_under(figures, root, limit)
    refs = {pid: state.references(pid) for pid in ids}
    known = sizes.get({name for r in refs.values() for name in r})
    rows = []
    for n, pid in enumerate(ids, 1):
        region = figures.partitions[pid].region
        held = refs[pid]
        rows.append({
            "n": n, "id": pid, "region": region_text(region, figures.key_types),
            "min": key_end_text(region.min, figures.key_types),
            "max": key_end_text(region.max, figures.key_types),
            "files": figures.own_files.get(pid, 0),
            "files_read": figures.leaf_files.get(pid, 0),
            "records": figures.own_records.get(pid, 0),
            "bytes": sum(known.get(name, 0) for name in held),
        })
    return {"rows": rows, "total": figures.leaves_below.get(root, 0), "limit": limit}
