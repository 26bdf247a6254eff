"""The dashboard at a glance (issue 36): one time format on every page, commits counted over
the last hour, day and week by kind, a list of the icicle's leaves, a readable properties
table and a ``where`` filter on the query form. Checked over HTTP against a real ``sediment
dashboard`` process and against references computed here (pandas, ``table.inspect``,
``datetime``), and the counting itself on synthetic times against pandas."""

from __future__ import annotations

import datetime as dt
import re
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pytest
from dashboard_helpers import Server, fetch, get_json, page_data
from markupsafe import escape

import sediment as sd
from helpers import SCHEMA, rows
from sediment.dashboard.commits import UNREAD, WINDOWS, CommitTimeline, window_counts
from sediment.properties import describe_properties

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
TIME_FIELDS = {"time", "created", "updated", "last_commit", "generated", "due", "last_due",
               "start", "end", "oldest"}


def times_in(data: Any) -> list[str]:
    """Every value of a time field at any depth (a window's bucket starts too; not the query
    form's echo, whose ``start`` and ``end`` are keys)."""
    out: list[str] = []
    if isinstance(data, dict):
        for k, v in data.items():
            if k == "form":
                continue
            if k in TIME_FIELDS and v is not None:
                out.append(v)
            elif k == "buckets" and isinstance(v, list):
                out.extend(v)
            else:
                out.extend(times_in(v))
    elif isinstance(data, list):
        for v in data:
            out.extend(times_in(v))
    return out


