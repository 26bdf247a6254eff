"""CLI commands of store and table administration: init, properties, tables, create-table,
describe, drop-table, clear, reinitialise, history, set-properties, online, offline.

The root app (:mod:`sediment.cli.app`) holds only the command group, its error handling and the
registration of the groups; these commands are a group like the others, registered first so
``sediment --help`` lists them first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import RenderableType
from rich.padding import Padding
from rich.text import Text

from sediment.cli.errors import CliError
from sediment.cli.humanize import human_bytes
from sediment.cli.options import (
    JsonOption,
    StoreOption,
    TableArg,
    VersionOption,
    YesOption,
    effective_store,
    open_store,
    open_table,
    parse_assignments,
    resolve_store_uri,
    resolve_version_option,
    store_exists,
)
from sediment.cli.output import emit, iso_time, key_value_table, make_table
from sediment.cli.parsing import _parse_field, _schema_from_file, convert_split_point
from sediment.cli.terminal import confirm_or_refuse
from sediment.errors import PropertyError, did_you_mean
from sediment.properties import PROPERTIES, defaults, describe_properties, validate_properties
from sediment.schema import Schema

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""


# ---- helpers ------------------------------------------------------------------------------------
PropertyOption = Annotated[
    list[str] | None,
    typer.Option("--property", "-p", metavar="NAME=VALUE",
                 help="A property (repeatable); see `sediment properties`."),
]




def _changed_properties(props: dict[str, Any]) -> dict[str, Any]:
    """The properties whose value differs from the built-in default (what a reader cares about)."""
    base = defaults()
    return {k: v for k, v in props.items() if base.get(k, object()) != v}


# ---- store commands -----------------------------------------------------------------------------
@commands.command()
def init(
    store: StoreOption = None,
    prop: PropertyOption = None,
    json_out: JsonOption = False,
) -> None:
    """Create the store (or open an existing one), setting store-wide property defaults.

    Store properties are the defaults for tables created afterwards; existing tables keep theirs.
    """
    uri = resolve_store_uri(store)
    props = validate_properties(parse_assignments(prop or [], what="--property"),
                                context=f"store {uri}")
    existed = store_exists(uri)
    st = open_store(uri, create=True, properties=props)
    data: dict[str, Any] = {"uri": st.uri, "created": not existed,
                            "properties": _changed_properties(st.properties)}
    emit(data, json_out, lambda d: d["uri"])


@commands.command("properties")
def properties_cmd(
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """List every table/store property with its type, default and meaning.

    With a store, also shows the store's own default for each property (it applies to tables
    created from now on).
    """
    rows = describe_properties()
    store = effective_store(store)
    if store:
        store_props = open_store(store).properties
        for row in rows:
            row["store_value"] = store_props.get(row["name"], row["default"])

    def render(data: list[dict[str, Any]]) -> list[RenderableType]:
        # One heading line per property and its description indented below: stays readable
        # at any terminal width, where a four-column table squeezes the descriptions.
        out: list[RenderableType] = []
        for r in data:
            head = Text.assemble((r["name"], "bold"), f" ({r['type']})  default {r['default']}")
            if store and r["store_value"] != r["default"]:
                head.append(f"  store {r['store_value']}", style="bold")
            doc = r["doc"] + (f" One of: {', '.join(map(str, r['choices']))}."
                              if r["choices"] else "")
            out += [head, Padding(Text(doc), (0, 0, 0, 4), expand=False)]
        return out

    emit(rows, json_out, render)


# ---- table commands -----------------------------------------------------------------------------
@commands.command("tables")
def tables_cmd(
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """List the tables of the store, one name per line."""
    names = open_store(store).tables()
    emit(names, json_out, lambda ns: "\n".join(ns) if ns else None)


@commands.command("create-table")
def create_table(
    name: TableArg,
    store: StoreOption = None,
    schema_file: Annotated[Path | None, typer.Option(
        "--schema", metavar="FILE.json",
        help='Schema JSON: {"row_keys": [{"name": "key", "type": "string"}], "sort_keys": '
             '[...], "values": [{"name": ..., "type": ..., "nullable": true}]}.')] = None,
    row_key: Annotated[list[str] | None, typer.Option(
        "--row-key", metavar="NAME:TYPE", help="Row key field (repeatable, in order).")] = None,
    sort_key: Annotated[list[str] | None, typer.Option(
        "--sort-key", metavar="NAME:TYPE", help="Sort key field (repeatable).")] = None,
    value: Annotated[list[str] | None, typer.Option(
        "--value", metavar="NAME:TYPE", help="Value field, nullable (repeatable).")] = None,
    split_point: Annotated[list[str] | None, typer.Option(
        "--split-point", metavar="V",
        help="Initial partition boundary on the first row key (repeatable, increasing).")] = None,
    prop: PropertyOption = None,
    scheme: Annotated[str | None, typer.Option(
        "--scheme", metavar="SCHEME",
        help="Join this partition scheme (create-scheme): the table follows its tree.")] = None,
    offline: Annotated[bool, typer.Option(
        "--offline", help="Create the table offline: no maintainer acts on it until "
                          "`sediment online TABLE`.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Create a table from a schema file or --row-key/--sort-key/--value fields.

    Creates the store too when it does not exist yet.
    """
    if schema_file is not None and (row_key or sort_key or value):
        raise CliError("give either --schema FILE or --row-key/--sort-key/--value, not both")
    if schema_file is not None:
        schema = _schema_from_file(schema_file)
    elif row_key:
        schema = Schema(
            [_parse_field(s, option="--row-key", nullable=False) for s in row_key],
            [_parse_field(s, option="--sort-key", nullable=False) for s in sort_key or []],
            [_parse_field(s, option="--value", nullable=True) for s in value or []],
        )
    else:
        raise CliError("a table needs a schema: pass --schema FILE.json or at least one "
                       "--row-key NAME:TYPE")
    splits = [convert_split_point(s, schema.row_keys[0]) for s in split_point or []]
    props = parse_assignments(prop or [], what="--property")
    st = open_store(store)
    table = st.create_table(name, schema, split_points=splits or None, properties=props,
                            scheme=scheme, online=not offline)
    info = table.describe()
    emit(info, json_out,
         lambda d: f"created table {d['name']} in {st.uri} (version {d['version']}, "
                   f"{d['leaf_partitions']} leaf partition{'s' * (d['leaf_partitions'] != 1)}"
                   f"{'' if d['online'] else ', offline'})")


