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
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.box import SIMPLE_HEAD
from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table as RichTable
from rich.text import Text

from sediment.core.units import human_seconds

if TYPE_CHECKING:
    from sediment.store import Store
    from sediment.table import Table

STORE_ENV = "SEDIMENT_STORE"
"""Environment variable naming the store when ``--store`` is not given."""

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URI",
        help="Store root: a path, file://..., s3://bucket/prefix (S3 settings come from the "
        "usual AWS_* environment variables). Also accepted before the command "
        "(`sediment --store URI COMMAND`); given in both places, this one wins; given in "
        f"neither, ${STORE_ENV}.",
    ),
]
"""The ``--store`` option every command takes; falls back to the root ``--store`` (before the
command), then ``$SEDIMENT_STORE`` (see :func:`effective_store`)."""

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
    capture) and terminal-width changes. Piped output (no terminal, no ``COLUMNS``) is laid
    out ``PIPE_WIDTH`` wide: rich's default of 80 columns split URIs and ids across lines.
    """
    width = None
    if "COLUMNS" not in os.environ and not _is_terminal(sys.stdout):
        width = PIPE_WIDTH
    return Console(highlight=False, soft_wrap=False, width=width)


PIPE_WIDTH = 240
"""Columns of output written to a pipe or a file."""


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or file-less stream
        return False


def report_error(exc: BaseException) -> None:
    """Print ``error: <message>`` on stderr, on one line, no traceback and no rich markup.

    Plain ``typer.echo`` because messages quote user input (paths, values) that may contain
    ``[`` and must not be read as rich markup.
    """
    typer.echo(f"error: {error_message(exc)}", err=True)


def one_line(text: str) -> str:
    """A possibly multi-line message (a Spark or Java error with its stack) as one line: the
    text before any traceback plus the traceback's last line (the exception itself)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    for i, ln in enumerate(lines):
        if ln.startswith(("Traceback (most recent call last)", "at ")) and i > 0:
            tail = next((x for x in reversed(lines[i:]) if not x.startswith(("at ", "File "))),
                        "")
            head = " ".join(lines[:i]).rstrip(":")
            return f"{head}: {tail}" if tail and tail != lines[i] else head
    return " ".join(lines)


def error_message(exc: BaseException) -> str:
    """The one-line text after ``error:`` for an exception a command let escape."""
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else None
        text = f"{exc.strerror}: {where}" if where is not None else exc.strerror
        if exc.filename2 is not None:
            text += f" -> {exc.filename2}"
        return one_line(text)
    message = one_line(str(exc)) or type(exc).__name__
    if is_io_error(exc) and not isinstance(exc, OSError):
        kind = type(exc).__name__
        if kind not in message:
            message = f"{kind}: {message}"
    return message


def is_io_error(exc: BaseException) -> bool:
    """An error of the environment or the input rather than of Sediment: I/O and permission
    errors, storage service errors (botocore), unreadable input files (pyarrow)."""
    if isinstance(exc, OSError):
        return True
    mod = type(exc).__module__ or ""
    if mod.startswith(("botocore", "boto3", "s3transfer")):
        return True
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        return False
    return isinstance(exc, pa.ArrowException)


# ---- numbers for people (human_seconds: sediment.core.units) -------------------------------
def human_bytes(n: float | None) -> str:
    """A size in B, KiB, MiB, GiB or TiB (one decimal past bytes)."""
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)  # pragma: no cover


def human_number(value: Any) -> Any:
    """Counts with thousands separators, other floats to three significant digits."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def human_value(key: str, value: Any) -> Any:
    """A result field for people, by its name: seconds, bytes, rates and counts rounded."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if key == "seconds" or key.endswith("_seconds"):
        return human_seconds(float(value))
    if key in ("bytes", "size") or key.endswith("_bytes"):
        return human_bytes(value)
    if key.endswith("per_second"):
        return f"{human_number(float(value))}/s"
    if key in ("version", "job_id") or key.endswith("_version"):
        return value
    return human_number(value)


