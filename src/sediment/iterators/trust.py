"""Iterators of your own, configured by import path, loaded only from modules a process trusts.

``{"type": "python", "class": "package.module:Name", ...}`` names a subclass of
:class:`~sediment.iterators.RecordIterator`; the configuration's other options are its
constructor's keyword arguments. Importing a module runs its code, and a table's properties
are written by whoever may write the table: so a process imports a module only when it trusts
it. Trust is a list of module prefixes (``acme.iterators`` trusts ``acme.iterators`` and
``acme.iterators.ttl``, not ``acme.iterators_old``), from ``$SEDIMENT_TRUSTED_ITERATOR_MODULES``
(comma separated) and :func:`trust_iterator_modules` (``sediment --trust-iterator-module``),
which writes it to that variable: the processes this one starts after (the maintainer's
workers, a local Spark's Python workers, a server started from a test) inherit it.

The checks come in an order that runs nothing untrusted: the class path is parsed, its module
checked against the trusted prefixes, then imported, then the attribute checked to be a
``RecordIterator`` subclass, and only then called. Each refusal is an
:class:`~sediment.errors.IteratorModuleError` naming the module.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping
from typing import Any

from sediment.errors import IteratorModuleError
from sediment.iterators.base import RecordIterator
from sediment.schema import Schema

TRUST_ENV = "SEDIMENT_TRUSTED_ITERATOR_MODULES"
"""Comma-separated module prefixes whose iterators this process (and its children) load."""

PYTHON_TYPE = "python"
"""The iterator ``type`` of a configuration naming a class by import path."""


def _dotted(name: str) -> bool:
    """A module path (``a.b.c``): identifiers joined by dots, nothing relative."""
    return bool(name) and all(part.isidentifier() for part in name.split("."))


def trusted_iterator_modules() -> tuple[str, ...]:
    """The module prefixes this process trusts (from ``$SEDIMENT_TRUSTED_ITERATOR_MODULES``),
    in the order given, without repeats or empty entries."""
    text = os.environ.get(TRUST_ENV, "")
    return tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))


def trust_iterator_modules(prefixes: Iterable[str]) -> tuple[str, ...]:
    """Trust the iterator modules under ``prefixes`` in this process and in every process it
    starts from now on (written to ``$SEDIMENT_TRUSTED_ITERATOR_MODULES``); returns every
    trusted prefix. IteratorModuleError for a prefix that is no module path (``acme.iters``)."""
    added = [p.strip() for p in prefixes]
    for p in added:
        if not _dotted(p):
            raise IteratorModuleError(f"trusted iterator module {p!r} is not a module path "
                                      f"(dotted identifiers, such as acme.iterators)")
    before = trusted_iterator_modules()
    trusted = tuple(dict.fromkeys((*before, *added)))
    if trusted != before:
        os.environ[TRUST_ENV] = ",".join(trusted)
    return trusted


def is_trusted(module: str, prefixes: Iterable[str]) -> bool:
    """Is ``module`` one of ``prefixes`` or inside one (at a dot: ``acme`` covers
    ``acme.x``, never ``acme_evil``)?"""
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def load_iterator_class(path: Any) -> type[RecordIterator]:
    """The class ``path`` (``package.module:Name``) names, once its module is trusted and
    imported and the class found to subclass RecordIterator; IteratorModuleError naming the
    module otherwise (nothing of an untrusted module is imported)."""
    if not isinstance(path, str) or path.count(":") != 1:
        raise IteratorModuleError(f"python iterator: 'class' must be 'package.module:Name', "
                                  f"not {path!r}")
    module, name = path.split(":")
    if not _dotted(module) or not name.isidentifier():
        raise IteratorModuleError(f"python iterator: 'class' must be 'package.module:Name', "
                                  f"not {path!r}")
    trusted = trusted_iterator_modules()
    if not is_trusted(module, trusted):
        raise IteratorModuleError(
            f"python iterator {path}: module {module!r} is not trusted by this process "
            f"(trusted: {', '.join(trusted) or 'none'}); trust it with "
            f"--trust-iterator-module {module} or ${TRUST_ENV}")
    try:
        loaded = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - a trusted module's own failure, named
        raise IteratorModuleError(f"python iterator {path}: module {module!r} cannot be "
                                  f"imported here: {type(e).__name__}: {e}") from None
    cls = getattr(loaded, name, None)
    if not (isinstance(cls, type) and issubclass(cls, RecordIterator)):
        raise IteratorModuleError(f"python iterator {path}: module {module!r} has no "
                                  f"RecordIterator subclass {name!r} "
                                  f"(found {type(cls).__name__})")
    return cls


def python_iterator_from_config(cfg: Mapping[str, Any],
                                schema: Schema | None = None) -> RecordIterator:
    """``{"type": "python", "class": "package.module:Name", **options}``: ``Name(**options)``
    (the registry reports a TypeError of the constructor as an invalid configuration)."""
    cls = load_iterator_class(cfg.get("class"))
    options = {k: v for k, v in cfg.items() if k not in ("type", "class")}
    return cls(**options)
