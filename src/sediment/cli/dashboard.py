"""CLI command: ``sediment dashboard``, the read-only web dashboard over a store.

The command line is checked (the token, the bind address) before the store is opened and
before the web stack is imported: a refused command has touched nothing and bound nothing.
The web stack is the ``dashboard`` extra (``pip install '.[dashboard]'`` in a checkout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sediment.cli.errors import CliError
from sediment.cli.metrics_options import (
    MetricsHostOption,
    MetricsPortOption,
    check_metrics,
    start_metrics,
)
from sediment.cli.options import (
    TOKENS_FILE_FORMAT,
    StoreOption,
    check_port_free,
    open_store,
    read_token,
    read_tokens,
)
from sediment.dashboard.security import TOKEN_ENV, check_bind, host_allow_list
from sediment.errors import install_hint

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""

EXTRA_MODULES = ("starlette", "uvicorn", "jinja2", "plotly")


def missing_modules() -> list[str]:
    """The web stack's modules that cannot be imported here."""
    import importlib.util

    missing = []
    for name in EXTRA_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    return missing


@commands.command()
def dashboard(
    store: StoreOption = None,
    host: Annotated[str, typer.Option(
        "--host", help="Address to bind. Anything but loopback needs a token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to bind.")] = 8050,
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", help=f"File holding the token browsers and API clients must give "
        f"(default: ${TOKEN_ENV}).")] = None,
    tokens_file: Annotated[Path | None, typer.Option(
        "--tokens-file", metavar="FILE",
        help=TOKENS_FILE_FORMAT + "The dashboard only reads, so any right reaches it: a "
             "token sees the tables its patterns match, and gets 403 for the others (logged "
             "with its name). A --token-file token, if any, sees every table.")] = None,
    refresh: Annotated[float, typer.Option(
        "--refresh", help="Seconds between the pages' refreshes.")] = 5.0,
    allowed_host: Annotated[list[str] | None, typer.Option(
        "--allowed-host", metavar="NAME",
        help="A host name (or address) browsers reach the dashboard by, besides the bound "
             "address, localhost, 127.0.0.1 and [::1]; repeatable. Requests naming any other "
             "Host are refused (421).")] = None,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = "127.0.0.1",
) -> None:
    """Serve a read-only web dashboard of the store's tables, partitions, files and jobs
    (pages and a JSON API under /api) until interrupted."""
    token = read_token(token_file, TOKEN_ENV)
    tokens = read_tokens(tokens_file)
    check_bind(host, token or tokens)  # DashboardSecurityError: one error line, nothing bound
    host_allow_list(host, allowed_host or ())  # the same for a malformed --allowed-host
    if not 1 <= port <= 65535:
        raise CliError(f"--port {port} is not a port number")
    if not 0.5 <= refresh <= 3600:
        raise CliError("--refresh must be between 0.5 and 3600 seconds")
    check_metrics(metrics_port, metrics_host, token, allowed_host or ())
    missing = missing_modules()
    if missing:
        raise CliError(f"the dashboard needs {', '.join(missing)}: "
                       f"{install_hint('dashboard')}")
    opened = open_store(store)
    check_port_free(host, port, what="serve the dashboard")
    start_metrics(metrics_port, metrics_host, token, allowed_host or ())

    from sediment.dashboard.app import serve

    bind = f"[{host}]" if ":" in host else host
    typer.echo(f"dashboard of {opened.uri} on http://{bind}:{port}/"
               f"{' (token required)' if token or tokens else ''}; Ctrl-C stops it", err=True)
    serve(opened, host=host, port=port, token=token, tokens=tokens, refresh_seconds=refresh,
          allowed_hosts=allowed_host or ())