def human_items(data: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``data``'s items with :func:`human_value` applied (for key/value tables)."""
    return [(k, human_value(k, v)) for k, v in data.items()]


# ---- store and table resolution -------------------------------------------------------------
ROOT_STORE: ContextVar[str | None] = ContextVar("sediment_root_store", default=None)
"""The ``--store`` given before the command (``sediment --store URI COMMAND``), set by the root
callback on every invocation."""


def effective_store(store: str | None) -> str | None:
    """The store a command runs on: its own ``--store``, else the ``--store`` given before the
    command (``sediment --store URI COMMAND``), else ``$SEDIMENT_STORE``, else None."""
    if store is not None and store.strip():
        return store
    before = ROOT_STORE.get()
    if before is not None and before.strip():
        return before
    env = os.environ.get(STORE_ENV)
    return env if env and env.strip() else None


def resolve_store_uri(store: str | None) -> str:
    """The store URI from ``--store`` (after or before the command) or ``$SEDIMENT_STORE``."""
    store = effective_store(store)
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
    """Open the store named by ``--store``/``$SEDIMENT_STORE`` (reading only).

    Only ``sediment init`` passes ``create=True``: every other command fails with one
    ``error:`` line saying to run ``sediment init`` when there is no store there, so a
    mistyped ``--store`` never produces a fresh empty store.
    """
    from sediment.errors import StoreNotFoundError
    from sediment.store import Store

    uri = resolve_store_uri(store)
    try:
        return Store.open(uri, create=create, properties=properties)
    except StoreNotFoundError:
        raise CliError(f"no Sediment store at {uri!r}: create one with "
                       f"`sediment init --store {uri}`") from None


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


def show_progress(json_out: bool) -> bool:
    """Progress bars only for a person at a terminal: never with --json, never when stderr
    (where bars go) is a file or a pipe."""
    if json_out:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _CountColumn(ProgressColumn):
    """``3/12 jobs`` once the total is known, ``3 jobs`` before (never ``0/None``)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        done = int(task.completed)
        if task.total is None:
            return Text(f"{done:,} {self.unit}")
        return Text(f"{done:,}/{int(task.total):,} {self.unit}")


def progress_bar(json_out: bool, unit: str) -> Progress:
    """A rich progress bar on stderr (``with progress_bar(...) as bar: bar.add_task(...)``):
    description, bar, ``done/total unit``, elapsed time; disabled when
    :func:`show_progress` says no, and gone from the screen once finished."""
    return Progress(TextColumn("{task.description}"), BarColumn(), _CountColumn(unit),
                    TimeElapsedColumn(), console=Console(stderr=True),
                    disable=not show_progress(json_out), transient=True)


def is_interactive() -> bool:
    """Can we ask the user a question? (Confirmation prompts only make sense on a terminal.)"""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (OSError, ValueError):
        return False


def confirm_or_refuse(yes: bool, what: str, question: str) -> None:
    """Ask ``question`` unless ``--yes`` was given; off a terminal (nobody to answer) refuse
    with an error naming ``what`` would have been done ("drop table 'x'")."""
    if yes:
        return
    if not is_interactive():
        raise CliError(f"refusing to {what} without --yes "
                       "(not running on a terminal, so cannot ask)")
    typer.confirm(question, abort=True)


TableArg = Annotated[str, typer.Argument(metavar="TABLE", help="Table name.")]

VersionOption = Annotated[
    str | None,
    typer.Option("--version", metavar="VERSION|TAG",
                 help="Read this version: a version number or a tag name (default: latest)."),
]
"""The ``--version`` option of every command that reads a version: a number or a tag."""


def resolve_version_option(table: Table, version: str | None) -> int | None:
    """``--version`` as a version number: digits are the number, anything else a tag of
    ``table`` (an unknown tag is the library's error naming it); None is the latest."""
    if version is None:
        return None
    text = version.strip()
    if not text:
        raise CliError("--version needs a version number or a tag name")
    return table.resolve_version(text)


def read_token(token_file: Path | None, env: str, *, env_option: str | None = None
               ) -> str | None:
    """A service's bearer token (``sediment serve``, ``sediment dashboard``): from
    ``--token-file``, else from the variable ``env_option`` names (``--token-env``; it must be
    set), else from ``env``; None when none is set. An empty token is an error: it would let
    anyone in."""
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise CliError(f"cannot read --token-file {str(token_file)!r}: "
                           f"{e.strerror or e}") from None
        if not token:
            raise CliError(f"--token-file {str(token_file)!r} is empty")
        return token
    name = env_option or env
    value = os.environ.get(name)
    if value is None:
        if env_option is not None:
            raise CliError(f"--token-env {env_option}: the variable is not set")
        return None
    if not value.strip():
        raise CliError(f"${name} is empty: set a token or unset it")
    return value.strip()
