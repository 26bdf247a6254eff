"""One read of a table as a value: :class:`ReadRequest`, and its JSON.

Every reader of a table says what it wants the same way: exact keys, ranges (or per-field
regions), columns, a version or tag, a filter, extra iterators, and per-read switches. The
local API builds a request from its arguments (``Table.query(keys=...)``), and the components
that carry a read between processes exchange the request's JSON (:meth:`ReadRequest.to_json`,
:meth:`ReadRequest.from_json`): the Flight service's descriptors and tickets, the Spark data
source's ``request`` option and its partitions, ``sediment query --request``. One encoding,
checked in one place.

The JSON (format 1)::

    {"format": 1,                                        # required
     "keys": ["a", ["b", 5], {"base64": "AAE="}],        # exact row keys (a list: a key tuple)
     "ranges": [{"range": {"start": "a", "end": "m",
                           "start_inclusive": true, "end_inclusive": false}},
                {"region": {"dst": {"range": {...}}}}],  # a per-field region
     "columns": ["key", "value"],
     "version": 12,                                      # or a tag name
     "filter": "value > 3",                              # --where text, or a JSON filter
                                                         # tree (sediment.query.wire)
     "iterators": [{"type": "keep_latest", "by": "ts"}], # iterator configurations
     "raw": true}                                        # internal: records as stored

Every field but ``format`` is optional; an absent one means what None means locally. Values:
JSON strings, numbers, booleans and null as they are; ``bytes`` as ``{"base64": "..."}``;
``datetime``/``date`` as ``{"datetime": "<ISO 8601>"}``/``{"date": "..."}``. A reader refuses
a format it does not know (a newer one: a new field or switch bumps the format) and a field
it does not know, naming it, rather than read something else than was asked.

Decoding checks the JSON's shape only: key shapes, range ends, columns and versions are
checked by the table itself (``Table.prepare``), so a request from elsewhere gets the local
API's messages.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import pyarrow.compute as pc

from sediment.core.regions import Box, Range
from sediment.errors import BadRequestError, FilterError, QueryError
from sediment.query.filters import filter_expression
from sediment.query.wire import from_wire, to_wire
from sediment.schema import Schema, check_text

__all__ = ["REQUEST_FORMAT", "ReadRequest", "decode_value", "encode_value"]

REQUEST_FORMAT = 1
"""The format a request's JSON is written in, and the newest one read."""

REQUEST_FIELDS = ("format", "keys", "ranges", "columns", "version", "filter", "iterators",
                  "raw", "block_cache", "changes")
"""The fields of a request's JSON (format 1)."""


# ---- values ---------------------------------------------------------------------------------
def encode_value(value: Any, what: str) -> Any:
    """``value`` as JSON data (see the module docstring); BadRequestError for a value that
    has no JSON form (an iterator object, a callable, any other Python object)."""
    if value is None or isinstance(value, bool | int | float | str):
        check_text(value, f"{what} {value!r}")  # no reader's Arrow could hold it either
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, tuple | list):
        return [encode_value(v, what) for v in value]
    if isinstance(value, Range) and value.per_field is not None:
        # a per-field region: its fields' ranges as given
        return {"region": {str(name): encode_value(r, what)
                           for name, r in value.per_field.given}}
    if isinstance(value, Range):
        return {"range": {"start": encode_value(value.start, what),
                          "end": encode_value(value.end, what),
                          "start_inclusive": value.start_inclusive,
                          "end_inclusive": value.end_inclusive}}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    raise BadRequestError(f"{what}: a {type(value).__name__} cannot be sent in a read "
                          f"request (send row-key values, tuples, sediment.Range values)")


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
            # checked where it is read (bind_region), as a local region is
            return Box({str(k): decode_value(v, what) for k, v in data["region"].items()})
        if set(data) == {"range"} and isinstance(data["range"], dict):
            r = data["range"]
            return Range(decode_value(r.get("start"), what), decode_value(r.get("end"), what),
                         start_inclusive=bool(r.get("start_inclusive", True)),
                         end_inclusive=bool(r.get("end_inclusive", False)))
    except (binascii.Error, ValueError, TypeError) as e:
        raise BadRequestError(f"{what}: malformed value {_quote(data)}: {e}") from None
    raise BadRequestError(f"{what}: unknown value form {_quote(data)} (expected base64, "
                          f"datetime, date, range or region)")


