"""The ``--where`` syntax: a small SQL-like filter language parsed into a pyarrow compute
expression (what ``filter=`` takes; see :mod:`sediment.query.filters` for how queries use it).
The CLI's ``query --where`` and the network service take it.

``--where`` syntax (case-insensitive keywords), parsed by :func:`parse_where`::

    expr      := term (OR term)*
    term      := factor (AND factor)*
    factor    := NOT factor | '(' expr ')' | predicate
    predicate := field (= | != | <> | < | <= | > | >=) literal
               | field [NOT] IN '(' literal (',' literal)* ')'
               | field [NOT] BETWEEN literal AND literal
               | field IS [NOT] NULL
    literal   := number | 'string' ('' for a quote) | true | false
    field     := name | "quoted name"

Literals are cast to the field's type from the table schema (so ``ts >= '2024-01-01'``
compares a timestamp); a literal that does not fit is an error naming its position.

Hostile text cannot crash the process: the text is at most ``MAX_WHERE_CHARS`` characters,
parentheses and NOTs nest at most ``MAX_FILTER_DEPTH`` deep, and the condition has at most
``MAX_FILTER_NODES`` parts (each refusal a WhereError). Chains of AND and OR are built as
balanced trees, and ``f = a OR f = b OR ...`` on one field as ``f IN (a, b, ...)``, so the
20,000 equalities Arrow cannot evaluate as ORs are one set lookup.
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from sediment.errors import WhereError
from sediment.query.expressions import MAX_FILTER_DEPTH, MAX_FILTER_NODES

__all__ = ["MAX_WHERE_CHARS", "WhereError", "cast_literal", "parse_where"]

MAX_WHERE_CHARS = 1_000_000
"""The longest ``--where`` text parsed: enough for an IN list or OR-chain of some 50,000
values, and a bound on the work a hostile text can ask for."""

# ---- the --where syntax -------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<str>'(?:[^']|'')*')
  | (?P<qname>"(?:[^"]|"")*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<op><=|>=|!=|<>|=|<|>)
  | (?P<punct>[(),])
  | (?P<bad>.)
""", re.VERBOSE | re.DOTALL)

_KEYWORDS = {"and", "or", "not", "in", "between", "is", "null", "true", "false"}


class _Tok(NamedTuple):
    kind: str
    text: str
    pos: int
    """0-based offset in the text."""

    @property
    def word(self) -> str:
        return self.text.lower() if self.kind == "name" else ""


def _tokens(text: str) -> list[_Tok]:
    out = []
    for m in _TOKEN.finditer(text):  # one pass: the last alternative takes any other char
        kind = m.lastgroup
        if kind == "ws":
            continue
        pos = m.start()
        if kind == "bad":
            if text[pos] in "'\"":
                what = "string" if text[pos] == "'" else "name"
                raise WhereError(f"where: unterminated {what} at position {pos + 1} (a quote "
                                 "opens it, none closes it)")
            raise WhereError(f"where: unexpected character {text[pos]!r} at position "
                             f"{pos + 1}")
        assert kind is not None
        out.append(_Tok(kind, m.group(), pos))
    out.append(_Tok("end", "", len(text)))
    return out


@dataclass(frozen=True, slots=True)
class _Part:
    """A parsed piece of the condition with what the limits need: its size and depth as
    :func:`sediment.query.expressions.tree_shape` counts them (a chain of one AND or OR is
    one level), and, for ``field = literal``, the field and literal (OR-chains of those
    become one ``is_in``)."""

    expr: pc.Expression
    nodes: int
    depth: int
    top: str = ""
    """The function at the top (and_kleene, or_kleene) when a chain of it may absorb it."""
    equality: tuple[str, pa.Scalar] | None = None


