"""Who may reach a Sediment service (``sediment serve``, ``sediment dashboard``): loopback binds
need nothing, any other bind a bearer token, compared in constant time; and an HTTP service
answers only the host names it is reached by (:class:`HostCheck`, against DNS rebinding).

Every service and its command take these rules from here, so they cannot drift apart.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from typing import Any


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


# ---- the Host check (DNS rebinding) ---------------------------------------------------------
# A page whose name an attacker re-points at 127.0.0.1 is same-origin with a loopback service
# (the browser thinks it talks to the attacker's name), so it could read every answer; its
# requests still carry that name in ``Host``. Services over HTTP answer only the names they
# are reached by: these, the bound address and those their operator allows.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
"""Names every HTTP service answers, whatever it is bound to."""

MISDIRECTED = 421
"""HTTP status of a request whose Host the service does not answer ("Misdirected Request")."""


def host_name(value: str) -> str | None:
    """A host name or address as a Host check compares it: lower case, no trailing dot, an
    IPv6 literal in brackets and compressed (``[0:0::1]`` is ``[::1]``); None for what is no
    host (a port, a scheme, a path, user info, a wildcard, an empty name)."""
    name = value.strip().lower()
    if name.startswith("[") or name.endswith("]") or ":" in name:
        bracketed = name.startswith("[") and name.endswith("]")
        if (name.startswith("[") or name.endswith("]")) and not bracketed:
            return None
        try:
            address = ipaddress.IPv6Address(name[1:-1] if bracketed else name)
        except ValueError:
            return None
        return f"[{address.compressed}]"
    name = name.removesuffix(".")
    if not name or any(not (c.isalnum() or c in "-._") for c in name) or not name.isascii():
        return None
    return name


def host_of_header(header: str) -> str | None:
    """The host a ``Host`` header names, its port dropped (None when it is malformed)."""
    value = header.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[:end + 1], value[end + 1:]
    else:
        host, sep, rest = value.partition(":")
        rest = sep + rest
    if rest and not (rest.startswith(":") and rest[1:].isdigit() and rest[1:].isascii()):
        return None
    return host_name(host)


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names a service bound to ``bound`` answers: :data:`LOCAL_HOSTS`, the bound address
    and ``extra`` (ValueError naming the first that is no host name or address)."""
    names = set()
    for given in (*LOCAL_HOSTS, bound, *extra):
        name = host_name(given)
        if name is None:
            raise ValueError(f"{given!r} is not a host name or address (give a name such as "
                             f"dash.example.com or an address, without scheme or port)")
        names.add(name)
    return frozenset(names)


class HostCheck:
    """ASGI middleware refusing, with 421 and before the application sees it, every HTTP
    request whose ``Host`` is not one of ``allowed`` (see :func:`allowed_hosts`); a request
    without exactly one ``Host`` header is refused too. Pure ASGI, so any HTTP endpoint of
    Sediment wraps its application in it whatever its web stack."""

    def __init__(self, app: Any, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(allowed)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") in ("http", "websocket"):
            hosts = [v for k, v in scope.get("headers", ()) if k.lower() == b"host"]
            name = host_of_header(hosts[0].decode("latin-1")) if len(hosts) == 1 else None
            if name not in self.allowed:
                await self._refuse(scope, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(scope: dict[str, Any], send: Any) -> None:
        body = (b"misdirected request: this server does not answer that Host name "
                b"(its operator can allow it with --allowed-host)\n")
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": MISDIRECTED,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(body)).encode()),
                                (b"x-content-type-options", b"nosniff"),
                                (b"cache-control", b"no-store")]})
        await send({"type": "http.response.body", "body": body})
