"""Where the bytes go: a table's and a store's storage by what it holds (``sediment du``,
``Table.usage()``, ``Store.usage()``, the dashboard).

A table's objects are sorted into:

- ``live``: the data files its head references, and their ``sidecars`` (samples and key
  filters) apart;
- ``unreferenced``: files no version at the head references, by the reason GC keeps each
  (tag, pin, retention, gc_delay, clock_skew) or ``due`` (the next GC pass deletes them);
- ``orphaned``: files no transaction added, by reason (tag, lease, pin, orphan_timeout) or
  ``due``;
- ``metadata``: the log, snapshots and their objects, tags and pins, leases, idempotency keys;
- ``status``: job and task events and their rollups.

Unreferenced and orphaned files come from the one classifier GC deletes by
(``sediment.maintenance.kept``, through ``gc.survey``), so ``du`` can never disagree with what
the next GC pass does; their bytes include their sidecars. One listing of the table's folder
answers all of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sediment.files.sidecars import data_file_of
from sediment.maintenance.gc import survey
from sediment.maintenance.kept import GcPlan
from sediment.maintenance.unnamed import TABLES_PREFIX
from sediment.status.events import STATUS_PREFIX
from sediment.storage.base import ObjectInfo, ObjectStore

if TYPE_CHECKING:
    from sediment.handle import TableHandle

DATA_PREFIX = "data/"


def _add(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in (*a, *(k for k in b if k not in a))}


@dataclass(frozen=True, slots=True)
class Usage:
    """Bytes on storage by what they hold (see the module); ``files``: live data files,
    ``objects``: every object counted."""

    live: int = 0
    sidecars: int = 0
    unreferenced: Mapping[str, int] = field(default_factory=dict)
    orphaned: Mapping[str, int] = field(default_factory=dict)
    metadata: int = 0
    status: int = 0
    files: int = 0
    objects: int = 0

    @property
    def total(self) -> int:
        """Every byte counted, whatever holds it."""
        return (self.live + self.sidecars + sum(self.unreferenced.values()) +
                sum(self.orphaned.values()) + self.metadata + self.status)

    def plus(self, other: Usage) -> Usage:
        """Both usages summed, reason by reason (a store's total over its tables)."""
        return Usage(self.live + other.live, self.sidecars + other.sidecars,
                     _add(self.unreferenced, other.unreferenced),
                     _add(self.orphaned, other.orphaned), self.metadata + other.metadata,
                     self.status + other.status, self.files + other.files,
                     self.objects + other.objects)

    def to_json(self) -> dict[str, Any]:
        """The figures as ``sediment du --json`` prints them (``total`` included)."""
        return {"live": self.live, "sidecars": self.sidecars,
                "unreferenced": dict(self.unreferenced), "orphaned": dict(self.orphaned),
                "metadata": self.metadata, "status": self.status, "total": self.total,
                "files": self.files, "objects": self.objects}


def table_usage(table: TableHandle, *, now: float | None = None) -> Usage:
    """``table``'s usage now (one listing of its folder; the head read after it, as GC
    reads it)."""
    return usage_and_plan(table, now=now)[0]


def usage_and_plan(table: TableHandle, *, now: float | None = None) -> tuple[Usage, GcPlan]:
    """``table_usage`` and the GC survey it comes from (the dashboard shows both)."""
    listed = list(table.objects.list(""))
    data = [o for o in listed if o.key.startswith(DATA_PREFIX) and not o.key.endswith("/")]
    plan = survey(table, now=time.time() if now is None else now, listed=data)
    state = table.states.head()
    live = sidecars = 0
    files = set()
    for o in data:
        f = data_file_of(o.key)
        if f in state.refcount:
            if f == o.key:
                live += o.size
                files.add(f)
            else:
                sidecars += o.size
    unreferenced = {r: k.bytes for r, k in plan.kept.unreferenced.items()}
    due = plan.unreferenced_bytes - sum(unreferenced.values())
    if due:
        unreferenced["due"] = due
    orphaned = {r: k.bytes for r, k in plan.kept.orphans.items()}
    due = plan.orphan_bytes - sum(orphaned.values())
    if due:
        orphaned["due"] = due
    status = sum(o.size for o in listed if o.key.startswith(STATUS_PREFIX))
    metadata = sum(o.size for o in listed
                   if not o.key.startswith((DATA_PREFIX, STATUS_PREFIX)))
    return Usage(live, sidecars, unreferenced, orphaned, metadata, status, len(files),
                 len(listed)), plan


@dataclass(frozen=True, slots=True)
class StoreUsage:
    """A store's usage: ``tables`` by name, their sum (``total``), and the store's own
    objects (``catalog``: the catalogs of tables and schemes and the store file; ``unnamed``:
    the folders of dropped tables or killed creates, which the store's maintenance removes)."""

    tables: Mapping[str, Usage]
    catalog: int = 0
    unnamed: int = 0

    @property
    def total(self) -> Usage:
        """The tables' usages summed."""
        out = Usage()
        for u in self.tables.values():
            out = out.plus(u)
        return out

    @property
    def bytes(self) -> int:
        """Every byte of the store: its tables', its catalogs' and its unnamed folders'."""
        return self.total.total + self.catalog + self.unnamed

    def to_json(self) -> dict[str, Any]:
        """The figures as ``sediment du --json`` prints them for a whole store."""
        return {"tables": {n: u.to_json() for n, u in sorted(self.tables.items())},
                "total": self.total.to_json(), "catalog": self.catalog,
                "unnamed": self.unnamed, "bytes": self.bytes}


def store_usage(objects: ObjectStore, tables: Mapping[str, TableHandle], *,
                root_files: Iterable[str] = (), now: float | None = None) -> StoreUsage:
    """The usage of a store rooted at ``objects`` whose catalog names ``tables``;
    ``root_files``: the store's own objects at its root (its store file)."""
    named = {t.table_id for t in tables.values()}
    usage = {name: table_usage(t, now=now) for name, t in tables.items()}
    unnamed = sum(_sizes(objects.list(f"{TABLES_PREFIX}{folder}/"))
                  for folder in objects.list_folders(TABLES_PREFIX) if folder not in named)
    # every folder but the tables' (catalog/, schemes/), and the files at the root (store.json):
    # listed so, the store's root listing does not walk every table's objects again
    catalog = sum(_sizes(objects.list(f"{folder}/")) for folder in objects.list_folders("")
                  if f"{folder}/" != TABLES_PREFIX)
    for key in root_files:
        info = objects.head(key)
        catalog += info.size if info is not None else 0
    return StoreUsage(usage, catalog, unnamed)


def _sizes(listed: Iterable[ObjectInfo]) -> int:
    return sum(o.size for o in listed)
