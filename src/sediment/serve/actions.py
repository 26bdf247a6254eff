"""The Flight service's actions: each takes a JSON object body and answers one JSON value,
through the local API (so results and errors are the library's own).

========================  =====================================================  ==========
action                    body                                                   mutates
========================  =====================================================  ==========
``create-table``          ``{"name", "schema": Schema.to_json(), "split_points",  yes
                          "properties"}``
``drop-table``            ``{"name"}``                                           yes
``open-table``            ``{"table"}``: its name and id (does it exist?)        no
``describe``              ``{"table", "version"}``                               no
``history``               ``{"table", "limit"}``: the ``limit`` newest entries     no
                          (all when absent), read from the head back
``tag``                   ``{"table", "name", "version"}``                       yes
``restore``               ``{"table", "version"}``                               yes
``delete``                ``{"table", "keys", "ranges", "filter"}``: keys,        yes
                          ranges and filter as a query descriptor's; answers
                          ``{"version"}``
``alter``                 ``{"table", "op", "args"}``: a schema change, ``op``   yes
                          one of ``add_columns``, ``drop_columns``,
                          ``rename_column``, ``widen_column`` with ``args`` as
                          the ``alter_schema`` transaction stores them
                          (``{"columns": [[name, type], ...]}``, ``{"names"}``,
                          ``{"old", "new"}``, ``{"name", "type"}``); answers
                          ``{"version", "schema"}``
``compact``               ``{"table", "full"}``                                  yes
``maintain``              ``{"table"}``                                          yes
``health``                ``{}``                                                 no
``stats``                 ``{}``                                                 no
========================  =====================================================  ==========

With scoped tokens (``--tokens-file``, :mod:`sediment.tokens`) each action needs the right
:data:`ACTION_RIGHTS` gives it on the table its body names (``name`` for ``create-table`` and
``drop-table``, ``table`` for the others; ``health`` and ``stats`` name none): read for what
only reads; write for what changes a table's records or maintains it (``delete``, ``tag``,
``compact``, ``maintain``; puts too); admin for what makes, drops, reshapes or rewinds a table
(``create-table``, ``drop-table``, ``alter``, ``restore``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from sediment.errors import BadRequestError, FilterError, SchemaError
from sediment.schema import Schema
from sediment.schema_changes import OPS
from sediment.serve.middleware import Admission
from sediment.serve.protocol import (
    decode_value,
    idempotency_key,
    parse_json,
    quoted,
    read_request,
    table_name,
)
from sediment.serve.stats import Request, Stats
from sediment.tokens import Right
from sediment.types import parse_type

if TYPE_CHECKING:
    from sediment.serve.puts import GroupedPuts
    from sediment.store import Store
    from sediment.table import Table


class SedimentFlightServer(Protocol):
    """What actions use of the server (:class:`sediment.serve.server.SedimentFlightServer`)."""

    store: Store
    read_only: bool
    stats: Stats
    admission: Admission
    puts: GroupedPuts

    def table(self, name: str) -> Table: ...

    def forget(self, name: str) -> None: ...

    def writable(self, what: str) -> None: ...


Handler = Callable[[SedimentFlightServer, dict[str, Any], Request], Any]


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return obj


def _open(server: SedimentFlightServer, doc: dict[str, Any], req: Request, what: str) -> Table:
    """The table a body names, the request's log line naming it even when it cannot open."""
    req.table = table_name(doc, what)
    return server.table(req.table)


def _version(doc: dict[str, Any], required: bool = False) -> int | str | None:
    v = doc.get("version")
    if v is None and not required:
        return None
    if not isinstance(v, int | str) or isinstance(v, bool):
        raise BadRequestError(f"malformed action body: version must be a number or a tag "
                              f"name, not {quoted(v)}")
    return v


