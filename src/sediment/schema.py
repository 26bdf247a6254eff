"""Table schemas: row keys, sort keys and values as Arrow types.

Records are ordered by the tuple (row keys..., sort keys...). Strings and binaries order by their
bytes (for ``str`` this equals Python's code-point order), integers numerically. Key fields are
never null; value fields may be.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pyarrow as pa

from sediment.errors import DataError, SchemaError
from sediment.types import KEY_TYPES, is_key_type, parse_type, storage_type

RESERVED_PREFIX = "__sediment"
"""Field names starting with this are Sediment's own (e.g. the hidden record sequence of
compacted files, sediment.files.sequence; the sort's and aggregation's working columns);
user schemas may not use them."""

FIELD_ID_KEY = b"PARQUET:field_id"
"""The Arrow field metadata key Parquet readers and writers map to a column's field id."""

RESERVED_ROW_KEY_NAMES = ("__count", "__idx")
"""Names a row key field may not have: the key samples (sediment.files.sample) put the row
keys next to columns of these names, in sidecars already written, so they keep them."""


FieldSpec: TypeAlias = pa.Field | tuple[str, pa.DataType] | tuple[str, pa.DataType, bool]


def _as_field(spec: FieldSpec, *, role: str) -> pa.Field:
    f = _as_given_field(spec, role=role)
    stored = storage_type(f.type)
    return f if stored.equals(f.type) else f.with_type(stored)


def _as_given_field(spec: FieldSpec, *, role: str) -> pa.Field:
    if isinstance(spec, pa.Field):
        return spec
    if isinstance(spec, tuple) and len(spec) in (2, 3):
        name, typ = spec[0], spec[1]
        nullable = bool(spec[2]) if len(spec) == 3 else role == "value"
        if isinstance(typ, str):
            typ = parse_type(typ)
        if not isinstance(name, str) or not isinstance(typ, pa.DataType):
            raise SchemaError(f"{role} field {spec!r} must be (name, pyarrow type)")
        return pa.field(name, typ, nullable=nullable)
    raise SchemaError(f"{role} field {spec!r} must be a pyarrow Field or (name, type)")