def reference_iso(epoch: float) -> str:
    """ISO 8601 UTC with milliseconds, by ``datetime.isoformat``."""
    stamp = dt.datetime.fromtimestamp(epoch, tz=dt.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture(scope="module")
def store(dash_store: str) -> sd.Store:
    return sd.Store.open(dash_store)


# ---- one time format -----------------------------------------------------------------------
def test_every_page_gives_times_in_one_iso_format(server: Server, store: sd.Store) -> None:
    from sediment.cli.output import iso_time as cli_iso_time
    from sediment.core.units import iso_time

    assert cli_iso_time is iso_time  # the CLI's --json and the pages share one formatter
    for epoch in (0.0, 0.5, 1_795_000_000.123_9, 1_795_000_000.999_9):
        assert iso_time(epoch) == reference_iso(epoch)
    seen = []
    for path in ("/api/store", "/api/tables/events", "/api/tables/broken",
                 "/api/tables/events/partitions"):
        seen += times_in(get_json(server, path))
    for path in ("/", "/tables/events", "/tables/events/query?limit=3"):
        seen += times_in(page_data(fetch(server.url + path)[2]))
    assert len(seen) > 300  # commits, jobs, tags, GC due times, buckets, ...
    assert [t for t in seen if not ISO.match(t)] == []
    # the commit times are the history's own, to the millisecond
    table = store.table("events")
    history = get_json(server, "/api/tables/events")["history"]
    assert [h["time"] for h in history] == \
        [reference_iso(h.time) for h in reversed(table.history()[-25:])]
    tags = get_json(server, "/api/tables/events")["tags"]
    assert [g["created"] for g in tags] == [reference_iso(g.created) for g in table.tags()]
    # the script writes its own clock in the same format, and no time in a local one
    script = fetch(server.url + "/static/dashboard.js")[2].decode()
    assert "toISOString()" in script
    assert not re.search(r"toLocale(Time|Date)String|getHours|getTimezoneOffset", script)


# ---- commits over windows ------------------------------------------------------------------
def test_window_counts_match_pandas() -> None:
    """Synthetic commits over nine days: per window, bucket and kind, the counts pandas gets
    by flooring the times to the minute, hour or day; a time ahead of now counts in the last
    bucket, one before the window in none."""
    rng = np.random.default_rng(7)
    now = 1_795_012_345.678
    times = np.concatenate([now - rng.uniform(0, 9 * 86400, 5000),
                            now - rng.uniform(0, 3600, 2000), [now + 2.0]])
    names = ["add_files", "replace_file_references", "split_partition", UNREAD]
    codes = rng.integers(0, len(names), len(times)).astype(np.int32)
    windows = {w["name"]: w for w in window_counts(times, codes, names, now)}
    assert list(windows) == ["hour", "day", "week"]
    frame = pd.DataFrame({"time": pd.to_datetime(np.minimum(times, now), unit="s", utc=True),
                          "kind": [names[c] for c in codes]})
    for spec in WINDOWS:
        w = windows[spec.name]
        freq = {"minute": "min", "hour": "h", "day": "D"}[spec.bucket]
        last = pd.Timestamp(now, unit="s", tz="UTC").floor(freq)
        starts = pd.date_range(end=last, periods=spec.buckets, freq=freq)
        assert w["buckets"] == [s.strftime("%Y-%m-%dT%H:%M:%S.000Z") for s in starts]
        assert (w["start"], w["end"]) == (w["buckets"][0], (last + pd.Timedelta(
            seconds=spec.bucket_seconds)).strftime("%Y-%m-%dT%H:%M:%S.000Z"))
        inside = frame[frame["time"] >= starts[0]]
        ref = inside.groupby([inside["time"].dt.floor(freq), "kind"]).size()
        for kind in names:
            expected = [int(ref.get((s, kind), 0)) for s in starts]
            assert w["counts"].get(kind, [0] * spec.buckets) == expected, (spec.name, kind)
        assert w["commits"] == len(inside)
        assert all(sum(c) > 0 for c in w["counts"].values())  # kinds absent are left out


def test_table_api_counts_commits_by_kind(server: Server, store: sd.Store) -> None:
    """Every commit of the tests' tables is minutes old: each window counts them all, by the
    kinds ``table.history()`` gives, and the shortest window is the default."""
    for name in ("events", "broken"):
        history = store.table(name).history()
        kinds = pd.Series([h.kind for h in history]).value_counts().to_dict()
        timeline = get_json(server, f"/api/tables/{name}")["timeline"]
        assert timeline["default"] == "hour" and timeline["unread"] == 0
        assert timeline["held"] == len(history)
        assert timeline["oldest"] == reference_iso(history[0].time)
        for w, spec in zip(timeline["windows"], WINDOWS, strict=True):
            assert w["name"] == spec.name and len(w["buckets"]) == spec.buckets
            assert {k: sum(v) for k, v in w["counts"].items()} == kinds
            assert w["commits"] == len(history)
            assert all(len(v) == spec.buckets for v in w["counts"].values())


def test_kinds_are_read_a_bounded_number_at_a_time(tmp_path: Path) -> None:
    """A first look at a table with more commits than one refresh reads counts them all at
    once (from the log's listing), the newest with their kinds; the rest are read over the
    next refreshes, newest first, until the counts by kind equal the history's."""
    table = sd.Store.open(str(tmp_path), create=True).create_table(
        "t", SCHEMA, properties={"state.cache.refresh_seconds": 0})
    for seed in range(11):
        table.ingest(rows(3, seed=seed))
    history = table.history()
    assert len(history) == 12
    timeline = CommitTimeline(kind_reads=5)
    seen = []
    for _ in range(3):
        view = timeline.view(table)
        hour = view["windows"][0]
        seen.append(view["unread"])
        assert hour["commits"] == 12 and sum(map(sum, hour["counts"].values())) == 12
        assert sum(hour["counts"].get(UNREAD, [0])) == view["unread"]
        assert [r["version"] for r in view["recent"]] == list(range(12, 0, -1))[:5 * len(seen)]
    assert seen == [7, 2, 0]
    kinds = pd.Series([h.kind for h in history]).value_counts().to_dict()
    assert {k: sum(v) for k, v in hour["counts"].items()} == kinds
    # a new commit is listed and read on the next look, alone
    table.ingest(rows(3, seed=99))
    view = timeline.view(table)
    assert view["unread"] == 0 and view["recent"][0]["version"] == 13
    assert view["recent"][0]["time"] == reference_iso(table.history()[-1].time)


# ---- the leaf list -------------------------------------------------------------------------
def test_leaf_list_matches_inspect(server: Server, store: sd.Store) -> None:
    table = store.table("events")
    parts = table.inspect.partitions().to_pandas()
    leaves = parts[parts["leaf"]].sort_values("region_min", na_position="first")
    files = table.inspect.files().to_pandas()
    size = files.groupby("partition_id")["file_size_bytes"].sum()
    listing = get_json(server, "/api/tables/events/partitions")["leaf_list"]
    assert listing["total"] == len(leaves) == len(listing["rows"])
    assert [r["n"] for r in listing["rows"]] == list(range(1, len(leaves) + 1))
    assert [r["id"] for r in listing["rows"]] == list(leaves["partition_id"])
    for r, (_, ref) in zip(listing["rows"], leaves.iterrows(), strict=True):
        assert (r["files"], r["records"], r["region"]) == \
            (ref["files"], ref["records"], ref["region"])
        assert r["bytes"] == int(size.get(ref["partition_id"], 0)) > 0
        assert r["files_read"] >= r["files"]
    # a tree of 1,024 leaves: the first 200 in key order, the count of all
    deep = get_json(server, "/api/tables/deep/partitions")["leaf_list"]
    assert deep["total"] == 1024 and len(deep["rows"]) == deep["limit"] == 200
    parts = store.table("deep").inspect.partitions().to_pandas()
    first = parts[parts["leaf"]].sort_values("region_min", na_position="first")[:200]
    assert [r["id"] for r in deep["rows"]] == list(first["partition_id"])
    # re-rooted: the leaves under that partition only
    child = get_json(server, "/api/tables/deep/partitions")["nodes"][1]["id"]
    sub = get_json(server, f"/api/tables/deep/partitions?root={child}")["leaf_list"]
    assert sub["total"] == 512 and sub["rows"][0]["id"] == deep["rows"][0]["id"]


# ---- properties ----------------------------------------------------------------------------
def test_properties_are_grouped_sorted_and_say_what_is_set(server: Server,
                                                          store: sd.Store) -> None:
    table = store.table("events")
    props = get_json(server, "/api/tables/events")["properties"]
    names = [p["name"] for p in props]
    assert sorted(names) == sorted(d["name"] for d in describe_properties())
    assert [(p["group"], p["name"]) for p in props] == \
        sorted((n.split(".")[0], n) for n in names)
    own = set(table.state().properties)
    assert {p["name"] for p in props if p["set"]} == own == {
        "state.cache.refresh_seconds", "compaction.strategy", "compaction.batch_size",
        "partition.split.threshold"}
    defaults = {d["name"]: d["default"] for d in describe_properties()}
    for p in props:
        assert p["value"] == table.properties[p["name"]]
        assert p["default"] == defaults[p["name"]] and p["meaning"]


# ---- the where filter ----------------------------------------------------------------------
def test_where_filter_on_the_query_form(server: Server, store: sd.Store) -> None:
    """The form's ``where`` text filters the records as ``table.query(filter=...)`` does,
    with keys, ranges and versions too; checked against pandas on the whole table."""
    table = store.table("events")
    everything = table.query().to_pandas()
    cut = int(everything["timestamp"].median())
    where = f"key >= 'm' and timestamp > {cut}"
    q = urllib.parse.urlencode({"where": where, "limit": 1000})
    data = get_json(server, f"/api/tables/events/query?{q}")
    got = pd.DataFrame(data["rows"], columns=data["columns"])
    ref = everything[(everything["key"] >= "m") & (everything["timestamp"] > cut)]
    pd.testing.assert_frame_equal(got, ref.reset_index(drop=True), check_dtype=False)
    assert 0 < len(got) < len(everything) and data["form"]["where"] == where
    lib = table.query(filter=where).to_pandas()
    assert lib.equals(ref.reset_index(drop=True))
    # with a range and a tag
    q = urllib.parse.urlencode({"where": "value IS NOT NULL", "start": "c", "end": "p",
                                "version": "before-maintenance", "limit": 1000})
    data = get_json(server, f"/api/tables/events/query?{q}")
    ref = table.query(ranges=sd.Range("c", "p"), version="before-maintenance",
                      filter=pc.field("value").is_valid()).to_pandas()
    assert pd.DataFrame(data["rows"], columns=data["columns"]).equals(ref)
    # the page echoes it in the form's field
    code, _, body = fetch(server.url + "/tables/events/query?" + urllib.parse.urlencode(
        {"where": where}))
    assert code == 200 and f'name="where" value="{escape(where)}"' in body.decode()


@pytest.mark.parametrize(("where", "message"), [
    ("value >", "filter on table events: expected a literal"),
    ("nope > 3", "unknown field 'nope'"),
    ("timestamp > 'x'", "does not fit field 'timestamp' (int64)"),
    ("key like 'a%'", "expected a comparison"),
    ("<script>alert(1)</script>", "unexpected character '/' at position 18"),
    ("x" * 10_001, "where is longer than 10000 characters"),
])
def test_a_bad_where_is_shown_not_a_500(server: Server, where: str, message: str) -> None:
    q = urllib.parse.urlencode({"where": where})
    assert message in get_json(server, f"/api/tables/events/query?{q}", 400)["error"]
    code, headers, body = fetch(server.url + f"/tables/events/query?{q}")
    assert code == 400 and headers["content-type"].startswith("text/html")
    shown = re.search(rb'<p id="query-error" class="error" role="alert">(.*?)</p>', body, re.S)
    assert shown is not None and str(escape(message)) in shown.group(1).decode()
    assert message in page_data(body)["error"]
    assert b"<script>alert" not in body
