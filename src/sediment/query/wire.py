"""The one form a filter takes between components: a JSON tree of fields, literals,
comparisons, and/or/not, ``is_in`` and null checks (or the ``--where`` text, a string).

Nothing that receives a filter deserialises expression bytes: Arrow's own serialised form
aborts the process on malformed input, and no component may be crashed by a request. A
filter is sent as this tree (:func:`to_wire`, which refuses, naming the function, what the
tree cannot say) and rebuilt from it (:func:`from_wire`, which checks every node, the size
and the depth before Arrow sees any of it).

Nodes (JSON objects; a filter is one node that evaluates to booleans)::

    {"field": "value"}                                   a top-level column
    {"literal": 3, "type": "int64"}                      a literal of an Arrow type
    {"literal": 3}                                       untyped: the field's type it meets
    {"call": "and", "args": [<node>, <node>, ...]}       also "or" (SQL's three-valued
                                                         logic, as & and |), 1+ args
    {"call": "not", "args": [<node>]}
    {"call": "less", "args": [<node>, <node>]}           also equal, not_equal, less_equal,
                                                         greater, greater_equal
    {"call": "is_null", "args": [<node>], "nan_is_null": false}   (the flag is optional)
    {"call": "is_valid", "args": [<node>]}
    {"call": "is_in", "args": [<node>], "values": [1, 2], "type": "int64",
     "skip_nulls": false}                                ("type" and "skip_nulls" optional)

Literal values by type (``type`` is Arrow's name of the type, as ``str(pa.int64())``):

==========================================  ===============================================
``null``                                    ``null``
``bool``                                    ``true``/``false``
``int8`` ... ``int64``, ``uint8`` ...       a JSON integer
``halffloat``, ``float``, ``double``        a JSON number, or ``"NaN"``, ``"Infinity"``,
                                            ``"-Infinity"`` (every NaN is ``"NaN"``: its
                                            sign and payload are not sent)
``string``, ``large_string``,               a JSON string
``string_view``
``binary``, ``large_binary``,               base64 text
``binary_view``, ``fixed_size_binary[n]``
``date32[day]``, ``date64[ms]``             the integer Arrow stores (days, ms since the
                                            epoch), or ISO text (``"2024-01-31"``)
``timestamp[unit]``,                        the integer Arrow stores (units since the epoch,
``timestamp[unit, tz=ZONE]``                UTC), or ISO text
``time32[unit]``, ``time64[unit]``,         the integer Arrow stores
``duration[unit]``
``decimal32(p, s)`` ... ``decimal256(p, s)``  decimal text (``"12.50"``) or an integer
==========================================  ===============================================

Any literal may be ``null`` (a null of its type). An untyped literal compared with (or an
``is_in`` of) a field of the schema is cast to that field's type as ``--where`` casts its
literals (``{"literal": "2024-01-01"}`` against a timestamp field); elsewhere it takes the
JSON value's own type (int64, double, string, bool). A tree deeper than MAX_FILTER_DEPTH,
with more than MAX_FILTER_NODES parts or MAX_FILTER_VALUES ``is_in`` values, is refused.
Every refusal is a FilterError (a QueryError) naming the node's path (``filter at
args[1].args[0]: ...``).
"""

from __future__ import annotations

import base64
import binascii
import decimal
import math
import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sediment.errors import FilterError
from sediment.query.expressions import (
    MAX_FILTER_DEPTH,
    MAX_FILTER_NODES,
    MAX_FILTER_VALUES,
    Field,
    Literal,
    Node,
    Opaque,
    decompose,
)
from sediment.query.filters import check_size
from sediment.query.where import cast_literal

__all__ = ["from_wire", "parse_type", "to_wire", "type_name"]

COMPARISONS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
CALLS = ("and", "or", "not", *COMPARISONS, "is_null", "is_valid", "is_in")
"""The functions of the wire form."""

_ARROW_NAMES = {"and_kleene": "and", "or_kleene": "or", "invert": "not",
                **{c: c for c in COMPARISONS}, "is_null": "is_null", "is_valid": "is_valid",
                "is_in": "is_in"}
"""Arrow's function names for the wire form's (``&`` builds and_kleene, ``~`` invert)."""

