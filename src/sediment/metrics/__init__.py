"""Sediment's Prometheus metrics: each event is counted where it happens, through the calls
of this module; the metric objects themselves live in :mod:`sediment.metrics.families`.

Metrics are off until a process turns them on (:func:`enable`: ``sediment serve``,
``sediment maintain --loop`` and ``sediment dashboard`` do with ``--metrics-port``, a library
user may too). While off, every call here returns at once and ``prometheus_client`` is not
even imported: it takes 0.2-0.3 s to import, which every command's start and every commit
would otherwise pay.

What costs little to count when asked and much to keep current (the most files a read of a
leaf merges, a queue's depth, the caches that keep their own counters) is not counted here
but computed on each scrape from the *sources* a process registers (:func:`watch_leaves`,
:func:`watch_queue`, :func:`watch_cache`).

Names and meanings (one place: :data:`sediment.metrics.families.FAMILIES`) are listed in
the "Operating Sediment" page of the docs.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from sediment.metrics.families import Families

V = TypeVar("V")

_families: Families | None = None
_lock = threading.Lock()

_leaves: dict[str, list[weakref.WeakMethod[Callable[[], tuple[int, int]]]]] = {}
"""Table name -> the methods answering (version, the most files a read of one of its leaves
merges at that version): one per live head cache of the table (a process may open a table
more than once; the newest version answers)."""
_queues: dict[str, Callable[[], int]] = {}
"""Queue name -> a function answering its depth now."""
_caches: dict[str, Callable[[], tuple[int, int]]] = {}
"""Cache name -> a function answering its (hits, misses) since the process started."""


def enable() -> CollectorRegistry:
    """Turn the metrics of this process on (once; later calls answer the same registry) and
    return the registry they are in (a registry of Sediment's own, not prometheus_client's
    global one, so that a library user's metrics and ours never clash)."""
    global _families
    with _lock:
        if _families is None:
            from sediment.metrics.families import Families

            _families = Families(scraped)
        return _families.registry


def enabled() -> bool:
    """Whether :func:`enable` was called in this process."""
    return _families is not None


# ---- counted where the event happens ------------------------------------------------------
def commit(table: str, kind: str, rows_added: int = 0) -> None:
    """A transaction of ``kind`` landed in ``table``'s log (the commit loop); ``rows_added``:
    the records an ingest (AddFiles) brought in."""
    f = _families
    if f is not None:
        f.commits.labels(table, kind).inc()
        if rows_added:
            f.ingest_rows.labels(table).inc(rows_added)


def commit_conflict(table: str) -> None:
    """A committer lost the race for a version of ``table``'s log (it retries)."""
    if _families is not None:
        _families.conflicts.labels(table).inc()


def commit_unknown(table: str) -> None:
    """The store could not say whether a commit to ``table`` landed."""
    if _families is not None:
        _families.unknown.labels(table).inc()


def compaction(table: str, seconds: float, rows: int) -> None:
    """A compaction job of ``table`` committed, having merged ``rows`` in ``seconds``."""
    f = _families
    if f is not None:
        f.compaction_seconds.observe(seconds)
        f.compaction_rows.labels(table).inc(rows)


def gc_deleted(table: str, files: int) -> None:
    """Garbage collection deleted ``files`` data files of ``table``."""
    if _families is not None and files:
        _families.gc_deleted.labels(table).inc(files)


def request(method: str, seconds: float) -> None:
    """A request of the Flight service (``method``) took ``seconds``."""
    if _families is not None:
        _families.request_seconds.labels(method).observe(seconds)


def group_commit(puts: int, waited: float) -> None:
    """The Flight service's group commit committed ``puts`` puts as one transaction, the
    oldest of which had waited ``waited`` seconds for its group."""
    f = _families
    if f is not None:
        f.group_puts.observe(puts)
        f.group_wait_seconds.observe(waited)


def cache(name: str, hit: bool) -> None:
    """A lookup in cache ``name`` (for caches that keep no counters of their own)."""
    f = _families
    if f is not None:
        (f.cache_hits if hit else f.cache_misses).labels(name).inc()


# ---- computed on each scrape --------------------------------------------------------------
def watch_leaves(table: str, most_files: Callable[[], tuple[int, int]]) -> None:
    """Answer ``sediment_files_per_leaf{table}`` on each scrape with the files of the newest
    version the ``most_files`` methods registered for ``table`` answer (each: its version
    and the most files a read of one leaf merges there). A method is held weakly: the head
    cache that registered it answers while it lives, and registering costs no memory past
    it."""
    held = weakref.WeakMethod(most_files)
    with _lock:
        live = [m for m in _leaves.get(table, ()) if m() is not None]
        _leaves[table] = [*live, held]


def watch_queue(queue: str, depth: Callable[[], int]) -> None:
    """Answer ``sediment_queue_depth{queue}`` with ``depth()`` on each scrape."""
    with _lock:
        _queues[queue] = depth


def watch_cache(name: str, counts: Callable[[], tuple[int, int]]) -> None:
    """Add ``counts()`` (hits, misses) of a cache that keeps its own counters to
    ``sediment_cache_hits_total{cache}`` / ``..._misses_total`` on each scrape."""
    with _lock:
        _caches[name] = counts


def scraped() -> tuple[dict[str, int], dict[str, int], dict[str, tuple[int, int]]]:
    """The sources' answers now: files per leaf by table, depth by queue, (hits, misses) by
    cache. A source that fails is left out of this scrape (a metrics endpoint never fails
    the process it watches)."""
    with _lock:
        leaves = {t: [fn for m in ms if (fn := m()) is not None] for t, ms in _leaves.items()}
        queues, caches = dict(_queues), dict(_caches)
    most: dict[str, int] = {}
    for table, fns in leaves.items():
        answers: dict[str, tuple[int, int]] = {}
        for i, leaf in enumerate(fns):
            _answer(answers, str(i), leaf)
        if answers:
            most[table] = max(answers.values())[1]  # the newest version's
    depth: dict[str, int] = {}
    for queue, queued in queues.items():
        _answer(depth, queue, queued)
    counts: dict[str, tuple[int, int]] = {}
    for name, counted in caches.items():
        _answer(counts, name, counted)
    return most, depth, counts


def _answer(out: dict[str, V], key: str, fn: Callable[[], V]) -> None:
    try:
        out[key] = fn()
    except Exception:  # noqa: BLE001 - a scrape leaves out what it cannot read now
        return
