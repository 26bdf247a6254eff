"""The dependency floors of pyproject.toml as pip constraints: ``name==floor`` for every
``name>=floor`` in the dependencies and extras, so ``./dev test-floors`` installs the oldest
versions the package claims to work with (pip has no "lowest" resolution of its own).

    python tests/support/floors.py [pyproject.toml]   # prints the constraints

Extras (``moto[server]``) are dropped from a constraint, as pip wants; the package's own
extras (``sediment-lsm[spark]``) are skipped. A name given two floors gets the higher one.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$")
_FLOOR = re.compile(r"^>=\s*([0-9][0-9A-Za-z.]*)$")


def canonical(name: str) -> str:
    """The package name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(pyproject: dict) -> list[str]:
    """Every requirement string of the dependencies and extras, the package's own skipped."""
    project = pyproject["project"]
    own = canonical(project["name"])
    reqs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        reqs.extend(extra)
    return [r for r in reqs if canonical(split(r)[0]) != own]


def split(requirement: str) -> tuple[str, list[str]]:
    """A requirement's name and its version specifiers (``["<3", ">=2.1"]``)."""
    m = _REQUIREMENT.match(requirement.split(";")[0])
    if not m:
        raise ValueError(f"cannot read the requirement {requirement!r}")
    specs = [s.strip() for s in m.group(2).split(",") if s.strip()]
    return m.group(1), specs


def floor(requirement: str) -> str | None:
    """The version after ``>=`` in ``requirement``, None without one."""
    found = [m.group(1) for s in split(requirement)[1] if (m := _FLOOR.match(s))]
    return found[0] if found else None


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def pins(pyproject: dict) -> dict[str, str]:
    """Canonical name -> floor, for every requirement with one (the higher of two)."""
    out: dict[str, str] = {}
    for r in requirements(pyproject):
        f = floor(r)
        if f is None:
            continue
        name = canonical(split(r)[0])
        if name not in out or _key(f) > _key(out[name]):
            out[name] = f
    return out


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else "pyproject.toml")
    pyproject = tomllib.loads(path.read_text(encoding="utf-8"))
    for name, version in sorted(pins(pyproject).items()):
        print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
