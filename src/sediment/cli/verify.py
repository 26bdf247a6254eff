"""CLI command verify: every object a table's versions need, read and checked against its
checksum (``Table.verify``); exit status 1 when anything is damaged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import RenderableType

from sediment.cli.humanize import human_bytes
from sediment.cli.options import JsonOption, StoreOption, TableArg, open_table
from sediment.cli.output import emit, make_table
from sediment.cli.terminal import progress_bar
from sediment.core.units import human_seconds

if TYPE_CHECKING:
    from sediment.maintenance.verify import VerifyReport

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""


@commands.command()
def verify(name: TableArg,
           version: Annotated[str | None, typer.Option(
               "--version", metavar="VERSION|TAG",
               help="Check the data files of this version only (default: the head and every "
                    "tag's and live pin's version). Metadata is checked whole.")] = None,
           deep: Annotated[bool, typer.Option(
               "--deep", help="Also decode every row group of every data file, verifying "
                              "page CRCs (reads and decodes all the data).")] = False,
           store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Check every object a table's versions need against its checksum: store file, catalog
    entry, tags, log entries, snapshots and their objects, and each data file once (size,
    footer and whole-file CRC-32, sample, key filter). Lists what is damaged or missing and
    the versions and tags it breaks, and exits with status 1 when anything is (after
    printing). Objects written before checksums are counted unchecked, not damaged."""
    t = open_table(store, name)
    with progress_bar(json_out, "files") as bar:
        task = bar.add_task(f"verifying {name}", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = t.verify(version, deep, progress=progress)
    emit(report.to_json() if json_out else report, json_out, lambda _: _render(report))
    if not report.ok:
        raise typer.Exit(1)


def spans_text(versions: Sequence[range]) -> str:
    """``(range(2, 5), range(7, 8))`` -> ``2-4, 7``."""
    return ", ".join(str(r.start) if len(r) == 1 else f"{r.start}-{r.stop - 1}"
                     for r in versions)


def _counted(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n:,} {_plural(kind, n)}" for kind, n in counts.items())


def _plural(kind: str, n: int) -> str:
    if n == 1:
        return kind
    return kind[:-1] + "ies" if kind.endswith("y") else kind + "s"


def _render(report: VerifyReport) -> list[RenderableType]:
    mode = " (deep)" if report.deep else ""
    versions = ", ".join(map(str, report.versions)) or "none"
    out: list[RenderableType] = [
        f"table {report.table}: versions {versions} verified{mode} in "
        f"{human_seconds(report.seconds)}, {human_bytes(report.bytes)} read",
        f"checked: {_counted(report.checked) or 'nothing'}"]
    if report.unchecked:
        out.append(f"unchecked (written before checksums): {_counted(report.unchecked)}")
    if report.ok:
        out.append("ok: nothing damaged")
        return out
    rows: list[list[Any]] = [[d.kind, d.key, d.problem, spans_text(d.versions) or "none",
                              ", ".join(d.tags)] for d in report.damaged]
    out.append(make_table(["kind", "object", "problem", "breaks versions", "tags"], rows,
                          no_wrap=["object"]))
    n = len(report.damaged)
    out.append(f"damaged: {n} object{'s' * (n != 1)}")
    return out