_KEYS: dict[str, set[str]] = {
    "and": {"args"}, "or": {"args"}, "not": {"args"},
    **{c: {"args"} for c in COMPARISONS},
    "is_null": {"args", "nan_is_null"}, "is_valid": {"args"},
    "is_in": {"args", "values", "type", "skip_nulls"}}
"""The keys a call node may have besides ``call``."""

_ARITY = {"not": 1, "is_null": 1, "is_valid": 1, "is_in": 1, **dict.fromkeys(COMPARISONS, 2)}

# ---- types ----------------------------------------------------------------------------------

_SIMPLE: dict[str, pa.DataType] = {str(t): t for t in (
    pa.null(), pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(),
    pa.uint16(), pa.uint32(), pa.uint64(), pa.float16(), pa.float32(), pa.float64(),
    pa.string(), pa.large_string(), pa.string_view(), pa.binary(), pa.large_binary(),
    pa.binary_view(), pa.date32(), pa.date64())}
_SIMPLE.update({"boolean": pa.bool_(), "float16": pa.float16(), "float32": pa.float32(),
                "float64": pa.float64(), "date32": pa.date32(), "date64": pa.date64()})
_TIMESTAMP = re.compile(r"timestamp\[(s|ms|us|ns)(?:, tz=([^\]]{1,64}))?\]")
_TIME = re.compile(r"(time32)\[(s|ms)\]|(time64)\[(us|ns)\]")
_DURATION = re.compile(r"duration\[(s|ms|us|ns)\]")
_DECIMAL = re.compile(r"decimal(32|64|128|256)\((\d{1,2}), ?(-?\d{1,2})\)")
_FIXED = re.compile(r"fixed_size_binary\[(\d{1,9})\]")
_DECIMALS: dict[str, Callable[[int, int], pa.DataType]] = {
    "32": pa.decimal32, "64": pa.decimal64, "128": pa.decimal128, "256": pa.decimal256}


_OFFSET = re.compile(r"[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]")
"""A fixed UTC offset as a time zone (``+05:30``), as Arrow takes one."""


def parse_type(text: Any) -> pa.DataType:
    """The Arrow type a wire-form type name stands for (ValueError for any other)."""
    if not isinstance(text, str) or len(text) > 100:
        raise ValueError(f"a type is a name such as 'int64', not {_quote(text)}")
    if text in _SIMPLE:
        return _SIMPLE[text]
    if m := _TIMESTAMP.fullmatch(text):
        typ = pa.timestamp(m.group(1), tz=m.group(2))
        if m.group(2) is not None and not _OFFSET.fullmatch(m.group(2)):
            # a zone Arrow cannot find would fail later, mid-query (a fixed offset is always
            # found; pyarrow before 26 cannot format one as text, so it is not probed)
            try:
                pa.array([0], pa.int64()).view(typ).cast(pa.string())
            except pa.ArrowException:
                raise ValueError(f"unknown time zone {_quote(m.group(2))}") from None
        return typ
    if m := _TIME.fullmatch(text):
        return pa.time32(m.group(2)) if m.group(1) else pa.time64(m.group(4))
    if m := _DURATION.fullmatch(text):
        return pa.duration(m.group(1))
    if m := _DECIMAL.fullmatch(text):
        try:
            return _DECIMALS[m.group(1)](int(m.group(2)), int(m.group(3)))
        except (pa.ArrowException, ValueError) as e:
            raise ValueError(f"{_quote(text)}: {e}") from None
    if m := _FIXED.fullmatch(text):
        return pa.binary(int(m.group(1)))
    raise ValueError(f"unknown or unsupported type {_quote(text)} (types: null, bool, "
                     f"integers, floats, strings, binaries, dates, times, timestamps, "
                     f"durations, decimals)")


def type_name(typ: pa.DataType) -> str:
    """The wire-form name of ``typ`` (ValueError for a type the form has no values for:
    lists, structs, maps, dictionaries...)."""
    name = str(typ)
    try:
        if parse_type(name) == typ:
            return name
    except ValueError:
        pass
    raise ValueError(f"a literal of type {typ} has no wire form")


