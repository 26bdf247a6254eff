"""TableHandle: what the services (ingest, compaction, maintenance, dump, Spark runners) need of
a table, and nothing of the façade.

:class:`~sediment.table.Table` is the public façade: it composes a handle and passes it to the
services, which never import ``sediment.table`` (the import contracts in pyproject.toml hold that).
A handle is the table's identity (name, id), its state store and object store, the readers
built on them (samples, job events, query executors), and how to reach storage the way its
store does (``store_spec``, ``object_store_at``). Everything it derives from the state is read
from the state store's head, so nothing here is ever invalidated by hand.
"""

from __future__ import annotations

import functools
import numbers
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa

from sediment.core.head import Head
from sediment.core.state import TableState
from sediment.errors import QueryError
from sediment.files.samples_io import SampleReader
from sediment.iterators.base import RecordIterator
from sediment.properties import defaults
from sediment.schema import Schema
from sediment.state.store import StateStore
from sediment.status import StatusStore
from sediment.storage.base import ObjectStore
from sediment.storage.registry import open_object_store_beside

if TYPE_CHECKING:
    from sediment.query.prepare import ExecutorCache


_EXECUTORS_LOCK = threading.Lock()
"""Makes each handle's executor cache once, whatever threads read it first."""


class TableHandle:
    """One table as the services see it. ``store_spec`` returns what reopens the table's store
    in another process (``Store.spec()``: URI and storage options)."""

    def __init__(self, name: str, table_id: str, states: StateStore,
                 store_spec: Callable[[], dict[str, Any]]) -> None:
        self.name = name
        self.table_id = table_id
        self.states = states
        self.objects: ObjectStore = states.objects
        self.store_spec = store_spec
        self._executors: ExecutorCache | None = None

    @property
    def executors(self) -> ExecutorCache:
        """The query executors of this table (one per state, with the footer and key-filter
        caches), made on first use: a process that never reads records (a command that
        describes or tags, an ingest) does not import the read path."""
        executors = self._executors
        if executors is None:
            with _EXECUTORS_LOCK:
                if self._executors is None:
                    from sediment.query.prepare import ExecutorCache

                    self._executors = ExecutorCache(self.objects)
                executors = self._executors
        return executors

    @functools.cached_property
    def samples(self) -> SampleReader:
        """Reader (with cache) of the sidecar samples of this table's data files; a damaged
        sample is rebuilt from its data file with the table's row keys and ``sample.size``."""
        return SampleReader(
            self.objects, table=self.name,
            key_schema=lambda: pa.schema(list(self.schema.row_keys)),
            sample_size=lambda: int(self.properties["sample.size"]))

    @functools.cached_property
    def status(self) -> StatusStore:
        """Job and task events of this table."""
        return StatusStore(self.objects)

    # ---- read from the head ----------------------------------------------------------------
    @property
    def version(self) -> int:
        """The latest committed version."""
        return self.states.head().version

    @property
    def schema(self) -> Schema:
        s = self.states.head(refresh=False).schema
        assert s is not None
        return s

    @property
    def properties(self) -> dict[str, Any]:
        """Every property with its effective value (defaults included)."""
        return {**defaults(), **self.states.head().properties}

    def read_head(self, *, refresh: bool = True) -> Head:
        """Read the head once for an operation (``refresh``: from the log, else this
        process's cached head): the state with its schema, settings and compaction
        iterators, which the operation passes down instead of reading the head again."""
        return Head.of(self.states.head(refresh=refresh), self.name)

    def state(self, version: int | str | None = None) -> TableState:
        """The state at ``version`` (a number or a tag; latest when None)."""
        return self.states.load(self.resolve_version(version))

    def resolve_version(self, version: int | str | None) -> int | None:
        """A version number from a number, a tag name, or None (latest).

        Raises QueryError naming the table for anything else (a bool is not a version,
        though Python counts ``True`` as 1; a negative or fractional number is none).
        """
        if version is None:
            return None
        if isinstance(version, numbers.Integral) and not isinstance(version, bool):
            if int(version) < 0:
                raise QueryError(f"table {self.name} has no version {int(version)} "
                                 f"(versions count up from 0)")
            return int(version)
        if not isinstance(version, str):
            raise QueryError(f"table {self.name}: a version is a version number or a tag "
                             f"name, not {version!r} ({type(version).__name__})")
        if version.isdigit():
            return int(version)
        from sediment.state.versions import get_tag

        return get_tag(self.states, str(version)).version

    def compaction_iterators(self) -> list[RecordIterator]:
        """The iterators compaction applies, from the ``compaction.iterators`` property."""
        return list(self.read_head().iterators)

    # ---- storage ---------------------------------------------------------------------------
    def object_store_at(self, root: str) -> ObjectStore:
        """An object store at ``root`` (a dump's folder): on S3 with the table's store's
        storage options (endpoint, region, credentials), elsewhere with none."""
        return open_object_store_beside(root, self.store_spec())

    def __repr__(self) -> str:
        return f"TableHandle({self.name!r}, {self.table_id!r})"


TableLike: TypeAlias = Any
"""A :class:`~sediment.table.Table` or its :class:`TableHandle`: what public entry points below
the façade accept (the façade's type is out of their reach: ``sediment.table`` imports them)."""


def handle_of(table: TableLike) -> TableHandle:
    """The handle of a :class:`~sediment.table.Table` (or a handle itself): how entry points
    that users call with a table (bulk import, the batcher, the maintainer) and integrations
    (the CLI, Spark executors) reach the services without the façade."""
    if isinstance(table, TableHandle):
        return table
    handle = getattr(table, "_handle", None)
    if not isinstance(handle, TableHandle):
        raise TypeError(f"expected a sediment Table, not {type(table).__name__}")
    return handle
