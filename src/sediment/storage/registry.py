"""The opener: which ObjectStore implementation a URI scheme names.

``open_object_store(uri, **options)`` looks the URI's scheme up in a small registry and calls
the factory registered for it. The built-in schemes are registered below, explicitly; each
factory imports its implementation only when a store of that kind is opened (so opening a local
store never imports boto3). ``register_scheme`` adds another (a test double, a new backend).

A factory takes the URI and the options and returns the store; it refuses options it does not
take with a :class:`~sediment.errors.StorageError` naming them (see :func:`refuse_options`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from typing import Any
from urllib.parse import urlparse

from sediment.errors import StorageError
from sediment.storage.base import ObjectStore

StoreFactory = Callable[..., ObjectStore]
"""``factory(uri, **options) -> ObjectStore``."""

_PATH = ""
"""The registry key of a plain filesystem path (no scheme)."""

_FACTORIES: dict[str, StoreFactory] = {}


def register_scheme(scheme: str, factory: StoreFactory) -> None:
    """Open URIs ``<scheme>://...`` with ``factory(uri, **options)`` (replacing any earlier
    factory for the scheme). ``""`` is a plain path without a scheme."""
    _FACTORIES[scheme.lower()] = factory


def schemes() -> list[str]:
    """The registered schemes, sorted (``""`` is a plain path)."""
    return sorted(_FACTORIES)


def refuse_options(uri: str, options: Mapping[str, Any],
                   accepted: Collection[str] = ()) -> None:
    """StorageError naming the options that a store for ``uri`` does not take."""
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        takes = f"it takes {', '.join(sorted(accepted))}" if accepted else "it takes none"
        raise StorageError(f"unknown storage option{'s' if len(unknown) > 1 else ''} "
                           f"{', '.join(map(repr, unknown))} for store {uri!r}; {takes}")


def open_object_store(uri: str, **options: Any) -> ObjectStore:
    """Open the store for a URI: local path, ``file://``, ``s3://bucket/prefix``, ``memory://``
    (or another registered scheme).

    S3 options: ``endpoint_url``, ``region``, ``access_key_id``, ``secret_access_key``,
    ``session_token``; when omitted they come from the usual AWS environment variables
    (``AWS_ENDPOINT_URL``, ``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID``, ...).
    Local and memory stores take no options. An option the store does not take is refused
    with a StorageError naming it.
    """
    scheme = urlparse(uri).scheme.lower()
    if len(scheme) == 1 and os.name == "nt":  # a drive letter: C:\data
        scheme = _PATH
    factory = _FACTORIES.get(scheme)
    if factory is None:
        known = ", ".join("a path" if s == _PATH else f"{s}://" for s in schemes())
        raise StorageError(f"unsupported store URI scheme {scheme!r} in {uri!r}; use {known}")
    return factory(uri, **options)


def spec_options(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The storage options of a store spec (``{"uri": ..., **options}``): all but its URI."""
    return {k: v for k, v in spec.items() if k != "uri"}


def open_object_store_beside(root: str, spec: Mapping[str, Any]) -> ObjectStore:
    """An object store at ``root`` (a dump's folder) reached the way the store of ``spec`` is:
    on S3 with its storage options (endpoint, region, credentials), elsewhere with none."""
    return open_object_store(root, **(spec_options(spec) if root.startswith("s3://") else {}))


# ---- the built-in schemes ------------------------------------------------------------------
def _after_scheme(uri: str) -> str:
    """What follows ``scheme://`` (or ``scheme:``), taken as written."""
    rest = uri.split(":", 1)[1]
    return rest[2:] if rest.startswith("//") else rest


def _open_path(uri: str, **options: Any) -> ObjectStore:
    from sediment.storage.local import LocalObjectStore

    refuse_options(uri, options)
    return LocalObjectStore(uri)


def _open_file(uri: str, **options: Any) -> ObjectStore:
    from sediment.storage.local import LocalObjectStore, file_uri_to_path

    refuse_options(uri, options)
    return LocalObjectStore(file_uri_to_path(uri))


def _open_memory(uri: str, **options: Any) -> ObjectStore:
    from sediment.storage.memory import MemoryObjectStore

    refuse_options(uri, options)
    return MemoryObjectStore.named(_after_scheme(uri))  # as written, like s3://


def _open_s3(uri: str, **options: Any) -> ObjectStore:
    from sediment.storage.s3 import S3_OPTIONS, S3ObjectStore

    # An S3 URI is written as the key reads (``aws s3`` does the same): no percent-decoding,
    # and a ``?`` or ``#`` belongs to the prefix (urlparse would cut a query or fragment off,
    # so the store's own uri would reopen a shorter prefix).
    bucket, _, prefix = _after_scheme(uri).partition("/")
    if not bucket or not uri.split(":", 1)[1].startswith("//"):
        raise StorageError(f"S3 URI {uri!r} names no bucket")
    refuse_options(uri, options, S3_OPTIONS)
    return S3ObjectStore(bucket, prefix.strip("/"), **options)


register_scheme(_PATH, _open_path)
register_scheme("file", _open_file)
register_scheme("memory", _open_memory)
register_scheme("s3", _open_s3)
