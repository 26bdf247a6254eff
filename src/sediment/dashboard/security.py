"""The dashboard's bind rule and token comparison, free of the web stack (the CLI checks a
command line with them before starlette or uvicorn are even imported).

Loopback binds need no token (the machine's own users only); any other bind requires one,
refused before a socket is opened. Token comparisons are constant-time.
"""

from __future__ import annotations

import hmac
import ipaddress

from sediment.errors import SedimentError

TOKEN_ENV = "SEDIMENT_DASHBOARD_TOKEN"
"""Environment variable holding the dashboard's token when ``--token-file`` is not given."""


class DashboardSecurityError(SedimentError):
    """A dashboard that would be open to the network without a token."""


def is_loopback(host: str) -> bool:
    """Is ``host`` a loopback address (127.0.0.0/8, ::1) or ``localhost``? Other names are not
    resolved: they count as reachable from elsewhere."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse a bind beyond loopback without a token (before anything is opened)."""
    if not is_loopback(host) and not token:
        raise DashboardSecurityError(
            f"refusing to bind the dashboard to {host}: a non-loopback address needs a "
            f"token (--token-file or ${TOKEN_ENV}); or bind 127.0.0.1")


def same_token(given: str | None, token: str) -> bool:
    """Constant-time comparison of a token a client gave with the dashboard's."""
    if not given:
        return False
    return hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))
