"""Leases that share a store's tables among maintainers: the planner (pure, hypothesis),
then the holder against an in-memory store (beats, takeover after the timeout, release)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.maintenance.lease_store import (
    LeaseHolder,
    lease_key,
    list_maintainers,
    maintainers_report,
)
from sediment.maintenance.leases import (
    STORE_LEASE,
    LeaseView,
    MemberView,
    plan_leases,
)
from sediment.storage.memory import MemoryObjectStore

TIMEOUT = 10.0

names_st = st.lists(st.sampled_from([f"t{i}" for i in range(12)]), min_size=0, max_size=12,
                    unique=True)
members_st = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4,
                      unique=True)


@st.composite
def listings(draw: Any) -> tuple[list[str], dict[str, LeaseView], list[MemberView]]:
    """Tables, the latest epoch of some leases (any holder, age, released) and members."""
    names = draw(names_st)
    members = draw(members_st)
    leases = {}
    for n in draw(st.lists(st.sampled_from(names), unique=True)) if names else []:
        leases[n] = LeaseView(n, draw(st.integers(1, 5)),
                              draw(st.sampled_from([*members, "gone"])),
                              draw(st.floats(0, 3 * TIMEOUT)), draw(st.booleans()))
    views = [MemberView(m, draw(st.floats(0, 2 * TIMEOUT))) for m in members]
    return names, leases, views


@given(listings(), st.sampled_from(["a", "b", "c", "d"]), st.data())
def test_a_plan_never_takes_a_live_lease_of_another_nor_releases_busy_work(
        listing: Any, me: str, data: Any) -> None:
    names, leases, members = listing
    busy = set(data.draw(st.lists(st.sampled_from(names)) if names else st.just([])))
    plan = plan_leases(me, names, leases, members, timeout=TIMEOUT, busy=busy)
    for name, epoch in plan.take:
        v = leases.get(name)
        assert v is None or not v.live(TIMEOUT) or v.member == me and v.released
        assert v is None or v.member != me or v.released  # ours already: kept, not taken
        assert epoch == (1 if v is None else v.epoch + 1)
    mine = {n for n, v in leases.items() if v.member == me and not v.released}
    assert plan.keep <= mine
    assert set(plan.release) <= mine and not set(plan.release) & busy
    assert plan.drain <= mine & busy  # busy work is drained, never let go
    assert not set(plan.release) & plan.keep and not plan.drain & plan.keep
    assert plan.keep | plan.drain >= mine & busy


def simulate(members: list[str], names: list[str], rounds: int,
             leases: dict[str, LeaseView] | None = None) -> dict[str, LeaseView]:
    """Members plan one after another on a shared listing, as their rounds interleave."""
    leases = dict(leases or {})
    for _ in range(rounds):
        for me in members:
            plan = plan_leases(me, names, leases,
                               [MemberView(m, 0.0) for m in members], timeout=TIMEOUT)
            for n in plan.release:
                leases[n] = LeaseView(n, leases[n].epoch, me, 0.0, released=True)
            for n, epoch in plan.take:
                leases[n] = LeaseView(n, epoch, me, 0.0)
            for n in plan.keep:
                leases[n] = LeaseView(n, leases[n].epoch, me, 0.0)
    return leases


@settings(max_examples=60)
@given(st.integers(1, 4), st.integers(0, 12), st.integers(0, 3))
def test_members_settle_on_an_even_share_and_a_late_one_takes_its_part(
        k: int, n: int, late: int) -> None:
    names = [f"t{i}" for i in range(n)] + [STORE_LEASE]
    members = [f"m{i}" for i in range(k)]
    leases = simulate(members, names, 4)
    joined = members + [f"late{i}" for i in range(late)]
    leases = simulate(joined, names, 6, leases)
    held = [v for v in leases.values() if v.live(TIMEOUT)]
    assert sorted(v.name for v in held) == sorted(names)  # every lease held, once
    counts = [sum(v.member == m for v in held) for m in joined]
    assert max(counts) - min(counts) <= 1, counts


def test_a_dead_members_leases_are_taken_over_by_the_live_ones() -> None:
    names = ["t0", "t1", "t2", "t3"]
    leases = simulate(["a", "b"], names, 3)
    dead = {n: LeaseView(n, v.epoch, v.member, TIMEOUT + 1, v.released) if v.member == "a"
            else v for n, v in leases.items()}
    plan = plan_leases("b", names, dead, [MemberView("a", TIMEOUT + 1), MemberView("b", 0)],
                       timeout=TIMEOUT)
    assert {n for n, _ in plan.take} | plan.keep == set(names)
    assert all(e == leases[n].epoch + 1 for n, e in plan.take)


# ---- the holder, on an in-memory store -------------------------------------------------------
def wait_for(check: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.01)


def test_holders_share_beat_take_over_after_the_timeout_and_release() -> None:
    objects = MemoryObjectStore("memory://leases")
    a = LeaseHolder(objects, timeout=0.4, member="a")
    b = LeaseHolder(objects, timeout=0.4, member="b")
    tables = ["x", "y", "z"]
    try:
        a.offer(tables)
        assert set(a.held()) == {*tables, STORE_LEASE}  # alone: every lease
        b.offer(tables)
        wait_for(lambda: len(a.held()) == 2 and len(b.held()) == 2)
        assert not set(a.held()) & set(b.held())
        assert all(a.holds(n) for n in a.held())
        epochs = {n: v.epoch for n, v in list_maintainers(objects).leases.items()}
        report = maintainers_report(objects)
        assert {m["member"]: len(m["leases"]) for m in report["members"]} == {"a": 2, "b": 2}
        assert {r["state"] for r in report["leases"]} == {"held"}

        a._stop.set()  # a stalls: no more beats (its thread stops, nothing is released)
        assert a._thread is not None
        a._thread.join(5)
        stalled = a.held()
        wait_for(lambda: not any(a.holds(n) for n in stalled))  # stops acting first...
        wait_for(lambda: set(b.held()) == {*tables, STORE_LEASE})  # ...then b takes over
        after = list_maintainers(objects).leases
        assert all(after[n].epoch == epochs[n] + 1 and after[n].member == "b" for n in stalled)
    finally:
        b.close()
    assert {r["state"] for r in maintainers_report(objects)["leases"]} == {"released"}
    assert [m["member"] for m in maintainers_report(objects)["members"]] == ["a"]


def test_a_lease_taken_over_is_dropped_by_its_old_holder_at_its_next_round() -> None:
    objects = MemoryObjectStore("memory://leases2")
    a = LeaseHolder(objects, timeout=30.0, member="a")
    a.offer(["x"])
    try:
        epoch = list_maintainers(objects).leases["x"].epoch
        assert objects.put_if_absent(lease_key("x", epoch + 1),
                                     b'{"member": "intruder", "lease": "x"}')
        a.round()
        assert not a.holds("x") and a.holds(STORE_LEASE)
        assert list_maintainers(objects).leases["x"].member == "intruder"
    finally:
        a.close()


@pytest.mark.parametrize("name", ["a/b c", "(store)", "naïve%"])
def test_lease_names_are_kept_whatever_their_characters(name: str) -> None:
    objects = MemoryObjectStore("memory://leases3")
    assert objects.put_if_absent(lease_key(name, 3), b'{"member": "m"}')
    assert list(list_maintainers(objects).leases) == [name]


def test_a_member_busy_everywhere_drains_leases_for_a_late_one() -> None:
    """A member whose every table has a job running still hands leases over: it starts no new
    work under the ones to hand over and releases each once its work ends."""
    names = ["t0", "t1", "t2", "t3"]
    leases = simulate(["a"], names, 2)
    members = [MemberView("a", 0.0), MemberView("b", 0.0)]
    plan = plan_leases("a", names, leases, members, timeout=TIMEOUT, busy=set(names))
    assert len(plan.drain) == 2 and not plan.release and len(plan.keep) == 2
    assert not plan.take
    done = plan_leases("a", names, leases, members, timeout=TIMEOUT,
                       busy=set(names) - plan.drain)
    assert set(done.release) == plan.drain


def test_leases_of_dropped_tables_and_silent_members_are_forgotten() -> None:
    objects = MemoryObjectStore("memory://leases4")
    a = LeaseHolder(objects, timeout=0.05, member="a")
    b = LeaseHolder(objects, timeout=0.05, member="b")
    try:
        a.offer(["kept", "dropped"], store=False)
        assert set(a.held()) == {"kept", "dropped"}
        a.close()  # released; "dropped" then goes from the store's tables
        b.offer(["kept"], store=False)
        wait_for(lambda: b.held() == ["kept"])
        wait_for(lambda: set(list_maintainers(objects).leases) == {"kept"})
        assert set(list_maintainers(objects).members) == {"b"}
    finally:
        b.close()


def test_a_round_that_cannot_write_keeps_beating_and_reports_why() -> None:
    from sediment.errors import StorageError

    class Refusing(MemoryObjectStore):
        refuse = True

        def put(self, key: str, data: bytes) -> None:
            if self.refuse and key.startswith("maintainers/"):
                raise StorageError(f"refused {key}")
            super().put(key, data)

    objects = Refusing("memory://leases5")
    a = LeaseHolder(objects, timeout=30.0, member="a")
    a.round()
    errors = a.take_errors()
    assert len(errors) == 1 and "StorageError: refused maintainers/members/a.json" in errors[0]
    assert a.take_errors() == [] and not a.held()
    objects.refuse = False
    a.offer(["x"])
    try:
        assert a.holds("x") and a.take_errors() == []
    finally:
        a.close()


def test_a_damaged_lease_is_taken_at_the_next_epoch_once_it_times_out() -> None:
    objects = MemoryObjectStore("memory://leases6")
    assert objects.put_if_absent(lease_key("x", 4), b"{not json")
    a = LeaseHolder(objects, timeout=0.1, member="a")
    try:
        a.offer(["x"], store=False)
        wait_for(lambda: a.held() == ["x"])
        assert list_maintainers(objects).leases["x"].epoch == 5
    finally:
        a.close()
