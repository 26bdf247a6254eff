"""The metric objects of Sediment (made once, by :func:`sediment.metrics.enable`): their
names, labels, help texts and histogram buckets, in one place.

The docs' "Operating Sediment" page lists the same names with what they mean and which alerts
they serve; ``tests/metrics`` checks that every one of :data:`FAMILIES` is exposed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

Sources = Callable[[], tuple[dict[str, int], dict[str, int], dict[str, tuple[int, int]]]]
"""What :func:`sediment.metrics.scraped` answers: files per leaf, queue depths, cache counts."""

FAMILIES = (
    "sediment_commits_total", "sediment_commit_conflicts_total",
    "sediment_commit_unknown_outcomes_total", "sediment_ingest_rows_total",
    "sediment_compaction_seconds", "sediment_compaction_rows_total",
    "sediment_files_per_leaf", "sediment_queue_depth", "sediment_request_seconds",
    "sediment_gc_deleted_files_total", "sediment_cache_hits_total",
    "sediment_cache_misses_total", "sediment_group_commit_puts",
    "sediment_group_commit_wait_seconds",
)
"""Every family's name as a scrape shows it (counters with their ``_total``)."""

COMPACTION_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""A job merges from a few KiB (tens of ms) to a batch of 12 large files (tens of minutes)."""
REQUEST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0)
"""A point read answers in a millisecond or two; a whole-table stream can take a minute."""
GROUP_PUTS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
GROUP_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Around the group-commit window (20 ms by default; at most 10 s)."""


class Families:
    """The metric objects, in a registry of their own, with the collector that answers the
    families computed on each scrape from ``sources``."""

    def __init__(self, sources: Sources) -> None:
        r = self.registry = CollectorRegistry()
        self.commits = Counter("sediment_commits", "Transactions committed, by table and "
                               "transaction kind.", ["table", "kind"], registry=r)
        self.conflicts = Counter("sediment_commit_conflicts", "Commits that lost the race for "
                                 "a log version to another writer (each retried).", ["table"],
                                 registry=r)
        self.unknown = Counter("sediment_commit_unknown_outcomes", "Commits whose outcome the "
                               "store never told (CommitOutcomeUnknownError).", ["table"],
                               registry=r)
        self.ingest_rows = Counter("sediment_ingest_rows", "Records committed by ingests "
                                   "(add-files transactions: ingest, upsert, bulk import, "
                                   "load).", ["table"], registry=r)
        self.compaction_seconds = Histogram("sediment_compaction_seconds", "Time of each "
                                            "committed compaction job's merge.",
                                            buckets=COMPACTION_BUCKETS, registry=r)
        self.compaction_rows = Counter("sediment_compaction_rows", "Records read by committed "
                                       "compaction jobs.", ["table"], registry=r)
        self.gc_deleted = Counter("sediment_gc_deleted_files", "Unreferenced data files "
                                  "garbage collection deleted.", ["table"], registry=r)
        self.request_seconds = Histogram("sediment_request_seconds", "Time of each request, "
                                         "by method (Flight methods; http:<endpoint> in the "
                                         "dashboard).", ["method"],
                                         buckets=REQUEST_BUCKETS, registry=r)
        self.group_puts = Histogram("sediment_group_commit_puts", "Puts committed together "
                                    "by each group commit.", buckets=GROUP_PUTS_BUCKETS,
                                    registry=r)
        self.group_wait_seconds = Histogram("sediment_group_commit_wait_seconds", "How long "
                                            "the oldest put of each group waited before its "
                                            "group's commit began.",
                                            buckets=GROUP_WAIT_BUCKETS, registry=r)
        self.cache_hits = _CacheCounts()
        self.cache_misses = _CacheCounts()
        r.register(_Scraped(sources, self.cache_hits, self.cache_misses))


class _CacheCounts:
    """Hits (or misses) of the caches without counters of their own, by cache: plain
    integers, added on each scrape to those of the caches that count for themselves (one
    family has to answer both)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def labels(self, name: str) -> _CacheCounts._One:
        return _CacheCounts._One(self, name)

    class _One:
        def __init__(self, owner: _CacheCounts, name: str) -> None:
            self.owner, self.name = owner, name

        def inc(self) -> None:
            with self.owner._lock:
                self.owner.counts[self.name] = self.owner.counts.get(self.name, 0) + 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


class _Scraped(Collector):
    """The families computed when scraped: files per leaf, queue depths, cache counts."""

    def __init__(self, sources: Sources, hits: _CacheCounts, misses: _CacheCounts) -> None:
        self.sources, self.hits, self.misses = sources, hits, misses

    def collect(self) -> Iterator[Metric]:
        most, depth, counts = self.sources()
        leaves = GaugeMetricFamily("sediment_files_per_leaf", "The most files a read of one "
                                   "leaf of the table merges (its own and its ancestors'), "
                                   "as this process last saw the table.", labels=["table"])
        for table, files in sorted(most.items()):
            leaves.add_metric([table], files)
        yield leaves
        queues = GaugeMetricFamily("sediment_queue_depth", "Work waiting in a queue of this "
                                   "process: jobs (compaction jobs assigned, not started), "
                                   "batcher (file-ingest requests pending), group_commit "
                                   "(puts waiting for their group).", labels=["queue"])
        for queue, n in sorted(depth.items()):
            queues.add_metric([queue], n)
        yield queues
        hits, misses = self.hits.snapshot(), self.misses.snapshot()
        for name, (h, m) in counts.items():
            hits[name] = hits.get(name, 0) + h
            misses[name] = misses.get(name, 0) + m
        for family, values, what in (("sediment_cache_hits", hits, "found"),
                                     ("sediment_cache_misses", misses, "not found")):
            out = CounterMetricFamily(family, f"Lookups {what} in a cache of this process "
                                      "(block: decoded pages, disk: the local disk cache of "
                                      "an object store, footer: Parquet footers).",
                                      labels=["cache"])
            for name, n in sorted(values.items()):
                out.add_metric([name], n)
            yield out
