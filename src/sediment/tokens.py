"""Scoped tokens of a service (``--tokens-file`` of ``sediment serve`` and ``sediment
dashboard``): each token has a name, a right and the tables it reaches.

A tokens file holds one JSON object a line (blank lines and lines starting with ``#`` are
skipped)::

    {"name": "etl", "sha256": "<hex digest>", "tables": ["events_*"], "right": "write"}

The file keeps SHA-256 digests, never tokens: a token given by a client is hashed and its
digest compared (in constant time) with every entry's. ``tables`` are glob patterns
(``fnmatch``, case-sensitive: ``*``, ``?``, ``[abc]``) matched against a table's name; a right
includes those below it (read < write < admin). What each call or page needs is the service's
to say (``sediment.serve.actions.ACTION_RIGHTS``, ``sediment.dashboard.auth``); a call on no
table in particular (a health check, the list of tables) needs the right alone, and lists
show only the tables a token reaches. ``--token-file`` stays one token with every right on
every table (:meth:`Tokens.single`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from sediment.errors import PermissionDeniedError, TokensFileError

Right = Literal["read", "write", "admin"]
RIGHTS: tuple[Right, ...] = ("read", "write", "admin")
"""The rights, each including those before it."""

FIELDS = ("name", "sha256", "tables", "right")
"""The fields of a tokens file's entry, each required."""


@dataclass(frozen=True, slots=True)
class Scope:
    """What one token may do: ``right`` on the tables ``tables`` (glob patterns) match."""

    name: str
    tables: tuple[str, ...]
    right: Right

    def allows(self, right: Right, table: str | None = None) -> bool:
        """Does the scope give ``right`` on ``table`` (None: on no table in particular)?"""
        if RIGHTS.index(self.right) < RIGHTS.index(right):
            return False
        return table is None or any(fnmatch.fnmatchcase(table, p) for p in self.tables)

    def check(self, right: Right, table: str | None, what: str) -> None:
        """PermissionDeniedError, naming the token and what it lacks, unless it
        :meth:`allows` ``right`` on ``table``; ``what`` names the call (``do_put``,
        ``action drop-table``)."""
        if self.allows(right, table):
            return
        on = f" on table {table}" if table is not None else ""
        if RIGHTS.index(self.right) < RIGHTS.index(right):
            why = f"{what} needs the {right} right{on}; token {self.name!r} has {self.right}"
        else:
            why = (f"{what}: token {self.name!r} does not reach table {table} (its tables: "
                   f"{', '.join(self.tables) or 'none'})")
        raise PermissionDeniedError(f"permission denied: {why}")


ANYONE = Scope("anyone", ("*",), "admin")
"""The scope of every caller of a service without tokens (a loopback bind)."""


def digest_of(token: str | bytes) -> str:
    """The SHA-256 hex digest a tokens file keeps for ``token`` (``sha256sum`` of its bytes,
    without a newline)."""
    raw = token.encode("utf-8") if isinstance(token, str) else token
    return hashlib.sha256(raw).hexdigest()


class Tokens:
    """A service's tokens and their scopes (see the module docstring)."""

    def __init__(self, entries: Iterable[tuple[Scope, str]]) -> None:
        self._entries = [(scope, bytes.fromhex(digest)) for scope, digest in entries]

    @classmethod
    def single(cls, token: str, name: str = "token") -> Tokens:
        """One token with every right on every table (``--token-file``, ``--token-env``)."""
        return cls([(Scope(name, ("*",), "admin"), digest_of(token))])

    @classmethod
    def parse(cls, text: str, source: str) -> Tokens:
        """The entries of a tokens file's ``text``; TokensFileError naming ``source`` and the
        line for anything that is no entry, and for a name or digest given twice."""
        entries: list[tuple[Scope, str]] = []
        names: set[str] = set()
        digests: set[str] = set()
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"{source} line {number}"
            scope, digest = _entry(line, where)
            if scope.name in names:
                raise TokensFileError(f"{where}: token name {scope.name!r} is given twice")
            if digest in digests:
                raise TokensFileError(f"{where}: token {scope.name!r} has the digest of an "
                                      f"earlier token (one token, one scope)")
            names.add(scope.name)
            digests.add(digest)
            entries.append((scope, digest))
        if not entries:
            raise TokensFileError(f"{source} holds no token: a service with it would let "
                                  f"nobody in")
        return cls(entries)

    @classmethod
    def read(cls, path: Path) -> Tokens:
        """:meth:`parse` of the file at ``path`` (TokensFileError when it cannot be read)."""
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise TokensFileError(f"cannot read --tokens-file {str(path)!r}: "
                                  f"{getattr(e, 'strerror', None) or e}") from None
        return cls.parse(text, f"--tokens-file {str(path)!r}")

    def plus(self, other: Tokens) -> Tokens:
        """These tokens and ``other``'s (TokensFileError for a name or digest in both)."""
        mine = {s.name for s, _ in self._entries}
        digests = {d for _, d in self._entries}
        for scope, digest in other._entries:
            if scope.name in mine:
                raise TokensFileError(f"token name {scope.name!r} is taken by a token of "
                                      f"--tokens-file (the --token-file token is named so)")
            if digest in digests:
                raise TokensFileError("the --token-file token (or its variable's) is also in "
                                      "--tokens-file: one token, one scope")
        joined = Tokens([])
        joined._entries = [*self._entries, *other._entries]
        return joined

    def scope_of(self, given: str | bytes | None) -> Scope | None:
        """The scope of the token a client gave (None: no token, or none of these). Every
        entry is compared, in constant time, whichever matches."""
        if not given:
            return None
        digest = bytes.fromhex(digest_of(given))
        found = None
        for scope, known in self._entries:
            if hmac.compare_digest(digest, known):
                found = scope
        return found

    def names(self) -> list[str]:
        return [s.name for s, _ in self._entries]


def _entry(line: str, where: str) -> tuple[Scope, str]:
    """One line's scope and digest (TokensFileError naming ``where`` and the field)."""
    try:
        doc = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as e:
        raise TokensFileError(f"{where}: not a JSON object ({e})") from None
    if not isinstance(doc, dict):
        raise TokensFileError(f"{where}: not a JSON object of {', '.join(FIELDS)}")
    unknown = sorted(set(doc) - set(FIELDS))
    missing = [f for f in FIELDS if f not in doc]
    if unknown or missing:
        odd = f"unknown {unknown[0]!r}" if unknown else f"missing {missing[0]!r}"
        raise TokensFileError(f"{where}: an entry has exactly the fields {', '.join(FIELDS)} "
                              f"({odd})")
    name, digest, tables, right = (doc[f] for f in FIELDS)
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise TokensFileError(f"{where}: 'name' must be a printable, non-empty string")
    if not isinstance(digest, str) or len(digest) != 64 or \
            any(c not in "0123456789abcdefABCDEF" for c in digest):
        raise TokensFileError(f"{where}: token {name!r}: 'sha256' must be the token's SHA-256 "
                              f"as 64 hex digits (the file keeps digests, never tokens)")
    if not isinstance(tables, list) or not all(isinstance(t, str) and t for t in tables):
        raise TokensFileError(f"{where}: token {name!r}: 'tables' must be a list of table "
                              f"name patterns (\"*\" for all)")
    if right not in RIGHTS:
        raise TokensFileError(f"{where}: token {name!r}: 'right' must be one of "
                              f"{', '.join(RIGHTS)}, not {right!r}")
    return Scope(name, tuple(tables), cast(Right, right)), digest.lower()