def _quote(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error never echoes a whole request."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# ---- the request ----------------------------------------------------------------------------
def _frozen(value: Any) -> Any:
    """A sequence argument as a tuple (a single Range as a tuple of one). Text and bytes stay
    as they are: the table refuses them with its own message (iterating would read each
    character as a key)."""
    if value is None or isinstance(value, str | bytes | tuple):
        return value
    if isinstance(value, Range):
        return (value,)
    if isinstance(value, Iterable):
        return tuple(value)
    return value


def _same(a: Any, b: Any) -> bool:
    """Whether two fields' values ask for the same: filters by ``Expression.equals``, or by
    their wire form when one is an expression and the other its tree (a request equals
    itself carried through JSON)."""
    if isinstance(a, pc.Expression) and isinstance(b, pc.Expression):
        return a.equals(b)
    if isinstance(a, pc.Expression) or isinstance(b, pc.Expression):
        expr, other = (a, b) if isinstance(a, pc.Expression) else (b, a)
        if not isinstance(other, Mapping):
            return False
        try:
            return to_wire(expr) == dict(other)
        except FilterError:  # no wire form: no tree is that expression
            return False
    return bool(a == b)


@dataclass(frozen=True, slots=True, eq=False)
class ReadRequest:
    """What one read of a table asks for: the arguments of ``Table.query`` as one value.

    ``Table.prepare(request)`` plans it (into a :class:`~sediment.query.scan.Scan`), and
    ``to_json``/``from_json`` carry it between processes (the Flight service, the Spark data
    source, ``sediment query --request``). Arguments as ``Table.query`` takes them:

    * ``keys``: exact row keys (values, or tuples for several row-key fields; a shorter tuple
      is a prefix); ``ranges``: ``sd.Range`` values or per-field regions (``sd.Region``).
      Neither: the whole table.
    * ``columns``: the columns returned, in that order (None: all).
    * ``version``: a version number or a tag name (None: the head when planned).
    * ``filter``: a pyarrow compute expression, ``--where`` text, or the JSON filter tree of
      :mod:`sediment.query.wire` (what ``from_json`` gives), applied after the iterators.
    * ``iterators``: extra iterators after the table's (configurations, or iterator objects
      for a local read: those have no JSON form).
    * ``raw``: internal (change feeds): the records as stored, without the table's
      iterators. A server does not serve raw reads.
    * ``changes``: ``{"from": V, "to": W}`` (``to`` optional: the head): instead of the
      records at a version, the record changes committed after ``V`` up to ``W``
      (``Table.changes``), with ``columns`` and ``filter``; keys, ranges, a version and
      iterators do not go with it.
    * ``block_cache``: whether the read keeps the data it decodes in the process's block
      cache (sediment.query.blocks) and reads from it: None (the default) for reads of keys
      or ranges and not for whole-leaf scans, so a full scan never churns the cache; True
      for every read (a scan of a hot table); False for none.

    Sequences are kept as tuples. Nothing is checked against a table here: ``Table.prepare``
    does that, with the same messages for a request as for arguments. Requests compare equal
    when they ask for the same (filters by ``Expression.equals``).
    """

    keys: Sequence[Any] | None = None
    ranges: Sequence[Range] | Range | None = None
    columns: Sequence[str] | None = None
    version: int | str | None = None
    filter: pc.Expression | str | Mapping[str, Any] | None = None
    iterators: Sequence[Any] | None = None
    raw: bool = False
    block_cache: bool | None = None
    changes: Mapping[str, int | str | None] | None = None

    def __post_init__(self) -> None:
        for name in ("keys", "ranges", "columns", "iterators"):
            value = getattr(self, name)
            frozen = _frozen(value)
            if frozen is not value:
                object.__setattr__(self, name, frozen)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReadRequest):
            return NotImplemented
        return all(_same(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))

    def __hash__(self) -> int:
        # equal requests have equal versions and switches (the rest may be unhashable)
        version = self.version if isinstance(self.version, int | str) else None
        return hash((version, self.raw, self.block_cache))

    def replace(self, **changes: Any) -> ReadRequest:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return replace(self, **changes)

    def changes_range(self) -> tuple[int | str, int | str | None]:
        """A changes request's (from, to) versions (``to`` None: the head). BadRequestError
        when it is not a changes request, or asks for what a change feed does not take
        (keys, ranges, a version, iterators, raw)."""
        if self.changes is None:
            raise BadRequestError("read request: not a changes request (no field 'changes')")
        extra = [n for n in ("keys", "ranges", "version", "iterators")
                 if getattr(self, n) is not None] + (["raw"] if self.raw else [])
        if extra:
            raise BadRequestError(f"read request: field {extra[0]!r} does not go with "
                                  f"'changes' (a changes request takes columns and filter)")
        start = self.changes["from"]
        assert start is not None
        return start, self.changes.get("to")

    @property
    def narrows(self) -> bool:
        """Whether the request selects fewer rows than the whole table at its version (keys,
        ranges, a filter or extra iterators), rather than only fewer columns."""
        return self.keys is not None or self.ranges is not None or self.filter is not None \
            or bool(self.iterators) or self.raw

    def filter_expression(self, schema: Schema, table: str) -> pc.Expression | None:
        """The filter as a pyarrow expression of ``schema``'s columns (None: no filter):
        ``--where`` text parsed (WhereError naming the table), a JSON tree rebuilt
        (FilterError naming the node), an expression as it is."""
        flt = self.filter
        if flt is None:
            return None
        if isinstance(flt, Mapping):
            return from_wire(dict(flt), schema.to_arrow())
        return filter_expression(flt, schema, table)

    # ---- JSON ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The request as JSON data (see the module docstring), ``format`` first. Raises
        BadRequestError for an argument with no JSON form (an iterator object, a key of
        another Python type: named), FilterError for a filter expression the wire form cannot
        say (the function named), DataError for text with a lone surrogate."""
        out: dict[str, Any] = {"format": REQUEST_FORMAT}
        if self.keys is not None:
            # text and bytes travel as they are: the table refuses them with its message
            out["keys"] = encode_value(self.keys if isinstance(self.keys, str | bytes)
                                       else list(self.keys), "keys")
        if self.ranges is not None:
            ranges = self.ranges
            out["ranges"] = encode_value(
                ranges if isinstance(ranges, str | bytes)
                else [ranges] if isinstance(ranges, Range) else list(ranges), "ranges")
        if self.columns is not None:
            out["columns"] = [c if isinstance(c, str) else encode_value(c, "columns")
                              for c in self.columns]
        if self.version is not None:
            if not isinstance(self.version, int | str) or isinstance(self.version, bool):
                raise BadRequestError(f"version must be a number or a tag name, not "
                                      f"{_quote(self.version)}")
            out["version"] = self.version
        if self.filter is not None:
            out["filter"] = _filter_to_json(self.filter)
        if self.iterators is not None:
            out["iterators"] = [_iterator_to_json(it) for it in self.iterators]
        if self.raw:
            out["raw"] = True
        if self.block_cache is not None:
            out["block_cache"] = bool(self.block_cache)
        if self.changes is not None:
            out["changes"] = dict(_changes(self.changes))
        return out

    def to_json_text(self) -> str:
        """:meth:`to_json` as compact JSON text."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str | bytes) -> ReadRequest:
        """The request a JSON object (or its text) stands for. Raises BadRequestError (a
        QueryError) naming the field for: a missing ``format`` or one this version does not
        read (a newer one), an unknown field, a field of the wrong JSON type, a malformed
        value; FilterError for a filter tree outside the wire form (naming the node)."""
        doc = _parse(data)
        fmt = doc.get("format")
        if fmt is None:
            raise BadRequestError(f"read request: field 'format' is missing (this Sediment "
                                  f"reads format {REQUEST_FORMAT})")
        if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1:
            raise BadRequestError(f"read request: field 'format' must be a format number "
                                  f"such as {REQUEST_FORMAT}, not {_quote(fmt)}")
        if fmt > REQUEST_FORMAT:
            raise BadRequestError(f"read request: field 'format' is {fmt}, newer than this "
                                  f"Sediment reads ({REQUEST_FORMAT}): upgrade sediment where "
                                  f"the request is read, or write format {REQUEST_FORMAT}")
        unknown = sorted(str(k) for k in set(doc) - set(REQUEST_FIELDS))
        if unknown:
            raise BadRequestError(f"read request: unknown field {_quote(unknown[0])} "
                                  f"(fields of format {REQUEST_FORMAT}: "
                                  f"{', '.join(REQUEST_FIELDS)})")
        return cls(keys=_keys(doc.get("keys")), ranges=_ranges(doc.get("ranges")),
                   columns=_columns(doc.get("columns")), version=_version(doc.get("version")),
                   filter=_filter_from_json(doc.get("filter")),
                   iterators=_iterators(doc.get("iterators")), raw=_flag(doc, "raw"),
                   block_cache=None if doc.get("block_cache") is None
                   else _flag(doc, "block_cache"),
                   changes=None if doc.get("changes") is None else _changes(doc["changes"]))


