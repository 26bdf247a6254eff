"""Pins: tags with an owner and an expiry. Held by GC and prune exactly like a tag (and the
files they name besides), listed by ``tags()``, ``describe`` and ``sediment tags``, let go by
``unpin``, and expiring on their own by the object store's clock.

Expected contents come from the independent reference in ``reference.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import sediment as sd
from helpers import make_table, rows
from reference import Reference, assert_matches
from sediment.cli import app
from sediment.errors import InvalidTagNameError, QueryError, TagError, TagExistsError
from sediment.files.writer import new_data_filename
from sediment.maintenance.gc import gc
from sediment.state import pending
from sediment.state.tags import FORGET_EXPIRED_PINS_SECONDS, forget_expired_pins, scan_tags
from sediment.workload import benchmark_schema
from support.internals import write_sorted_file

SCHEMA = benchmark_schema()
COLLECT = {"gc.delay_seconds": 0, "retention.seconds": 0, "gc.clock_skew_seconds": 0,
           "compaction.strategy": "basic", "compaction.batch_size": 3}
"""Properties under which GC collects an unreferenced file at once (nothing else holds it)."""


def ingest(table: sd.Table, ref: Reference, n: int, seed: int) -> int:
    data = rows(n, seed)
    table.ingest(data)
    ref.add(data)
    return table.version


def keys_of(table: sd.Table) -> set[str]:
    return {o.key for o in table._handle.objects.list("") if not o.key.endswith("/")}


def uncommitted_file(table: sd.Table, seed: int = 0) -> str:
    """A data file written like a job's output and never committed, whose writer is gone."""
    data = rows(20, seed).sort_by([("key", "ascending"), ("timestamp", "ascending")])
    name = new_data_filename("root")
    write_sorted_file(table._handle.objects, name, SCHEMA, table.properties, [data])
    pending.release(table._handle.objects, [name])
    return name


def test_a_pin_holds_its_version_like_a_tag_until_unpinned(tmp_path: Path,
                                                           no_prune_grace: None) -> None:
    table = make_table(tmp_path / "s", **COLLECT, **{"state.snapshot.interval": 2})
    ref = Reference(SCHEMA)
    for i in range(3):
        ingest(table, ref, 100, i)
    pinned = table.version
    inputs = {r.filename for r in table.files()}
    pin = table.pin("job-42", pinned, ttl_seconds=3600)
    assert (pin.name, pin.version, pin.is_pin) == ("job-42", pinned, True)
    assert pin.expires is not None and 3500 < pin.expires - time.time() <= 3600
    [listed] = table.tags()
    assert (listed.name, listed.version, listed.files) == ("job-42", pinned, ())
    assert listed.expires is not None and listed.expires > time.time() + 3500
    [described] = table.describe()["tags"]
    assert described["name"] == "job-42" and described["version"] == pinned
    assert described["expires"] == listed.expires

    assert table.compact().jobs_committed == 1
    for i in range(3, 8):  # versions after the pin, with snapshots, for prune to work on
        ingest(table, ref, 20, i)
    assert table.gc().deleted == 0  # the compacted inputs are the pinned version's
    assert inputs <= keys_of(table)
    table.prune()
    assert table._handle.states.earliest_version() <= pinned
    assert_matches(table.query(version="job-42"), ref.upto(3))  # readable by its name
    assert_matches(table.query(version=pinned), ref.upto(3))

    assert table.unpin("job-42") is True
    assert table.unpin("job-42") is False  # let go already: no error
    assert table.tags() == [] and table.describe()["tags"] == []
    assert table.gc().deleted >= 3
    assert not inputs & keys_of(table)
    table.prune()
    assert table._handle.states.earliest_version() > pinned
    assert_matches(table.query(), ref)