# ---- values ---------------------------------------------------------------------------------

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _storage(typ: pa.DataType) -> pa.DataType:
    """The integer type a temporal type is stored as."""
    return pa.int32() if typ.bit_width == 32 else pa.int64()


def _encode(s: pa.Scalar) -> Any:
    """A scalar's value as JSON data (see the module docstring)."""
    if not s.is_valid:
        return None
    t = s.type
    if pa.types.is_floating(t):
        x = float(s.as_py())
        if math.isnan(x):
            return "NaN"
        return x if math.isfinite(x) else ("Infinity" if x > 0 else "-Infinity")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t) \
            or pa.types.is_fixed_size_binary(t):
        return base64.b64encode(s.as_py()).decode()
    if pa.types.is_temporal(t):
        return pa.array([s], t).view(_storage(t))[0].as_py()
    if pa.types.is_decimal(t):
        return str(s.as_py())
    return s.as_py()


def _decode(v: Any, typ: pa.DataType) -> pa.Scalar:
    """A JSON value as a scalar of ``typ`` (ValueError when it is not one)."""
    if v is None:
        return pa.scalar(None, typ)
    ok = False
    if pa.types.is_boolean(typ):
        ok = isinstance(v, bool)
    elif pa.types.is_integer(typ):
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif pa.types.is_floating(typ):
        if isinstance(v, str) and v in _NON_FINITE:
            v = _NON_FINITE[v]
        if isinstance(v, int | float) and not isinstance(v, bool):
            return pa.array([float(v)], pa.float64()).cast(typ)[0]
    elif pa.types.is_string(typ) or pa.types.is_large_string(typ) \
            or pa.types.is_string_view(typ):
        ok = isinstance(v, str)
    elif pa.types.is_binary(typ) or pa.types.is_large_binary(typ) \
            or pa.types.is_binary_view(typ) or pa.types.is_fixed_size_binary(typ):
        if isinstance(v, str):
            return pa.scalar(base64.b64decode(v, validate=True), typ)
    elif pa.types.is_temporal(typ):
        if isinstance(v, int) and not isinstance(v, bool):
            return pa.array([v], _storage(typ)).view(typ)[0]
        if isinstance(v, str) and len(v) <= 64:
            return pa.scalar(v).cast(typ)
    elif pa.types.is_decimal(typ):
        if isinstance(v, str) and len(v) <= 100 or isinstance(v, int) and \
                not isinstance(v, bool):
            d = decimal.Decimal(v)
            if d.is_finite():
                return pa.scalar(d, typ)
    if ok:
        return pa.scalar(v, typ)
    raise ValueError(f"{_quote(v)} is not a {typ} value")


def _quote(v: Any, limit: int = 60) -> str:
    """``repr(v)`` cut to ``limit`` characters: an error never echoes a whole request."""
    if isinstance(v, int) and v.bit_length() > 200:
        return f"an integer of {v.bit_length()} bits"
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + "..."


# ---- to the wire ----------------------------------------------------------------------------


def to_wire(expr: Any) -> dict[str, Any]:
    """A pyarrow compute expression as the wire form (JSON data). FilterError, before
    anything is sent, for what the form cannot say, naming it: another function
    (``add``, ``starts_with``, non-Kleene ``and``...), a literal of a nested type, a field
    by position or nested path; and for a tree past the limits."""
    if not isinstance(expr, pc.Expression):
        raise FilterError(f"filter must be --where text or a pyarrow.compute.Expression such "
                          f"as pc.field('v') > 3, not {type(expr).__name__}")
    tree = decompose(expr)
    check_size(tree, "filter", FilterError)
    return _node_to_wire(tree)


