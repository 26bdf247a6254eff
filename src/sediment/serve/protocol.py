"""The wire format of the Flight service: JSON query descriptors and tickets, and Sediment
errors carried inside Flight errors.

A query travels as a JSON object (the command of a Flight descriptor, UTF-8): the table's
name and a read request's JSON (:mod:`sediment.query.request`, the one encoding of a read
every component exchanges)::

    {"table": "events",                      # required
     "format": 1,                             # the request's format
     "keys": ["a", ["b", 5], {"base64": "AAE="}],   # exact row keys (a list is a key tuple)
     "ranges": [{"range": {"start": "a", "end": "m", "start_inclusive": true,
                           "end_inclusive": false}}],
     "columns": ["key", "value"],
     "filter": "value > 3 AND key != 'x'",   # the --where text, or a JSON filter tree
                                              # ({"call": "greater", "args": [...]}: see
                                              # sediment.query.wire)
     "version": 12,                           # or a tag name
     "iterators": [{"type": "age_off", ...}]}  # iterator configs (JSON objects)

A descriptor without ``format`` (the form documented before the request had a format: the
same fields) is read as format 1; a newer format is refused, naming the field. Values:
JSON strings, numbers, booleans and null as they are; ``bytes`` as ``{"base64": "..."}``
(the CLI's ``--json`` form for binary); a key tuple as a JSON list; ``datetime``/``date`` as
``{"datetime": "<ISO 8601>"}``/``{"date": "..."}``; a per-field region (``sd.Region({...})``)
as ``{"region": {"<field>": {"range": {...}}, ...}}``. A ticket is the query with its version
pinned plus the leaf it reads: ``{"query": {...}, "leaf": "<id>"}`` (``"leaf": null``: the
whole query).

Decoding never interprets arguments beyond their JSON form: key shapes, range ends, columns
and versions are checked by the table itself (``Table.prepare``), so a remote caller gets the
local API's messages.
"""

from __future__ import annotations

import datetime as dt
import json
import reprlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow.flight as fl

import sediment.errors as errors_module
from sediment.core.regions import Range
from sediment.errors import (
    AuthenticationError,
    BadRequestError,
    DataError,
    PermissionDeniedError,
    ReadOnlyError,
    SedimentError,
    ServerBusyError,
    ServiceError,
)
from sediment.query.request import ReadRequest, decode_value, encode_value, request_of

__all__ = ["END_OF_STREAM", "MESSAGE_BYTES", "bounded_message", "decode_value", "dumps",
           "encode_query", "encode_value", "from_flight_error", "parse_json", "quoted",
           "read_request", "table_name", "to_flight_error"]

END_OF_STREAM = b"sediment:end-of-stream"
"""App metadata of the last message of a put whose descriptor asks for an end marker."""

MESSAGE_BYTES = 1000
"""Most UTF-8 bytes of an error message sent to a client. A message travels twice in gRPC
metadata (the status message, percent-encoded, and the error's JSON in ``extra_info``, non-ASCII
escaped), which a client refuses past 16 KiB ("resource exhausted"): 1,000 bytes stay under
10 KiB whatever their characters."""

_QUOTE = reprlib.Repr()  # Python 3.11's takes no keyword arguments
_QUOTE.maxlevel, _QUOTE.maxdict, _QUOTE.maxlist, _QUOTE.maxtuple, _QUOTE.maxset = 3, 4, 4, 4, 4
_QUOTE.maxstring, _QUOTE.maxother, _QUOTE.maxlong = 80, 80, 40


def quoted(value: Any) -> str:
    """How an error message quotes a client's value: its ``repr`` cut to a bounded prefix
    (long strings, deep or long containers), whatever its size or nesting."""
    return _QUOTE.repr(value)


def bounded_message(text: str) -> str:
    """``text`` cut to :data:`MESSAGE_BYTES` UTF-8 bytes (saying so), lone surrogates
    escaped: what every error sent to a client carries."""
    raw = text.encode("utf-8", "backslashreplace")
    if len(raw) <= MESSAGE_BYTES:
        return raw.decode("utf-8")
    head = raw[:MESSAGE_BYTES].decode("utf-8", "ignore")
    return f"{head}... (message cut: {len(raw) - MESSAGE_BYTES} more bytes)"


# ---- queries ------------------------------------------------------------------------------
def encode_query(table: str, keys: Any = None, ranges: Any = None, *, columns: Any = None,
                 version: Any = None, iterators: Any = None,
                 filter: Any = None) -> dict[str, Any]:  # noqa: A002 (the public name)
    """A query descriptor: ``{"table": ..., **request.to_json()}`` for a
    :class:`~sediment.query.request.ReadRequest` (given as ``keys``) or a read's arguments.
    BadRequestError for an argument that cannot travel (an iterator: pass a list), DataError
    (as the table itself gives) for a key or range end with a lone surrogate, FilterError for
    a filter the wire form cannot say."""
    for name, value in (("keys", keys), ("ranges", ranges), ("columns", columns)):
        if isinstance(value, Iterator):
            raise BadRequestError(f"{name}: an iterator cannot be sent to a server; pass a "
                                  f"list")
    request = request_of(keys, ranges, columns=columns, version=version,
                         iterators=iterators, filter=filter)
    try:
        return {"table": table, **request.to_json()}
    except DataError as e:
        raise DataError(f"query of table {table}: {e}") from None


def read_request(doc: Mapping[str, Any]) -> ReadRequest:
    """The read a query descriptor (or a ticket's query) asks for: its fields but ``table``
    are a request's JSON. A descriptor without ``format`` is the form documented before the
    request had one (the same fields): read as format 1. Refuses a raw read (internal)."""
    fields = {k: v for k, v in doc.items() if k != "table"}
    fields.setdefault("format", 1)
    request = ReadRequest.from_json(fields)
    if request.raw:
        raise BadRequestError("a raw read (records as stored, without the table's "
                              "iterators) is internal: the server does not serve it")
    return request


