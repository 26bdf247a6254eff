"""Shared plumbing for ``sediment`` CLI commands: store resolution, options, output, errors.

Every command module of :mod:`sediment.cli` uses these helpers so that all commands behave alike:

* ``StoreOption`` / ``JsonOption`` are the ``--store`` and ``--json`` options, declared once so
  their names, help and the ``SEDIMENT_STORE`` fallback cannot drift between commands;
* :func:`open_store` turns the option into a :class:`~sediment.Store` with one clear error when
  no store was given or the store does not exist (a typo must not silently create a new store);
* :func:`emit` prints either plain ``json.dumps`` output (for scripts: no rich markup, no
  colour, no wrapping) or a rich rendering for people;
* :class:`CliError` is for mistakes in the command line itself; it is reported exactly like a
  :class:`~sediment.errors.SedimentError` (``error: <message>`` on stderr, exit code 1).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console, RenderableType
from rich.table import Table as RichTable
from rich.text import Text

if TYPE_CHECKING:
    from sediment.store import Store
    from sediment.table import Table

STORE_ENV = "SEDIMENT_STORE"
"""Environment variable naming the store when ``--store`` is not given."""

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar=STORE_ENV,
        show_envvar=True,
        metavar="URI",
        help="Store root: a path, file://..., s3://bucket/prefix (S3 settings come from the "
        "usual AWS_* environment variables).",
    ),
]
"""The ``--store`` option every command takes; falls back to ``$SEDIMENT_STORE``."""

JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print machine-readable JSON instead of tables."),
]
"""The ``--json`` option of every command that prints data."""


class CliError(Exception):
    """A mistake in the command line (missing option, malformed NAME=VALUE, ...).

    Kept separate from SedimentError because the library never raises it, but reported the same
    way so scripts see one error format and one exit code.
    """


# ---- consoles ---------------------------------------------------------------------------------
def stdout_console() -> Console:
    """A rich console on the *current* ``sys.stdout``.

    Made per call rather than once at import so output follows stream swaps (CliRunner, pytest
    capture) and terminal-width changes.
    """
    return Console(highlight=False, soft_wrap=False)


def report_error(exc: BaseException) -> None:
    """Print ``error: <message>`` on stderr, no traceback and no rich markup.

    Plain ``typer.echo`` because messages quote user input (paths, values) that may contain
    ``[`` and must not be read as rich markup.
    """
    message = str(exc) or type(exc).__name__
    typer.echo(f"error: {message}", err=True)


# ---- store and table resolution -------------------------------------------------------------
def resolve_store_uri(store: str | None) -> str:
    """The store URI from ``--store`` (typer already applied ``$SEDIMENT_STORE``)."""
    if store is None or not store.strip():
        raise CliError(f"no store given: pass --store URI or set {STORE_ENV}")
    return store.strip()


def store_exists(uri: str) -> bool:
    """Does a Sediment store (its ``store.json``) exist at ``uri``? Never creates anything."""
    from sediment.storage import open_object_store
    from sediment.store import STORE_FILE

    return open_object_store(uri).exists(STORE_FILE)


def open_store(store: str | None, *, create: bool = False,
               properties: Mapping[str, Any] | None = None) -> Store:
    """Open the store named by ``--store``/``$SEDIMENT_STORE``.

    ``Store.open`` creates missing stores; only commands whose purpose is to create things
    (``init``, ``create-table``) pass ``create=True``, so that a mistyped ``--store`` on any
    other command fails loudly instead of producing a fresh empty store.
    """
    from sediment.store import Store

    uri = resolve_store_uri(store)
    if not create and not store_exists(uri):
        raise CliError(f"no Sediment store at {uri!r} "
                       f"(create one with `sediment init --store {uri}`)")
    return Store.open(uri, properties=properties)


def open_table(store: str | None, name: str) -> Table:
    """Open table ``name`` of the given store (TableNotFoundError names the table)."""
    return open_store(store).table(name)


# ---- parsing helpers ----------------------------------------------------------------------------
def parse_assignments(items: Iterable[str], *, what: str) -> dict[str, str]:
    """Parse ``name=value`` arguments (``what`` names the option in the error message)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise CliError(f"{what} {item!r} must be NAME=VALUE")
        out[name] = value
    return out


# ---- output ---------------------------------------------------------------------------------
def iso_time(epoch_seconds: float) -> str:
    """A commit time as an ISO 8601 UTC timestamp (unambiguous across machines' time zones)."""
    stamp = dt.datetime.fromtimestamp(epoch_seconds, tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def json_default(obj: Any) -> Any:
    """JSON for the few non-JSON types commands may hand to :func:`emit`."""
    if isinstance(obj, bytes):
        try:
            return obj.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(obj).decode()}
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
    """The exact text ``--json`` prints (indented, keys in insertion order)."""
    return json.dumps(data, indent=2, default=json_default)


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
               no_wrap: Iterable[str] = ()) -> RichTable:
    """A rich table in Sediment's house style.

    ``numeric`` columns are right-aligned; ``no_wrap`` columns (times, ids) are kept on one line
    so they stay copyable, and the other columns fold instead.
    """
    numeric_set, no_wrap_set = set(numeric), set(no_wrap)
    table = RichTable(title=title, title_justify="left", header_style="bold")
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


def is_interactive() -> bool:
    """Can we ask the user a question? (Confirmation prompts only make sense on a terminal.)"""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (OSError, ValueError):
        return False


TableArg = Annotated[str, typer.Argument(metavar="TABLE", help="Table name.")]