def _node_to_wire(node: Node) -> dict[str, Any]:
    if isinstance(node, Field):
        return {"field": node.name}
    if isinstance(node, Literal):
        return _literal_to_wire(node.value)
    if isinstance(node, Opaque):
        raise FilterError(f"filter: {node.what} has no wire form (name a top-level column "
                          f"with pc.field('name'))")
    name = _ARROW_NAMES.get(node.name)
    if name is None and node.name in ("and", "or", "and_", "or_"):
        raise FilterError(f"filter: function {node.name!r} (null-propagating) has no wire "
                          f"form: write & or | (SQL's three-valued and/or)")
    if name is None:
        raise FilterError(
            f"filter: function {node.name!r} has no wire form (a filter sent to a server "
            f"has fields, literals, comparisons, & | ~, is_in, is_null and is_valid): "
            f"filter the answer locally, or write it with those")
    want = _ARITY.get(name)
    if len(node.args) != want if want is not None else len(node.args) < 2:
        raise FilterError(f"filter: {node.name} with {len(node.args)} arguments")
    out: dict[str, Any] = {"call": name, "args": [_node_to_wire(a) for a in node.args]}
    opts = node.options or {}
    if name == "is_null" and opts.get("nan_is_null"):
        out["nan_is_null"] = True
    if name == "is_in":
        behaviour = opts.get("null_matching_behavior", 0)
        if behaviour not in (0, 1):  # MATCH, SKIP: what skip_nulls=False/True set
            raise FilterError(f"filter: is_in with null matching behaviour {behaviour} has "
                              f"no wire form (skip_nulls is)")
        raw = node.raw_options
        values = raw["value_set"].values if raw is not None else None
        if values is None:
            raise FilterError("filter: is_in without a value set")
        try:
            out["type"] = type_name(values.type)
        except ValueError as e:
            raise FilterError(f"filter: is_in values: {e}") from None
        out["values"] = [_encode(v) for v in values]
        if behaviour == 1:
            out["skip_nulls"] = True
    return out


def _literal_to_wire(value: pa.Scalar) -> dict[str, Any]:
    try:
        return {"literal": _encode(value), "type": type_name(value.type)}
    except ValueError as e:
        raise FilterError(f"filter: {e}") from None


# ---- from the wire --------------------------------------------------------------------------


