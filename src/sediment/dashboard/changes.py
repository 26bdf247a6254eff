"""What the table page says about records that change: the table's merge rule, the deletes
compaction has not settled yet, how upserts and deletes read in the commit timeline, and the
schema's history (columns added, dropped, renamed and widened).

A delete is metadata (``sediment.core.deletions``): its ranges and filter stay in the state
until compaction has dropped the records it covers from every leaf that held them, so the
page lists those still pending, with the leaves left. In the log an upsert and an overwrite
are ``add_files`` entries flagged as such (their summaries say so); the timeline counts them
apart from plain ingests, and a delete's row in the latest commits says what it deleted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sediment.core.deletions import Deletion
from sediment.core.regions import Range
from sediment.core.state import TableState
from sediment.core.transactions import DeleteRecords
from sediment.errors import SedimentError
from sediment.query.wire import from_wire
from sediment.schema import Schema
from sediment.state.log import HistoryEntry

SHOWN_RANGES = 5
"""Ranges a delete's text names before saying how many more it has."""

FLAGGED = {"upsert: ": "add_files (upsert)", "overwrite: ": "add_files (overwrite)"}
"""The timeline's kind of an ``add_files`` entry whose summary starts with the key."""


def timeline_kind(entry: HistoryEntry) -> str:
    """The kind the commit timeline counts ``entry`` under: its log kind, but upserts and
    overwrites apart from plain ingests (``add_files (upsert)``)."""
    if entry.kind == "add_files":
        for prefix, kind in FLAGGED.items():
            if entry.summary.startswith(prefix):
                return kind
    return entry.kind


def schema_history(schemas: Sequence[tuple[int, Schema]]) -> list[dict[str, Any]]:
    """Each schema the table has had (TableState.schemas), newest first, with what changed
    from the one before, found by field id: added, dropped, renamed and widened columns."""
    out: list[dict[str, Any]] = []
    before: Schema | None = None
    for version, schema in schemas:
        now = schema.by_id()
        if before is None:
            change = "created"
        else:
            was = before.by_id()
            parts = [f"added {f.name}:{f.type}" for i, f in now.items() if i not in was]
            parts += [f"dropped {f.name}" for i, f in was.items() if i not in now]
            for i, f in now.items():
                old = was.get(i)
                if old is not None and old.name != f.name:
                    parts.append(f"renamed {old.name} to {f.name}")
                if old is not None and not old.type.equals(f.type):
                    parts.append(f"widened {f.name} to {f.type}")
            change = "; ".join(parts) or "restored"
        out.append({"version": version, "change": change,
                    "columns": ", ".join(f"{f.name}:{f.type}" for f in schema.fields)})
        before = schema
    return out[::-1]


def merge_rule(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The table's merge rule (``merge``; ``none`` keeps every record) and, for
    ``aggregate``, each value field's function (``merge.functions``; fields not named take
    ``last``)."""
    rule = str(properties.get("merge") or "none")
    functions: dict[str, str] = {}
    if rule == "aggregate":
        try:
            parsed = json.loads(str(properties.get("merge.functions") or "{}"))
        except ValueError:
            parsed = {}
        if isinstance(parsed, dict):
            functions = {str(k): str(v) for k, v in parsed.items()}
    return {"rule": rule, "functions": functions}


def range_text(r: Range) -> str:
    """A delete's range for people: ``key 'a'`` for one row key, a per-field region as its
    fields' ranges, else its interval."""
    if r.per_field is not None:
        return repr(r.per_field)

    def end(key: tuple[Any, ...] | None) -> str:
        return "" if key is None else repr(key[0]) if len(key) == 1 else repr(key)

    if r.start is not None and r.start == r.end and r.start_inclusive and r.end_inclusive:
        return f"key {end(r.start)}"
    return (f"{'[' if r.start_inclusive else '('}{end(r.start)}, "
            f"{end(r.end)}{']' if r.end_inclusive else ')'}")


def deletion_text(ranges: Sequence[Range] | None, flt: Mapping[str, Any] | None) -> str:
    """What a delete covers: its keys and ranges (the first few), and its filter."""
    parts = []
    if ranges is not None:
        shown = ", ".join(range_text(r) for r in ranges[:SHOWN_RANGES])
        more = len(ranges) - SHOWN_RANGES
        parts.append(shown + (f" and {more} more" if more > 0 else ""))
    if flt is not None:
        try:
            parts.append(f"where {from_wire(dict(flt))}")
        except SedimentError:
            parts.append("where (a filter this version cannot show)")
    return "; ".join(parts) or "every record"


def pending_deletes(state: TableState) -> list[dict[str, Any]]:
    """The deletes compaction has not settled everywhere yet, newest first: the version that
    made each, what it covers and how many leaves may still hold its records."""
    return [{"version": d.version, "deletes": _text(d), "leaves": len(d.pending)}
            for d in reversed(state.deletions)]


def _text(d: Deletion) -> str:
    return deletion_text(d.ranges, d.filter)


def delete_detail(transaction: Any) -> str | None:
    """What a logged delete covers (None for another kind of commit)."""
    if isinstance(transaction, DeleteRecords):
        return deletion_text(transaction.ranges, transaction.filter)
    return None