@commands.command()
def describe(
    name: TableArg,
    store: StoreOption = None,
    version: VersionOption = None,
    json_out: JsonOption = False,
) -> None:
    """Show a table's schema, non-default properties, version and partition/file counts
    (at --version, a number or a tag)."""
    table = open_table(store, name)
    info = table.describe(resolve_version_option(table, version))
    emit(info, json_out, _render_describe)


def schema_table(schema: dict[str, Any]) -> RenderableType:
    """A schema (``Schema.to_json()``) for people: role, name, type, nullable per field (as
    ``describe`` and ``alter`` show it)."""
    rows = [
        (role, f["name"], f["type"], "yes" if f["nullable"] else "no")
        for role, key in (("row key", "row_keys"), ("sort key", "sort_keys"), ("value", "values"))
        for f in schema.get(key, [])
    ]
    return make_table(["role", "name", "type", "nullable"], rows, title="Schema")


def _render_describe(d: dict[str, Any]) -> list[RenderableType]:
    """Describe output for people: summary, schema, counts, then the properties that matter."""
    out: list[RenderableType] = [
        key_value_table([("table", d["name"]), ("uri", d["uri"]), ("version", d["version"]),
                         ("status", "online" if d["online"] else "offline")]),
    ]
    out.append(schema_table(d["schema"]))
    # records as stored: deleted and replaced ones count until compaction drops them
    out.append(make_table(
        ["partitions", "leaves", "files", "references", "records stored", "unreferenced",
         "unreferenced bytes"],
        [[d["partitions"], d["leaf_partitions"], d["files"], d["references"], d["records"],
          d["unreferenced_files"], human_bytes(d["unreferenced_bytes"])]],
        title="Contents",
        numeric=["partitions", "leaves", "files", "references", "records stored",
                 "unreferenced", "unreferenced bytes"]))
    if d.get("tags"):
        out.append(make_table(["tag", "version", "expires"], [
            [t["name"], t["version"], iso_time(t["expires"]) if "expires" in t else ""]
            for t in d["tags"]], title="Tags and pins", numeric=["version"]))
    changed = _changed_properties(d["properties"])
    if changed:
        base = defaults()
        out.append(make_table(["property", "value", "default"],
                              [(k, v, base[k]) for k, v in sorted(changed.items())],
                              title="Properties (differing from defaults)"))
    else:
        out.append("Properties: all defaults")
    return out


@commands.command("drop-table")
def drop_table(
    name: TableArg,
    store: StoreOption = None,
    yes: YesOption = False,
) -> None:
    """Delete a table and all its data. Asks first unless --yes (required when not a terminal)."""
    st = open_store(store)
    st.table(name)  # fail on an unknown table before asking anything
    confirm_or_refuse(yes, f"drop table {name!r}",
                      f"Drop table {name!r} from {st.uri} and delete all its data?")
    st.drop_table(name)
    typer.echo(f"dropped table {name}")


