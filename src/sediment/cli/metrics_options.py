"""The metrics endpoint's options, shared by the long-running commands (``serve``,
``maintain --loop``, ``dashboard``): ``--metrics-port`` and ``--metrics-host``.

The command line is checked (:func:`check_metrics`) with the command's other checks, before
the store is opened or anything bound; the endpoint starts (:func:`start_metrics`) just
before the command's own service, so the metrics count from its first request.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated

import typer

from sediment.cli.errors import CliError
from sediment.errors import SedimentError

if TYPE_CHECKING:
    from sediment.metrics.endpoint import MetricsEndpoint

TOKEN_ENV = "SEDIMENT_METRICS_TOKEN"
"""The token a non-loopback metrics endpoint of a command without one of its own requires."""

MetricsPortOption = Annotated[int | None, typer.Option(
    "--metrics-port", metavar="PORT",
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port; the log "
         "says which). Off when not given.")]
MetricsHostOption = Annotated[str, typer.Option(
    "--metrics-host", help="Address of the metrics endpoint. Anything but loopback needs a "
    f"token (the command's own, else ${TOKEN_ENV}), which scrapes send as a bearer token.")]


def metrics_token(own: str | None) -> str | None:
    """The token of the metrics endpoint: the command's own, else ``$SEDIMENT_METRICS_TOKEN``."""
    if own:
        return own
    value = os.environ.get(TOKEN_ENV, "").strip()
    return value or None


def check_metrics(port: int | None, host: str, token: str | None,
                  allowed: Iterable[str] = ()) -> None:
    """Refuse a bad metrics endpoint before anything is opened (a non-loopback address
    without a token, a port out of range, a malformed host name)."""
    if port is None:
        return
    from sediment.metrics.endpoint import check_bind

    try:
        check_bind(host, port, metrics_token(token), allowed)
    except SedimentError as e:
        raise CliError(str(e)) from None


def start_metrics(port: int | None, host: str, token: str | None,
                  allowed: Iterable[str] = ()) -> MetricsEndpoint | None:
    """Start the endpoint (None when ``--metrics-port`` is not given) and say where on
    stderr: ``metrics on http://127.0.0.1:9464/metrics``."""
    if port is None:
        return None
    from sediment.metrics.endpoint import MetricsEndpoint

    try:
        endpoint = MetricsEndpoint(host, port, token=metrics_token(token), allowed=allowed)
    except OSError as e:
        raise CliError(f"cannot serve metrics on {host}:{port}: {e.strerror or e}") from None
    bind = f"[{host.strip('[]')}]" if ":" in host else host
    typer.echo(f"metrics on http://{bind}:{endpoint.port}/metrics"
               f"{' (token required)' if endpoint.token else ''}", err=True)
    return endpoint
