"""StoreMaintenance: the one maintenance of a store, which ``Store.maintain``, ``sediment
maintain`` and the continuous maintainer (``maintain --loop``) all run.

Per table it runs passes of the table steps (:data:`sediment.maintenance.passes.TABLE_STEPS`:
split, compact, collect garbage) until one does nothing (``Table.maintain``, which resolves the
job runner: local threads or Spark). Over the whole store it then does
what no single table's passes can: the members of partition schemes are maintained again while
a round splits or compacts anything (a scheme split made by a later member's pass leaves the
members maintained before it with references to push down into the new leaves), and the store
steps run, in order (the folders of tables and of partition schemes that no catalog entry
names: dropped ones, killed creates), stopping at the first that could not look (an
unreadable catalog or clock: then nothing can be called unnamed).

The store steps are given by the store (``sediment.store.store_maintenance``), which this room
does not import: the catalogs of tables and schemes live above it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from sediment.compaction.runner import Progress
from sediment.maintenance.passes import MaintenanceResult
from sediment.state.schemes import catalog_entries
from sediment.storage.base import ObjectStore

SETTLE_ROUNDS = 10
"""At most this many extra rounds over the members of partition schemes."""


@dataclass(frozen=True, slots=True)
class StoreStepResult:
    """What one store step did: ``what`` it collects, how many folders it ``removed``, the
    objects deleted, and a ``note`` when it could not look (nothing is collected then)."""

    what: str
    removed: int = 0
    objects_deleted: int = 0
    note: str = ""

    def row(self) -> dict[str, Any] | None:
        """A report row (``sediment maintain``) when it did something or could not."""
        if not (self.removed or self.note):
            return None
        return {"table": f"({self.what})", "removed": self.removed,
                "deleted": self.objects_deleted, **({"error": self.note} if self.note else {})}


StoreStep = Callable[[float | None], StoreStepResult]
"""A store step: ``step(orphan_timeout)`` (None: its own default timeout)."""


class MaintainedTable(Protocol):
    """What the orchestrator needs of a ``Table`` (which this layer does not import)."""

    def maintain(self, *, runner: Literal["local", "spark"] = "local",
                 orphan_timeout: float | None = None,
                 progress: Callable[[int, int], None] | None = None) -> MaintenanceResult: ...


class MaintainedStore(Protocol):
    """What the orchestrator needs of a ``Store`` (which this layer does not import)."""

    objects: ObjectStore

    def tables(self) -> list[str]: ...

    def table(self, name: str) -> Any: ...


class StoreMaintenance:
    """See the module docstring. ``runner`` runs compaction jobs (local threads or Spark
    tasks); ``orphan_timeout`` overrides ``gc.orphan_timeout_seconds`` and the store steps'
    timeouts; ``store_steps`` are the store's steps, in order."""

    def __init__(self, store: MaintainedStore, *, runner: Literal["local", "spark"] = "local",
                 orphan_timeout: float | None = None,
                 store_steps: Sequence[StoreStep] = ()) -> None:
        self.store = store
        self.runner: Literal["local", "spark"] = runner
        self.orphan_timeout = orphan_timeout
        self.store_steps = tuple(store_steps)

    def maintain_table(self, table: MaintainedTable, *, progress: Progress | None = None
                       ) -> MaintenanceResult:
        """Passes of the table steps over one table until one does nothing."""
        return table.maintain(runner=self.runner, orphan_timeout=self.orphan_timeout,
                              progress=progress)

    def settle(self, results: dict[str, MaintenanceResult]) -> dict[str, MaintenanceResult]:
        """``results`` (by table name) with the members of partition schemes among them
        maintained again while a round splits or commits anything, each summed per table."""
        members = [n for n, d in catalog_entries(self.store.objects).items()
                   if d.get("scheme_id") and n in results]
        out = dict(results)
        if not members or not any(r.splits for r in results.values()):
            return out
        for _ in range(SETTLE_ROUNDS):
            again = {n: self.maintain_table(self.store.table(n)) for n in members}
            for n, r in again.items():
                out[n] = out[n].plus(r)
            if not any(r.splits or r.jobs_committed for r in again.values()):
                break
        return out

    def run_store_steps(self) -> list[StoreStepResult]:
        """The store steps in order, up to the first that could not look."""
        out = []
        for step in self.store_steps:
            r = step(self.orphan_timeout)
            out.append(r)
            if r.note:
                break
        return out

    def maintain(self, names: Sequence[str] | None = None) -> dict[str, MaintenanceResult]:
        """Maintain the tables ``names`` (None: the whole store, scheme members settled and
        the store steps run after the tables)."""
        whole = names is None
        chosen = self.store.tables() if names is None else list(names)
        out = {n: self.maintain_table(self.store.table(n)) for n in chosen}
        if whole:
            out = self.settle(out)
            self.run_store_steps()
        return out
