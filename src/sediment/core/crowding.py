"""How many files a read of each leaf merges: its own references and its ancestors' (a pure
function of a state). The health check compares it with a table's bound and the metrics
endpoint reports its maximum (``sediment_files_per_leaf``)."""

from __future__ import annotations

from sediment.core.state import TableState


def files_per_leaf(state: TableState) -> dict[str, int]:
    """Leaf id -> the files a read of it merges. Counted from ``partition_totals`` (a
    snapshot's references are not decoded), one walk down the tree."""
    own = {pid: files for pid, (files, _) in state.partition_totals().items()}
    roots = [p.id for p in state.partitions.values() if p.parent_id is None]
    out: dict[str, int] = {}
    stack = [(pid, 0) for pid in roots]
    while stack:
        pid, above = stack.pop()
        files = above + own.get(pid, 0)
        p = state.partitions[pid]
        if p.is_leaf:
            out[pid] = files
        else:
            stack.extend((c, files) for c in p.children)
    return out


def most_files_per_leaf(state: TableState) -> int:
    """The most files a read of one leaf merges (0 for a table without partitions)."""
    return max(files_per_leaf(state).values(), default=0)
