"""CLI commands for partition schemes (co-sharding): create-scheme, schemes, describe-scheme,
set-scheme-properties, drop-scheme, split-scheme. ``create-table --scheme NAME`` makes a
member table."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import RenderableType

from sediment.cli.errors import CliError
from sediment.cli.options import (
    JsonOption,
    StoreOption,
    YesOption,
    open_store,
    parse_assignments,
)
from sediment.cli.output import emit, key_value_table
from sediment.cli.parsing import _parse_field, convert_split_point
from sediment.cli.terminal import confirm_or_refuse
from sediment.schema import Schema

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""

SchemeArg = Annotated[str, typer.Argument(metavar="SCHEME", help="Partition scheme name.")]


@commands.command("create-scheme")
def create_scheme(
    name: SchemeArg,
    store: StoreOption = None,
    row_key: Annotated[list[str] | None, typer.Option(
        "--row-key", metavar="NAME:TYPE",
        help="Row key field (repeatable, in order): member tables need these types.")] = None,
    split_point: Annotated[list[str] | None, typer.Option(
        "--split-point", metavar="V",
        help="Initial partition boundary on the first row key (repeatable, increasing).")] = None,
    prop: Annotated[list[str] | None, typer.Option(
        "--property", "-p", metavar="NAME=VALUE",
        help="partition.split.threshold=N: records of all member tables in one leaf above "
             "which it splits.")] = None,
    json_out: JsonOption = False,
) -> None:
    """Create a partition scheme: one partition tree that tables created with
    `create-table --scheme NAME` share (co-sharding)."""
    if not row_key:
        raise CliError("a scheme needs at least one --row-key NAME:TYPE")
    fields = [_parse_field(s, option="--row-key", nullable=False) for s in row_key]
    first = Schema(fields).row_keys[0]
    splits = [convert_split_point(s, first) for s in split_point or []]
    props = parse_assignments(prop or [], what="--property")
    st = open_store(store)
    info = st.create_scheme(name, fields, splits or None, properties=props)
    emit(info.to_json(), json_out,
         lambda d: f"created partition scheme {d['name']} in {st.uri} ({d['leaves']} leaf "
                   f"partition{'s' * (d['leaves'] != 1)})")


@commands.command("schemes")
def schemes_cmd(store: StoreOption = None, json_out: JsonOption = False) -> None:
    """List the partition schemes of the store with their member tables."""
    st = open_store(store)
    rows = [st.describe_scheme(n).to_json() for n in st.schemes()]
    emit(rows, json_out, lambda rs: "\n".join(
        f"{r['name']}: {', '.join(r['members']) or '(no tables)'}" for r in rs) or None)


@commands.command("describe-scheme")
def describe_scheme(name: SchemeArg, store: StoreOption = None,
                    json_out: JsonOption = False) -> None:
    """Show a scheme's row keys, tree version, leaves and member tables."""
    info = open_store(store).describe_scheme(name).to_json()
    emit(info, json_out, _render)


def _render(d: dict[str, Any]) -> list[RenderableType]:
    return [key_value_table([
        ("scheme", d["name"]), ("row keys", ", ".join(f"{n}:{t}" for n, t in d["row_keys"])),
        ("version", d["version"]), ("leaves", d["leaves"]),
        ("split threshold", d["split_threshold"]),
        ("member tables", ", ".join(d["members"]) or "(none)")])]


@commands.command("set-scheme-properties")
def set_scheme_properties(
    name: SchemeArg,
    assignments: Annotated[list[str] | None, typer.Argument(
        metavar="NAME=VALUE...",
        help="partition.split.threshold=N (the one property a scheme has).")] = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Change a scheme's split threshold: records of all member tables in one leaf above
    which it splits (`set-properties MEMBER partition.split.threshold=N` does the same)."""
    props = parse_assignments(assignments or [], what="property")
    if not props:
        raise CliError("nothing to change: give partition.split.threshold=N")
    info = open_store(store).set_scheme_properties(name, props).to_json()
    emit(info, json_out, lambda d: f"partition scheme {d['name']}: split threshold "
                                   f"{d['split_threshold']} (version {d['version']})")


@commands.command("drop-scheme")
def drop_scheme(
    name: SchemeArg,
    store: StoreOption = None,
    yes: YesOption = False,
) -> None:
    """Drop a partition scheme that no table uses (drop its member tables first)."""
    st = open_store(store)
    st.describe_scheme(name)  # fail on an unknown scheme before asking anything
    confirm_or_refuse(yes, f"drop scheme {name!r}",
                      f"Drop partition scheme {name!r} from {st.uri}?")
    st.drop_scheme(name)
    typer.echo(f"dropped partition scheme {name}")


@commands.command("split-scheme")
def split_scheme(name: SchemeArg, store: StoreOption = None,
                 json_out: JsonOption = False) -> None:
    """Split the scheme's leaves whose records, over all member tables, exceed its threshold."""
    r = open_store(store).split_scheme(name)
    emit({"splits": r.splits, "unsplittable": list(r.unsplittable)}, json_out,
         lambda d: f"{d['splits']} split{'s' * (d['splits'] != 1)}")
