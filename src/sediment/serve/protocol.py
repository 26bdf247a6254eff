"""The wire format of the Flight service: JSON query descriptors and tickets, key values in
JSON, and Sediment errors carried inside Flight errors.

A query travels as a JSON object (the command of a Flight descriptor, UTF-8)::

    {"table": "events",                      # required
     "keys": ["a", ["b", 5], {"base64": "AAE="}],   # exact row keys (a list is a key tuple)
     "ranges": [{"start": "a", "end": "m", "start_inclusive": true, "end_inclusive": false}],
     "columns": ["key", "value"],
     "filter": "value > 3 AND key != 'x'",   # the --where text, or a JSON filter tree
                                              # ({"call": "greater", "args": [...]}: see
                                              # sediment.query.wire)
     "version": 12,                           # or a tag name
     "iterators": [{"type": "age_off", ...}]}  # iterator configs (JSON objects)

Values: JSON strings, numbers, booleans and null as they are; ``bytes`` as
``{"base64": "..."}`` (the CLI's ``--json`` form for binary); a key tuple as a JSON list;
``datetime``/``date`` as ``{"datetime": "<ISO 8601>"}``/``{"date": "..."}``; a per-field
region (``sd.Region({...})``) as ``{"region": {"<field>": {"range": {...}}, ...}}``. A ticket is the
query with its version pinned plus the leaf it reads: ``{"query": {...}, "leaf": "<id>"}``
(``"leaf": null``: the whole query).

Decoding never interprets arguments beyond their JSON form: key shapes, range ends, columns
and versions are checked by the table itself (``Table.prepare``), so a remote caller gets the
local API's messages.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import reprlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl

import sediment.errors as errors_module
from sediment.core.boxes import Box
from sediment.core.ranges import Range
from sediment.errors import (
    AuthenticationError,
    BadRequestError,
    DataError,
    FilterError,
    ReadOnlyError,
    SedimentError,
    ServerBusyError,
    ServiceError,
)
from sediment.query.where import parse_where
from sediment.query.wire import from_wire, to_wire
from sediment.schema import check_text

END_OF_STREAM = b"sediment:end-of-stream"
"""App metadata of the last message of a put whose descriptor asks for an end marker."""

QUERY_FIELDS = ("table", "keys", "ranges", "columns", "filter", "version", "iterators")

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


# ---- values -------------------------------------------------------------------------------
def encode_value(value: Any, what: str) -> Any:
    """``value`` as JSON data (see the module docstring); BadRequestError for a value that
    cannot travel (an iterator object, a callable, any other Python object)."""
    if value is None or isinstance(value, bool | int | float | str):
        check_text(value, f"{what} {value!r}")  # the server's Arrow cannot hold it either
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, tuple | list):
        return [encode_value(v, what) for v in value]
    if isinstance(value, Box):  # a per-field region: its fields' ranges as given
        return {"region": {str(name): encode_value(r, what) for name, r in value.given}}
    if isinstance(value, Range):
        return {"range": {"start": encode_value(value.start, what),
                          "end": encode_value(value.end, what),
                          "start_inclusive": value.start_inclusive,
                          "end_inclusive": value.end_inclusive}}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    raise BadRequestError(f"{what}: a {type(value).__name__} cannot be sent to a server "
                          f"(send row-key values, tuples, sediment.Range values)")


def decode_value(data: Any, what: str) -> Any:
    """The inverse of :func:`encode_value` (lists become tuples, as keys are tuples)."""
    if isinstance(data, list):
        return tuple(decode_value(v, what) for v in data)
    if not isinstance(data, dict):
        return data
    try:
        if set(data) == {"base64"}:
            return base64.b64decode(str(data["base64"]), validate=True)
        if set(data) == {"datetime"}:
            return dt.datetime.fromisoformat(str(data["datetime"]))
        if set(data) == {"date"}:
            return dt.date.fromisoformat(str(data["date"]))
        if set(data) == {"region"} and isinstance(data["region"], dict):
            # checked where it is queried (bind_region), as a local region is
            return Box({str(k): decode_value(v, what) for k, v in data["region"].items()})
        if set(data) == {"range"} and isinstance(data["range"], dict):
            r = data["range"]
            return Range(decode_value(r.get("start"), what), decode_value(r.get("end"), what),
                         start_inclusive=bool(r.get("start_inclusive", True)),
                         end_inclusive=bool(r.get("end_inclusive", False)))
    except (binascii.Error, ValueError, TypeError) as e:
        raise BadRequestError(f"{what}: malformed value {quoted(data)}: {e}") from None
    raise BadRequestError(f"{what}: unknown value form {quoted(data)} (expected base64, "
                          f"datetime, date, range or region)")


# ---- queries ------------------------------------------------------------------------------
def encode_filter(filter: Any) -> Any:  # noqa: A002 (the public name)
    """A filter for the wire: ``--where`` text as it is, a pyarrow expression as the JSON
    tree of :mod:`sediment.query.wire` (FilterError, before anything is sent, for a part the
    tree cannot say, named)."""
    if filter is None or isinstance(filter, str):
        return filter
    if isinstance(filter, pc.Expression):
        return to_wire(filter)
    raise BadRequestError(f"filter must be --where text or a pyarrow.compute.Expression, "
                          f"not {type(filter).__name__}")


def decode_filter(data: Any, arrow_schema: pa.Schema) -> pc.Expression | None:
    """The filter a query descriptor carries, as ``filter=`` takes it: WhereError for bad
    ``--where`` text (naming the position), FilterError for a tree outside the wire form.
    Expression bytes are never deserialised: Arrow aborts the process on malformed ones."""
    if data is None:
        return None
    if isinstance(data, str):
        return parse_where(data, arrow_schema)
    if isinstance(data, dict) and "expression" in data:
        raise FilterError("filter: serialised Arrow expressions are not accepted; send "
                          "--where text or the JSON filter form (sediment.query.wire)")
    if isinstance(data, dict):
        return from_wire(data, arrow_schema)
    raise FilterError(f"filter must be --where text or a JSON filter tree, not "
                      f"{type(data).__name__}")


def encode_query(table: str, keys: Any = None, ranges: Any = None, *, columns: Any = None,
                 version: Any = None, iterators: Any = None,
                 filter: Any = None) -> dict[str, Any]:  # noqa: A002 (the public name)
    """A query's arguments as descriptor JSON; BadRequestError for one that cannot travel,
    DataError (as the table itself gives) for a key or range end with a lone surrogate."""
    try:
        return _encode_query(table, keys, ranges, columns=columns, version=version,
                             iterators=iterators, filter=filter)
    except DataError as e:
        raise DataError(f"query of table {table}: {e}") from None


def _encode_query(table: str, keys: Any, ranges: Any, *, columns: Any, version: Any,
                  iterators: Any, filter: Any) -> dict[str, Any]:  # noqa: A002
    out: dict[str, Any] = {"table": table}
    if keys is not None:
        if isinstance(keys, Iterator) or callable(keys):
            raise BadRequestError("keys: an iterator cannot be sent to a server; pass a list")
        # str/bytes travel as they are: the table refuses them with its own message
        out["keys"] = encode_value(keys if isinstance(keys, str | bytes) else list(keys),
                                   "keys")
    if ranges is not None:
        if isinstance(ranges, Iterator):
            raise BadRequestError("ranges: an iterator cannot be sent to a server; pass a list")
        out["ranges"] = encode_value(ranges if isinstance(ranges, Range | str | bytes)
                                     else list(ranges), "ranges")
    if columns is not None:
        if isinstance(columns, Iterator):
            raise BadRequestError("columns: an iterator cannot be sent; pass a list")
        out["columns"] = [c if isinstance(c, str) else encode_value(c, "columns")
                          for c in columns]
    if version is not None:
        if not isinstance(version, int | str) or isinstance(version, bool):
            raise BadRequestError(f"version must be a number or a tag name, not {version!r}")
        out["version"] = version
    if iterators is not None:
        configs = []
        for it in iterators:
            if not isinstance(it, dict):
                raise BadRequestError(
                    f"iterators: a {type(it).__name__} object cannot be sent to a server; "
                    "send its configuration (a JSON object such as {'type': 'keep_latest', "
                    "'by': 'ts'}) instead")
            configs.append(it)
        json.dumps(configs)  # a non-JSON config fails here, before anything is sent
        out["iterators"] = configs
    if filter is not None:
        out["filter"] = encode_filter(filter)
    return out


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


def query_arguments(doc: Mapping[str, Any], arrow_schema: pa.Schema) -> dict[str, Any]:
    """``Table.prepare``'s keyword arguments from a query descriptor (the table checks them)."""
    unknown = sorted(set(doc) - set(QUERY_FIELDS))
    if unknown:
        raise BadRequestError(f"malformed query descriptor: unknown field {quoted(unknown[0])} "
                              f"(fields: {', '.join(QUERY_FIELDS)})")
    args: dict[str, Any] = {}
    if doc.get("keys") is not None:
        keys = doc["keys"]
        args["keys"] = keys if isinstance(keys, str) else list(decode_value(keys, "keys")) \
            if isinstance(keys, list) else decode_value(keys, "keys")
        if not isinstance(args["keys"], list | str | bytes):  # (the table refuses str, bytes)
            raise BadRequestError(f"malformed query descriptor: keys must be a list of row "
                                  f"keys, not {quoted(keys)}")
    if doc.get("ranges") is not None:
        r = decode_value(doc["ranges"], "ranges")
        args["ranges"] = list(r) if isinstance(r, tuple) else r
        if not isinstance(args["ranges"], list | Range | Box | str | bytes):
            raise BadRequestError(f"malformed query descriptor: ranges must be a list of "
                                  f"ranges or regions, not {quoted(doc['ranges'])}")
    if doc.get("columns") is not None:
        if not isinstance(doc["columns"], list):
            raise BadRequestError("malformed query descriptor: columns must be a list")
        args["columns"] = list(doc["columns"])
    if doc.get("version") is not None:
        args["version"] = doc["version"]
    if doc.get("iterators") is not None:
        if not isinstance(doc["iterators"], list) or \
                not all(isinstance(it, dict) for it in doc["iterators"]):
            raise BadRequestError("malformed query descriptor: iterators must be a list of "
                                  "iterator configurations (JSON objects)")
        args["iterators"] = doc["iterators"]
    args["filter"] = decode_filter(doc.get("filter"), arrow_schema)
    return args


