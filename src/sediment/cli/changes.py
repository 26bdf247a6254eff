"""CLI command ``changes``: a table's record change feed, once or followed live.

``sediment changes TABLE --from V [--to W]`` prints the record changes committed after version
``V`` (up to ``W``, default the head), as ``Table.changes`` gives them; ``--follow`` goes on
printing each version as it is committed, until SIGTERM or Ctrl-C, after the version it is
printing. ``--json`` writes one JSON object per change row (flushed per version, so a pipe
sees each version when it lands).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sediment.cli.errors import CliError
from sediment.cli.options import JsonOption, StoreOption, TableArg, open_table
from sediment.cli.output import json_default, make_table
from sediment.cli.terminal import stdout_console, stop_on_signals

if TYPE_CHECKING:
    import pyarrow as pa

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""


def _version(table: Any, text: str, flag: str) -> int:
    text = text.strip()
    if not text:
        raise CliError(f"{flag} needs a version number or a tag name")
    v = table.resolve_version(text)
    assert v is not None
    return int(v)


@commands.command()
def changes(
    name: TableArg,
    start: Annotated[str, typer.Option(
        "--from", metavar="VERSION|TAG",
        help="The changes committed after this version (a number or a tag; 0: since the "
             "table was created).")],
    end: Annotated[str | None, typer.Option(
        "--to", metavar="VERSION|TAG",
        help="Up to and including this version (default: the head now).")] = None,
    follow: Annotated[bool, typer.Option(
        "--follow", help="After the changes so far, print each version's as it is "
                         "committed, until SIGTERM or Ctrl-C.")] = False,
    columns: Annotated[str | None, typer.Option(
        "--columns", "-c", help="Comma-separated columns (the change columns "
                                "_change_type, _commit_version, _commit_timestamp too).")]
    = None,
    where: Annotated[str | None, typer.Option(
        "--where", "-w", help="Keep change rows matching a condition (query --where's syntax; "
                              "it may name the change columns: \"_change_type = 'delete'\").")]
    = None,
    poll_seconds: Annotated[float, typer.Option(
        "--poll-seconds", min=0.01, help="With --follow: how often the log is read.")] = 1.0,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Print the record changes of a table's commits: each row is a record with its
    _change_type (insert, update_preimage, update_postimage, delete), _commit_version and
    _commit_timestamp. Examples: sediment changes events --from 12 --json;
    sediment changes events --from v1 --to v2; sediment changes events --from 40 --follow."""
    if follow and end is not None:
        raise CliError("--follow goes on past the head: give --to or --follow, not both")
    table = open_table(store, name)
    a = _version(table, start, "--from")
    b = _version(table, end, "--to") if end is not None else None
    cols = [c.strip() for c in columns.split(",")] if columns else None
    reader = table.changes(a, b, columns=cols, filter=where)
    if not follow:
        _print(reader, json_out)
        return
    head = table.version if b is None else b
    stop = stop_on_signals(f"stopping: following {name} ends after the version being printed")
    _print(table.changes(a, head, columns=cols, filter=where), json_out)
    for _, version_reader in table.follow(head, poll_seconds=poll_seconds, columns=cols,
                                          filter=where, stop=stop):
        _print(version_reader, json_out, quiet_if_empty=True)


def _print(reader: pa.RecordBatchReader, json_out: bool, *, quiet_if_empty: bool = False
           ) -> None:
    """Change rows as JSON lines (streamed) or one rich table (no table for an empty
    version while following)."""
    if json_out:
        out = sys.stdout
        for batch in reader:
            for row in batch.to_pylist():
                out.write(json.dumps(row, default=json_default) + "\n")
        out.flush()
        return
    rows: list[dict[str, Any]] = [r for b in reader for r in b.to_pylist()]
    if not rows and quiet_if_empty:
        return
    stdout_console().print(make_table(reader.schema.names, _values(rows),
                                      title=f"{len(rows):,} change row{'s' * (len(rows) != 1)}"))


def _values(rows: Iterable[dict[str, Any]]) -> list[list[Any]]:
    return [list(r.values()) for r in rows]
