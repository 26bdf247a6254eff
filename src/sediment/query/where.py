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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sediment.errors import QueryError

# ---- the --where syntax -------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<str>'(?:[^']|'')*')
  | (?P<qname>"(?:[^"]|"")*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<op><=|>=|!=|<>|=|<|>)
  | (?P<punct>[(),])
""", re.VERBOSE)

_KEYWORDS = {"and", "or", "not", "in", "between", "is", "null", "true", "false"}


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str
    text: str
    pos: int
    """0-based offset in the text."""

    @property
    def word(self) -> str:
        return self.text.lower() if self.kind == "name" else ""


class WhereError(QueryError):
    """A ``--where`` string that does not parse (the message names the position)."""


def _tokens(text: str) -> list[_Tok]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos] in "'\"":
                what = "string" if text[pos] == "'" else "name"
                raise WhereError(f"where: unterminated {what} at position {pos + 1} (a quote "
                                 "opens it, none closes it)")
            raise WhereError(f"where: unexpected character {text[pos]!r} at position "
                             f"{pos + 1}")
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            out.append(_Tok(kind, m.group(), pos))
        pos = m.end()
    out.append(_Tok("end", "", len(text)))
    return out


class _Parser:
    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text = text
        self.schema = schema
        self.toks = _tokens(text)
        self.i = 0

    def error(self, msg: str, tok: _Tok | None = None) -> WhereError:
        tok = tok or self.peek()
        near = "the end" if tok.kind == "end" else repr(tok.text)
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
        return e

    def expr(self) -> pc.Expression:
        e = self.term()
        while self.accept("or"):
            e = e | self.term()
        return e

    def term(self) -> pc.Expression:
        e = self.factor()
        while self.accept("and"):
            e = e & self.factor()
        return e

    def factor(self) -> pc.Expression:
        if self.accept("not"):
            return ~self.factor()
        tok = self.peek()
        if tok.kind == "punct" and tok.text == "(":
            self.i += 1
            e = self.expr()
            self.expect_punct(")")
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
            if isinstance(value, float) and (pa.types.is_integer(typ)):
                if not value.is_integer():
                    raise ValueError("not an integer")
                value = int(value)
            if isinstance(value, str) and not (pa.types.is_string(typ)
                                               or pa.types.is_large_string(typ)):
                if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
                    return pa.scalar(value.encode(), typ)
                return pa.scalar(value).cast(typ)
            return pa.scalar(value, typ)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError,
                TypeError, ValueError, OverflowError):
            raise self.error(f"literal {tok.text} does not fit field {name!r} ({typ})",
                             tok) from None

    def predicate(self) -> pc.Expression:
        name, typ = self.field()
        f = pc.field(name)
        tok = self.peek()
        if tok.kind == "op":
            self.i += 1
            v = self.literal(name, typ)
            op = tok.text
            if op == "=":
                return f == v
            if op in ("!=", "<>"):
                return f != v
            return {"<": f < v, "<=": f <= v, ">": f > v, ">=": f >= v}[op]
        if self.accept("is"):
            negate = self.accept("not")
            self.expect("null", "NULL")
            return f.is_valid() if negate else f.is_null()
        negate = self.accept("not")
        if self.accept("in"):
            self.expect_punct("(")
            values = [self.literal(name, typ)]
            while self.peek().kind == "punct" and self.peek().text == ",":
                self.i += 1
                values.append(self.literal(name, typ))
            self.expect_punct(")")
            e = f.isin(pa.array([v.as_py() for v in values], typ))
            return ~e if negate else e
        if self.accept("between"):
            lo = self.literal(name, typ)
            self.expect("and", "AND")
            hi = self.literal(name, typ)
            e = (f >= lo) & (f <= hi)
            return ~e if negate else e
        raise self.error("expected a comparison (= != < <= > >=), IN, BETWEEN or IS")


def parse_where(text: str, schema: pa.Schema) -> pc.Expression:
    """The ``--where`` string as a pyarrow expression over ``schema`` (the table's Arrow
    schema); WhereError (a QueryError) naming the 1-based position of the first problem."""
    return _Parser(text, schema).parse()