def test_a_pin_expires_on_its_own(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s", **COLLECT)
    ref = Reference(SCHEMA)
    for i in range(3):
        ingest(table, ref, 50, i)
    inputs = {r.filename for r in table.files()}
    table.pin("short", None, ttl_seconds=0.3)
    table.compact()
    deadline = time.monotonic() + 10
    while table.tags():  # expiry by the store's clock: wait for it, no fixed sleep
        assert time.monotonic() < deadline, "the pin never expired"
        time.sleep(0.05)
    assert table.describe()["tags"] == []
    with pytest.raises(QueryError, match="expired"):
        table.query(version="short")
    assert table.gc().deleted >= 3  # an expired pin holds nothing
    assert not inputs & keys_of(table)
    assert_matches(table.query(), ref)

    # its object stays a day (an owner renewing late pins again), then prune forgets it
    states = table._handle.states
    later = time.time() + FORGET_EXPIRED_PINS_SECONDS / 2
    assert forget_expired_pins(states, scan_tags(states, later), later) == 0
    assert [t.name for t in scan_tags(states, later).expired] == ["short"]
    later = time.time() + FORGET_EXPIRED_PINS_SECONDS + 10
    assert forget_expired_pins(states, scan_tags(states, later), later) == 1
    assert not any(k.startswith("tags/") for k in keys_of(table))


def test_gc_judges_expiry_by_its_own_clock(tmp_path: Path) -> None:
    """GC, run a week later by the store's clock, finds a one-day pin expired."""
    table = make_table(tmp_path / "s", **COLLECT)
    ref = Reference(SCHEMA)
    for i in range(3):
        ingest(table, ref, 50, i)
    inputs = {r.filename for r in table.files()}
    table.pin("day", None, ttl_seconds=86400)
    table.compact()
    assert gc(table._handle, now=time.time() + 3600).deleted == 0
    assert gc(table._handle, now=time.time() + 7 * 86400).deleted >= 3
    assert not inputs & keys_of(table)


def test_pinned_files_are_kept_though_no_lease_names_them(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s", **COLLECT)
    ref = Reference(SCHEMA)
    ingest(table, ref, 50, 1)
    staged = uncommitted_file(table, 7)
    other = uncommitted_file(table, 8)
    table.pin("staged", None, 3600, files=[staged])
    [listed] = table.tags()
    assert listed.files == (staged,)
    r = table.gc(orphan_timeout=0)
    assert r.orphans_deleted == 1  # the other orphan only
    assert staged in keys_of(table) and other not in keys_of(table)
    table.unpin("staged")
    assert table.gc(orphan_timeout=0).orphans_deleted == 1
    assert staged not in keys_of(table)
    assert_matches(table.query(), ref)


def test_pinning_again_renews_or_moves_the_pin(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    ref = Reference(SCHEMA)
    v2 = ingest(table, ref, 20, 1)
    first = table.pin("follower", v2, 60)
    v3 = ingest(table, ref, 20, 2)
    second = table.pin("follower", v3, 3600)
    assert second.version == v3 and second.created >= first.created
    [listed] = table.tags()
    assert (listed.version, listed.is_pin) == (v3, True)
    assert listed.expires is not None and listed.expires > time.time() + 3000


def test_refusals_write_nothing(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    ref = Reference(SCHEMA)
    v = ingest(table, ref, 20, 1)
    table.tag("release", v)
    table.pin("job-1", v, 60)
    before = {k: table._handle.objects.get(k) for k in keys_of(table) if k.startswith("tags/")}
    with pytest.raises(TagExistsError, match="is a tag, not a pin"):
        table.pin("release", v, 60)  # a tag never turns into a pin
    with pytest.raises(TagExistsError, match="already exists"):
        table.tag("job-1", v)  # nor a pin into a tag
    with pytest.raises(TagError, match="is a tag, not a pin"):
        table.unpin("release")
    for bad in (0, -1, float("nan"), float("inf"), 1e12, "soon", True, None):
        with pytest.raises(TagError, match="ttl_seconds"):
            table.pin("job-2", v, bad)  # type: ignore[arg-type]
    for name in ("12", "../x", "a/b", ""):
        with pytest.raises(InvalidTagNameError):
            table.pin(name, v, 60)
        with pytest.raises(InvalidTagNameError):
            table.unpin(name)
    with pytest.raises(QueryError, match="no version"):
        table.pin("job-3", v + 5, 60)
    after = {k: table._handle.objects.get(k) for k in keys_of(table) if k.startswith("tags/")}
    assert after == before
    assert [(t.name, t.is_pin) for t in table.tags()] == [("job-1", True), ("release", False)]


def test_cli_pin_tags_unpin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)
    store = str(tmp_path / "s")
    table = make_table(store, name="events")
    ingest(table, Reference(SCHEMA), 20, 1)
    runner = CliRunner()

    def js(*args: str) -> Any:
        result = runner.invoke(app, [*args, "--store", store, "--json"])
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        return json.loads(result.stdout)

    out = js("pin", "events", "reader", "--ttl", "600", "--version", "1")
    assert (out["pin"], out["version"]) == ("reader", 1)
    # --json gives times in ISO 8601 UTC
    assert 500 < dt.datetime.fromisoformat(out["expires"]).timestamp() - time.time() <= 600
    [row] = js("tags", "events")
    assert (row["tag"], row["version"]) == ("reader", 1)
    assert dt.datetime.fromisoformat(row["expires"]).timestamp() > time.time()
    human = runner.invoke(app, ["tags", "events", "--store", store]).stdout
    assert "reader" in human
    assert [t["name"] for t in js("describe", "events")["tags"]] == ["reader"]
    assert js("unpin", "events", "reader")["existed"] is True
    assert js("unpin", "events", "reader")["existed"] is False
    assert js("tags", "events") == []
    bad = runner.invoke(app, ["pin", "events", "x", "--ttl", "0", "--store", store])
    assert bad.exit_code == 1 and "ttl_seconds" in bad.stderr and "Traceback" not in bad.output
