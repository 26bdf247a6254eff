"""How ``sediment`` commands print data: JSON for scripts, rich tables for people.

:func:`emit` prints either plain ``json.dumps`` output (``--json``: no rich markup, no colour,
no wrapping) or a rich rendering for people; :func:`make_table` and :func:`key_value_table` are
the house style of those renderings, :func:`cell` keeps user data from being read as markup.
Options and store resolution are in :mod:`sediment.cli.options`, errors in
:mod:`sediment.cli.errors`, terminal-only behaviour (progress bars, prompts) in
:mod:`sediment.cli.terminal`, rounding for people in :mod:`sediment.cli.humanize`.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.box import SIMPLE_HEAD
from rich.console import RenderableType
from rich.table import Table as RichTable
from rich.text import Text

from sediment.cli.terminal import stdout_console
from sediment.core.units import iso_time  # one time format: the dashboard's too

TIME_KEYS = frozenset({"time", "created", "updated", "expires", "submitted", "started",
                       "finished", "heartbeat", "dropped"})
"""Fields that hold a moment as epoch seconds wherever they appear in a command's data (the
library's values); ``--json`` prints them as :func:`iso_time` strings, as ``history`` does."""


def iso_times(data: Any) -> Any:
    """``data`` with every number under a :data:`TIME_KEYS` field, at any depth, given as an
    ISO 8601 UTC string: one time format across every command's ``--json``, readable and
    unambiguous across machines' time zones, where the library keeps epoch seconds."""
    if isinstance(data, dict):
        return {k: iso_time(v) if k in TIME_KEYS and isinstance(v, int | float)
                and not isinstance(v, bool) else iso_times(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [iso_times(v) for v in data]
    return data


def json_default(obj: Any) -> Any:
    """JSON for the few non-JSON types commands may hand to :func:`emit`."""
    if isinstance(obj, bytes):
        try:
            return obj.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(obj).decode()}
    if isinstance(obj, dt.datetime) and obj.utcoffset() == dt.timedelta(0):
        # a UTC moment as every other time of --json (iso_time: milliseconds, Z), its
        # microseconds kept when it has them
        spec = "milliseconds" if obj.microsecond % 1000 == 0 else "microseconds"
        return obj.isoformat(timespec=spec).removesuffix("+00:00") + "Z"
    if isinstance(obj, dt.datetime | dt.date):
        return obj.isoformat()
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=str)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "_asdict"):
        return obj._asdict()
    return str(obj)


def to_json(data: Any) -> str:
    """The exact text ``--json`` prints (indented, keys in insertion order, times in ISO 8601
    UTC)."""
    return json.dumps(iso_times(data), indent=2, default=json_default)


T = TypeVar("T")
Render = Callable[[T], RenderableType | list[RenderableType] | None]


def emit(data: T, json_flag: bool, render: Render[T]) -> None:
    """Print ``data`` as JSON (``--json``) or through ``render`` for a terminal.

    JSON goes through ``typer.echo`` untouched by rich so pipes get exactly ``json.dumps``.
    ``render`` may print by itself (returning None) or return a renderable (a string, a rich
    Table...) or a list of them, printed in order.
    """
    if json_flag:
        typer.echo(to_json(data))
        return
    out = render(data)
    if out is None:
        return
    console = stdout_console()
    items = out if isinstance(out, list) else [out]
    for item in items:
        console.print(Text(item) if isinstance(item, str) else item)


def cell(value: Any) -> Text:
    """A table cell that never interprets rich markup in user data (``[`` in a path...)."""
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if value is None:
        return Text("")
    return Text(str(value))


def make_table(columns: Iterable[str], rows: Iterable[Iterable[Any]], *,
               title: str | None = None, numeric: Iterable[str] = (),
               no_wrap: Iterable[str] = (), compact: bool = False) -> RichTable:
    """A rich table in Sediment's house style.

    ``numeric`` columns are right-aligned; ``no_wrap`` columns (times, ids) are kept on one line
    so they stay copyable, and the other columns fold instead. ``compact``: no vertical rules,
    for wide rows of numbers (maintenance reports) in an 80-column terminal.
    """
    numeric_set, no_wrap_set = set(numeric), set(no_wrap)
    table = RichTable(title=title, title_justify="left", header_style="bold")
    if compact:
        table.box, table.pad_edge = SIMPLE_HEAD, False
    for col in columns:
        table.add_column(col, justify="right" if col in numeric_set else "left",
                         overflow="fold", no_wrap=col in no_wrap_set)
    for row in rows:
        table.add_row(*(cell(v) for v in row))
    return table


def key_value_table(pairs: Iterable[tuple[str, Any]], *, title: str | None = None) -> RichTable:
    """A two-column table of labelled values (counts, settings)."""
    table = RichTable(title=title, title_justify="left", show_header=False, box=None,
                      padding=(0, 2, 0, 0))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for k, v in pairs:
        table.add_row(cell(k), cell(v))
    return table