def dumps(doc: Any) -> bytes:
    """Compact JSON bytes (bytes values as base64, as :func:`encode_value`)."""
    def default(obj: Any) -> Any:
        if isinstance(obj, bytes | bytearray | Range | dt.date | tuple):
            return encode_value(obj, "result")
        if isinstance(obj, set | frozenset):
            return sorted(obj, key=str)
        return str(obj)

    return json.dumps(doc, separators=(",", ":"), default=default).encode()


# ---- errors -------------------------------------------------------------------------------
def to_flight_error(exc: BaseException) -> fl.FlightError:
    """A Flight error carrying ``exc``'s message, with the Sediment class and the message as
    JSON in ``extra_info`` so the client raises the same class with the same text (cut to
    :data:`MESSAGE_BYTES`: a message quoting a huge input would not fit in gRPC's metadata)."""
    classes = [c.__name__ for c in type(exc).__mro__ if issubclass(c, SedimentError)]
    message = bounded_message(str(exc))
    info = dumps({"error": type(exc).__name__, "classes": classes, "message": message})
    kind: Callable[..., fl.FlightError]
    if isinstance(exc, AuthenticationError):
        kind = fl.FlightUnauthenticatedError
    elif isinstance(exc, ReadOnlyError):
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
                            BadRequestError)}


def from_flight_error(exc: fl.FlightError) -> SedimentError:
    """The Sediment exception a Flight error stands for: the class the server raised (by name,
    from :mod:`sediment.errors` or this module; else its nearest base class) with its
    message; for a Flight error of the transport (no server-side class), ServiceError
    (AuthenticationError when it says so)."""
    extra = getattr(exc, "extra_info", b"") or b""
    names: list[str] = []
    message = ""
    try:
        doc = json.loads(extra.decode()) if extra else {}
        if isinstance(doc, dict):
            names = [str(n) for n in doc.get("classes", [doc.get("error", "")])]
            message = str(doc.get("message", ""))
    except (UnicodeDecodeError, json.JSONDecodeError):
        pass
    for name in names:  # the server's class, else its nearest base this side knows
        cls = _LOCAL_ERRORS.get(name) or getattr(errors_module, name, None)
        if isinstance(cls, type) and issubclass(cls, SedimentError):
            return cls(message)
    text = message or str(exc)
    if isinstance(exc, fl.FlightUnauthenticatedError):
        return AuthenticationError(text)
    return ServiceError(text)  # the transport's own (no server reached, say)
