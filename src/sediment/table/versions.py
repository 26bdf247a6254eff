"""Versions of a table: tags and pins, diffs, restores, dumps, pruning, verification and
the commit history (part of the :class:`~sediment.table.Table` façade).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from sediment.errors import VersionExpiredError
from sediment.settings import settings_of
from sediment.state.log import HistoryEntry
from sediment.state.tags import Tag
from sediment.table.base import TableBase

if TYPE_CHECKING:
    from sediment.core.regions import Range
    from sediment.dump import DumpJob
    from sediment.maintenance.verify import VerifyReport
    from sediment.state.versions import Diff, PruneResult


class TableVersions(TableBase):
    """Tags, pins, diff, restore, dump, prune, verify, history."""

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

    def abandon_dump(self, root: str | None = None, *, force: bool = False
                     ) -> dict[str, Any] | None:
        """Remove the lock (and the version tag) of an interrupted dump job, so that another
        dump may start, and abort the multipart uploads its tasks left unfinished under its
        folder; returns the abandoned job's lock document (``job_id``, ``root``, ...), or
        None when no dump held the lock. Refused (JobError) while the lock's heartbeat is
        fresh, so a running dump is never broken (``force``: abandon it anyway), and when
        ``root`` is given and is not the folder the locked job writes to."""
        from sediment.dump.dump import abandon_dump

        return abandon_dump(self._handle, root, force=force)

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
        from sediment.maintenance.unnamed import CATALOG_PREFIX
        from sediment.maintenance.verify import CATALOG_ENTRY, STORE_FILE, verify_table
        from sediment.store import STORE_FILE as STORE_KEY

        documents = [(STORE_FILE, STORE_KEY),
                     (CATALOG_ENTRY, f"{CATALOG_PREFIX}{self.name}.json")]
        return verify_table(self._handle, version, deep=deep, documents=documents,
                            progress=progress)


    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """Every committed transaction still kept (``retention.seconds``: older ones are
        pruned): version, time, kind and a one-line summary, in commit order. ``limit``: only
        the ``limit`` newest, read without listing the rest of the log (what a page of
        recent commits needs, however long the table has run).

        Raises CorruptMetadataError: a gap or a damaged entry in the log; QueryError: a
        negative ``limit``.
        """
        return self._handle.states.history(limit)