def _bounded(text: str, limit: int = 40) -> str:
    """``text`` quoted, cut to ``limit`` characters (an error never echoes a whole input)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _balanced(parts: list[_Part], fn: str) -> _Part:
    """``parts`` joined by ``fn`` (and_kleene/or_kleene) as a balanced tree: Python builds
    it without deep recursion whatever the number of parts."""
    if len(parts) == 1:
        return parts[0]
    exprs = [p.expr for p in parts]
    join = (lambda x, y: x & y) if fn == "and_kleene" else (lambda x, y: x | y)
    while len(exprs) > 1:
        exprs = [join(exprs[i], exprs[i + 1]) if i + 1 < len(exprs) else exprs[i]
                 for i in range(0, len(exprs), 2)]
    depth = 1 + max(p.depth - (p.top == fn) for p in parts)
    nodes = 1 + sum(p.nodes - (p.top == fn) for p in parts)
    return _Part(exprs[0], nodes, depth, fn)


def _collapsible(typ: pa.DataType) -> bool:
    """Whether ``f = a OR f = b ...`` may become ``f IN (a, b, ...)``: not for floats,
    where NaN and -0.0 compare otherwise than a set lookup matches them."""
    return not (pa.types.is_floating(typ) or pa.types.is_nested(typ))


class _Parser:
    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text = text
        self.schema = schema
        self.toks = _tokens(text)
        self.i = 0
        self.nesting = 0
        """Parentheses and NOTs open at this point (bounds Python's recursion)."""
        self.negations = 0
        """NOTs open at this point: an OR-chain under an odd number is not collapsed (a
        null field's ``f = 1 OR f = 2`` is null, its ``f IN (1, 2)`` false, and NOT tells
        them apart)."""

    def error(self, msg: str, tok: _Tok | None = None) -> WhereError:
        tok = tok or self.peek()
        near = "the end" if tok.kind == "end" else _bounded(tok.text)
        return WhereError(f"where: {msg} at position {tok.pos + 1} (at {near})")

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def accept(self, word: str) -> bool:
        if self.peek().word == word:
            self.i += 1
            return True
        return False

    def expect(self, word: str, what: str) -> None:
        if not self.accept(word):
            raise self.error(f"expected {what}")

    def expect_punct(self, p: str) -> None:
        tok = self.peek()
        if tok.kind != "punct" or tok.text != p:
            raise self.error(f"expected {p!r}")
        self.i += 1

    def parse(self) -> pc.Expression:
        if self.peek().kind == "end":
            raise self.error("expected a condition")
        e = self.expr()
        if self.peek().kind != "end":
            raise self.error("expected AND, OR or the end")
        if e.depth > MAX_FILTER_DEPTH:
            raise WhereError(f"where: the condition nests {e.depth} levels deep (at most "
                             f"{MAX_FILTER_DEPTH})")
        if e.nodes > MAX_FILTER_NODES:
            raise WhereError(f"where: the condition has {e.nodes} parts (at most "
                             f"{MAX_FILTER_NODES})")
        return e.expr

    def expr(self) -> _Part:
        terms = [self.term()]
        while self.accept("or"):
            terms.append(self.term())
        if len(terms) > 1 and self.negations % 2 == 0:
            terms = self.collapse(terms)
        return _balanced(terms, "or_kleene")

    def collapse(self, terms: list[_Part]) -> list[_Part]:
        """ORs of ``field = literal`` on one field as one ``is_in`` (outside NOT, where a
        null's false and null both drop the row)."""
        groups: dict[str, list[_Part]] = {}
        for t in terms:
            if t.equality is not None:
                groups.setdefault(t.equality[0], []).append(t)
        merged = {name: g for name, g in groups.items() if len(g) > 1}
        if not merged:
            return terms
        out = [t for t in terms if t.equality is None or t.equality[0] not in merged]
        for name, g in merged.items():
            typ = self.schema.field(name).type
            values = pa.array([t.equality[1] for t in g if t.equality is not None], typ)
            out.append(_Part(pc.field(name).isin(values), 2, 2))
        return out

    def term(self) -> _Part:
        factors = [self.factor()]
        while self.accept("and"):
            factors.append(self.factor())
        return _balanced(factors, "and_kleene")

    def nested(self, tok: _Tok) -> None:
        self.nesting += 1
        if self.nesting > MAX_FILTER_DEPTH:
            raise self.error(f"the condition nests more than {MAX_FILTER_DEPTH} levels of "
                             f"parentheses and NOTs", tok)

    def factor(self) -> _Part:
        tok = self.peek()
        if self.accept("not"):
            self.nested(tok)
            self.negations += 1
            inner = self.factor()
            self.negations -= 1
            self.nesting -= 1
            return _Part(~inner.expr, 1 + inner.nodes, 1 + inner.depth)
        if tok.kind == "punct" and tok.text == "(":
            self.nested(tok)
            self.i += 1
            e = self.expr()
            self.expect_punct(")")
            self.nesting -= 1
            return e
        return self.predicate()

    def field(self) -> tuple[str, pa.DataType]:
        tok = self.next()
        if tok.kind == "qname":
            name = tok.text[1:-1].replace('""', '"')
        elif tok.kind == "name" and tok.word not in _KEYWORDS:
            name = tok.text
        else:
            raise self.error("expected a field name", tok)
        if name not in self.schema.names:
            raise self.error(f"unknown field {name!r} (fields: "
                             f"{', '.join(self.schema.names)})", tok)
        return name, self.schema.field(name).type

    def literal(self, name: str, typ: pa.DataType) -> pa.Scalar:
        tok = self.next()
        value: Any
        if tok.kind == "num":
            value = float(tok.text) if re.search(r"[.eE]", tok.text) else int(tok.text)
        elif tok.kind == "str":
            value = tok.text[1:-1].replace("''", "'")
        elif tok.word in ("true", "false"):
            value = tok.word == "true"
        elif tok.word == "null":
            raise self.error("null compares to nothing: write IS NULL or IS NOT NULL", tok)
        else:
            raise self.error("expected a literal (number, 'string', true or false)", tok)
        try:
            return cast_literal(value, typ)
        except ValueError:
            text = tok.text if len(tok.text) <= 40 else tok.text[:40] + "..."
            raise self.error(f"literal {text} does not fit field {name!r} ({typ})",
                             tok) from None

    def predicate(self) -> _Part:
        name, typ = self.field()
        f = pc.field(name)
        tok = self.peek()
        if tok.kind == "op":
            self.i += 1
            v = self.literal(name, typ)
            op = tok.text
            if op == "=":
                eq = (name, v) if _collapsible(typ) else None
                return _Part(f == v, 3, 2, equality=eq)
            if op in ("!=", "<>"):
                return _Part(f != v, 3, 2)
            return _Part({"<": f < v, "<=": f <= v, ">": f > v, ">=": f >= v}[op], 3, 2)
        if self.accept("is"):
            negate = self.accept("not")
            self.expect("null", "NULL")
            return _Part(f.is_valid() if negate else f.is_null(), 2, 2)
        negate = self.accept("not")
        if self.accept("in"):
            self.expect_punct("(")
            values = [self.literal(name, typ)]
            while self.peek().kind == "punct" and self.peek().text == ",":
                self.i += 1
                values.append(self.literal(name, typ))
            self.expect_punct(")")
            # SQL's IN is null for a null field, where Arrow's is_in is false, which NOT
            # turns true (NOT IN would match every null, as != and NOT (f = 1) never do):
            # or-ed with null exactly where the field is null
            e = f.isin(pa.array(values, typ)) | (f.is_null() & (f != f))
            return _Part(~e, 5, 10) if negate else _Part(e, 4, 9, "or_kleene")
        if self.accept("between"):
            lo = self.literal(name, typ)
            self.expect("and", "AND")
            hi = self.literal(name, typ)
            e = (f >= lo) & (f <= hi)
            return _Part(~e, 8, 4) if negate else _Part(e, 7, 3, "and_kleene")
        raise self.error("expected a comparison (= != < <= > >=), IN, BETWEEN or IS")


_OFFSET_OR_Z = re.compile(r"[T ]\d\d(?::\d\d){0,2}(?:\.\d+)?(?:[zZ]|[+-]\d\d(?::?\d\d)?)$")
"""The end of a time literal that carries its offset after its time (``Z``, ``+02:00``,
``-0500``; a date alone has none: its ``-01`` is its day)."""


def cast_literal(value: Any, typ: pa.DataType) -> pa.Scalar:
    """A JSON-like value (number, string, boolean) as a scalar of a field's type, as
    ``--where`` reads literals: a string is parsed for temporal and numeric fields and
    encoded for binary ones, an integral float fits an integer field. ValueError when it
    does not fit."""
    try:
        if isinstance(value, float) and pa.types.is_integer(typ):
            if not value.is_integer():
                raise ValueError("not an integer")
            value = int(value)
        if isinstance(value, float | int) and not isinstance(value, bool) \
                and pa.types.is_decimal(typ):
            value = decimal.Decimal(repr(value))  # 2.5 is 2.5, not its binary neighbour
        if isinstance(value, str) and not (pa.types.is_string(typ)
                                           or pa.types.is_large_string(typ)):
            if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
                return pa.scalar(value.encode(), typ)
            if pa.types.is_timestamp(typ) and typ.tz is not None \
                    and _OFFSET_OR_Z.search(value) is None:
                # a time without an offset, on a field with a time zone: a wall time in that
                # zone, as SQL reads a plain timestamp literal against a zoned column
                # ('2024-01-01' on a UTC field is its midnight UTC)
                naive = pa.array([value]).cast(pa.timestamp(typ.unit))
                return pc.assume_timezone(naive, typ.tz)[0]
            return pa.scalar(value).cast(typ)
        return pa.scalar(value, typ)
    except (pa.ArrowException, TypeError, ValueError, OverflowError, UnicodeError,
            decimal.InvalidOperation) as e:
        raise ValueError(str(e)) from None


def parse_where(text: str, schema: pa.Schema) -> pc.Expression:
    """The ``--where`` string as a pyarrow expression over ``schema`` (the table's Arrow
    schema); WhereError (a QueryError) naming the 1-based position of the first problem, or
    the limit a text past MAX_WHERE_CHARS, MAX_FILTER_DEPTH or MAX_FILTER_NODES exceeds."""
    if not isinstance(text, str):
        raise WhereError(f"where: expected text, not {type(text).__name__}")
    if len(text) > MAX_WHERE_CHARS:
        raise WhereError(f"where: the condition is {len(text)} characters long (at most "
                         f"{MAX_WHERE_CHARS})")
    return _Parser(text, schema).parse()