@dataclass(frozen=True, slots=True)
class Schema:
    """The fields of a table: row keys (partitioning), sort keys (order within a row key), values.

    Accepts pyarrow fields or ``(name, type[, nullable])`` tuples. A tuple key field defaults to
    non-nullable; a key field declared nullable (``pa.field`` defaults to nullable) is rejected,
    because a null key has no place in the order.
    """

    row_keys: tuple[pa.Field, ...]
    sort_keys: tuple[pa.Field, ...]
    values: tuple[pa.Field, ...]
    ids: tuple[int, ...]
    """Each field's id (row keys, sort keys, values in order): what a column is, whatever its
    name. A new schema numbers its fields 1..n; an added column takes ``last_id + 1``, so a
    dropped and re-added name never meets the old column's values (Iceberg's field ids)."""
    last_id: int
    """The highest id the table ever gave a field (dropped ones included)."""
    created_id: int
    """The highest id of the fields the table was created with: a field above it was added
    by a schema change, and data written without it holds nulls there (:attr:`added`)."""
    names: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """Every field's name, keys first (what :attr:`field_names` lists)."""

    def __init__(
        self,
        row_keys: Sequence[FieldSpec],
        sort_keys: Sequence[FieldSpec] = (),
        values: Sequence[FieldSpec] = (),
        *,
        ids: Sequence[int] | None = None,
        last_id: int | None = None,
        created_id: int | None = None,
    ) -> None:
        rk = tuple(_as_field(f, role="row key") for f in row_keys)
        sk = tuple(_as_field(f, role="sort key") for f in sort_keys)
        vs = tuple(_as_field(f, role="value") for f in values)
        if not rk:
            raise SchemaError("a schema needs at least one row key field")
        for role, fields in (("row key", rk), ("sort key", sk)):
            for f in fields:
                if f.nullable:
                    raise SchemaError(
                        f"{role} field {f.name!r} must not be nullable "
                        "(declare it with pa.field(name, type, nullable=False) or a tuple)"
                    )
                if not is_key_type(f.type):
                    raise SchemaError(
                        f"{role} field {f.name!r} has unsupported type {f.type}; "
                        f"key types: {', '.join(KEY_TYPES)}, timestamps with a time zone "
                        "(timestamp[us, tz=UTC])"
                    )
        seen: set[str] = set()
        for f in (*rk, *sk, *vs):
            if not f.name:
                raise SchemaError("field names must not be empty")
            if f.name in seen:
                raise SchemaError(f"duplicate field name {f.name!r}")
            if "\0" in f.name:  # Parquet readers end the name there: a column nobody finds
                raise SchemaError(f"field name {f.name!r} contains a NUL character")
            if f.name.startswith(RESERVED_PREFIX):
                raise SchemaError(f"field name {f.name!r}: names starting with "
                                  f"{RESERVED_PREFIX!r} are reserved for Sediment's own "
                                  "columns")
            seen.add(f.name)
        for f in rk:
            if f.name in RESERVED_ROW_KEY_NAMES:
                raise SchemaError(f"row key field {f.name!r}: the names "
                                  f"{', '.join(RESERVED_ROW_KEY_NAMES)} are reserved for the "
                                  "columns Sediment keeps beside row keys (key samples); "
                                  "rename the field")
        n = len(rk) + len(sk) + len(vs)
        given = tuple(range(1, n + 1)) if ids is None else tuple(int(i) for i in ids)
        if len(given) != n or len(set(given)) != n or any(i < 1 for i in given):
            raise SchemaError(f"field ids {list(given)} must be {n} distinct positive integers, "
                              "one per field")
        top = max(given, default=0) if last_id is None else int(last_id)
        if given and top < max(given):
            raise SchemaError(f"last field id {top} is below a field's id {max(given)}")
        object.__setattr__(self, "row_keys", rk)
        object.__setattr__(self, "sort_keys", sk)
        object.__setattr__(self, "values", vs)
        object.__setattr__(self, "ids", given)
        object.__setattr__(self, "last_id", top)
        object.__setattr__(self, "created_id", top if created_id is None else int(created_id))
        # the names every read asks for several times, kept (the lists handed out are copies)
        object.__setattr__(self, "names", tuple(f.name for f in (*rk, *sk, *vs)))

    @classmethod
    def from_arrow(cls, schema: pa.Schema, row_keys: Sequence[str],
                   sort_keys: Sequence[str] = ()) -> Schema:
        """A schema from an Arrow schema (a DataFrame's, a Parquet file's): the fields named by
        ``row_keys`` then ``sort_keys`` are the keys, in that order (made non-nullable: Arrow
        schemas of pandas and Parquet data mark every field nullable); every other field is a
        value, in the Arrow schema's order. Raises SchemaError naming a missing, repeated or
        unsupported field."""
        if not isinstance(schema, pa.Schema):
            raise SchemaError(f"from_arrow takes a pyarrow Schema, not {type(schema).__name__}")
        if isinstance(row_keys, str) or isinstance(sort_keys, str):
            raise SchemaError("row_keys and sort_keys are lists of field names")
        names = schema.names
        for role, wanted in (("row key", row_keys), ("sort key", sort_keys)):
            for n in wanted:
                if n not in names:
                    raise SchemaError(f"{role} field {n!r} is not in the Arrow schema "
                                      f"(fields: {', '.join(names)})")
                if names.count(n) > 1:
                    raise SchemaError(f"{role} field {n!r} appears more than once in the "
                                      "Arrow schema")
        keys = [*row_keys, *sort_keys]
        for n in keys:
            if keys.count(n) > 1:
                raise SchemaError(f"field {n!r} is named more than once in row_keys and "
                                  "sort_keys")

        def key(n: str) -> pa.Field:
            return schema.field(n).with_nullable(False)

        return cls([key(n) for n in row_keys], [key(n) for n in sort_keys],
                   [f for f in schema if f.name not in keys])

    # ---- views -------------------------------------------------------------------------
    @property
    def row_key_names(self) -> list[str]:
        return list(self.names[:len(self.row_keys)])

    @property
    def sort_key_names(self) -> list[str]:
        return list(self.names[len(self.row_keys):len(self.row_keys) + len(self.sort_keys)])

    @property
    def key_names(self) -> list[str]:
        """Row keys then sort keys: the order records are sorted by."""
        return list(self.names[:len(self.row_keys) + len(self.sort_keys)])

    @property
    def value_names(self) -> list[str]:
        return list(self.names[len(self.row_keys) + len(self.sort_keys):])

    @property
    def field_names(self) -> list[str]:
        return list(self.names)

    def to_arrow(self, *, field_ids: bool = False) -> pa.Schema:
        """The Arrow schema of the table's records, keys first; with ``field_ids``, each field
        carries its id as ``PARQUET:field_id`` metadata, which Parquet writers store in the
        file's schema (how a data file says which column is which)."""
        fields = [*self.row_keys, *self.sort_keys, *self.values]
        if field_ids:
            fields = [f.with_metadata({**(f.metadata or {}), FIELD_ID_KEY: str(i).encode()})
                      for f, i in zip(fields, self.ids, strict=True)]
        return pa.schema(fields)

    @property
    def fields(self) -> tuple[pa.Field, ...]:
        """Every field, keys first (the order of :meth:`to_arrow`)."""
        return (*self.row_keys, *self.sort_keys, *self.values)

    def id_of(self, name: str) -> int:
        """The id of field ``name`` (SchemaError naming the fields when there is none)."""
        for f, i in zip(self.fields, self.ids, strict=True):
            if f.name == name:
                return i
        raise SchemaError(f"no field {name!r}; fields: {', '.join(self.field_names)}")

    @property
    def added(self) -> frozenset[str]:
        """Value fields a schema change added (ids above :attr:`created_id`): data may omit
        them (nulls), as the files written before them do."""
        return frozenset(f.name for f, i in zip(self.fields, self.ids, strict=True)
                         if i > self.created_id)

    def by_id(self) -> dict[int, pa.Field]:
        """Field id -> field."""
        return dict(zip(self.ids, self.fields, strict=True))

    def field(self, name: str) -> pa.Field:
        for f in (*self.row_keys, *self.sort_keys, *self.values):
            if f.name == name:
                return f
        raise SchemaError(f"no field {name!r}; fields: {', '.join(self.field_names)}")

    def check_row_key(self, value: Any, *, what: str = "key") -> tuple[Any, ...]:
        """A user's row key (scalar, tuple or prefix tuple) checked against the row key types.

        Temporal values (``datetime``, ``date`` or int) come back as ints, the form keys take
        in the model (see ``sediment.core.keys``).
        """
        key = value if isinstance(value, tuple) else tuple(value) if isinstance(value, list) \
            else (value,)
        if not key or len(key) > len(self.row_keys):
            raise SchemaError(f"{what} {value!r} must have 1..{len(self.row_keys)} fields "
                              f"({', '.join(self.row_key_names)})")
        out = []
        for v, f in zip(key, self.row_keys, strict=False):
            if not _fits(v, f.type):
                raise SchemaError(f"{what} {value!r}: {v!r} is not a valid {f.type} "
                                  f"for row key field {f.name!r}")
            check_text(v, f"{what} {value!r}: field {f.name!r}")
            out.append(_temporal_as_int(v, f.type))
        return tuple(out)

    def check_key_field(self, name: str, value: Any, *, what: str = "value") -> Any:
        """One value of row-key field ``name`` checked against its type (temporal values as
        ints, the model's form): a per-field region's ends are checked one field at a time."""
        f = self.row_keys[self.row_key_names.index(name)]
        if not _fits(value, f.type):
            raise SchemaError(f"{what} {value!r} is not a valid {f.type} for row key field "
                              f"{name!r}")
        check_text(value, f"{what} {value!r}")
        return _temporal_as_int(value, f.type)

    # ---- serialisation -----------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """A JSON-able description: readable type strings plus the exact Arrow schema."""
        def fields(fs: Iterable[pa.Field]) -> list[dict[str, Any]]:
            return [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in fs]

        return {
            "row_keys": fields(self.row_keys),
            "sort_keys": fields(self.sort_keys),
            "values": fields(self.values),
            "arrow": base64.b64encode(self.to_arrow().serialize().to_pybytes()).decode(),
            "ids": list(self.ids),
            "last_field_id": self.last_id,
            "created_field_id": self.created_id,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Schema:
        """Read :meth:`to_json` output, or a hand-written ``{"row_keys": [{"name", "type"}]}``."""
        try:
            if "arrow" in doc:
                arrow = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(doc["arrow"])))
                nr, ns = len(doc["row_keys"]), len(doc.get("sort_keys", []))
                fs = list(arrow)
                return cls(fs[:nr], fs[nr : nr + ns], fs[nr + ns :], ids=doc.get("ids"),
                           last_id=doc.get("last_field_id"),
                           created_id=doc.get("created_field_id"))

            def fields(key: str, role: str) -> list[pa.Field]:
                out = []
                for f in doc.get(key, []):
                    nullable = f.get("nullable", role == "value")
                    out.append(pa.field(f["name"], parse_type(f["type"]), nullable=nullable))
                return out

            return cls(fields("row_keys", "key"), fields("sort_keys", "key"),
                       fields("values", "value"), ids=doc.get("ids"),
                       last_id=doc.get("last_field_id"),
                       created_id=doc.get("created_field_id"))
        except SchemaError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, pa.ArrowException) as e:
            raise SchemaError(f"invalid schema document: {e}") from e


