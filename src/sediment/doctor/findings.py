"""What ``sediment doctor`` reports: findings, each with what to do, and the report of a store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a check found. ``table``: None for the store itself; ``check``: the name of
    the check (stable, for scripts); ``problem``: what is wrong, naming the object; ``action``:
    what to do about it; ``attention``: whether it needs someone (the command's exit status),
    or is only worth knowing."""

    table: str | None
    check: str
    problem: str
    action: str
    attention: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "check": self.check, "problem": self.problem,
                "action": self.action, "attention": self.attention}


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """Every finding of one run over a store: the tables looked at and how long it took."""

    store: str
    tables: tuple[str, ...]
    findings: tuple[Finding, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        """Nothing needs attention (notes may remain)."""
        return not any(f.attention for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "ok": self.ok, "tables": list(self.tables),
                "findings": [f.to_json() for f in self.findings],
                "seconds": round(self.seconds, 3)}
