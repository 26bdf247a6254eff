"""What the continuous maintainer did to each table between two reports (its report rows)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sediment.maintenance.batching import BatcherActivity


@dataclass(slots=True)
class TableActivity:
    """What the maintainer did to one table since the last report."""

    ticks: int = 0
    splits: int = 0
    jobs_started: int = 0
    jobs_committed: int = 0
    jobs_failed: int = 0
    files_deleted: int = 0
    metadata_deleted: int = 0
    """Log entries, snapshots, snapshot objects and job events pruned or rolled up."""
    errors: list[str] = field(default_factory=list)

    def row(self) -> dict[str, object]:
        # "ticks": the maintainer's looks at the table in the interval (not whole passes)
        out: dict[str, object] = {"ticks": self.ticks, "splits": self.splits,
                                  "jobs": self.jobs_committed, "failed": self.jobs_failed,
                                  "deleted": self.files_deleted}
        if self.metadata_deleted:
            out["pruned"] = self.metadata_deleted
        if self.errors:
            out["error"] = "; ".join(dict.fromkeys(self.errors))
        return out


def report_rows(activity: Mapping[str, TableActivity], running: Mapping[str, int],
                ingests: Mapping[str, BatcherActivity], *,
                batching: bool = False) -> list[dict[str, object]]:
    """One row per table, by name: its maintenance since the last report, its jobs running
    now, and (when the batcher lane runs: ``batching``) the batcher jobs it committed or
    failed, 0 and 0 for a table the lane has not reached yet (every row has the same keys
    from the first report on)."""
    rows = []
    for name in sorted({*activity, *ingests}):
        act = activity.get(name, TableActivity())
        row = {"table": name, **act.row(), "running": running.get(name, 0)}
        b = ingests.get(name)
        if b is None and batching:
            b = BatcherActivity()
        if b is not None:
            row["ingests"] = b.committed
            row["ingests_failed"] = b.failed
            if b.errors:
                row["error"] = "; ".join(dict.fromkeys(
                    [*([str(row["error"])] if "error" in row else []), *b.errors]))
        rows.append(row)
    return rows