def schema_difference(existing: Schema, wanted: Schema) -> str | None:
    """How ``wanted`` differs from ``existing``, naming the first field that does (None when
    they are the same): what ``create_table(..., exist_ok=True)`` refuses."""
    for role, a, b in (("row key", existing.row_keys, wanted.row_keys),
                       ("sort key", existing.sort_keys, wanted.sort_keys),
                       ("value", existing.values, wanted.values)):
        for i in range(max(len(a), len(b))):
            if i >= len(a):
                return f"{role} field {b[i].name!r} is not in the existing schema"
            if i >= len(b):
                return f"{role} field {a[i].name!r} of the existing schema is missing"
            if a[i].name != b[i].name:
                return (f"{role} field {i + 1} is {a[i].name!r} in the existing schema, "
                        f"{b[i].name!r} in the one given")
            if not a[i].type.equals(b[i].type) or a[i].nullable != b[i].nullable:
                def kind(f: pa.Field) -> str:
                    return f"{f.type}{' (nullable)' if f.nullable else ''}"
                return (f"{role} field {a[i].name!r} is {kind(a[i])} in the existing schema, "
                        f"{kind(b[i])} in the one given")
    return None


def check_text(value: Any, what: str) -> None:
    """Refuse a ``str`` that is not Unicode text UTF-8 can hold: one with a lone surrogate
    (``"\\ud800"``, or the ``"\\udcff"`` a command line makes of an undecodable byte). Arrow
    cannot encode it, so a key or range end holding one would fail deep in a read with a raw
    UnicodeEncodeError; this is the DataError ingest gives the same value (``what`` names the
    value; the message shows it escaped, so it prints anywhere and travels in gRPC metadata)."""
    if not isinstance(value, str):
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DataError(f"{what} has a lone surrogate {value[e.start]!r} at position "
                        f"{e.start}, which UTF-8 cannot encode") from None


_INT_BOUNDS = {32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}


def _fits(v: Any, t: pa.DataType) -> bool:
    """Is a Python value a valid key value of Arrow type ``t``? Never None: a key has no
    nulls (Arrow takes None as a null of any type, which no key order places)."""
    if v is None:
        return False
    if pa.types.is_string(t):
        return isinstance(v, str)
    if pa.types.is_binary(t):
        return isinstance(v, bytes)
    if pa.types.is_integer(t):
        lo, hi = _INT_BOUNDS[t.bit_width]
        return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        if isinstance(v, bool | float):  # Arrow would silently truncate a float
            return False
        try:
            pa.array([v], type=t)
            return True
        except (pa.ArrowException, TypeError, ValueError):
            return False
    return False


def _temporal_as_int(v: Any, t: pa.DataType) -> Any:
    """A timestamp or date key value as its Arrow integer (other values unchanged)."""
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        storage = pa.int32() if pa.types.is_date32(t) else pa.int64()
        return pa.array([v], type=t).cast(storage)[0].as_py()
    return v
