"""CLI command du: where a store's or a table's bytes go (``Store.usage``, ``Table.usage``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sediment.cli.humanize import human_bytes
from sediment.cli.options import JsonOption, StoreOption, open_store
from sediment.cli.output import emit, make_table

if TYPE_CHECKING:
    from rich.table import Table as RichTable

    from sediment.maintenance.usage import Usage

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""

COLUMNS = ["live", "sidecars", "unreferenced", "orphaned", "metadata", "status", "total"]


@commands.command()
def du(table: Annotated[str | None, typer.Option(
           "--table", "-t", help="One table (default: every table, and the store's own "
                                 "objects).")] = None,
       store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Where the bytes go: per table, the live data files and their sidecars (samples and
    key filters), unreferenced and orphaned files by the reason garbage collection keeps them
    (tag, pin, retention, gc_delay, clock_skew; lease, orphan_timeout; or due: the next GC
    deletes them), metadata (log, snapshots, tags, leases) and job events; for the store, also
    its catalogs and the folders of dropped tables."""
    s = open_store(store)
    if table is not None:
        u = s.table(table).usage()
        emit({"table": table, **u.to_json()}, json_out,
             lambda _: [_table({table: u}), _reasons({table: u})])
        return
    su = s.usage()
    emit(su.to_json(), json_out, lambda _: [
        _table({**su.tables, "(all tables)": su.total}),
        _reasons(su.tables),
        f"store: catalogs {human_bytes(su.catalog)}, unnamed folders "
        f"{human_bytes(su.unnamed)}; {human_bytes(su.bytes)} in all"])


def _row(u: Usage) -> list[Any]:
    return [human_bytes(v) for v in (u.live, u.sidecars, sum(u.unreferenced.values()),
                                      sum(u.orphaned.values()), u.metadata, u.status,
                                      u.total)]


def _table(rows: Mapping[str, Usage]) -> RichTable:
    return make_table(["table", *COLUMNS], [[n, *_row(u)] for n, u in rows.items()],
                      numeric=COLUMNS, no_wrap=["table"], compact=True)


def _reasons(rows: Mapping[str, Usage]) -> str:
    """One line per table holding unreferenced or orphaned bytes: by reason."""
    lines = []
    for n, u in rows.items():
        parts = [f"unreferenced {r} {human_bytes(b)}" for r, b in u.unreferenced.items()] + \
            [f"orphaned {r} {human_bytes(b)}" for r, b in u.orphaned.items()]
        if parts:
            lines.append(f"{n}: " + ", ".join(parts))
    return "\n".join(lines)