def parse_json(body: bytes, what: str) -> dict[str, Any]:
    """A JSON object from a descriptor, ticket or action body (BadRequestError otherwise)."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except RecursionError:  # arrays or objects nested past Python's recursion limit
        raise BadRequestError(f"malformed {what}: JSON nested too deeply") from None
    except ValueError as e:  # not UTF-8, not JSON, a number past Python's digit limit
        raise BadRequestError(f"malformed {what}: not JSON ({quoted(str(e))})") from None
    if not isinstance(doc, dict):
        raise BadRequestError(f"malformed {what}: expected a JSON object, got {quoted(doc)}")
    depth = _nesting(doc)
    if depth > MAX_JSON_DEPTH:
        raise BadRequestError(f"malformed {what}: JSON nested {depth} deep (at most "
                              f"{MAX_JSON_DEPTH})")
    return doc


MAX_JSON_DEPTH = 256
"""How deeply a request's JSON may nest: room for a filter tree at its own limit (100 levels,
two JSON levels each), and far from Python's recursion limit, which decoding keys and filters
would otherwise reach (a RecursionError, not an answer)."""


def _nesting(doc: Any) -> int:
    """How deeply lists and objects nest in ``doc`` (without recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))
    return deepest


def table_name(doc: Mapping[str, Any], what: str, field: str = "table") -> str:
    """The table a request names (its name checked by the store when it is opened)."""
    name = doc.get(field)
    if not isinstance(name, str):
        raise BadRequestError(f"malformed {what}: {field!r} must be a table name")
    return name


def dumps(doc: Any) -> bytes:
    """Compact JSON bytes (bytes values as base64, as :func:`encode_value`)."""
    def default(obj: Any) -> Any:
        if isinstance(obj, bytes | bytearray | Range | dt.date | tuple):
            return encode_value(obj, "result")
        if isinstance(obj, set | frozenset):
            return sorted(obj, key=str)
        return str(obj)

    return json.dumps(doc, separators=(",", ":"), default=default).encode()


def idempotency_key(doc: dict[str, Any], what: str) -> str | None:
    """A put descriptor's or delete body's ``"idempotency_key"`` (None: none), a string;
    BadRequestError for anything else (the library checks its length)."""
    key = doc.get("idempotency_key")
    if key is not None and not isinstance(key, str):
        raise BadRequestError(f"malformed {what}: 'idempotency_key' must be a string")
    return key


# ---- errors -------------------------------------------------------------------------------
def to_flight_error(exc: BaseException) -> fl.FlightError:
    """A Flight error carrying ``exc``'s message, with the Sediment class and the message as
    JSON in ``extra_info`` so the client raises the same class with the same text (cut to
    :data:`MESSAGE_BYTES`: a message quoting a huge input would not fit in gRPC's metadata)."""
    classes = [c.__name__ for c in type(exc).__mro__ if issubclass(c, SedimentError)]
    message = bounded_message(str(exc))
    doc: dict[str, Any] = {"error": type(exc).__name__, "classes": classes, "message": message}
    if isinstance(exc, ServerBusyError) and exc.retry_after is not None:
        doc["retry_after"] = exc.retry_after  # seconds the client may wait before retrying
    info = dumps(doc)
    kind: Callable[..., fl.FlightError]
    if isinstance(exc, AuthenticationError):
        kind = fl.FlightUnauthenticatedError
    elif isinstance(exc, ReadOnlyError | PermissionDeniedError):
        kind = fl.FlightUnauthorizedError
    elif isinstance(exc, ServerBusyError):
        kind = fl.FlightUnavailableError
    elif isinstance(exc, SedimentError):
        kind = fl.FlightServerError
    else:
        kind = fl.FlightInternalError
    return kind(message, extra_info=info)


_LOCAL_ERRORS: dict[str, type[SedimentError]] = {
    c.__name__: c for c in (ServiceError, AuthenticationError, ReadOnlyError, ServerBusyError,
                            BadRequestError, PermissionDeniedError)}


def from_flight_error(exc: fl.FlightError) -> SedimentError:
    """The Sediment exception a Flight error stands for: the class the server raised (by name,
    from :mod:`sediment.errors` or this module; else its nearest base class) with its
    message; for a Flight error of the transport (no server-side class), ServiceError
    (AuthenticationError when it says so)."""
    extra = getattr(exc, "extra_info", b"") or b""
    names: list[str] = []
    message = ""
    retry_after = None
    try:
        doc = json.loads(extra.decode()) if extra else {}
        if isinstance(doc, dict):
            names = [str(n) for n in doc.get("classes", [doc.get("error", "")])]
            message = str(doc.get("message", ""))
            hint = doc.get("retry_after")
            if isinstance(hint, int | float) and not isinstance(hint, bool):
                retry_after = float(hint)
    except (UnicodeDecodeError, json.JSONDecodeError):
        pass
    for name in names:  # the server's class, else its nearest base this side knows
        cls = _LOCAL_ERRORS.get(name) or getattr(errors_module, name, None)
        if isinstance(cls, type) and issubclass(cls, ServerBusyError):
            return cls(message, retry_after=retry_after)
        if isinstance(cls, type) and issubclass(cls, SedimentError):
            return cls(message)
    text = message or str(exc)
    if isinstance(exc, fl.FlightUnauthenticatedError):
        return AuthenticationError(text)
    return ServiceError(text)  # the transport's own (no server reached, say)
