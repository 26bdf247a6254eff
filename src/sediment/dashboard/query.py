"""The query view: exact keys or a key range typed in a form, at a version or tag, with a
``where`` filter, the first N records and the query plan (leaves and files read).

Form values are text: each is checked here (lengths, the limit) and converted to the row key's
types; the table then validates the keys themselves (``QueryError`` naming the key), so the
page shows the library's own message for a bad one. The ``where`` text goes to the table as
it is (``filter=``, the syntax of ``--where`` and ``table.query(filter="status >= 500")``):
text that does not parse comes back as the library's ``WhereError``, naming the position.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sediment.core.regions import Range
from sediment.errors import QueryError
from sediment.query.request import ReadRequest
from sediment.schema import Schema
from sediment.table import Table
from sediment.types import key_from_text, region_text

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_KEYS = 1000
MAX_TEXT = 10_000
PLAN_LEAVES = 200
"""Leaves of the plan listed one by one (the counts cover all of them)."""


class FormError(QueryError):
    """A form value that is not a key, a range end, a version or a limit."""


def _scalar(text: str, field: pa.Field) -> Any:
    """A value of a row-key field from form text (:func:`sediment.types.key_from_text`)."""
    try:
        return key_from_text(text, field)
    except ValueError as e:
        raise FormError(str(e)) from None


def parse_key(text: str, schema: Schema) -> tuple[Any, ...]:
    """A key from the form: a value of the first row-key field, or a JSON array of values for
    several fields (``["a", 5]``; a shorter array is a prefix)."""
    text = text.strip()
    if text.startswith("[") and len(schema.row_keys) > 1:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise FormError(f"key {text!r} is not a JSON array: {e}") from None
        if not isinstance(values, list) or not values:
            raise FormError(f"key {text!r} must be a non-empty JSON array")
        return tuple(_scalar(v, f) if isinstance(v, str) else v
                     for v, f in zip(values, schema.row_keys, strict=False))
    return (_scalar(text, schema.row_keys[0]),)


def _text(form: Mapping[str, str], name: str) -> str:
    value = form.get(name, "") or ""
    if len(value) > MAX_TEXT:
        raise FormError(f"{name} is longer than {MAX_TEXT} characters")
    return value


FORM_FIELDS = ("keys", "start", "end", "end_inclusive", "version", "where", "limit")
"""The query form's fields, as the page and the JSON API take them."""


def parse_form(form: Mapping[str, str], schema: Schema
               ) -> tuple[list[tuple[Any, ...]] | None, Range | None, str | None, int]:
    """Keys (one per line), a range (start inclusive, end exclusive unless ``end_inclusive``),
    a version or tag, and the limit, from the form's fields (``where`` is the table's to
    check)."""
    lines = [ln for ln in _text(form, "keys").splitlines() if ln.strip()]
    if len(lines) > MAX_KEYS:
        raise FormError(f"at most {MAX_KEYS} keys, one per line")
    keys = [parse_key(ln, schema) for ln in lines] or None
    start, end = _text(form, "start").strip(), _text(form, "end").strip()
    rng = None
    if start or end:
        rng = Range(parse_key(start, schema) if start else None,
                    parse_key(end, schema) if end else None,
                    end_inclusive=form.get("end_inclusive") in ("1", "on", "true"))
    version = _text(form, "version").strip() or None
    limit_text = _text(form, "limit").strip()
    try:
        limit = int(limit_text) if limit_text else DEFAULT_LIMIT
    except ValueError:
        raise FormError(f"limit {limit_text!r} is not a whole number") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise FormError(f"limit must be between 1 and {MAX_LIMIT}")
    return keys, rng, version, limit


def cell(value: Any) -> Any:
    """A record value as JSON a browser can parse (no NaN; bytes as text or base64)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(value).decode()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | dt.timedelta):
        return str(value)
    if isinstance(value, list | tuple):
        return [cell(v) for v in value]
    if isinstance(value, dict):
        return {str(k): cell(v) for k, v in value.items()}
    return str(value)


def first_rows(reader: pa.RecordBatchReader, limit: int
               ) -> tuple[list[str], list[list[Any]], bool]:
    """Column names, the first ``limit`` records of ``reader`` (streamed: no more is read),
    and whether more records followed."""
    rows: list[list[Any]] = []
    more = False
    try:
        for batch in reader:
            if batch.num_rows == 0:
                continue
            need = limit - len(rows)
            if need <= 0:
                more = True
                break
            part = batch.slice(0, need)
            rows.extend([cell(v) for v in rec.values()] for rec in part.to_pylist())
            if batch.num_rows > need:
                more = True
                break
    finally:
        reader.close()
    return list(reader.schema.names), rows, more


def query_view(table: Table, form: Mapping[str, str]) -> dict[str, Any]:
    """The query's echo (the form as typed), plan and first records (those the ``where``
    filter keeps). Raises QueryError (the form's own FormError, or the library's for a key,
    range, version or filter it refuses: WhereError for filter text that does not parse)."""
    keys, rng, version, limit = parse_form(form, table.schema)
    where = _text(form, "where").strip() or None
    # the form is one read request (the JSON `sediment query --request`, Flight and Spark
    # take), planned once into a scan: its plan and its records
    request = ReadRequest(keys=keys, ranges=rng, version=version, filter=where)
    scan = table.prepare(request)
    plan = scan.plan
    columns, rows, more = first_rows(scan.to_batches(), limit)
    types = [f.type for f in table.schema.row_keys]
    leaves = [{"leaf_id": s.leaf_id, "region": region_text(s.region, types),
               "files": len(s.references),
               "records": sum(r.records for r in s.references)}
              for s in plan.subqueries]
    return {
        "table": table.name,
        "form": {k: form.get(k, "") for k in FORM_FIELDS},
        "plan": {"version": plan.version, "leaves": len(leaves), "files": len(plan.files),
                 "references": sum(x["files"] for x in leaves),
                 "subqueries": leaves[:PLAN_LEAVES]},
        "columns": columns, "rows": rows, "limit": limit, "more": more,
        "request": request.to_json_text(),
    }
