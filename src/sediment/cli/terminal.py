"""What depends on whether a person is at a terminal: consoles, progress bars, questions.

Output laid out for the terminal (or ``PIPE_WIDTH`` wide in a pipe), progress bars only for a
person watching stderr, confirmation prompts only where someone can answer; kept apart from the
output helpers so the tests can stand in for the terminal in one place.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from sediment.cli.errors import CliError


def stdout_console() -> Console:
    """A rich console on the *current* ``sys.stdout``.

    Made per call rather than once at import so output follows stream swaps (CliRunner, pytest
    capture) and terminal-width changes. Piped output (no terminal) is laid out at least
    ``PIPE_WIDTH`` wide, whatever ``COLUMNS`` says (a shell or a test runner may export 80):
    a URI or an id split across lines breaks whatever reads the pipe.
    """
    width = None
    if not _is_terminal(sys.stdout):
        try:
            columns = int(os.environ.get("COLUMNS", "0"))
        except ValueError:
            columns = 0
        width = max(PIPE_WIDTH, columns)
    return Console(highlight=False, soft_wrap=False, width=width)


PIPE_WIDTH = 240
"""Columns of output written to a pipe or a file."""


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or file-less stream
        return False


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




SIGTERM_EXIT = 128 + signal.SIGTERM
"""The exit code of a command SIGTERM stopped (what a shell reports for it)."""


@contextlib.contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM (unless ignored) stops the command as Ctrl-C does: an
    exception in the main thread, so the work's own clean-up runs (a dump marks its lock
    stopped) before the process exits with :data:`SIGTERM_EXIT`, instead of dying at once."""
    def handler(signum: int, frame: object) -> None:
        raise SystemExit(SIGTERM_EXIT)

    before = signal.getsignal(signal.SIGTERM)
    if before is signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def stop_on_signals(message: str) -> threading.Event:
    """An event set by SIGTERM or SIGINT (unless ignored), telling ``message`` on stderr: a
    loop (a daemon, a follower) stops starting work and finishes what it is doing; the same
    signal again aborts at once."""
    stop = threading.Event()

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        typer.echo(message, err=True)

    for sig in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, handler)
    return stop
