"""The CLI's own error and how any error a command lets escape is reported.

Separate from the output helpers because the root group (:mod:`sediment.cli.app`) needs only
this: :class:`CliError` for mistakes in the command line itself, and :func:`report_error` /
:func:`error_message` / :func:`is_io_error` to turn an exception into one ``error: <message>``
line on stderr (exit code 1), the same for a :class:`~sediment.errors.SedimentError`.
"""

from __future__ import annotations

import typer


class CliError(Exception):
    """A mistake in the command line (missing option, malformed NAME=VALUE, ...).

    Kept separate from SedimentError because the library never raises it, but reported the same
    way so scripts see one error format and one exit code.
    """


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

