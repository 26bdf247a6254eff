"""Table: one Sediment table, its state at any version, and the operations on it.

A façade: every operation is a service (ingest, compaction, maintenance, dump, query
preparation) given the table's :class:`~sediment.handle.TableHandle`, never the ``Table``
itself, so the services do not depend on this module.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from sediment.core.model import FileReference, Partition
from sediment.core.state import TableState
from sediment.core.transactions import (
    AlterSchema,
    ClearTable,
    ReinitialiseTable,
    SetOnline,
    SetProperties,
)
from sediment.core.transactions.schema import filtered_fields
from sediment.errors import (
    PropertyError,
    QueryError,
    SchemaError,
    VersionExpiredError,
    did_you_mean,
)
from sediment.handle import TableHandle
from sediment.properties import PROPERTIES, check_combined, defaults, validate_properties
from sediment.runners import load_runner
from sediment.schema import Schema, parse_type
from sediment.schema_changes import add_args, drop_args, judged_change
from sediment.settings import settings_of
from sediment.state.log import HistoryEntry
from sediment.state.schemes import THRESHOLD, set_scheme_threshold, with_scheme_threshold
from sediment.state.store import StateStore
from sediment.state.tags import Tag, scan_tags

if TYPE_CHECKING:
    import pandas as pd

    from sediment.compaction.runner import CompactionResult
    from sediment.core.regions import Range
    from sediment.dump import DumpJob
    from sediment.ingest import IngestResult
    from sediment.ingest.buffered import BufferedWriter
    from sediment.maintenance.gc import GcResult
    from sediment.maintenance.passes import MaintenanceResult
    from sediment.maintenance.purge import PurgeResult
    from sediment.maintenance.splitting import SplitResult
    from sediment.maintenance.usage import Usage
    from sediment.maintenance.verify import VerifyReport
    from sediment.query.engines import PlannedFile
    from sediment.query.inspect import TableInspector
    from sediment.query.planner import QueryPlan
    from sediment.query.request import ReadRequest
    from sediment.query.scan import Scan
    from sediment.state.versions import Diff, PruneResult
    from sediment.status import Event
    from sediment.store import Store


class Table:
    """A table of a :class:`Store`. Obtain one with ``store.table(name)``.

    Errors (all :class:`~sediment.errors.SedimentError`): every method raises StorageError when
    the object store fails; every method taking a ``version`` raises QueryError for an unknown
    one and VersionExpiredError (a QueryError) for one whose log or files are past
    ``retention.seconds``, and for a tag name InvalidTagNameError or TagNotFoundError. What
    else a method raises, its own docstring says.
    """

    def __init__(self, store: Store, name: str, table_id: str, states: StateStore) -> None:
        self.store = store
        self.name = name
        self.table_id = table_id
        self._handle = TableHandle(name, table_id, states, store.spec)

    # ---- state ---------------------------------------------------------------------------
    def state(self, version: int | str | None = None) -> TableState:
        """The table state at ``version`` (a number or a tag; latest when None).

        Raises QueryError for an unknown version, VersionExpiredError (a QueryError) for one
        whose log entries were pruned (older than ``retention.seconds``)."""
        v = self.resolve_version(version)
        if v is None:
            return self._handle.state(None)
        from sediment.query.expiry import load_version

        return load_version(self._handle.states, self.name, v)

    def _readable_state(self, version: int | str) -> TableState:
        """The state at ``version`` when its data can still be read: VersionExpiredError when
        its log was pruned or GC deleted any of its files (older than ``retention.seconds``)."""
        from sediment.query.expiry import check_files

        state = self.state(version)
        check_files(self._handle.states, self.name, state)
        return state

    def resolve_version(self, version: int | str | None) -> int | None:
        """A version number from a number, a tag name, or None (latest)."""
        return self._handle.resolve_version(version)

    # ---- versions -------------------------------------------------------------------------
    def tag(self, name: str, version: int | None = None) -> Tag:
        """Pin ``version`` (default: latest) under ``name``; GC keeps its files.

        Raises InvalidTagNameError: a malformed name; TagExistsError: the name is taken;
        WriteOutcomeUnknownError: the store never answered whether the tag was written.
        """
        from sediment.state.versions import create_tag

        v = self.version if version is None else int(version)
        self.state(v)  # QueryError for an unknown version, VersionExpiredError for a pruned one
        return create_tag(self._handle.states, name, v)

    def pin(self, name: str, version: int | None, ttl_seconds: float, *,
            files: Sequence[str] = (), onward: bool = False) -> Tag:
        """Hold ``version`` (default: latest) under ``name`` for ``ttl_seconds``, as a tag holds
        it: GC keeps its files (and ``files``, data files not yet committed), prune its log.
        ``onward``: hold every later version's files too, so :meth:`changes` from ``version``
        still reads (a change-feed follower's or a stream source's position).
        The pin expires on its own by the object store's clock unless pinned again (which
        renews or moves it); ``unpin`` lets it go at once. Listed by ``tags()``.

        Raises InvalidTagNameError: a malformed name; TagExistsError: ``name`` is a tag;
        TagError: a time to live that is not positive (or above a century);
        WriteOutcomeUnknownError: the store never answered whether the pin was written;
        VersionExpiredError: ``version``'s log was pruned, or GC recorded any of its files
        deleted (then the pin is let go: see ``sediment.maintenance.gc``).
        """
        from sediment.query.expiry import check_pinnable
        from sediment.state.tags import create_pin, delete_pin

        v = self.version if version is None else int(version)
        state = self.state(v)  # QueryError: an unknown version; VersionExpiredError: pruned
        states = self._handle.states
        pin = create_pin(states, name, v, ttl_seconds, files, onward=onward)
        try:  # a GC pass that read the pins before this one may have recorded its files
            check_pinnable(states, self.name, state)
        except VersionExpiredError:
            delete_pin(states, name)
            raise
        return pin

    def unpin(self, name: str) -> bool:
        """Let the pin ``name`` go (False when there was none, or it expired and was
        forgotten). Raises TagError when ``name`` is a tag (``delete_tag`` deletes tags)."""
        from sediment.state.tags import delete_pin

        return delete_pin(self._handle.states, name)

    def tags(self) -> list[Tag]:
        """Every tag and live pin of the table, by version.

        Raises CorruptMetadataError: a damaged tag object.
        """
        from sediment.state.versions import list_tags

        return list_tags(self._handle.states)

    def tag_version(self, name: str) -> int:
        """The version a tag pins.

        Raises CorruptMetadataError: a damaged tag object.
        """
        from sediment.state.versions import get_tag

        return get_tag(self._handle.states, name).version

    def delete_tag(self, name: str) -> None:
        from sediment.state.versions import delete_tag

        delete_tag(self._handle.states, name)

    def diff(self, v1: int | str, v2: int | str | None = None) -> Diff:
        """Files, partitions and records that changed from ``v1`` to ``v2`` (default: latest).

        A diff reads only the log and snapshots, never data files, so it still answers for a
        version whose files GC collected. Raises VersionExpiredError for a version whose log
        entries were pruned (past ``retention.seconds``), QueryError for an unknown one."""
        from sediment.state.versions import diff

        a = self.resolve_version(v1)
        b = self.resolve_version(v2) if v2 is not None else self.version
        assert a is not None and b is not None
        for v in {a, b}:
            self.state(v)  # VersionExpiredError for a pruned version
        return diff(self._handle.states, a, b)

    def restore(self, version: int | str) -> int:
        """Make the content what it was at ``version``, as a new transaction; returns it.

        Restoring the version that is already the head changes nothing: no transaction is
        committed and that version is returned. Raises VersionExpiredError for a version past
        ``retention.seconds`` (its log pruned or its files collected: nothing to restore);
        CommitConflictError, committing nothing, when another writer changed the content
        (an ingest) while the restore was under way: retry to discard that change too."""
        from sediment.state.restoring import restore_version

        v = self.resolve_version(version)
        assert v is not None
        seen = self.version  # the head restored over: later changes to content are refused
        if v == seen:
            return v
        old = self._readable_state(v)
        return restore_version(self._handle.states, old, seen)

    def dump(self, root: str, *, range: Range | None = None,  # noqa: A002 (public API name)
             version: int | str | None = None, runner: Literal["local", "spark"] = "local",
             progress: Callable[[int, int], None] | None = None) -> DumpJob:
        """Dump ``range`` at ``version`` under ``root`` (local path or s3://): data, sample and
        manifest files per task plus a job manifest; resumes an interrupted dump to ``root``.
        ``runner``: the tasks run in local threads, or as Spark tasks with ``"spark"``.
        Raises VersionExpiredError for a ``version`` past ``retention.seconds``; JobError for
        an unknown ``runner``; MissingDependencyError: ``runner="spark"`` without pyspark."""
        from sediment.dump import dump_table

        if version is not None:
            v = self.resolve_version(version)
            assert v is not None
            if v != self.version:
                self._readable_state(v)

        return dump_table(self._handle, root, range=range, version=version, runner=runner,
                          progress=progress)

    def abandon_dump(self) -> None:
        """Remove the lock (and the version tag) of an interrupted dump job, so that another
        dump may start, and abort the multipart uploads its tasks left unfinished under its
        folder; nothing is done when no dump holds the lock."""
        from sediment.dump.dump import abandon_dump

        abandon_dump(self._handle)

    def prune(self) -> PruneResult:
        """Delete log entries and snapshots no tag or retained version needs."""
        from sediment.state.versions import prune

        states = self._handle.states
        return prune(states, settings_of(states.head(), self.name).retention_seconds)

    def verify(self, version: int | str | None = None, deep: bool = False, *,
               progress: Callable[[int, int], None] | None = None) -> VerifyReport:
        """Read every object ``version`` needs (None: the head and every tag's and live
        pin's version) and check it against its checksum: the store file and catalog entry,
        tags, log entries, snapshots, and each data file once (size, footer and whole-file
        CRC-32, sample, key filter); ``deep`` also decodes every row group, verifying page
        CRCs. Damage is reported, never raised: ``VerifyReport.damaged`` names each damaged
        or missing object and the versions and tags it breaks; objects written before
        checksums are counted unchecked. ``progress(done, total)``: data files.

        Raises QueryError for a version the table does not have.
        """
        from sediment.maintenance.verify import CATALOG_ENTRY, STORE_FILE, verify_table
        from sediment.store import CATALOG_PREFIX
        from sediment.store import STORE_FILE as STORE_KEY

        documents = [(STORE_FILE, STORE_KEY),
                     (CATALOG_ENTRY, f"{CATALOG_PREFIX}{self.name}.json")]
        return verify_table(self._handle, version, deep=deep, documents=documents,
                            progress=progress)

    @property
    def version(self) -> int:
        """The latest committed version."""
        return self._handle.version

    @property
    def schema(self) -> Schema:
        return self._handle.schema

    @property
    def properties(self) -> dict[str, Any]:
        """Every property with its effective value (defaults included; for a member of a
        partition scheme, the scheme's ``partition.split.threshold``)."""
        return with_scheme_threshold(self.store.objects, self._handle.properties)

    def set_properties(self, updates: Mapping[str, Any] | None = None, *,
                       remove: Sequence[str] = ()) -> int:
        """Set and/or reset properties in one transaction; returns the new version.

        A member of a partition scheme has the scheme's ``partition.split.threshold`` (one
        value per scheme): setting it sets the scheme's, in the scheme's log, and resetting it
        sets the store's default there; the member's version moves only for its other
        properties (with none, its version is returned as it is).

        Raises PropertyError: an unknown property or a bad value (named); TransactionError: the
        commit was refused or its outcome is unknown.
        """
        updates = dict(updates or {})
        remove = list(remove)
        for name in remove:
            if name not in PROPERTIES:
                raise PropertyError(f"table {self.name}: unknown property {name!r}"
                                    f"{did_you_mean(name, PROPERTIES)}")
        # checked here so that errors name the table, not its id (the transaction validates
        # again against the head it follows)
        parsed = validate_properties(updates, context=f"table {self.name}", schema=self.schema)
        after = {**self._handle.states.head().properties, **parsed}
        check_combined({k: v for k, v in after.items() if k not in remove},
                       context=f"table {self.name}")
        scheme = self._handle.states.head().properties.get("partition.scheme")
        if scheme and THRESHOLD in {*updates, *remove}:
            value = parsed[THRESHOLD] if THRESHOLD in parsed else \
                self.store.properties[THRESHOLD]
            set_scheme_threshold(self.store.objects, str(scheme), int(value))
            updates.pop(THRESHOLD, None)
            remove = [r for r in remove if r != THRESHOLD]
            if not updates and not remove:
                return self.version
        return self._handle.states.commit(SetProperties(updates, tuple(remove))).version

    @property
    def online(self) -> bool:
        return self._handle.states.head().online

    # ---- schema changes (sediment.schema_changes; one transaction each) -------------------
    def add_columns(self, columns: Sequence[tuple[str, Any]]) -> int:
        """Add nullable value columns ``[(name, type), ...]`` (a pyarrow type or its text,
        as ``create-table`` takes it); returns the new version. Files are not rewritten:
        records written before read the new columns as nulls.

        Raises SchemaError naming the table and the column; TransactionError: the commit was
        refused or its outcome is unknown."""
        try:
            args = add_args(columns)
        except SchemaError as e:
            raise SchemaError(f"table {self.name}: {e}") from None
        return self._alter("add_columns", args)

    def drop_columns(self, names: Sequence[str]) -> int:
        """Drop value columns; returns the new version. Their values stay in old files (time
        travel and tags still read them) but a column added later under the same name never
        shows them."""
        try:
            args = drop_args(names)
        except SchemaError as e:
            raise SchemaError(f"table {self.name}: {e}") from None
        return self._alter("drop_columns", args)

    def rename_column(self, old: str, new: str) -> int:
        """Rename a value column; returns the new version. Its values stay with it."""
        return self._alter("rename_column", {"old": str(old), "new": str(new)})

    def widen_column(self, name: str, type: Any) -> int:
        """Widen a value column's type (int32 -> int64, float32 -> float64, ...: see
        ``sediment.schema_changes.is_widening``); returns the new version. Old files' values
        are cast exactly when read."""
        try:
            typ = parse_type(type) if isinstance(type, str) else type
        except SchemaError as e:
            raise SchemaError(f"table {self.name}: column {name!r}: {e}") from None
        return self._alter("widen_column", {"name": str(name), "type": str(typ)})

    def schema_at(self, version: int | str) -> Schema:
        """The table's schema at ``version`` (a number or a tag)."""
        state = self.state(version)
        assert state.schema is not None
        return state.schema

    def _alter(self, op: str, args: dict[str, Any]) -> int:
        head = self._handle.states.head()
        assert head.schema is not None
        try:
            judged_change(head.schema, head.properties, filtered_fields(head), op, args)
        except SchemaError as e:
            raise SchemaError(f"table {self.name}: {e}") from None
        return self._handle.states.commit(AlterSchema(op, args)).version

    def set_online(self, online: bool) -> int:
        """Bring the table online or take it offline (maintenance skips offline tables).

        Raises TransactionError: the commit was refused or its outcome is unknown.
        """
        return self._handle.states.commit(SetOnline(online)).version

    def delete(self, keys: Sequence[Any] | None = None,
               ranges: Sequence[Range] | Range | None = None, *,
               filter: Any = None,  # noqa: A002 (the public name)
               idempotency_key: str | None = None) -> int:
        """Delete, in one transaction, every record committed before it of ``keys`` (row
        keys: all their records), in ``ranges``, and/or matching ``filter`` (a
        ``pc.Expression`` or ``--where`` text; with keys or ranges, the records of those
        that match it); returns the new version. A metadata commit: no data is read or
        written, whatever it covers; reads drop the records from this version on, earlier
        versions still hold them, and compaction removes them for good. Records written
        after it (an insert of a deleted key) are kept. ``idempotency_key``: as
        :meth:`ingest`'s (the payload is what the delete names).

        Raises QueryError naming the table: nothing named (``clear()`` deletes every
        record), a key, range or filter that does not fit the table; TransactionError: the
        commit was refused or its outcome is unknown (IdempotencyKeyReusedError: the key was
        used for another delete or write).
        """
        from sediment.ingest.records import delete

        return delete(self._handle, keys, ranges, filter=filter,
                      idempotency_key=idempotency_key)

    def purge(self, keys: Sequence[Any] | None = None,
              ranges: Sequence[Range] | Range | None = None, *,
              filter: Any = None) -> PurgeResult:  # noqa: A002 (the public name)
        """:meth:`delete`, then rewrite every live file that may hold a deleted record, in one
        transaction, so that once retention, pins and tags allow, GC leaves no data file or
        sidecar holding one. ``PurgeResult`` says what still holds them: the retained
        versions before the rewrite, the tags and pins, and when GC may delete the files.

        Raises: as :meth:`delete`; JobError naming the table when a rewrite fails (the
        records stay deleted from every read).
        """
        from sediment.maintenance.purge import purge

        return purge(self._handle, keys, ranges, filter=filter)

    def clear(self) -> int:
        """Remove every record in one transaction; returns the new version. Schema, properties
        and partitions are kept. The files become unreferenced: older versions (time travel,
        tags, ``restore``) still read them until the collector deletes them after
        ``gc.delay_seconds``. Clearing an empty table commits nothing.

        Raises TransactionError: the commit was refused or its outcome is unknown.
        """
        head = self._handle.states.head()
        if head.reference_count() == 0 and not head.jobs:
            return head.version
        return self._handle.states.commit(ClearTable()).version

    def reinitialise(self, split_points: Sequence[Any] | None = None) -> int:
        """Give a table that holds no records a new partition tree cut at ``split_points``
        (none: a single root partition); returns the new version. A table with records is
        refused (TransactionInvalidError): clear it first. Schema and properties are kept.

        Raises TransactionInvalidError: the table still holds references; SchemaError: split
        points that are not row keys or not increasing.
        """
        from sediment.core.state import build_partition_tree

        partitions = build_partition_tree(self.schema, split_points,
                                          str(self.properties["partitioning"]))
        return self._handle.states.commit(ReinitialiseTable(partitions)).version

    def changes(self, start_version: int | str, end_version: int | str | None = None, *,
                columns: Sequence[str] | None = None,
                filter: Any = None) -> pa.RecordBatchReader:  # noqa: A002 (the public name)
        """The record changes committed in versions ``(start_version, end_version]`` (numbers
        or tags; ``end_version`` None: the head now), streamed one version at a time, in
        commit order: so ``changes(a, b)`` then ``changes(b, c)`` is ``changes(a, c)``.

        Each row is a record of the table, shaped by the end version's schema, followed by
        ``_change_type`` (``insert``, ``update_preimage``, ``update_postimage``, ``delete``),
        ``_commit_version`` and ``_commit_timestamp`` (``timestamp[ms, tz=UTC]``). What each
        kind of commit yields: sediment.query.changes and docs/howto/streams.md. ``columns``
        picks output columns (the change columns among them); ``filter`` (an expression or
        ``--where`` text, which may name the change columns) keeps rows.

        Raises QueryError: an unknown version, tag or column, a start after the end;
        VersionExpiredError: a start version whose log was pruned (past ``retention.seconds``,
        unpinned), at the call, or, while reading, a version whose files GC collected (an
        onward pin, ``pin(..., onward=True)``, keeps them); SchemaError: a table column
        named like a change column.
        """
        from sediment.query.changes import reader_of

        feed, pairs = self._change_feed(start_version, end_version, columns, filter)
        return reader_of(feed.out_schema, pairs)

    def changes_of(self, request: ReadRequest) -> pa.RecordBatchReader:
        """:meth:`changes` of a changes request (``ReadRequest(changes={"from": V, "to": W},
        columns=..., filter=...)``: what the Flight service and ``sediment query --request``
        take). Raises BadRequestError for a request that is not one, then as :meth:`changes`."""
        start, end = request.changes_range()
        return self.changes(start, end, columns=request.columns, filter=request.filter)

    def _change_feed(self, start_version: int | str, end_version: int | str | None,
                     columns: Sequence[str] | None, filter: Any,  # noqa: A002
                     ) -> tuple[Any, Iterator[tuple[int, pa.Table]]]:
        """The feed of ``changes`` and its (version, rows) pairs, versions read as asked."""
        a = self.resolve_version(start_version)
        b = self.resolve_version(end_version) if end_version is not None else None
        assert a is not None
        return self._changes.between(a, b, columns, filter)

    @property
    def _changes(self) -> Any:
        from sediment.query.change_source import ChangeSource

        return ChangeSource(self.name, self._handle.states, self._prepare_at)

    def follow(self, start_version: int | str | None = None, *, poll_seconds: float = 1.0,
               columns: Sequence[str] | None = None, filter: Any = None,  # noqa: A002
               pin: str | None = None, pin_ttl_seconds: float = 3600.0,
               stop: threading.Event | None = None
               ) -> Iterator[tuple[int, pa.RecordBatchReader]]:
        """Follow the table live: ``(version, reader)`` for each version committed after
        ``start_version`` (None: after the head at the call), one whole version at a time,
        in commit order, each exactly once; the reader streams its change rows as
        :meth:`changes` gives them, shaped by that version's schema (a version that changed
        no record gives an empty reader). The log is polled every ``poll_seconds``.

        A follower that records the last version it handled resumes after a restart with
        ``follow(that_version)``. ``pin``: a pin name the follower holds, onward, on the last
        version it finished (renewed for ``pin_ttl_seconds`` at each), so GC and prune keep
        what it still needs to read while it is down for less than that. ``stop``: an event that
        ends the loop (after the version being handled).

        Raises as :meth:`changes`."""
        a = self.resolve_version(start_version) if start_version is not None else self.version
        if a is None or not 0 <= a <= self.version:
            raise QueryError(f"table {self.name} has no version {start_version} to follow from")
        if pin is not None and a:
            self.pin(pin, a, pin_ttl_seconds, onward=True)

        def handled(v: int) -> None:
            if pin is not None:
                self.pin(pin, v, pin_ttl_seconds, onward=True)

        yield from self._changes.follow(a, poll_seconds, handled, stop, columns, filter)

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """Every committed transaction still kept (``retention.seconds``: older ones are
        pruned): version, time, kind and a one-line summary, in commit order. ``limit``: only
        the ``limit`` newest, read without listing the rest of the log (what a page of
        recent commits needs, however long the table has run).

        Raises CorruptMetadataError: a gap or a damaged entry in the log; QueryError: a
        negative ``limit``.
        """
        return self._handle.states.history(limit)

    def partitions(self, version: int | None = None) -> list[Partition]:
        """The partition tree, parents before children."""
        st = self.state(version)
        return sorted(st.partitions.values(),
                      key=lambda p: (len(st.ancestors(p.id)), p.region.min or ()))

    def leaves(self, version: int | None = None) -> list[Partition]:
        """The leaf partitions (those holding the data, tiling the key space), in key order:
        what a count of a table's pieces means (``partitions()`` has their ancestors too)."""
        return self.state(version).leaf_partitions()

    def files(self, version: int | None = None) -> list[FileReference]:
        """Every file reference, by partition then filename."""
        return list(self.state(version).all_references())

    def usage(self) -> Usage:
        """Where this table's bytes go now: live data files and their sidecars (samples and
        key filters), unreferenced and orphaned files by the reason GC keeps them (or due:
        its next pass deletes them), metadata (log, snapshots, tags, leases) and job events
        (``sediment du``; see ``sediment.maintenance.usage``). One listing of the table's
        folder.

        Raises StorageError: the object store failed."""
        from sediment.maintenance.usage import table_usage

        return table_usage(self._handle)

    def describe(self, version: int | None = None) -> dict[str, Any]:
        """Schema, properties, version and counts, as plain data (the CLI's ``describe``).
        ``unreferenced_bytes`` and ``orphan_bytes`` are the bytes GC has yet to free (the
        files no version at the head references, and those no transaction added, sidecars
        included), as of now whatever ``version``: ``table.gc().kept`` says what holds them."""
        from sediment.maintenance.gc import survey

        st = self.state(version)
        refs = list(st.all_references())
        plan = survey(self._handle)
        return {
            "name": self.name,
            "table_id": self.table_id,
            "uri": self._handle.objects.uri,
            "version": st.version,
            "online": st.online,
            "schema": {k: v for k, v in (st.schema.to_json() if st.schema else {}).items()
                       if k != "arrow"},
            "properties": with_scheme_threshold(self.store.objects,
                                                {**defaults(), **st.properties}),
            "partitions": len(st.partitions),
            "leaf_partitions": sum(p.is_leaf for p in st.partitions.values()),
            "files": len(st.refcount),
            "references": len(refs),
            "records": sum(r.records for r in refs),
            "unreferenced_files": len(st.unreferenced),
            "unreferenced_bytes": plan.unreferenced_bytes,
            "orphan_bytes": plan.orphan_bytes,
            "tags": [_tag_json(t) for t in scan_tags(self._handle.states).tags],
        }

    # ---- reports -----------------------------------------------------------------------------
    def jobs(self, kind: str | None = "compaction") -> list[dict[str, Any]]:
        """Jobs of ``kind`` (compaction, split, gc, ingest, dump; None: all) from their
        events: id, partition, status, inputs, rows in and out, seconds, as plain data (the
        CLI's ``report jobs``)."""
        return self._handle.status.jobs(kind)

    def events(self, kind: str | None = None, *, since: float | None = None) -> list[Event]:
        """Job and task events, oldest first (the CLI's ``report tasks``)."""
        return list(self._handle.status.events(kind, since=since))

    # ---- maintenance -----------------------------------------------------------------------
    def compact(self, *, full: bool = False, runner: Literal["local", "spark"] = "local",
                progress: Callable[[int, int], None] | None = None) -> CompactionResult:
        """One compaction pass: push references down, create jobs, run them in parallel
        (threads here, or Spark tasks with ``runner="spark"``). ``full``: a forced full
        compaction, every leaf with more than one file (or a file spanning other leaves too)
        compacted into one file whatever the strategy. ``progress(done, total)``: called with
        ``(0, jobs)`` once the pass has planned its jobs, then as each ends (with Spark, as
        the driver commits each once all tasks have run).

        Raises JobError: a job failed (the others still commit), or an unknown ``runner``
        (named, with the known ones); TransactionError: a commit was refused or its outcome
        is unknown; MissingDependencyError: ``runner="spark"`` without pyspark.
        """
        from sediment.compaction.runner import compact

        return compact(self._handle, runner=load_runner("compaction", runner, table=self.name),
                       full=full, progress=progress)

    def split(self) -> SplitResult:
        """Split every leaf partition over ``partition.split.threshold`` at its median (a
        member of a partition scheme: the scheme's leaves, on all members' records).

        Raises TransactionError: a split's commit was refused or its outcome is unknown.
        """
        from sediment.maintenance.schemes import split_table

        return split_table(self._handle)

    def gc(self, *, orphan_timeout: float | None = None) -> GcResult:
        """Delete unreferenced files past the GC delay and orphans past the orphan timeout
        (``orphan_timeout`` overrides the property, which may not go below an hour: lower
        only where no writer could be slower, as in tests). ``GcResult.kept`` says what the
        pass kept, why (a tag, a pin, retention, the GC delay, the clock-skew margin; a
        writer's lease, the orphan timeout), how many bytes and when each becomes due.

        Raises TransactionError: the DeleteFiles commit was refused or its outcome is unknown.
        """
        from sediment.maintenance.gc import gc

        return gc(self._handle, orphan_timeout=orphan_timeout)

    def maintain(self, *, runner: Literal["local", "spark"] = "local",
                 orphan_timeout: float | None = None,
                 progress: Callable[[int, int], None] | None = None) -> MaintenanceResult:
        """Split, compact and collect garbage until there is nothing left to do (compaction
        jobs in local threads, or as Spark tasks with ``runner="spark"``), then bound the
        metadata as the continuous maintainer does: log entries and snapshots past
        ``retention.seconds`` pruned (never below a tag or a pin), job events past
        ``status.retention.seconds`` rolled up (``MaintenanceResult.metadata_deleted``).
        ``progress(done, total)``: each pass's compaction jobs, as for :meth:`compact`
        (``(0, jobs)`` at the start of every pass).

        Raises JobError, TransactionError: as :meth:`compact`, :meth:`split` and :meth:`gc`;
        MissingDependencyError: ``runner="spark"`` without pyspark.
        """
        from sediment.maintenance.passes import maintain

        return maintain(self._handle, runner=load_runner("compaction", runner, table=self.name),
                        orphan_timeout=orphan_timeout, progress=progress)

    # ---- ingest ----------------------------------------------------------------------------
    def ingest(self, data: Any, *, progress: Callable[[int], None] | None = None,
               spill_dir: str | None = None,
               idempotency_key: str | None = None) -> IngestResult:
        """Ingest records (pyarrow Table/RecordBatch/RecordBatchReader, pandas DataFrame or an
        iterable of them) in one transaction.

        ``spill_dir``: the local folder sorted runs spill to past ``ingest.memory_limit_bytes``
        (else ``$SEDIMENT_SPILL_DIR``, else the system temp folder). It is this client's
        choice, not the table's: the old ``ingest.spill_dir`` property is ignored.

        ``idempotency_key``: a string naming this write, so that a retry (after a lost
        answer, a crash, from another process or server) commits it at most once: within
        ``write.idempotency_window_seconds`` the same key with the same records returns the
        first write's result (its version) and writes nothing; with other records it raises
        IdempotencyKeyReusedError (see ``sediment.ingest.idempotency``).

        Raises DataError: records that do not fit the schema (the field and row are named);
        StorageError: the spill folder does not exist or is not a folder, or a write failed
        (a full disk: the folder or file is named); TransactionError: the commit was refused
        (CommitOutcomeUnknownError: no answer; IdempotencyKeyReusedError: a key used for
        other records). Nothing partial is ever committed.
        """
        if idempotency_key is not None:
            from sediment.ingest.keyed import keyed_ingest

            return keyed_ingest(self._handle, data, idempotency_key, progress=progress,
                                spill_dir=spill_dir)
        from sediment.ingest import ingest

        return ingest(self._handle, data, progress=progress, spill_dir=spill_dir)

    def upsert(self, data: Any, *, progress: Callable[[int], None] | None = None,
               spill_dir: str | None = None,
               idempotency_key: str | None = None) -> IngestResult:
        """Upsert records, in one transaction: each replaces every record of its record key
        (row keys + sort keys) committed before it, whatever the table's merge rule, until
        a later write of that key; of equal keys in ``data``, the last in input order wins.
        Takes what :meth:`ingest` takes; costs what an ingest costs (the records replaced
        are dropped by readers and, for good, by compaction). ``idempotency_key``: as
        :meth:`ingest`'s (an upsert's payload differs from an ingest of the same records).

        Raises: as :meth:`ingest`. Nothing partial is ever committed.
        """
        if idempotency_key is not None:
            from sediment.ingest.keyed import keyed_ingest

            return keyed_ingest(self._handle, data, idempotency_key, progress=progress,
                                spill_dir=spill_dir, upsert=True)
        from sediment.ingest import ingest

        return ingest(self._handle, data, progress=progress, spill_dir=spill_dir, upsert=True)

    def writer(self, *, max_rows: int = 100_000, max_bytes: int = 64 << 20,
               max_seconds: float = 1.0) -> BufferedWriter:
        """A buffered writer (a context manager): ``write(data, *, idempotency_key=None)``
        validates and buffers small writes; a background thread flushes them as one sorted
        set of files and ONE commit once ``max_rows`` rows or ``max_bytes`` bytes are
        buffered or the oldest write is ``max_seconds`` old. ``flush()`` and ``close()``
        return the versions committed since the last of them (once everything written
        before is committed) and raise what a background flush hit. ``write`` blocks while
        the buffer is full (see ``sediment.ingest.buffered``)."""
        from sediment.ingest.buffered import BufferedWriter

        return BufferedWriter(self._handle, max_rows=max_rows, max_bytes=max_bytes,
                              max_seconds=max_seconds)

    def upsert_files(self, paths: Sequence[str] | str, *,
                     progress: Callable[[int], None] | None = None,
                     spill_dir: str | None = None,
                     idempotency_key: str | None = None) -> IngestResult:
        """:meth:`upsert` the records of Parquet, CSV or JSON-lines files (as
        :meth:`ingest_files` reads them; the last of equal keys in file order wins)."""
        if idempotency_key is not None:
            from sediment.ingest.keyed import keyed_ingest_files

            return keyed_ingest_files(self._handle, paths, idempotency_key, progress=progress,
                                      spill_dir=spill_dir, upsert=True)
        from sediment.ingest import ingest_files

        return ingest_files(self._handle, paths, progress=progress, spill_dir=spill_dir,
                            upsert=True)

    def ingest_files(self, paths: Sequence[str] | str, *,
                     progress: Callable[[int], None] | None = None,
                     spill_dir: str | None = None,
                     idempotency_key: str | None = None) -> IngestResult:
        """Ingest Parquet, CSV or JSON-lines files (local or S3; globs) in one transaction
        (``spill_dir``, ``idempotency_key``: as :meth:`ingest`; the payload is the files'
        records).

        Raises DataError: a missing or unreadable file, an unknown format, a bad record;
        StorageError, TransactionError: as :meth:`ingest`.
        """
        if idempotency_key is not None:
            from sediment.ingest.keyed import keyed_ingest_files

            return keyed_ingest_files(self._handle, paths, idempotency_key, progress=progress,
                                      spill_dir=spill_dir)
        from sediment.ingest import ingest_files

        return ingest_files(self._handle, paths, progress=progress, spill_dir=spill_dir)

    # ---- queries ---------------------------------------------------------------------------
    def _query_state(self, version: int | str | None) -> TableState:
        """The state a query reads: the version asked for, or the head this process shares
        (its own commits at once, others' within ``state.cache.refresh_seconds``).
        VersionExpiredError for a version whose log was pruned."""
        if version is not None:
            return self.state(version)
        return self._handle.states.cached_head()

    def prepare(self, keys: Sequence[Any] | ReadRequest | None = None, ranges: Any = None, *,
                columns: Sequence[str] | None = None, version: int | str | None = None,
                iterators: Sequence[Any] | None = None,
                filter: Any = None) -> Scan:  # noqa: A002 (the public name)
        """A read planned and ready to run: a :class:`~sediment.query.scan.Scan` whose
        outputs (``to_arrow``, ``to_batches``, ``to_pandas``, ``to_polars``, ``to_duckdb``,
        ``register_datafusion``, ``plan_files``, the plan, the Arrow PyCapsule stream) all
        give the same records. Every read of a table goes through here: :meth:`query`,
        :meth:`scan` and the conversions, the Spark reader, the Flight service, dumps.

        Takes a :class:`~sediment.query.request.ReadRequest` (``table.prepare(request)``) or
        the read's arguments, as :meth:`query` takes them (not both: QueryError).
        ``filter``: a pyarrow compute expression (``pc.field("v") > 3``) on any columns, the
        same condition as ``--where`` text (``"v > 3"``, parsed against the table's schema),
        or a request's JSON filter tree, applied to the merged records after the iterators;
        see :meth:`query`.

        Raises QueryError: a bad key, range, column or filter (one naming an unknown column
        names it; WhereError for filter text that does not parse, naming the table and the
        position; FilterError for a malformed filter tree); VersionExpiredError or a
        version/tag error for a version that cannot be read; CorruptMetadataError,
        ObjectNotFoundError: damaged or missing data files.
        """
        from sediment.query.request import request_of

        request = request_of(keys, ranges, columns=columns, version=version,
                             iterators=iterators, filter=filter)
        if request.changes is not None:
            raise QueryError(f"table {self.name}: a changes request is read with "
                             f"table.changes_of(request), not prepared as a scan")
        return self._prepare_at(self._query_state(request.version), request)

    def _prepare_at(self, state: TableState, request: ReadRequest) -> Scan:
        """:meth:`prepare` of ``request`` on ``state`` (the head this process shares, a
        version loaded for it, or a state the change feed replayed)."""
        from sediment.query.expiry import check_files
        from sediment.query.prepare import prepare_query
        from sediment.query.scan import ScanSource

        source = ScanSource(self.name, self._handle.objects, self.prepare)
        executors = self._handle.executors
        if request.version is None:
            return prepare_query(state, executors.get(state), self.name, request,
                                 source=source, iterators=executors.iterators(state, self.name),
                                 plans=executors.plans(state))
        # An old version: the files the plan reads must not have been collected by GC (one
        # set lookup per file against the head). A file found missing on read is judged
        # again, against the head then (GC may run meanwhile): VersionExpiredError, or the
        # missing-file error when the head still knows the file (lost some other way).
        files: set[str] = set()
        states = self._handle.states

        def on_missing() -> None:
            check_files(states, self.name, state, files)

        scan = prepare_query(state, self._handle.executors.get(state), self.name, request,
                             on_missing=on_missing, source=source)
        files.update(scan.plan.files)
        check_files(states, self.name, state, files)
        return scan

    def _pin(self, version: int | str | None) -> int:
        """The version an engine route pins: ``version`` resolved, or the head now."""
        v = self.resolve_version(version)
        return self.version if v is None else v

    # Every read below is ``prepare(...)`` and one output of the scan: the arguments are
    # :meth:`query`'s (keys, ranges, columns, version: a number or a tag, filter), and each
    # raises what :meth:`prepare` raises, then what reading raises (see ``Scan``).
    def query(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
              columns: Sequence[str] | None = None, version: int | str | None = None,
              iterators: Sequence[Any] | None = None,
              filter: Any = None) -> pa.Table:  # noqa: A002 (the public name)
        """Records with the given exact row keys and/or in the given ranges, sorted by key.

        ``keys``: row-key values (or tuples; a shorter tuple is a prefix). ``ranges``: Range
        values. Neither: the whole table. ``version``: read an older version (a number or a
        tag); VersionExpiredError when it is past ``retention.seconds`` and GC deleted its
        files or pruning its log (a file lost any other way stays ObjectNotFoundError).
        ``filter``: a pyarrow compute expression on any columns (``pc.field("v") > 3``) or
        ``--where`` text (``"v > 3"``, the syntax of :mod:`sediment.query.where`), kept
        for the merged records after the iterators (the ``filter`` iterator property is the
        configured, compaction-time one). Its constraints on the first row-key field narrow
        the leaves, files and row groups read; with record-by-record iterators (none,
        filters, age-off) its other constraints prune row groups by Parquet statistics. The
        columns it needs are read even when not in ``columns``.

        Raises as :meth:`prepare`.
        """
        return self.prepare(keys, ranges, columns=columns, version=version,
                            iterators=iterators, filter=filter).to_arrow()

    def scan(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
             columns: Sequence[str] | None = None, version: int | str | None = None,
             iterators: Sequence[Any] | None = None,
             filter: Any = None) -> pa.RecordBatchReader:  # noqa: A002 (the public name)
        """Like :meth:`query`, streamed as a RecordBatchReader in bounded memory
        (``prepare(...).to_batches()``). Raises as :meth:`prepare`."""
        return self.prepare(keys, ranges, columns=columns, version=version,
                            iterators=iterators, filter=filter).to_batches()

    def plan(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
             version: int | str | None = None,
             filter: Any = None) -> QueryPlan:  # noqa: A002 (the public name)
        """The query plan (leaves and files a query would read), for inspection; a
        ``filter`` narrows it by its row-key constraints. Raises as :meth:`prepare`."""
        return self.prepare(keys, ranges, version=version, filter=filter).plan

    def to_arrow(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
                 columns: Sequence[str] | None = None, version: int | str | None = None,
                 filter: Any = None) -> pa.Table:  # noqa: A002 (the public name)
        """The records as one ``pyarrow.Table``: :meth:`query`'s answer, under the name
        Arrow users look for (``Scan.to_arrow``)."""
        return self.prepare(keys, ranges, columns=columns, version=version,
                            filter=filter).to_arrow()

    def to_pandas(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
                  columns: Sequence[str] | None = None, version: int | str | None = None,
                  filter: Any = None) -> pd.DataFrame:  # noqa: A002 (the public name)
        """The records as a pandas DataFrame, rows in key order (``Scan.to_pandas``): a
        DataFrame user never goes around the merge (reading the data files directly
        double-counts records). Needs pandas."""
        return self.prepare(keys, ranges, columns=columns, version=version,
                            filter=filter).to_pandas()

    def to_batches(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
                   columns: Sequence[str] | None = None, version: int | str | None = None,
                   filter: Any = None) -> pa.RecordBatchReader:  # noqa: A002
        """The records as a ``pyarrow.RecordBatchReader`` streamed leaf by leaf in key order
        in bounded memory (``Scan.to_batches``), for answers larger than memory or engines
        that read Arrow streams."""
        return self.prepare(keys, ranges, columns=columns, version=version,
                            filter=filter).to_batches()

    def to_polars(self, lazy: bool = False, keys: Sequence[Any] | None = None,
                  ranges: Any = None, columns: Sequence[str] | None = None,
                  version: int | str | None = None,
                  filter: Any = None) -> Any:  # noqa: A002 (the public name)
        """:meth:`query`'s answer as a Polars DataFrame; with ``lazy``, a LazyFrame over the
        version pinned now (``Scan.to_polars``). MissingDependencyError without polars."""
        return self.prepare(keys, ranges, columns=columns, version=self._pin(version),
                            filter=filter).to_polars(lazy)

    def to_duckdb(self, con: Any, name: str, version: int | str | None = None) -> Any:
        """Register ``name`` in the DuckDB connection ``con``: a view of the table at
        ``version`` (None: the head now, pinned), equal to :meth:`query` there, reading
        nothing until queried (``Scan.to_duckdb``). Returns ``con``."""
        return self.prepare(version=self._pin(version)).to_duckdb(con, name)

    def register_datafusion(self, ctx: Any, name: str, version: int | str | None = None, *,
                            keys: Sequence[Any] | None = None, ranges: Any = None,
                            columns: Sequence[str] | None = None,
                            filter: Any = None) -> Any:  # noqa: A002 (the public name)
        """Register ``name`` in the DataFusion ``SessionContext`` ``ctx``: :meth:`query`'s
        answer at ``version`` (None: the head now), read once, here
        (``Scan.register_datafusion``). Returns ``ctx``."""
        return self.prepare(keys, ranges, columns=columns, version=self._pin(version),
                            filter=filter).register_datafusion(ctx, name)

    def plan_files(self, keys: Sequence[Any] | None = None, ranges: Any = None,
                   version: int | str | None = None,
                   filter: Any = None) -> list[PlannedFile]:  # noqa: A002
        """The data files a query reads at ``version`` (None: the head), one
        :class:`~sediment.query.engines.PlannedFile` per (leaf, file), in key order: what an
        engine that reads Parquet itself needs (``Scan.plan_files``)."""
        return self.prepare(keys, ranges, version=self._pin(version),
                            filter=filter).plan_files()

    @property
    def inspect(self) -> TableInspector:
        """Metadata as Arrow tables: ``files()``, ``partitions()``, ``history()``,
        ``jobs()`` (see :class:`~sediment.query.inspect.TableInspector`)."""
        from sediment.query.inspect import TableInspector

        return TableInspector(self)

    def __repr__(self) -> str:
        return f"Table({self.name!r}, store={self.store.uri!r})"


def _tag_json(tag: Tag) -> dict[str, Any]:
    """A tag (or pin) in ``describe``: a pin has an expiry and an owner (and may keep files)."""
    out: dict[str, Any] = {"name": tag.name, "version": tag.version, "created": tag.created}
    if tag.is_pin:
        out.update(expires=tag.expires, owner=tag.owner, files=len(tag.files))
    return out
