"""Who may reach a Sediment service (``sediment serve``, ``sediment dashboard``): loopback binds
need nothing, any other bind a bearer token, compared in constant time.

Both services and their commands take these two rules from here, so they cannot drift apart.
"""

from __future__ import annotations

import hmac
import ipaddress


def is_loopback(host: str) -> bool:
    """Is ``host`` a loopback address (127.0.0.0/8, ::1, with or without brackets) or
    ``localhost``? Other names are not resolved: they count as reachable from elsewhere."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def same_token(given: str | bytes | None, token: str | bytes) -> bool:
    """Whether a client's token is the service's, in time independent of where they differ
    (``hmac.compare_digest``); no token given never matches."""
    if not given:
        return False
    a = given.encode("utf-8") if isinstance(given, str) else given
    b = token.encode("utf-8") if isinstance(token, str) else token
    return hmac.compare_digest(a, b)
