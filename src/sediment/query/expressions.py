"""Taking a pyarrow compute expression apart: a tree of calls, fields and literals, and the
limits every filter is held to.

The expression is read through Arrow's own serialisation of expressions (an IPC file whose
schema metadata lists the tree in prefix order and whose columns hold the literals and
options), so literals keep their Arrow types. Only bytes this process has just made from its
own expression are read this way: bytes from a client never are (see
:mod:`sediment.query.wire`).

The tree is built without recursion, and chains of one associative function (``a | b | c``,
however Python nested them) become one call with every operand, so a left-deep chain of a
thousand ``|`` is one shallow node for the analyses that walk the tree.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

MAX_FILTER_DEPTH = 100
"""How deeply a filter may nest (a NOT or a parenthesis adds a level; a chain of one AND or
OR is one level however long). Arrow evaluates expressions recursively: 20,000 nested NOTs
crash the process (measured, pyarrow 26), and Python's own recursion limit is 1,000."""

MAX_FILTER_NODES = 4096
"""How many parts (calls, fields, literals) a filter may have. Arrow re-plans the expression
on every batch in time growing with the square of its size (1,000 ``=`` terms joined by OR:
0.1 s a batch; 2,000: 0.5 s; 5,000: 15 s on 100,000 rows) and crashes near 20,000 terms
whatever the tree's shape (measured, pyarrow 26). Many values of one field are one ``is_in``
(``IN (...)`` in ``--where``), which has no such cost."""

MAX_FILTER_VALUES = 1_000_000
"""How many values the ``is_in`` parts of one filter may list in all."""

ASSOCIATIVE = ("and_kleene", "or_kleene", "and", "or")
"""Functions whose chains are flattened into one call."""


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    args: tuple[Node, ...]
    options: dict[str, Any] | None = None
    raw_options: pa.Scalar | None = field(default=None, compare=False)
    """The options as Arrow has them (``options`` is their Python form): an ``is_in``'s
    value set keeps its type here."""


@dataclass(frozen=True, slots=True)
class Field:
    name: str


@dataclass(frozen=True, slots=True)
class Literal:
    value: pa.Scalar


@dataclass(frozen=True, slots=True)
class Opaque:
    """A part of the expression the analysis does not understand (a nested field
    reference, say): never narrows anything."""

    what: str = "a part that cannot be read"


Node = Call | Field | Literal | Opaque


class _CSchema(ctypes.Structure):
    """The Arrow C data interface's ArrowSchema (to read metadata with repeated keys)."""

    _fields_ = [("format", ctypes.c_char_p), ("name", ctypes.c_char_p),  # noqa: RUF012
                ("metadata", ctypes.c_void_p), ("flags", ctypes.c_int64),
                ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
                ("dictionary", ctypes.c_void_p), ("release", ctypes.c_void_p),
                ("private_data", ctypes.c_void_p)]


_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(_CSchema))


def _metadata_pairs(schema: pa.Schema) -> list[tuple[str, str]]:
    """The schema's metadata in order, repeated keys kept (``Schema.metadata`` is a dict)."""
    c = _CSchema()
    schema._export_to_c(ctypes.addressof(c))
    try:
        out: list[tuple[str, str]] = []
        if c.metadata:
            n = ctypes.c_int32.from_address(c.metadata).value
            pos = c.metadata + 4
            for _ in range(n):
                kv = []
                for _ in range(2):
                    length = ctypes.c_int32.from_address(pos).value
                    kv.append(ctypes.string_at(pos + 4, length).decode())
                    pos += 4 + length
                out.append((kv[0], kv[1]))
        return out
    finally:
        if c.release:
            _RELEASE(c.release)(ctypes.byref(c))


