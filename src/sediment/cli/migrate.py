"""CLI commands that migrate a store's layout: migrate-sidecars."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import RenderableType

from sediment.cli.options import JsonOption, StoreOption, open_store
from sediment.cli.output import emit, make_table
from sediment.cli.terminal import progress_bar

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""

OptionalTableArg = Annotated[str | None, typer.Argument(
    metavar="[TABLE]", help="One table (default: every table).")]


@commands.command("migrate-sidecars")
def migrate_sidecars_cmd(
    table: OptionalTableArg = None,
    store: StoreOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count the sidecars that "
                                          "would be renamed; write nothing.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Rename data-file sidecars (samples, key filters) written under their legacy names
    (``<file>.sample.parquet``, ``<file>.keys``) to the current ones (``_<file>.sample``,
    ``_<file>.keys``), which a ``*.parquet`` glob over data files does not pick up.

    Copies each, then deletes the old name; safe to rerun and to run while the store is in
    use (readers find either name; GC treats both as the data file's). Reads never migrate.
    """
    from sediment.files.sidecars import migrate_sidecars

    st = open_store(store)
    names = [table] if table else st.tables()
    tables = [st.table(n) for n in names]  # every name checked before anything is written
    rows: list[dict[str, Any]] = []
    with progress_bar(json_out, "sidecars") as bar:
        for t in tables:
            task = bar.add_task(f"{'checking' if dry_run else 'migrating'} {t.name}",
                                total=None)

            def progress(done: int, total: int, task: Any = task) -> None:
                bar.update(task, completed=done, total=total)

            r = migrate_sidecars(t._handle.objects, dry_run=dry_run, progress=progress)
            bar.remove_task(task)
            rows.append({"table": t.name, "legacy_sidecars": r.legacy,
                         ("to_rename" if dry_run else "renamed"): r.renamed,
                         ("to_remove" if dry_run else "removed"): r.removed,
                         "bytes": r.bytes, "dry_run": dry_run})

    def render(data: list[dict[str, Any]]) -> list[RenderableType]:
        cols = [c for c in data[0] if c != "dry_run"] if data else ["table"]
        out: list[RenderableType] = [make_table([c.replace("_", " ") for c in cols],
                                                [[row[c] for c in cols] for row in data])]
        total = sum(row["legacy_sidecars"] for row in data)
        verb = "would be renamed" if dry_run else "renamed"
        out.append(f"{total} legacy sidecar(s) in {len(data)} table(s) {verb}"
                   if total else "no legacy sidecars: nothing to do")
        return out

    emit(rows, json_out, render)