def _create_table(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    name = table_name(doc, "create-table body", "name")
    req.table = name
    if not isinstance(doc.get("schema"), dict):
        raise BadRequestError("malformed create-table body: 'schema' must be a schema object "
                              "(Schema.to_json())")
    schema = Schema.from_json(doc["schema"])
    splits = doc.get("split_points")
    points = None if splits is None else list(decode_value(splits, "split_points"))
    props = doc.get("properties") or {}
    if not isinstance(props, dict):
        raise BadRequestError("malformed create-table body: 'properties' must be an object")
    table = server.store.create_table(name, schema, split_points=points, properties=props)
    server.forget(name)
    return table.describe()


def _drop_table(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    name = table_name(doc, "drop-table body", "name")
    req.table = name
    server.store.drop_table(name)
    server.forget(name)
    return {"dropped": name}


def _open_table(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    table = _open(server, doc, req, "open-table body")
    return {"name": table.name, "table_id": table.table_id}


def _describe(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    table = _open(server, doc, req, "describe body")
    v = _version(doc)
    return table.describe(table.resolve_version(v))


def _history(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    """``Table.history``: with a ``limit``, only the newest entries are listed and read, so a
    client paging recent commits costs what it asks for, not the whole log."""
    table = _open(server, doc, req, "history body")
    limit = doc.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 0):
        raise BadRequestError(f"malformed history body for table {table.name}: 'limit' must "
                              f"be a whole number of at least 0, not {quoted(limit)}")
    entries = [_plain(e) for e in table.history(limit)]
    req.rows = len(entries)
    return entries


def _tag(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    table = _open(server, doc, req, "tag body")
    name = doc.get("name")
    if not isinstance(name, str):
        raise BadRequestError("malformed tag body: 'name' must be a string")
    v = _version(doc)
    return _plain(table.tag(name, table.resolve_version(v)))


def _restore(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    table = _open(server, doc, req, "restore body")
    v = _version(doc, required=True)
    assert v is not None
    return {"version": table.restore(v)}


DELETE_FIELDS = ("table", "format", "keys", "ranges", "filter", "idempotency_key")
"""What a delete body may hold: the table and a read request's fields that say which
records (no columns, version or iterators: a delete takes none), and the delete's
idempotency key."""


def _delete(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    """``Table.delete`` of the body's keys, ranges and filter, written as in a query
    descriptor (the same decoding: ``read_request``); the library refuses a body naming
    none of them, naming ``clear()``."""
    table = _open(server, doc, req, "delete body")
    unknown = sorted(str(k) for k in set(doc) - set(DELETE_FIELDS))
    if unknown:
        raise BadRequestError(f"malformed delete body for table {table.name}: unknown field "
                              f"{quoted(unknown[0])} (fields: {', '.join(DELETE_FIELDS)})")
    key = idempotency_key(doc, "delete body")
    request = read_request({k: v for k, v in doc.items() if k != "idempotency_key"})
    try:  # a wire tree rebuilt for the table's columns (text is parsed by delete itself)
        flt = request.filter_expression(table.schema, table.name)
    except FilterError as e:
        raise FilterError(f"delete on table {table.name}: {e}") from None
    return {"version": table.delete(request.keys, request.ranges, filter=flt,
                                    idempotency_key=key)}


ALTER_FIELDS = ("table", "op", "args")
"""What an alter body holds."""

ALTER_ARGS: dict[str, tuple[str, ...]] = {
    "add_columns": ("columns",), "drop_columns": ("names",),
    "rename_column": ("old", "new"), "widen_column": ("name", "type")}
"""The ``args`` of each schema change, as ``AlterSchema`` stores them."""


def _alter(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    """One schema change through the Table method of its name (``Table.add_columns``, ...):
    the library's checks and its SchemaError naming the table; one transaction."""
    table = _open(server, doc, req, "alter body")
    where = f"malformed alter body for table {table.name}"
    unknown = sorted(str(k) for k in set(doc) - set(ALTER_FIELDS))
    if unknown:
        raise BadRequestError(f"{where}: unknown field {quoted(unknown[0])} "
                              f"(fields: {', '.join(ALTER_FIELDS)})")
    op, args = doc.get("op"), doc.get("args")
    if op not in OPS:
        raise BadRequestError(f"{where}: 'op' must be one of {', '.join(OPS)}, not "
                              f"{quoted(op)}")
    if not isinstance(args, dict) or set(args) != set(ALTER_ARGS[op]):
        raise BadRequestError(f"{where}: {op}'s 'args' must be an object of "
                              f"{', '.join(ALTER_ARGS[op])}, not {quoted(args)}")
    strings = [args[k] for k in ALTER_ARGS[op]]
    if op == "add_columns":
        cols = args["columns"]
        if not isinstance(cols, list) or not all(
                isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c)
                for c in cols):
            raise BadRequestError(f"{where}: 'columns' must be a list of [name, type] "
                                  f"strings, not {quoted(cols)}")
        version = table.add_columns([(n, _type(table, n, t)) for n, t in cols])
    elif op == "drop_columns":
        if not isinstance(args["names"], list) or \
                not all(isinstance(n, str) for n in args["names"]):
            raise BadRequestError(f"{where}: 'names' must be a list of strings, not "
                                  f"{quoted(args['names'])}")
        version = table.drop_columns(args["names"])
    else:
        bad = next((v for v in strings if not isinstance(v, str)), None)
        if bad is not None:
            raise BadRequestError(f"{where}: {op}'s args must be strings, not {quoted(bad)}")
        name, other = strings
        version = (table.rename_column(name, other) if op == "rename_column"
                   else table.widen_column(name, _type(table, name, other)))
    return {"version": version, "schema": table.schema_at(version).to_json()}


def _type(table: Table, column: str, text: str) -> pa.DataType:
    """A column's type text (``parse_type``), its error naming the table and the column."""
    try:
        return parse_type(text)
    except SchemaError as e:
        raise SchemaError(f"table {table.name}: column {column!r}: {e}") from None


def _compact(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    table = _open(server, doc, req, "compact body")
    return _plain(table.compact(full=bool(doc.get("full", False))))


def _maintain(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    table = _open(server, doc, req, "maintain body")
    return _plain(table.maintain())


def _health(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    return {"status": "draining" if server.admission.draining else "ok",
            "store": server.store.uri, "read_only": server.read_only}


def _stats(server: SedimentFlightServer, doc: dict[str, Any], req: Request) -> Any:
    return {**server.stats.snapshot(), "active_calls": server.admission.active,
            "max_concurrency": server.admission.limit, "group_commit": server.puts.stats()}


ACTIONS: dict[str, tuple[str, bool, Handler]] = {
    "create-table": ("Create a table: {name, schema, split_points, properties}", True,
                     _create_table),
    "drop-table": ("Drop a table: {name}", True, _drop_table),
    "open-table": ("Check that a table exists: {table}", False, _open_table),
    "describe": ("Schema, properties, counts: {table, version}", False, _describe),
    "history": ("Committed transactions: {table}", False, _history),
    "tag": ("Tag a version: {table, name, version}", True, _tag),
    "restore": ("Restore a version as a new one: {table, version}", True, _restore),
    "delete": ("Delete records by key, range and/or filter: {table, keys, ranges, filter}",
               True, _delete),
    "alter": ("Change the schema: {table, op, args} (op: add_columns, drop_columns, "
              "rename_column, widen_column)", True, _alter),
    "compact": ("One compaction pass now: {table, full}", True, _compact),
    "maintain": ("Split, compact and collect garbage until settled: {table}", True,
                 _maintain),
    "health": ("Is the server up: {}", False, _health),
    "stats": ("Counters and latency percentiles per method: {}", False, _stats),
}


ACTION_RIGHTS: dict[str, Right] = {
    "create-table": "admin", "drop-table": "admin", "alter": "admin", "restore": "admin",
    "delete": "write", "tag": "write", "compact": "write", "maintain": "write",
    "open-table": "read", "describe": "read", "history": "read", "health": "read",
    "stats": "read",
}
"""The right each action needs of the caller's token on the table its body names (see the
module docstring)."""

NO_TABLE = frozenset({"health", "stats"})
"""Actions on no table in particular: the right alone is checked."""


def action_table(kind: str, doc: dict[str, Any]) -> str | None:
    """The table an action's body names, as its right is checked on it (None: no table; a
    name that is no string is checked as ``""``, and refused as malformed by the action)."""
    if kind in NO_TABLE:
        return None
    name = doc.get("name" if kind in ("create-table", "drop-table") else "table")
    return name if isinstance(name, str) else ""


def run_action(server: SedimentFlightServer, kind: str, body: Any, req: Request,
               allow: Callable[[Right, str | None, str], None] | None = None) -> Any:
    """Run action ``kind`` (ReadOnlyError for a mutating one on a read-only server;
    ``allow(right, table, what)``: raises when the caller may not, see :data:`ACTION_RIGHTS`)."""
    entry = ACTIONS.get(kind)
    if entry is None:
        raise BadRequestError(f"unknown action {quoted(kind)} (actions: {', '.join(ACTIONS)})")
    _doc, mutates, handler = entry
    raw = body.to_pybytes() if body is not None else b""
    doc = parse_json(raw or b"{}", f"{kind} body")
    if allow is not None:
        allow(ACTION_RIGHTS[kind], action_table(kind, doc), f"action {kind}")
    if mutates:
        server.writable(f"action {kind}")
    return handler(server, doc, req)