def serialised_parts(expr: pc.Expression) -> tuple[list[tuple[str, str]], pa.RecordBatch | None]:
    """The expression's prefix-order listing and its literal/options columns, from Arrow's
    serialisation of this process's own expression (raises what Arrow raises: a field
    reference by position or nested path cannot be serialised)."""
    _, (buf,) = expr.__reduce__()
    reader = ipc.open_file(buf)
    pairs = _metadata_pairs(reader.schema)
    columns = reader.get_batch(0) if reader.num_record_batches else None
    return pairs, columns


@dataclass(slots=True)
class _Frame:
    name: str
    args: list[Node] = field(default_factory=list)
    options: dict[str, Any] | None = None
    raw: pa.Scalar | None = None


def _options(raw: pa.Scalar) -> dict[str, Any] | None:
    """A call's options as Python values; one Python cannot hold (a date in year 0 in an
    ``is_in`` value set) is left out, so the analyses take that call as not understood."""
    if not raw.is_valid:
        return None
    out: dict[str, Any] = {}
    for i, f in enumerate(raw.type):
        try:
            out[f.name] = raw[i].as_py()
        except (ValueError, OverflowError, pa.ArrowException):
            continue
    return out


def _tree(pairs: list[tuple[str, str]], columns: pa.RecordBatch | None) -> Node:
    def column(i: str) -> pa.Scalar:
        assert columns is not None
        return columns.column(int(i))[0]

    stack: list[_Frame] = []
    root: Node | None = None

    def emit(node: Node) -> None:
        nonlocal root
        if not stack:
            if root is not None:
                raise ValueError("two roots")
            root = node
            return
        top = stack[-1]
        if isinstance(node, Call) and node.name == top.name and top.name in ASSOCIATIVE:
            top.args.extend(node.args)  # a | (b | c) is a | b | c
        else:
            top.args.append(node)

    i = 0
    while i < len(pairs):
        kind, value = pairs[i]
        i += 1
        if kind == "call":
            stack.append(_Frame(value))
        elif kind == "end":
            f = stack.pop()
            emit(Call(f.name, tuple(f.args), f.options, f.raw))
        elif kind == "options":
            raw = column(value)
            stack[-1].raw = raw
            stack[-1].options = _options(raw)
        elif kind == "literal":
            emit(Literal(column(value)))
        elif kind == "field_ref":
            emit(Field(value))
        elif kind == "nested_field_ref":  # its parts follow as plain field references
            i += int(value)
            emit(Opaque("a nested field reference"))
        else:
            emit(Opaque(f"a {kind}"))
    if stack or root is None:
        raise ValueError("unterminated expression")
    return root


def decompose(expr: pc.Expression) -> Node:
    """The expression as a tree of Call/Field/Literal (Opaque where not understood)."""
    try:
        pairs, columns = serialised_parts(expr)
    except Exception:  # a field reference by position, say: understand nothing
        return Opaque("a field reference by position or nested path")
    try:
        return _tree(pairs, columns)
    except Exception:  # an Arrow that serialises differently: understand nothing
        return Opaque()


def tree_shape(tree: Node) -> tuple[int, int]:
    """(depth, number of parts) of a tree, without recursion (a hostile tree may be deep)."""
    depth = nodes = 0
    stack: list[tuple[Node, int]] = [(tree, 1)]
    while stack:
        node, d = stack.pop()
        nodes += 1
        depth = max(depth, d)
        if isinstance(node, Call):
            stack.extend((a, d + 1) for a in node.args)
    return depth, nodes


def in_values(tree: Node) -> int:
    """How many values the tree's ``is_in`` calls list in all."""
    total = 0
    stack: list[Node] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, Call):
            if node.name == "is_in" and node.options is not None:
                values = node.options.get("value_set")
                total += len(values) if isinstance(values, list) else 0
            stack.extend(node.args)
    return total


def field_names(tree: Node) -> set[str] | None:
    """Fields the expression reads (None: it has parts not understood)."""
    out: set[str] = set()
    stack: list[Node] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, Field):
            out.add(node.name)
        elif isinstance(node, Opaque):
            return None
        elif isinstance(node, Call):
            stack.extend(node.args)
    return out
