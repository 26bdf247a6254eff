"""Splitting a partition scheme (co-sharding): once, in the scheme's log, for all members.

A scheme's leaf splits when the exact record counts of every member table in it add up to
more than the scheme's ``partition.split.threshold`` (the ClickHouse seed: "the criterion for
splitting shards is determined based on the total amount of data for all tables with the same
sharding scheme"), at the median of all members' samples there. The split commits once, in
the scheme's log, conditional on the leaf still being a leaf; then each member takes it over
with a FollowScheme transaction (``sediment.core.transactions.schemes``). A member that a
crash left behind is caught up by the next split pass, and is readable meanwhile: its tree
is the scheme's at an older version, which its references match.

Planning (``plan_scheme_splits``) is pure; the rest reads and commits.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from sediment.core.state import TableState
from sediment.core.transactions import FollowScheme, SplitPartition, follow_scheme
from sediment.errors import SedimentError, TransactionInvalidError
from sediment.files.sample import COUNT
from sediment.maintenance.splitting import (
    SampleLookup,
    SplitDecision,
    SplitReady,
    SplitResult,
    leaf_records,
    split,
)
from sediment.partitioning import partitioning_of
from sediment.settings import settings_of
from sediment.state.schemes import scheme_members, scheme_states
from sediment.state.store import StateStore
from sediment.storage import open_object_store, spec_options

if TYPE_CHECKING:
    from sediment.core.head import Head
    from sediment.handle import TableHandle

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member table as a scheme split plans over it: its state and its samples."""

    state: TableState
    sample_of: SampleLookup


def plan_scheme_splits(scheme: TableState, members: Sequence[MemberView]) -> list[SplitDecision]:
    """Scheme leaves whose records summed over the members exceed the scheme's threshold,
    with split keys from all members' samples (renamed to the scheme's row-key names).

    A member whose tree lags the scheme's (not yet followed) holds a scheme leaf's records in
    a coarser leaf: those count once it follows, which ``split_scheme`` makes it do first."""
    assert scheme.schema is not None
    names = scheme.schema.row_key_names
    settings = settings_of(scheme)
    threshold = settings.partition_split_threshold
    partitioning = partitioning_of(scheme)
    out = []
    for leaf in scheme.leaf_partitions():
        in_members = [m for m in members if (p := m.state.partitions.get(leaf.id)) is not None
                      and p.is_leaf and m.state.online]
        n = sum(leaf_records(m.state, leaf) for m in in_members)
        if n <= threshold:
            continue
        samples: list[pa.Table] = []
        try:
            for m in in_members:
                assert m.state.schema is not None
                own = m.state.schema.row_key_names
                for f in m.state.references(leaf.id):
                    s = m.sample_of(f).select([*own, COUNT])
                    samples.append(s.rename_columns([*names, COUNT]))
        except SedimentError as e:
            out.append(SplitDecision(leaf.id, n, None, f"cannot read a sample: {e}"))
            continue
        choice = partitioning.choose_split(scheme, leaf, samples, names, settings)
        out.append(SplitDecision(leaf.id, n, choice.key, choice.reason, choice.dimension))
    return out


_NOTHING = FollowScheme(-1, ())


def follow(member: StateStore, scheme: TableState) -> bool:
    """Bring a member's tree up to ``scheme``'s (one FollowScheme; nothing when it matches).
    True when it committed."""
    def build(head: TableState) -> FollowScheme:
        return follow_scheme(head, scheme) or _NOTHING

    before = member.head(refresh=False).version
    return member.commit(build).version != before


def split_scheme_at(root_spec: dict[str, object], scheme_id: str, name: str | None = None, *,
                    limit: int = 0) -> SplitResult:
    """Split the scheme ``scheme_id`` of the store ``root_spec`` (``Store.spec()``) once over
    every leaf above the threshold (with ``limit``, the fullest first), then make every
    member follow. Members are caught up first, so the counts see all their records."""
    from sediment.handle import TableHandle

    started = time.perf_counter()
    spec = dict(root_spec)
    root = open_object_store(str(spec["uri"]), **spec_options(spec))
    states = scheme_states(root, scheme_id, name)
    members = [TableHandle(n, tid, StateStore(root.child(f"tables/{tid}"), tid, n),
                           lambda: dict(spec))
               for n, tid in scheme_members(root, scheme_id).items()]
    scheme = states.head()
    errors: dict[str, str] = {}
    members = _following(members, scheme, errors)
    views = []
    for m in members:
        try:
            views.append(MemberView(m.states.head(), m.samples.sample))
        except SedimentError as e:
            _went_past(m, e, errors)
    members = [m for m in members if m.name not in errors]
    decisions = plan_scheme_splits(scheme, views)
    if limit:
        decisions = sorted(decisions, key=lambda d: -d.records)[:limit]
    done, stuck = 0, []
    for d in decisions:
        if d.split_key is None:
            stuck.append(d.partition_id)
            continue
        left, right = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
        try:
            states.commit(SplitPartition(d.partition_id, d.split_key, left, right))
        except TransactionInvalidError:  # split by another maintainer meanwhile
            continue
        done += 1
        for m in members:
            m.status.record("split", d.partition_id, "committed", partition_id=d.partition_id,
                            records=d.records, split_key=list(d.split_key), left=left,
                            right=right, scheme=name or scheme_id)
    if done:
        _following(members, states.head(), errors)
    return SplitResult(done, tuple(stuck), time.perf_counter() - started,
                       tuple(f"table {n}: {e}" for n, e in errors.items()))


def _following(members: list[TableHandle], scheme: TableState, errors: dict[str, str]
               ) -> list[TableHandle]:
    """The members brought up to ``scheme``'s tree; one that cannot be (its log cannot be
    read: a damaged entry; storage failing) is left out and recorded in ``errors``, so that
    one damaged member never stops the maintenance of the others."""
    out = []
    for m in members:
        try:
            follow(m.states, scheme)
        except SedimentError as e:
            _went_past(m, e, errors)
            continue
        out.append(m)
    return out


def _went_past(member: TableHandle, error: SedimentError, errors: dict[str, str]) -> None:
    errors.setdefault(member.name, f"{type(error).__name__}: {error}")
    log.warning("partition scheme split: member table %s left as it is: %s: %s",
                member.name, type(error).__name__, error)


def split_table(table: TableHandle, *, limit: int = 0, ready: SplitReady | None = None,
                head: Head | None = None) -> SplitResult:
    """Split a table's leaves over the threshold (``splitting.split``; ``ready``: see there);
    for a member of a partition scheme, split its scheme instead, on the records of all
    members (every leaf over the threshold: the members' files are not looked at). Planned
    on ``head`` (else on the table's head read now); a scheme's split reads every member's."""
    head = table.read_head() if head is None else head
    scheme_id = head.settings.partition_scheme
    if not scheme_id:
        return split(table, limit=limit, ready=ready, head=head)
    return split_scheme_at(table.store_spec(), scheme_id, limit=limit)
