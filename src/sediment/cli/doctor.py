"""CLI command ``sediment doctor``: a store's health at a glance (see
:mod:`sediment.doctor`); exit status 1 when something needs attention."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import RenderableType

from sediment.cli.options import JsonOption, StoreOption, open_store
from sediment.cli.output import emit, make_table

if TYPE_CHECKING:
    from sediment.doctor import DoctorReport

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""


@commands.command()
def doctor(store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Check a store's health: log gaps, unreadable tags, snapshots or log entries, stale
    pending-file leases, orphans and garbage past their time, leaves over their files bound,
    maintainers that stopped beating, compaction jobs whose runner stopped, stuck dumps and
    batcher jobs. Reads no data
    file (`sediment verify` does). Each finding says what to do; exits with status 1 when
    anything needs attention (after printing)."""
    from sediment.doctor import examine
    from sediment.handle import handle_of

    st = open_store(store)
    report = examine(st.uri, st.tables(), lambda name: handle_of(st.table(name)),
                     root=st.objects.root())
    emit(report.to_json() if json_out else report, json_out, lambda _: _render(report))
    if not report.ok:
        raise typer.Exit(1)


def _render(report: DoctorReport) -> list[RenderableType]:
    n = len(report.tables)
    out: list[RenderableType] = [f"store {report.store}: {n} table{'s' * (n != 1)} checked"]
    if report.findings:
        rows = [[f.table or "-", f.check, "yes" if f.attention else "no", f.problem, f.action]
                for f in report.findings]
        out.append(make_table(["table", "check", "attention", "problem", "what to do"], rows))
    out.append("ok: nothing needs attention" if report.ok else
               f"needs attention: {sum(f.attention for f in report.findings)} finding(s)")
    return out
