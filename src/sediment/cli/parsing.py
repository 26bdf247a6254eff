"""Parsing command-line values: schema fields, schema files, key values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from sediment.cli.errors import CliError
from sediment.errors import SchemaError
from sediment.schema import Schema
from sediment.types import key_from_text, parse_type


def _parse_field(spec: str, *, option: str, nullable: bool) -> pa.Field:
    """``name:type`` from --row-key/--sort-key/--value into an Arrow field.

    Splits on the first ':' only: type names (``map<string, int64>``) never contain one.
    """
    name, sep, type_text = spec.partition(":")
    if not sep or not name.strip() or not type_text.strip():
        raise CliError(f"{option} {spec!r} must be NAME:TYPE (e.g. key:string)")
    try:
        typ = parse_type(type_text)
    except SchemaError as exc:
        raise SchemaError(f"{option} {spec!r}: {exc}") from None
    return pa.field(name.strip(), typ, nullable=nullable)


def _schema_from_file(path: Path) -> Schema:
    """Read a schema JSON file in the format ``Schema.from_json`` accepts."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"cannot read schema file {str(path)!r}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CliError(f"schema file {str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CliError(f"schema file {str(path)!r} must hold a JSON object with row_keys")
    try:
        return Schema.from_json(doc)
    except SchemaError as exc:
        raise SchemaError(f"schema file {str(path)!r}: {exc}") from None


def convert_split_point(text: str, field: pa.Field, what: str = "split point") -> Any:
    """A split point (or a key: ``what`` names it in the error) typed on the command line,
    as a value of ``field``'s type (:func:`sediment.types.key_from_text`)."""
    try:
        return key_from_text(text, field)
    except ValueError:
        raise CliError(f"{what} {text!r} is not a valid {field.type} for row key field "
                       f"{field.name!r}") from None