# ---- JSON fields ----------------------------------------------------------------------------
def _parse(data: Mapping[str, Any] | str | bytes) -> Mapping[str, Any]:
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except RecursionError:
            raise BadRequestError("read request: JSON nested too deeply") from None
        except ValueError as e:
            raise BadRequestError(f"read request: not JSON ({_quote(str(e))})") from None
    if not isinstance(data, Mapping):
        raise BadRequestError(f"read request: expected a JSON object, not {_quote(data)}")
    return data


def _keys(data: Any) -> Any:
    if data is None or isinstance(data, str):  # (the table refuses a string)
        return data
    if not isinstance(data, list):
        raise BadRequestError(f"read request: field 'keys' must be a list of row keys, not "
                              f"{_quote(data)}")
    return decode_value(data, "keys")


def _ranges(data: Any) -> Any:
    if data is None or isinstance(data, str):
        return data
    value = decode_value(data, "ranges")  # a list, or one range or region as it is
    if not isinstance(value, tuple | Range):
        raise BadRequestError(f"read request: field 'ranges' must be a list of ranges or "
                              f"regions, not {_quote(data)}")
    return value


def _changes(data: Any) -> dict[str, int | str | None]:
    """A changes field: ``{"from": V}`` or ``{"from": V, "to": W}``, versions as numbers or
    tag names (BadRequestError naming what is wrong)."""
    if not isinstance(data, Mapping) or "from" not in data or set(data) - {"from", "to"}:
        raise BadRequestError(f"read request: field 'changes' must be {{\"from\": <version>}} "
                              f"or {{\"from\": <version>, \"to\": <version>}}, not "
                              f"{_quote(data)}")
    out: dict[str, int | str | None] = {"from": _version(data["from"])}
    if data.get("to") is not None:
        out["to"] = _version(data["to"])
    if out["from"] is None:
        raise BadRequestError("read request: field 'changes' needs a 'from' version")
    return out