class _Reader:
    """Rebuilds an expression from a wire-form tree, counting parts and values."""

    def __init__(self, schema: pa.Schema | None) -> None:
        self.schema = schema
        self.nodes = 0
        self.values = 0

    def fail(self, path: str, msg: str) -> FilterError:
        if len(path) > 80:
            path = "..." + path[-60:]
        return FilterError(f"filter at {path}: {msg}" if path else f"filter: {msg}")

    def field_type(self, node: Any) -> pa.DataType | None:
        """The schema's type of a field node (None: not a field, or no such column)."""
        if self.schema is None or not isinstance(node, dict) or set(node) != {"field"}:
            return None
        name = node["field"]
        if isinstance(name, str) and name in self.schema.names:
            return self.schema.field(name).type
        return None

    def build(self, node: Any, path: str, depth: int,
              context: pa.DataType | None = None) -> pc.Expression:
        if depth > MAX_FILTER_DEPTH:
            raise self.fail(path, f"nests deeper than {MAX_FILTER_DEPTH} levels")
        self.nodes += 1
        if self.nodes > MAX_FILTER_NODES:
            raise self.fail(path, f"more than {MAX_FILTER_NODES} parts")
        if not isinstance(node, dict):
            raise self.fail(path, f"a node is a JSON object, not {_quote(node)}")
        if "field" in node:
            if set(node) != {"field"} or not isinstance(node["field"], str) \
                    or not node["field"]:
                raise self.fail(path, f"a field node is {{\"field\": \"<name>\"}}, not "
                                      f"{_quote(node)}")
            return pc.field(node["field"])
        if "literal" in node:
            return pc.scalar(self.literal(node, path, context))
        if "call" in node:
            return self.call(node, path, depth)
        raise self.fail(path, f"a node has 'field', 'literal' or 'call', not {_quote(node)}")

    def literal(self, node: dict[str, Any], path: str,
                context: pa.DataType | None) -> pa.Scalar:
        extra = set(node) - {"literal", "type"}
        if extra:
            raise self.fail(path, f"unknown key {_quote(sorted(extra)[0])} in a literal")
        value = node["literal"]
        try:
            if "type" in node:
                return _decode(value, parse_type(node["type"]))
            if value is not None and not isinstance(value, bool | int | float | str):
                raise ValueError(f"a literal is a JSON string, number, boolean or null, not "
                                 f"{_quote(value)}")
            if context is not None:
                return cast_literal(value, context)
            return pa.scalar(value)
        except (ValueError, TypeError, OverflowError, binascii.Error,
                decimal.InvalidOperation, pa.ArrowException) as e:
            raise self.fail(path, f"literal {_quote(value)}: {e}") from None

    def call(self, node: dict[str, Any], path: str, depth: int) -> pc.Expression:
        name = node["call"]
        if name not in CALLS:
            raise self.fail(path, f"unknown function {_quote(name)} (functions: "
                                  f"{', '.join(CALLS)})")
        extra = set(node) - {"call"} - _KEYS[name]
        if extra:
            raise self.fail(path, f"unknown key {_quote(sorted(extra)[0])} for {name}")
        args = node.get("args")
        want = _ARITY.get(name)
        if not isinstance(args, list) or (len(args) != want if want is not None
                                          else not args):
            count = "one or more" if want is None else str(want)
            raise self.fail(path, f"{name} takes {count} arguments in a list 'args'")
        # an untyped literal meets the type of the field it is compared with
        typ = next((t for a in args if (t := self.field_type(a)) is not None), None)
        built = [self.build(a, f"{path}.args[{i}]" if path else f"args[{i}]", depth + 1, typ)
                 for i, a in enumerate(args)]
        try:
            return self.apply(name, node, built, path, typ)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise self.fail(path, f"{name}: {e}") from None

    def apply(self, name: str, node: dict[str, Any], args: list[pc.Expression], path: str,
              typ: pa.DataType | None) -> pc.Expression:
        if name in ("and", "or"):
            while len(args) > 1:  # balanced: Arrow and Python recurse on depth
                args = [(args[i] & args[i + 1] if name == "and" else args[i] | args[i + 1])
                        if i + 1 < len(args) else args[i] for i in range(0, len(args), 2)]
            return args[0]
        if name == "not":
            return ~args[0]
        if name in COMPARISONS:
            fn: Callable[..., pc.Expression] = getattr(pc, name)
            return fn(args[0], args[1])
        if name == "is_null":
            flag = node.get("nan_is_null", False)
            if not isinstance(flag, bool):
                raise ValueError("nan_is_null must be true or false")
            return pc.is_null(args[0], nan_is_null=flag)
        if name == "is_valid":
            return pc.is_valid(args[0])
        return pc.is_in(args[0], value_set=self.value_set(node, path, typ),
                        skip_nulls=self.flag(node, "skip_nulls", path))

    def flag(self, node: dict[str, Any], key: str, path: str) -> bool:
        value = node.get(key, False)
        if not isinstance(value, bool):
            raise self.fail(path, f"{key} must be true or false")
        return value

    def value_set(self, node: dict[str, Any], path: str,
                  typ: pa.DataType | None) -> pa.Array:
        values = node.get("values")
        if not isinstance(values, list):
            raise self.fail(path, "is_in takes its values in a list 'values'")
        self.values += len(values)
        if self.values > MAX_FILTER_VALUES:
            raise self.fail(path, f"more than {MAX_FILTER_VALUES} is_in values")
        try:
            if "type" in node:
                t = parse_type(node["type"])
                return pa.array([_decode(v, t) for v in values], t)
            for v in values:
                if v is not None and not isinstance(v, bool | int | float | str):
                    raise ValueError(f"an untyped value is a JSON string, number, boolean "
                                     f"or null, not {_quote(v)}")
            if typ is not None:
                return pa.array([cast_literal(v, typ) for v in values], typ)
            return pa.array(values)
        except (ValueError, TypeError, OverflowError, binascii.Error,
                decimal.InvalidOperation, pa.ArrowException) as e:
            raise self.fail(path, f"is_in values: {e}") from None


def from_wire(doc: Any, schema: pa.Schema | None = None) -> pc.Expression:
    """The expression a wire-form tree stands for (``schema``, the table's Arrow schema,
    types untyped literals). FilterError for anything else, naming the node's path; its
    columns and types are checked where it is used (``Table.prepare``), as for a local
    ``filter=``."""
    return _Reader(schema).build(doc, "", 1)
