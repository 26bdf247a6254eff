"""What damage breaks: the versions no readable snapshot and log entries reach any more,
and the versions referencing a data file (one replay of the retained log)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sediment.core.state import TableState
from sediment.errors import CorruptionError, SedimentError
from sediment.state.snapshot import read_snapshot
from sediment.state.store import StateStore


def broken_versions(first: int, last: int, entries: set[int], snaps: set[int]) -> set[int]:
    """The versions from the oldest retained (``first - 1`` when the log was pruned) to
    ``last`` that no readable snapshot and readable log entries after it reach."""
    lo = first - 1 if first > 1 else 1
    reach = first <= 1  # the empty state before version 1
    out: set[int] = set()
    for v in range(1, last + 1):
        reach = v in snaps or (reach and v in entries)
        if v >= lo and not reach:
            out.add(v)
    return out


def broken_run(start: int, broken: set[int]) -> list[range]:
    """The broken versions from ``start`` on, up to the first one that loads."""
    end = start
    while end in broken:
        end += 1
    return [range(start, end)] if end > start else []


def merged(spans: Iterable[range]) -> tuple[range, ...]:
    """Ranges of versions in order, overlapping and adjacent ones joined."""
    out: list[range] = []
    for r in sorted((r for r in spans if len(r)), key=lambda r: r.start):
        if out and r.start <= out[-1].stop:
            out[-1] = range(out[-1].start, max(out[-1].stop, r.stop))
        else:
            out.append(r)
    return tuple(out)


def tags_in(tags: Mapping[str, int], spans: Sequence[range]) -> tuple[str, ...]:
    """The names of the tags (name -> version) whose versions are in ``spans``."""
    return tuple(sorted(n for n, v in tags.items() if any(v in r for r in spans)))


def reference_spans(states: StateStore, files: set[str], first: int, last: int,
                     entries: set[int], snaps: set[int]) -> dict[str, list[range]]:
    """The versions referencing each of ``files``: one replay of the retained log, from the
    oldest state it starts at (the empty one, or the base snapshot of a pruned log). Past a
    damaged entry the replay starts again at the next readable snapshot; versions between
    (broken anyway) are left out."""
    spans: dict[str, list[range]] = {f: [] for f in files}
    since: dict[str, int] = {}
    state: TableState | None = TableState(states.table_id, states.name) if first <= 1 else None
    for v in range(1, last + 1):
        if state is not None and v in entries:
            try:
                states.heads.replay(state, states.log.read(v))
            except CorruptionError:
                state = None
        else:
            state = None
        if state is None and v in snaps:
            try:
                state = read_snapshot(states.objects, v, states.table_id, name=states.name)
            except SedimentError:
                state = None
        for f in files:
            if state is not None and f in state.refcount:
                since.setdefault(f, v)
            elif f in since:
                spans[f].append(range(since.pop(f), v))
    for f, v in since.items():
        spans[f].append(range(v, last + 1))
    return spans
