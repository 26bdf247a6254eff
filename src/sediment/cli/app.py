"""The ``sediment`` command: store and table administration from a shell.

One typer ``app`` holds every command. This module holds the app itself, its error handling
and the root options; each group of commands (store and table administration in
:mod:`sediment.cli.admin`, then data, maintenance, versions, spark, batcher...) is a module with
its own ``commands`` app (``alter`` and the batcher: a sub-app) that :func:`_register` adds
here explicitly. Shared options are in :mod:`sediment.cli.options` and output helpers in
:mod:`sediment.cli.output`: take
``store: StoreOption = None`` and, for commands that print data, ``json_out: JsonOption = False``,
then ``open_store(store)`` / ``emit(data, json_out, render)``.

Errors: any :class:`~sediment.errors.SedimentError` or :class:`~sediment.cli.errors.CliError`
escaping a command, and any I/O error (``OSError``, botocore errors, pyarrow errors reading a
bad input file), is printed as one line ``error: <message>`` on stderr with exit code 1 by
:class:`SedimentGroup`, so command bodies never need their own try/except for that. Anything
else is a bug: also one ``error: internal error ...`` line, unless ``SEDIMENT_DEBUG=1`` asks
for the traceback.

Help texts are plain text (``rich_markup_mode=None``): examples such as ``[a,m)`` print as
written instead of being read as rich markup.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

if TYPE_CHECKING:  # the click that typer vendors; typer.Context is a subclass of its Context
    from typer._click.core import Context as ClickContext

from sediment.cli.errors import CliError, error_message, is_io_error, report_error
from sediment.cli.options import ROOT_STORE
from sediment.errors import SedimentError


class SedimentGroup(TyperGroup):
    """The root command group: turns expected errors into ``error: ...`` and exit code 1.

    Catching here, around every subcommand, means commands added in other modules get the same
    behaviour without a decorator, and a SedimentError never shows a traceback.
    """

    def invoke(self, ctx: ClickContext) -> Any:
        try:
            return super().invoke(ctx)
        except (TyperException, typer.Exit, typer.Abort):
            raise  # usage errors, --help, exits: typer reports them
        except BrokenPipeError:
            reader_went_away()
        except (SedimentError, CliError) as exc:
            report_error(exc)
            raise typer.Exit(1) from None
        except Exception as exc:
            if is_io_error(exc):
                report_error(exc)
                raise typer.Exit(1) from None
            if os.environ.get(DEBUG_ENV, "").strip() not in ("", "0"):
                raise
            typer.echo(f"error: internal error: {type(exc).__name__}: {error_message(exc)} "
                       f"(set {DEBUG_ENV}=1 for the traceback)", err=True)
            raise typer.Exit(1) from None


SIGPIPE_EXIT = 128 + 13
"""The exit code of a command whose reader closed the pipe (``sediment query ... | head``):
what a shell reports for a process SIGPIPE ended, as ``cat`` and ``grep`` do."""


def reader_went_away() -> NoReturn:
    """Exit quietly with :data:`SIGPIPE_EXIT`: stdout's reader is gone, so nothing more can be
    said there and nothing went wrong to say on stderr. Stdout is pointed at ``/dev/null``
    first, so the interpreter's last flush of what is buffered does not fail again."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(SIGPIPE_EXIT)


DEBUG_ENV = "SEDIMENT_DEBUG"
"""Set to 1 to let unexpected exceptions (bugs) show their traceback."""


app = typer.Typer(
    name="sediment",
    cls=SedimentGroup,
    help="Sediment: an LSM table store of sorted Parquet files on object storage.\n\n"
    "Every command takes --store URI, before the command (sediment --store URI COMMAND) or "
    "after it (after wins), or the SEDIMENT_STORE environment variable. Every read command "
    "takes --json. Failures print one line, error: MESSAGE, and exit with code 1.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)


def _version_callback(value: bool) -> None:
    if value:
        from sediment import __version__

        typer.echo(f"sediment {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback,
                                          is_eager=True, help="Print the version.")] = False,
    store: Annotated[str | None, typer.Option(
        "--store", metavar="URI",
        help="Store root for the command that follows (its own --store wins).")] = None,
    trust_iterator_module: Annotated[list[str] | None, typer.Option(
        "--trust-iterator-module", metavar="PREFIX",
        help="Load python iterators ({\"type\": \"python\", \"class\": \"module:Name\"}) "
             "from modules under PREFIX (a module path; repeatable), in this command and "
             "the processes it starts (maintainer workers, a local Spark); added to "
             "$SEDIMENT_TRUSTED_ITERATOR_MODULES (comma separated).")] = None,
) -> None:
    """Sediment: an LSM table store of sorted Parquet files on object storage.

    Every command takes --store URI, here before the command or after it (after wins), or
    the SEDIMENT_STORE environment variable. Every read command takes --json.
    """
    ROOT_STORE.set(store)
    if trust_iterator_module:
        from sediment.iterators.trust import trust_iterator_modules

        trust_iterator_modules(trust_iterator_module)


# ---- the command groups -------------------------------------------------------------------------
def _register() -> None:
    """Add the command groups' commands to ``app``: each module holds its own ``commands``
    (and the batcher its sub-app), so nothing registers by being imported."""
    from sediment.cli import (
        admin,
        alter,
        batcher,
        changes,
        dashboard,
        data,
        doctor,
        maintenance,
        migrate,
        records,
        reports,
        schemes,
        serve,
        spark,
        usage,
        verify,
        versions,
    )

    for module in (admin, data, records, changes, maintenance, reports, versions, verify,
                   doctor, spark, migrate, serve, dashboard, schemes, usage):
        app.registered_commands.extend(module.commands.registered_commands)
    app.add_typer(alter.alter_app, name="alter")
    app.add_typer(batcher.batcher_app, name="batcher")


_register()


ROOT_OPTIONS_WITH_VALUES = ("--store", "--trust-iterator-module")
"""The root options that take a value (the word after them is no command name)."""


def invoked(argv: list[str]) -> str | None:
    """The name of the command (or group) ``argv`` invokes, None for root options alone."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in ROOT_OPTIONS_WITH_VALUES:
            i += 2
        elif word.startswith("-"):
            i += 1
        else:
            return word
    return None


def narrowed(name: str | None) -> typer.Typer:
    """``app`` with only the command or group ``name`` (all of them when it names none): a
    process runs one command, and typer assembles every command it holds before it runs
    one, some 0.12 s of CPU for the 46 here, a tenth of a short command's whole run. A name
    ``app`` does not hold gets the whole app, whose error names the commands there are."""
    from typer.main import get_command_name

    if name is None:
        return app
    commands = [c for c in app.registered_commands
                if (c.name or get_command_name(c.callback.__name__ if c.callback else "")) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    one = copy.copy(app)
    one.registered_commands = commands
    one.registered_groups = groups
    return one


def main() -> None:
    """Entry point of the ``sediment`` console script."""
    try:
        narrowed(invoked(sys.argv[1:]))(prog_name="sediment")
    except SystemExit as done:
        try:
            sys.stdout.flush()  # what is left in the buffer, while a closed pipe can be told
        except BrokenPipeError:
            reader_went_away()
        raise done from None
