"""Scoped tokens (``sediment.tokens``) on their own: rights include the lower ones, patterns
match whole names, a token is found by its digest (computed here with hashlib), and a tokens
file's mistakes are refused naming the line."""

from __future__ import annotations

import hashlib
import json

import pytest

from sediment.errors import PermissionDeniedError, TokensFileError
from sediment.tokens import ANYONE, Scope, Tokens


def _line(name: str, token: str, tables: list[str], right: str) -> str:
    return json.dumps({"name": name, "sha256": hashlib.sha256(token.encode()).hexdigest(),
                       "tables": tables, "right": right})


def test_rights_and_patterns() -> None:
    writer = Scope("w", ("logs_*", "m[ae]trics"), "write")
    assert writer.allows("read", "logs_x") and writer.allows("write", "metrics")
    assert writer.allows("write", "matrics") and not writer.allows("write", "mxtrics")
    assert not writer.allows("admin", "logs_x") and not writer.allows("read", "xlogs_x")
    assert not writer.allows("read", "LOGS_x")  # case-sensitive
    assert writer.allows("read") and not writer.allows("admin")  # no table in particular
    assert ANYONE.allows("admin", "anything")
    with pytest.raises(PermissionDeniedError, match="do_put needs the admin right on table "
                                                    "logs_a; token 'w' has write"):
        writer.check("admin", "logs_a", "do_put")
    with pytest.raises(PermissionDeniedError, match="token 'w' does not reach table secrets "
                                                    r"\(its tables: logs_\*, m\[ae\]trics\)"):
        writer.check("read", "secrets", "do_get")


def test_tokens_are_found_by_digest() -> None:
    tokens = Tokens.parse("\n".join([
        "# comment", "", _line("a", "tok-a", ["*"], "read"),
        _line("b", "tok-b", ["x"], "admin")]), "f")
    assert tokens.scope_of("tok-a") == Scope("a", ("*",), "read")
    assert tokens.scope_of(b"tok-b") == Scope("b", ("x",), "admin")
    assert tokens.scope_of("tok-c") is None and tokens.scope_of("") is None
    assert tokens.scope_of(None) is None
    both = tokens.plus(Tokens.single("tok-root"))
    assert both.names() == ["a", "b", "token"]
    assert both.scope_of("tok-root") == Scope("token", ("*",), "admin")
    with pytest.raises(TokensFileError, match="also in --tokens-file"):
        tokens.plus(Tokens.single("tok-a"))


@pytest.mark.parametrize("text, message", [
    (_line("a", "t1", ["*"], "read") + "\n" + _line("a", "t2", ["*"], "read"),
     "f line 2: token name 'a' is given twice"),
    (_line("a", "t1", ["*"], "read") + "\n" + _line("b", "t1", ["*"], "read"),
     "f line 2: token 'b' has the digest of an earlier token"),
    ('{"name": "", "sha256": "' + "a" * 64 + '", "tables": [], "right": "read"}',
     "'name' must be a printable, non-empty string"),
    ('{"name": "a", "sha256": "' + "g" * 64 + '", "tables": [], "right": "read"}',
     "as 64 hex digits"),
    ('{"name": "a", "sha256": "' + "a" * 64 + '", "tables": [""], "right": "read"}',
     "'tables' must be a list of table name patterns"),
    ('{"name": "a", "sha256": "' + "a" * 64 + '", "tables": [], "right": "read", "x": 1}',
     "unknown 'x'"),
    ("[1, 2]", "not a JSON object of name, sha256, tables, right"),
], ids=["name-twice", "digest-twice", "empty-name", "not-hex", "empty-pattern",
        "extra-field", "a-list"])
def test_a_bad_file_names_the_line(text: str, message: str) -> None:
    with pytest.raises(TokensFileError, match=message.replace("(", r"\(")):
        Tokens.parse(text, "f")
