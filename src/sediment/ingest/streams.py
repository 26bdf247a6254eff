"""Committing one batch of a stream exactly once (a streaming sink's driver side).

A streaming writer stages each batch's files (in Spark: its tasks, in parallel) and commits
them with :func:`commit_stream_batch`: one AddFiles carrying the batch's
:class:`~sediment.core.transactions.StreamMark`, built from the head on every attempt. Whether
the batch is already in the table is read from the state, never guessed:

- a head recording the batch (a replay after the driver died between this commit and its own
  checkpoint, or a concurrent committer of the same batch that won the version): nothing is
  committed, the staged files are deleted (none of them can be referenced: the batch went in
  with other files, or with these ones, which the head then references and which are kept);
- an append whose outcome the store did not tell (a lost response): the commit is tried again,
  from a fresh head. The log slot is taken at most once, so either the first append landed
  and the next attempt finds the mark (nothing more is added), or it did not and the next one
  commits the batch. Past ``attempts`` the error is raised and the files are kept for GC's
  orphan pass (the batch may have landed);
- a commit surely refused (invalid, every race lost, table dropped): the files are deleted
  and the error raised; Spark fails the batch, and a restart replays it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sediment.core.state import TableState
from sediment.core.transactions import AddFiles, StreamMark, Transaction
from sediment.errors import CommitOutcomeUnknownError
from sediment.files.staging import Staging
from sediment.ingest.standard import StagedFiles, _stall

if TYPE_CHECKING:
    from sediment.handle import TableHandle

log = logging.getLogger(__name__)

UNKNOWN_OUTCOME_ATTEMPTS = 3
"""Commits of one batch tried while the store does not tell whether the last one landed."""
_NOTHING = AddFiles(())
"""What a replayed batch commits: nothing (an empty transaction writes no log entry)."""


@dataclass(frozen=True, slots=True)
class StreamCommit:
    """What :func:`commit_stream_batch` did: ``committed`` False for a batch the table had
    already (a replay: nothing added) or an empty one (nothing to add); ``version``: the
    head after it."""

    committed: bool
    version: int
    rows: int


def commit_stream_batch(table: TableHandle, staged: StagedFiles, mark: StreamMark, *,
                        upsert: bool = False, overwrite: bool = False,
                        kind: str = "bulk_import") -> StreamCommit:
    """Commit ``staged`` (files other processes wrote, adopted here) as batch
    ``mark.batch_id`` of stream ``mark.stream_id``, exactly once: see the module. ``upsert``
    and ``overwrite`` as :func:`~sediment.ingest.standard.commit_staged`'s. An empty batch
    (no rows, no overwrite) commits nothing: replaying it adds nothing either."""
    started = time.perf_counter()
    names = [w.filename for w in staged.written]
    staging = Staging(table.objects, table.name)
    staging.adopt(names)
    if staged.rows == 0 and not overwrite:
        staging.delete()
        return StreamCommit(False, table.version, 0)
    batch = AddFiles(staged.references, checksums=staged.checksums, upsert=upsert,
                     overwrite=overwrite, stream=mark)
    built: list[Transaction] = []

    def source(head: TableState) -> Transaction:
        built.append(_NOTHING if mark.committed(head) else batch)
        return built[-1]

    with staging:  # an error before the commit deletes the files; one of it, as it says
        if staged.rows:
            _stall(table, staged, kind, None)
        for attempt in range(1, UNKNOWN_OUTCOME_ATTEMPTS + 1):
            try:
                state = staging.commit(table.states, source)
                break
            except CommitOutcomeUnknownError as e:
                if attempt == UNKNOWN_OUTCOME_ATTEMPTS:
                    raise
                log.warning("table %s: stream %s batch %d: %s; reading the table to tell",
                            table.name, mark.stream_id, mark.batch_id, e)
    if built[-1] is _NOTHING:
        # a replay: the files the head references (these ones, when an earlier attempt of
        # this call landed) stay; the others were never committed
        staging.delete([n for n in names
                        if n not in state.refcount and n not in state.unreferenced])
        log.info("table %s: stream %s batch %d was committed already; nothing added",
                 table.name, mark.stream_id, mark.batch_id)
        return StreamCommit(False, state.version, 0)
    table.status.record(kind, f"v{state.version}", "committed", rows=staged.rows,
                        files=len(staged.written), bytes=staged.bytes,
                        seconds=time.perf_counter() - started, stream=mark.stream_id,
                        batch=mark.batch_id)
    return StreamCommit(True, state.version, staged.rows)
