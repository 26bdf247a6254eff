"""The dashboard's bind rule, free of the web stack (the CLI checks a command line with it
before starlette or uvicorn are even imported).

Loopback binds need no token (the machine's own users only); any other bind requires one,
refused before a socket is opened (the loopback test and the constant-time token comparison
are :mod:`sediment.access`'s, shared with ``sediment serve``). Whatever the bind, the dashboard
answers only the host names it is reached by (:func:`host_allow_list`), so a page whose name
is re-pointed at the machine (DNS rebinding) reads nothing from it.
"""

from __future__ import annotations

from collections.abc import Iterable

from sediment.access import allowed_hosts, is_loopback
from sediment.errors import SedimentError
from sediment.tokens import Tokens

TOKEN_ENV = "SEDIMENT_DASHBOARD_TOKEN"
"""Environment variable holding the dashboard's token when ``--token-file`` is not given."""


class DashboardSecurityError(SedimentError):
    """A dashboard that would be open to the network without a token."""


def check_bind(host: str, token: str | Tokens | None) -> None:
    """Refuse a bind beyond loopback without a token or tokens (before anything is
    opened)."""
    if not is_loopback(host) and not token:
        raise DashboardSecurityError(
            f"refusing to bind the dashboard to {host}: a non-loopback address needs a "
            f"token (--token-file, ${TOKEN_ENV} or --tokens-file); or bind 127.0.0.1")


def host_allow_list(host: str, allowed: Iterable[str] = ()) -> frozenset[str]:
    """The ``Host`` names the dashboard bound to ``host`` answers: ``localhost``,
    ``127.0.0.1``, ``[::1]``, the bound address and ``allowed`` (``--allowed-host``);
    DashboardSecurityError for a name that is no host name or address (checked before
    anything is opened)."""
    try:
        return allowed_hosts(host, allowed)
    except ValueError as e:
        raise DashboardSecurityError(f"--allowed-host: {e}") from None
