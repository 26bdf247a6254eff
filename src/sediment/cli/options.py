"""Options every command shares, and what they resolve to.

Declared once so their names, help and fallbacks cannot drift between commands:

* ``StoreOption`` / ``JsonOption`` / ``TableArg`` / ``VersionOption`` are ``--store``,
  ``--json``, the TABLE argument and ``--version``;
* :func:`open_store` turns ``--store`` (after or before the command, else ``SEDIMENT_STORE``)
  into a :class:`~sediment.Store` with one clear error when no store was given or the store does
  not exist (a typo must not silently create a new store); :func:`open_table` and
  :func:`resolve_version_option` do the same for a table and a version;
* :func:`parse_assignments` reads ``NAME=VALUE`` arguments, :func:`read_token` a service's
  bearer token from ``--token-file`` / ``--token-env``.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sediment.cli.errors import CliError

if TYPE_CHECKING:
    from sediment.store import Store
    from sediment.table import Table
    from sediment.tokens import Tokens

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

YesOption = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask for confirmation."),
]
"""The ``--yes`` of every command that deletes (see terminal.confirm_or_refuse)."""

TableArg = Annotated[str, typer.Argument(metavar="TABLE", help="Table name.")]

VersionOption = Annotated[
    str | None,
    typer.Option("--version", metavar="VERSION|TAG",
                 help="Read this version: a version number or a tag name (default: latest)."),
]
"""The ``--version`` option of every command that reads a version: a number or a tag."""


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


TOKENS_FILE_FORMAT = ('Scoped tokens, one JSON object a line: {"name", "sha256" (the '
                      'token\'s SHA-256 in hex, never the token), "tables" (name patterns '
                      'such as "logs_*"), "right" (read, write or admin)}. ')
"""The start of the help of ``--tokens-file`` (``serve``, ``dashboard``): the file's format;
each command says what the rights mean to it."""


def read_tokens(tokens_file: Path | None) -> Tokens | None:
    """A service's scoped tokens from ``--tokens-file`` (None when not given);
    TokensFileError, one ``error:`` line, naming the file and the line at fault."""
    if tokens_file is None:
        return None
    from sediment.tokens import Tokens

    return Tokens.read(tokens_file)


def check_port_free(host: str, port: int, *, what: str) -> None:
    """Refuse (one ``error:`` line) a ``host:port`` another process listens on, before a
    server (``sediment serve``, ``sediment dashboard``) announces itself or starts: gRPC and
    uvicorn would report it in their own words (a raw C++ log line, or after a "serving"
    line), where a user needs one line naming the port. Port 0 (any free port) is always
    free. A probe, not a reservation: a process that binds the port in between still makes
    the server fail, in its own words."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        probe = socket.socket(family, socket.SOCK_STREAM)
        try:
            # as servers bind: a port in TIME_WAIT is free, one with a listener is not
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
        finally:
            probe.close()
    except OSError as e:
        hint = (" (another process listens there: choose another --port)"
                if e.errno == errno.EADDRINUSE else "")
        raise CliError(f"cannot {what} on {host}:{port}: {e.strerror or e}{hint}") from None
