"""mkdocs hooks: pages generated from the code at build time.

A page holding the marker ``<!-- generated: cli -->`` gets the reference of every ``sediment``
command (rendered from the typer app: usage, help, arguments and options with their defaults),
and ``<!-- generated: properties -->`` the table of every property in
``sediment.properties`` (name, type, default, constraints, meaning). Nothing is written to
docs/: the markdown is produced in memory for each build, so it cannot go stale.
"""

from __future__ import annotations

import html
import inspect
from typing import Any

CLI_MARKER = "<!-- generated: cli -->"
PROPERTIES_MARKER = "<!-- generated: properties -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if PROPERTIES_MARKER in markdown:
        markdown = markdown.replace(PROPERTIES_MARKER, properties_reference())
    return markdown


# ---- helpers ------------------------------------------------------------------------------------
def _text(s: str | None) -> str:
    """Help text as markdown: HTML escaped, click's paragraph markers dropped."""
    if not s:
        return ""
    s = inspect.cleandoc(s).replace("\b\n", "").replace("\b", "")
    return html.escape(s, quote=False)


def _cell(s: str) -> str:
    """One markdown table cell: a single line, pipes escaped."""
    return " ".join(_text(s).split()).replace("|", "\\|")


def _code(s: str) -> str:
    return f"`{s}`" if "`" not in s else f"`` {s} ``"


# ---- the command line ---------------------------------------------------------------------------
def cli_reference() -> str:
    import typer.main

    from sediment.cli import app

    # Typer vendors its own click: everything below goes by attributes, not click's classes.
    root = typer.main.get_command(app)
    root_ctx = root.context_class(root, info_name="sediment")
    out: list[str] = []
    out += _command_section(root, root_ctx, "sediment", level=2, is_root=True)

    def walk(group: Any, ctx: Any, prefix: str, level: int) -> None:
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            sub_ctx = cmd.context_class(cmd, info_name=name, parent=ctx)
            out.extend(_command_section(cmd, sub_ctx, f"{prefix} {name}", level))
            if hasattr(cmd, "list_commands"):
                walk(cmd, sub_ctx, f"{prefix} {name}", level + 1)

    walk(root, root_ctx, "sediment", 2)
    return "\n".join(out)


def _command_section(cmd: Any, ctx: Any, path: str, level: int,
                     is_root: bool = False) -> list[str]:
    out = [f"{'#' * level} `{path}`" if not is_root else f"{'#' * level} `sediment` (global)",
           ""]
    pieces = " ".join(cmd.collect_usage_pieces(ctx))
    out += ["```text", f"{path} {pieces}".rstrip(), "```", ""]
    if cmd.help:
        out += [_text(cmd.help), ""]
    params = [p for p in cmd.get_params(ctx) if p.name != "help"]
    args = [p for p in params if p.param_type_name == "argument"]
    opts = [p for p in params if p.param_type_name == "option"]
    if args:
        out += ["| Argument | Required | Help |", "|---|---|---|"]
        for a in args:
            name = (a.metavar or a.name or "").upper()
            out.append(f"| {_code(name)} | {'yes' if a.required else 'no'} | "
                       f"{_cell(getattr(a, 'help', None) or '')} |")
        out.append("")
    if opts:
        out += ["| Option | Default | Help |", "|---|---|---|"]
        for o in opts:
            names = ", ".join(_code(n) for n in [*o.opts, *o.secondary_opts])
            if o.metavar and not o.is_flag:
                names += f" {_code(o.metavar)}"
            elif getattr(getattr(o, "type", None), "choices", None):
                names += " (" + ", ".join(_code(str(c)) for c in o.type.choices) + ")"
            default = ""
            if o.default is not None and not callable(o.default) and o.default is not False \
                    and o.default != ():
                default = _code(str(o.default))
            help_text = getattr(o, "help", None) or ""
            if o.multiple:
                help_text += " (repeatable)" if "repeatable" not in help_text else ""
            if o.envvar:
                help_text += f" Environment variable: {o.envvar}."
            out.append(f"| {names} | {default} | {_cell(help_text)} |")
        out.append("")
    return out


# ---- properties ---------------------------------------------------------------------------------
def properties_reference() -> str:
    from sediment.properties import PROPERTIES

    out = ["| Property | Type | Default | Allowed | Meaning |", "|---|---|---|---|---|"]
    for spec in PROPERTIES.values():
        allowed = []
        if spec.choices:
            allowed.append("one of " + ", ".join(_code(str(c)) for c in spec.choices))
        if spec.minimum is not None:
            allowed.append(f">= {_num(spec.minimum)}")
        if spec.maximum is not None:
            allowed.append(f"<= {_num(spec.maximum)}")
        if spec.check is not None:
            allowed.append("checked (iterator JSON)")
        default = _code(repr(spec.default) if spec.default == "" else _num(spec.default))
        out.append(f"| {_code(spec.name)} | {spec.type.__name__} | {default} | "
                   f"{'; '.join(allowed)} | {_cell(spec.doc)} |")
    return "\n".join(out) + "\n"


def _num(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if isinstance(v, float) and not v.is_integer():
        return repr(v)
    n = int(v)
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2)):
        if n >= size and n % size == 0:
            return f"{n} ({n // size} {unit})"
    return f"{n:_}".replace("_", " ") if n >= 100_000 else str(v)