def _columns(data: Any) -> Any:
    if data is not None and not isinstance(data, list):
        raise BadRequestError(f"read request: field 'columns' must be a list of column "
                              f"names, not {_quote(data)}")
    return data


def _version(data: Any) -> Any:
    if data is not None and (not isinstance(data, int | str) or isinstance(data, bool)):
        raise BadRequestError(f"read request: field 'version' must be a version number or a "
                              f"tag name, not {_quote(data)}")
    return data


def _flag(doc: Mapping[str, Any], name: str) -> bool:
    value = doc.get(name, False)
    if not isinstance(value, bool):
        raise BadRequestError(f"read request: field {name!r} must be true or false, not "
                              f"{_quote(value)}")
    return value


def _iterators(data: Any) -> Any:
    if data is None:
        return None
    if not isinstance(data, list) or not all(isinstance(it, dict) for it in data):
        raise BadRequestError("read request: field 'iterators' must be a list of iterator "
                              "configurations (JSON objects)")
    return data


def _iterator_to_json(it: Any) -> dict[str, Any]:
    if not isinstance(it, Mapping):
        raise BadRequestError(
            f"iterators: a {type(it).__name__} object cannot be sent in a read request; "
            f"send its configuration (a JSON object such as {{'type': 'keep_latest', "
            f"'by': 'ts'}}) instead")
    config = dict(it)
    try:
        json.dumps(config)
    except (TypeError, ValueError) as e:
        raise BadRequestError(f"iterators: configuration {_quote(config)} is not JSON "
                              f"data: {e}") from None
    return config


def _filter_to_json(flt: Any) -> Any:
    """``--where`` text as it is, an expression as the wire form's tree (FilterError for a
    part it cannot say, named), a tree checked as ``from_json`` checks it."""
    if isinstance(flt, str):
        return flt
    if isinstance(flt, pc.Expression):
        return to_wire(flt)
    if isinstance(flt, Mapping):
        return _filter_from_json(dict(flt))
    raise BadRequestError(f"filter must be --where text or a pyarrow.compute.Expression, "
                          f"not {type(flt).__name__}")


def _filter_from_json(data: Any) -> Any:
    """A request's filter: text as it is, a tree checked (its shape, size and depth; types
    are checked against the table where it is read). Expression bytes are never
    deserialised: Arrow aborts the process on malformed ones."""
    if data is None or isinstance(data, str):
        return data
    if isinstance(data, dict) and "expression" in data:
        raise FilterError("filter: serialised Arrow expressions are not accepted; send "
                          "--where text or the JSON filter form (sediment.query.wire)")
    if isinstance(data, dict):
        from_wire(data)  # untyped literals keep their JSON types while the shape is checked
        return data
    raise FilterError(f"filter must be --where text or a JSON filter tree, not "
                      f"{type(data).__name__}")


def request_of(keys: Any = None, ranges: Any = None, *, columns: Sequence[str] | None = None,
               version: int | str | None = None, iterators: Sequence[Any] | None = None,
               filter: Any = None) -> ReadRequest:  # noqa: A002 (the public name)
    """The request of ``Table.prepare``'s arguments, or ``keys`` itself when it is a request
    and nothing else is given (QueryError for a request and arguments together)."""
    if isinstance(keys, ReadRequest):
        if ranges is not None or columns is not None or version is not None \
                or iterators is not None or filter is not None:
            raise QueryError("give a ReadRequest or the read's arguments (keys, ranges, "
                             "columns, version, iterators, filter), not both")
        return keys
    return ReadRequest(keys, ranges, columns, version, filter, iterators)