@commands.command()
def clear(
    name: TableArg,
    store: StoreOption = None,
    yes: YesOption = False,
) -> None:
    """Remove every record of a table in one transaction, keeping its schema, properties and
    partitions. Older versions still read the records until gc deletes the files. Asks first
    unless --yes (required when not a terminal)."""
    st = open_store(store)
    table = st.table(name)  # fail on an unknown table before asking anything
    confirm_or_refuse(yes, f"clear table {name!r}",
                      f"Remove every record of table {name!r} in {st.uri}?")
    before = table.version
    version = table.clear()
    typer.echo(f"cleared table {name} (version {version})" if version != before
               else f"table {name} holds no records: nothing to clear (version {version})")


@commands.command()
def reinitialise(
    name: TableArg,
    store: StoreOption = None,
    split_point: Annotated[list[str] | None, typer.Option(
        "--split-point", metavar="V",
        help="New partition boundary on the first row key (repeatable, increasing; none: "
             "one partition).")] = None,
    json_out: JsonOption = False,
) -> None:
    """Give an empty table a new partition tree (refused while it holds records: clear it
    first)."""
    table = open_table(store, name)
    splits = [convert_split_point(s, table.schema.row_keys[0]) for s in split_point or []]
    table.reinitialise(splits or None)
    info = table.describe()
    emit(info, json_out,
         lambda d: f"reinitialised table {d['name']} (version {d['version']}, "
                   f"{d['leaf_partitions']} leaf partition{'s' * (d['leaf_partitions'] != 1)})")


@commands.command()
def history(
    name: TableArg,
    store: StoreOption = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", "-n", min=1, help="Show only the most recent N versions.")] = None,
    json_out: JsonOption = False,
) -> None:
    """List the table's committed versions: version, time (UTC), kind and summary."""
    entries = open_table(store, name).history(limit=limit)
    rows = [{"version": e.version, "time": iso_time(e.time), "kind": e.kind,
             "summary": e.summary} for e in entries]
    emit(rows, json_out, lambda rs: make_table(
        ["version", "time", "kind", "summary"],
        [[r["version"], r["time"], r["kind"], r["summary"]] for r in rs],
        numeric=["version"], no_wrap=["version", "time", "kind"]))


@commands.command("set-properties")
def set_properties(
    name: TableArg,
    assignments: Annotated[list[str] | None, typer.Argument(
        metavar="NAME=VALUE...", help="Properties to set.")] = None,
    store: StoreOption = None,
    remove: Annotated[list[str] | None, typer.Option(
        "--remove", metavar="NAME",
        help="Reset a property to the default (repeatable).")] = None,
    json_out: JsonOption = False,
) -> None:
    """Set and/or reset table properties, all in one transaction (one new version)."""
    updates = parse_assignments(assignments or [], what="property")
    removed = list(remove or [])
    if not updates and not removed:
        raise CliError("nothing to change: give NAME=VALUE arguments and/or --remove NAME")
    both = sorted(set(updates) & set(removed))
    if both:
        raise CliError(f"property {both[0]!r} is both set and removed")
    # Validate here so the message names the table (the transaction only knows its id).
    parsed = validate_properties(updates, context=f"table {name}")
    for r in removed:
        if r not in PROPERTIES:
            raise PropertyError(f"unknown property {r!r} for table {name}"
                                f"{did_you_mean(r, PROPERTIES)}; see `sediment properties` "
                                "for the list")
    table = open_table(store, name)
    version = table.set_properties(parsed, remove=removed)
    data = {"table": name, "version": version, "set": parsed, "removed": removed}
    emit(data, json_out, lambda d: f"table {name}: "
         + ", ".join([f"{k}={v}" for k, v in parsed.items()] + [f"reset {r}" for r in removed])
         + f" (version {version})")


def _set_online(store: str | None, name: str, online: bool, json_out: bool) -> None:
    table = open_table(store, name)
    version = table.set_online(online)
    state = "online" if online else "offline"
    emit({"table": name, "online": online, "version": version}, json_out,
         lambda d: f"table {name} is {state} (version {version})")


@commands.command()
def online(name: TableArg, store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Bring a table online: background maintenance works on it again."""
    _set_online(store, name, True, json_out)


@commands.command()
def offline(name: TableArg, store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Take a table offline: background maintenance (compaction, splitting, GC) skips it."""
    _set_online(store, name, False, json_out)
