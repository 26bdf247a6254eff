"""The data of each dashboard view, as plain JSON-able dicts (the JSON API serves them as they
are; the pages embed the same dicts and draw them).

One :class:`Views` per server keeps the store, an open :class:`~sediment.table.Table` per name
(so each table's state cache is reused across requests), the per-version figures and the job
events read so far (only new events are fetched on each refresh).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sediment.core.state import ROOT_PARTITION_ID, TableState
from sediment.dashboard import aggregate
from sediment.dashboard.aggregate import iso
from sediment.dashboard.changes import merge_rule, pending_deletes, schema_history
from sediment.dashboard.commits import CommitTimeline
from sediment.dashboard.jobs import JobEvents
from sediment.dashboard.leaves import FileSizes, leaf_list
from sediment.errors import SedimentError, TableNotFoundError
from sediment.handle import handle_of
from sediment.ingest.batcher import pending
from sediment.maintenance.lease_store import maintainers_report
from sediment.maintenance.usage import usage_and_plan
from sediment.properties import defaults, describe_properties
from sediment.store import Store
from sediment.table import Table

GC_SURVEY_SECONDS = 30.0
"""How long a table's survey of what GC keeps is reused: it lists every data file, and a
table page refreshes every few seconds."""


def property_rows(values: dict[str, Any], set_here: set[str]) -> list[dict[str, Any]]:
    """Every property, grouped by its first name segment (``compaction``, ``gc``, ...) and
    sorted by name: its value, its default, whether the table sets it (even to the default)
    and what it means."""
    rows = [{"name": d["name"], "group": d["name"].split(".", 1)[0],
             "value": values.get(d["name"]), "default": d["default"],
             "set": d["name"] in set_here, "type": d["type"], "meaning": d["doc"]}
            for d in describe_properties()]
    return sorted(rows, key=lambda r: (r["group"], r["name"]))


class Views:
    """Builds every view's data from one Store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._tables: dict[str, Table] = {}
        self._lock = threading.Lock()
        self._figures = aggregate.FiguresCache()
        self.commits = CommitTimeline()
        self._sizes: dict[str, FileSizes] = {}
        self._gc: dict[str, tuple[float, dict[str, Any]]] = {}
        self.jobs = JobEvents()

    # ---- tables ----------------------------------------------------------------------------
    def table(self, name: str) -> Table:
        """The open table ``name``; TableNotFoundError (InvalidTableNameError for a name that
        cannot be one) otherwise. A table dropped and created again is reopened."""
        with self._lock:
            t = self._tables.get(name)
        if t is not None and name in self.store.tables():
            return t
        t = self.store.table(name)
        with self._lock:
            self._tables[name] = t
        return t

    def _summary(self, t: Table, state: TableState, fig: aggregate.Figures) -> dict[str, Any]:
        batch = int({**defaults(), **state.properties}["compaction.batch_size"])
        return {
            "name": t.name,
            "version": state.version,
            "online": state.online,
            "records": fig.records,
            "partitions": len(fig.partitions),
            "leaves": fig.leaves,
            "files": len(state.refcount),
            "references": fig.references,
            "last_commit": iso(state.last_update),
            "max_files_per_leaf": fig.max_files_per_leaf,
            "batch_size": batch,
            "keeping_up": fig.max_files_per_leaf <= batch,
            "pending_jobs": len(state.jobs),
        }

    # ---- views -----------------------------------------------------------------------------
    def store_view(self) -> dict[str, Any]:
        """Every table: records, leaves, files, version, last commit, online, keeping up,
        its batcher queue; and the maintainers of the store with the leases they hold."""
        rows = []
        unreadable = []
        now = time.time()
        for name in self.store.tables():
            try:
                t = self.table(name)
                state = t.state()
                row = self._summary(t, state, self._figures.get(t.table_id, state))
                queued = pending(t)
                row["batcher"] = {"queue_depth": len(queued), "oldest_age_seconds":
                                  (now - queued[0].submitted) if queued else None}
                rows.append(row)
            except TableNotFoundError:
                continue  # dropped while listing
            except SedimentError as e:
                # one damaged table (a log entry that cannot be replayed, a newer format)
                # is listed with its error, as sediment doctor lists it; the others show
                unreadable.append({"name": name, "error": f"{type(e).__name__}: {e}"})
        # ages by this server's clock: the dashboard writes nothing (no clock probe)
        maintainers = maintainers_report(self.store.objects, now=now)
        maintainers["time"] = iso(maintainers["time"])
        return {"store": self.store.uri, "generated": iso(now), "tables": rows,
                "unreadable": unreadable, "maintainers": maintainers}

    def table_view(self, name: str) -> dict[str, Any]:
        """A table's summary, merge rule and unsettled deletes, files-per-leaf histogram,
        commit timeline and latest commits, jobs, tags, what GC keeps and properties."""
        t = self.table(name)
        state = t.state()
        fig = self._figures.get(t.table_id, state)
        summary = self._summary(t, state, fig)
        props = {**defaults(), **state.properties}
        schema = state.schema
        assert schema is not None  # a created table has one
        timeline = self.commits.view(t)
        recent = timeline.pop("recent")
        return {
            "table": summary,
            "schema": {k: v for k, v in schema.to_json().items() if k != "arrow"},
            "schema_history": schema_history(state.schemas),
            "merge": merge_rule(props),
            "deletes": pending_deletes(state),
            "histogram": aggregate.histogram(fig),
            "timeline": timeline,
            "history": recent,
            "jobs": self.jobs.view(t),
            "tags": [{"name": g.name, "version": g.version, "created": iso(g.created)}
                     for g in t.tags()],
            "gc": self._gc_of(t),
            "properties": property_rows(props, set(state.properties)),
            "generated": iso(time.time()),
        }

    def tree_view(self, name: str, root: str | None = None) -> dict[str, Any]:
        """The partition subtree under ``root`` (default: the table's root partition) and the
        list of its first leaves (``sediment.dashboard.leaves``)."""
        t = self.table(name)
        state = t.state()
        fig = self._figures.get(t.table_id, state)
        root = root or ROOT_PARTITION_ID
        view = aggregate.tree(fig, root)  # KeyError for a partition not in this version
        with self._lock:
            sizes = self._sizes.setdefault(t.table_id, FileSizes(handle_of(t).objects))
        return {"table": name, **view, "leaf_list": leaf_list(fig, state, sizes, root)}

    def _gc_of(self, t: Table) -> dict[str, Any]:
        """What GC has yet to free and why (``sediment.maintenance.kept``): bytes by reason,
        and where all of the table's bytes go (``sediment.maintenance.usage``, as ``sediment
        du``), surveyed again at most every ``GC_SURVEY_SECONDS``."""
        with self._lock:
            hit = self._gc.get(t.table_id)
        if hit is not None and time.monotonic() - hit[0] < GC_SURVEY_SECONDS:
            return hit[1]
        usage, plan = usage_and_plan(handle_of(t))  # one listing for both
        kept = [{"class": cls, "reason": k.reason, "files": k.files, "bytes": k.bytes,
                 "due": None if k.due is None else iso(k.due),
                 "last_due": None if k.last_due is None else iso(k.last_due)}
                for cls, group in (("unreferenced", plan.kept.unreferenced),
                                   ("orphan", plan.kept.orphans))
                for k in group.values()]
        data = {"unreferenced_bytes": plan.unreferenced_bytes,
                "orphan_bytes": plan.orphan_bytes, "kept": kept, "usage": usage.to_json()}
        with self._lock:
            self._gc[t.table_id] = (time.monotonic(), data)
        return data
