"""Partitioning stays behind its protocol (``sediment.partitioning``): no module outside it asks
which kind a tree or a region is (``is_box_tree(...)``, ``isinstance(x, Box)`` or
``isinstance(x, Cell)``), and no module patches a class of another at import time (as
``Region.cell_from_json = ...`` once did). Read from the source with ``ast``, so the rule
holds as the code grows."""

from __future__ import annotations

import ast
from pathlib import Path

import sediment

SRC = Path(sediment.__file__).resolve().parent
KIND_CLASSES = {"Box", "Cell"}
ALLOWED = ("partitioning/", "core/regions.py")
"""Where the kinds may be told apart: the strategies, and the module that defines them."""


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(SRC)), ast.parse(p.read_text(), str(p)))
            for p in sorted(SRC.rglob("*.py"))]


def _names(node: ast.expr) -> set[str]:
    """The class names in an isinstance's second argument (a name, attribute or tuple)."""
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts))
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def kind_checks(rel: str, tree: ast.Module) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        name = fn.id if isinstance(fn, ast.Name) else fn.attr \
            if isinstance(fn, ast.Attribute) else ""
        if name == "is_box_tree":
            out.append(f"{rel}:{node.lineno} calls is_box_tree")
        if name == "isinstance" and len(node.args) == 2 and \
                _names(node.args[1]) & KIND_CLASSES:
            out.append(f"{rel}:{node.lineno} asks isinstance(..., "
                       f"{'/'.join(sorted(_names(node.args[1]) & KIND_CLASSES))})")
    return out


def import_time_patches(rel: str, tree: ast.Module) -> list[str]:
    """Module-level assignments to an attribute of a class (``Cls.attr = ...``)."""
    out = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
                    t.value.id[:1].isupper():
                out.append(f"{rel}:{node.lineno} sets {t.value.id}.{t.attr} at import")
    return out


def test_no_module_outside_partitioning_asks_the_kind() -> None:
    found = [hit for rel, tree in _modules() if not rel.startswith(ALLOWED)
             for hit in kind_checks(rel, tree)]
    assert found == [], "ask the table's Partitioning (sediment.partitioning) instead"


def test_no_class_is_patched_at_import_time() -> None:
    assert [hit for rel, tree in _modules() for hit in import_time_patches(rel, tree)] == []


def test_the_rule_sees_what_it_forbids() -> None:
    """The checks catch the forms they are for (so a green run means something)."""
    code = ast.parse("if is_box_tree(s.partitions) or isinstance(r, (Range, m.Box)):\n"
                     "    pass\nRegion.per_field = Box\n")
    assert len(kind_checks("x.py", code)) == 2
    assert import_time_patches("x.py", code) == ["x.py:3 sets Region.per_field at import"]
    assert kind_checks("x.py", ast.parse("isinstance(r, Range)")) == []
