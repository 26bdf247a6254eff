"""The dashboard over HTTP: every page and JSON endpoint of a real ``sediment dashboard``
process, checked against the library and against figures computed here with pandas from
``table.inspect`` (the independent reference); read-only; HTML from the store escaped."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from dashboard_helpers import HTML_KEYS, Server, fetch, get_json, page_data
from markupsafe import escape

import sediment as sd
from helpers import SCHEMA


def leaf_figures(table: sd.Table) -> pd.DataFrame:
    """Per leaf: files a read merges (its own and its ancestors' references), from the
    inspect partitions table with pandas."""
    parts = table.inspect.partitions().to_pandas().set_index("partition_id")

    def files_read(pid: str) -> int:
        n = 0
        while pid is not None:
            n += int(parts.loc[pid, "files"])
            pid = parts.loc[pid, "parent_id"]
        return n

    leaves = parts[parts["leaf"]].copy()
    leaves["files_read"] = [files_read(p) for p in leaves.index]
    return leaves


@pytest.fixture(scope="module")
def store(dash_store: str) -> sd.Store:
    return sd.Store.open(dash_store)


def test_store_api_matches_the_tables(server: Server, store: sd.Store) -> None:
    data = get_json(server, "/api/store")
    rows = {t["name"]: t for t in data["tables"]}
    assert sorted(rows) == sorted(store.tables()) == ["broken", "deep", "events", "idle", "web"]
    for name, row in rows.items():
        table = store.table(name)
        d = table.describe()
        leaves = leaf_figures(table)
        batch = table.properties["compaction.batch_size"]
        assert (row["records"], row["leaves"], row["files"], row["version"], row["online"]) \
            == (d["records"], d["leaf_partitions"], d["files"], d["version"], d["online"])
        assert row["max_files_per_leaf"] == int(leaves["files_read"].max())
        assert row["batch_size"] == batch
        assert row["keeping_up"] is (int(leaves["files_read"].max()) <= batch)
        last = max(h.time for h in table.history())
        assert pd.Timestamp(row["last_commit"]).timestamp() == pytest.approx(last, abs=0.002)
    assert rows["idle"]["online"] is False and rows["idle"]["records"] == 0
    assert rows["events"]["keeping_up"] is False  # 4 files per leaf, batch size 3


def test_table_api(server: Server, store: sd.Store) -> None:
    table = store.table("events")
    data = get_json(server, "/api/tables/events")
    leaves = leaf_figures(table)
    expected = leaves["files_read"].value_counts().sort_index()
    assert data["histogram"] == [{"files": int(k), "leaves": int(v)}
                                 for k, v in expected.items()]
    assert [(h["version"], h["kind"], h["summary"]) for h in data["history"]] == \
        [(h.version, h.kind, h.summary) for h in reversed(table.history()[-25:])]
    assert [(g["name"], g["version"]) for g in data["tags"]] == \
        [(g.name, g.version) for g in table.tags()] == \
        [("before-maintenance", 5), ("latest", table.version)]
    props = {p["name"]: p for p in data["properties"]}
    assert {k: p["value"] for k, p in props.items()} == table.properties
    assert props["compaction.batch_size"]["set"] is True
    assert props["compaction.batch_size"]["default"] == 12
    assert props["compaction.batch_size"]["meaning"]
    assert props["compaction.ratio"]["set"] is False
    # jobs: one row per job of the events, as table.jobs() folds them
    jobs = data["jobs"]
    for kind in ("compaction", "split", "ingest"):
        ref = table.jobs(kind)
        assert sum(data["jobs"]["counts"].get(kind, {}).values()) == len(ref)
        mine = [j for j in jobs["jobs"] if j["kind"] == kind]
        assert [(j["job_id"], j["status"]) for j in mine] == \
            [(r["job_id"], r["status"]) for r in ref]
    compactions = [j for j in jobs["jobs"] if j["kind"] == "compaction"]
    ref_rows = {r["job_id"]: r for r in table.jobs("compaction")}
    for j in compactions:
        r = ref_rows[j["job_id"]]
        assert j["records"] == r["rows_in"]
        assert j["seconds"] == pytest.approx(r["seconds"])
        assert j["records_per_second"] == pytest.approx(r["rows_per_second"])
    assert jobs["failed"] == 0


def test_failed_job_is_shown(server: Server, store: sd.Store) -> None:
    data = get_json(server, "/api/tables/broken")
    (failed,) = [j for j in data["jobs"]["jobs"] if j["status"] == "failed"]
    (ref,) = [e for e in store.table("broken").events("compaction") if e.status == "failed"]
    assert failed["kind"] == "compaction" and failed["job_id"] == ref.job_id
    assert failed["reason"] == ref.details["reason"] and "not valid Parquet" in failed["reason"]
    assert data["jobs"]["failed"] == 1
    code, _, body = fetch(server.url + "/tables/broken")
    assert code == 200 and page_data(body)["view"]["jobs"]["failed"] == 1


def test_partitions_api(server: Server, store: sd.Store) -> None:
    table = store.table("events")
    parts = table.inspect.partitions().to_pandas().set_index("partition_id")
    tree = get_json(server, "/api/tables/events/partitions")
    nodes = {n["id"]: n for n in tree["nodes"]}
    assert set(nodes) == set(parts.index) and tree["root"] == "root" and tree["path"] == []
    # records held at and below each partition, from the inspect table
    children = parts.groupby("parent_id").groups

    def below(pid: str) -> int:
        return int(parts.loc[pid, "records"]) + sum(below(c) for c in children.get(pid, []))

    for pid, n in nodes.items():
        assert n["records"] == below(pid)
        assert n["files"] == parts.loc[pid, "files"]
        assert n["leaf"] == parts.loc[pid, "leaf"] and n["more"] is False
        assert n["parent"] == (None if pid == "root" else parts.loc[pid, "parent_id"])
    assert nodes["root"]["records"] == table.describe()["records"]
    leaves = leaf_figures(table)
    for pid in leaves.index:
        assert nodes[pid]["files_read"] == leaves.loc[pid, "files_read"]
    # re-rooted at a child: that subtree, with the path back up
    child = next(p for p in parts.index if parts.loc[p, "parent_id"] == "root"
                 and not parts.loc[p, "leaf"])
    sub = get_json(server, f"/api/tables/events/partitions?root={child}")
    assert sub["root"] == child and [p["id"] for p in sub["path"]] == ["root"]
    assert {n["id"] for n in sub["nodes"]} == {child, *children[child]}
    assert sub["nodes"][0]["parent"] is None
    deep = get_json(server, "/api/tables/deep/partitions")
    assert len(deep["nodes"]) == 511 and deep["partitions"] == 2047
    assert sum(n["more"] for n in deep["nodes"]) == 256
    err = get_json(server, "/api/tables/events/partitions?root=nope", 404)
    assert "nope" in err["error"]


def test_tree_budget_sends_whole_levels(tmp_path: Path) -> None:
    """A tree larger than the budget: whole levels only, ``more`` where levels were left."""
    from sediment.dashboard.aggregate import compute, tree

    store = sd.Store.open(str(tmp_path), create=True)
    table = store.create_table("deep", SCHEMA,
                               split_points=[f"k{i:02d}" for i in range(1, 32)])
    fig = compute(table.state())
    assert fig.leaves == 32 and len(fig.partitions) == 63
    view = tree(fig, budget=10)  # levels of 1, 2, 4 fit; 8 more would not
    assert len(view["nodes"]) == 7
    assert [n["more"] for n in view["nodes"]] == [False] * 3 + [True] * 4
    assert all(n["depth"] <= 2 for n in view["nodes"])
    deeper = view["nodes"][-1]["id"]
    sub = tree(fig, deeper, budget=10)
    assert sub["nodes"][0]["id"] == deeper and len(sub["nodes"]) == 7
    assert len(sub["path"]) == 2 and sub["path"][0]["id"] == "root"
    assert sum(n["leaves"] for n in sub["nodes"] if n["depth"] == 4) == 8 == \
        sub["nodes"][0]["leaves"]
    assert len(tree(fig, budget=1)["nodes"]) == 1  # the view's root is always sent


def test_query_api_matches_table_query(server: Server, store: sd.Store) -> None:
    table = store.table("events")
    everything = table.query().to_pandas()
    lo, hi = everything["key"].iloc[100], everything["key"].iloc[400]
    q = urllib.parse.urlencode({"start": lo, "end": hi, "limit": 50})
    data = get_json(server, f"/api/tables/events/query?{q}")
    ref = table.query(ranges=sd.Range(lo, hi)).to_pandas()
    assert data["columns"] == list(ref.columns)
    got = pd.DataFrame(data["rows"], columns=data["columns"])
    pd.testing.assert_frame_equal(got, ref.head(50).reset_index(drop=True),
                                  check_dtype=False)
    assert data["more"] is (len(ref) > 50) and data["limit"] == 50
    # the form is one read request: its JSON reads the same records through the library
    request = sd.ReadRequest.from_json(data["request"])
    assert request == sd.ReadRequest(ranges=sd.Range(lo, hi))
    pd.testing.assert_frame_equal(table.prepare(request).to_pandas(), ref)
    plan = table.plan(ranges=sd.Range(lo, hi))
    assert data["plan"]["leaves"] == len(plan.subqueries)
    assert data["plan"]["files"] == len(plan.files)
    assert [s["leaf_id"] for s in data["plan"]["subqueries"]] == \
        [s.leaf_id for s in plan.subqueries]
    # exact keys at a tag
    old = table.query(version="before-maintenance").to_pandas()
    keys = list(old["key"].iloc[[3, 7, 11]])
    q = urllib.parse.urlencode({"keys": "\n".join(keys), "version": "before-maintenance"})
    data = get_json(server, f"/api/tables/events/query?{q}")
    ref = table.query(keys, version="before-maintenance").to_pandas()
    assert pd.DataFrame(data["rows"], columns=data["columns"]).equals(ref)
    assert data["plan"]["version"] == 5 and data["more"] is False
    # end inclusive, a version number
    q = urllib.parse.urlencode({"start": lo, "end": hi, "end_inclusive": "1",
                                "version": str(table.version), "limit": 1000})
    data = get_json(server, f"/api/tables/events/query?{q}")
    ref = table.query(ranges=sd.Range(lo, hi, end_inclusive=True)).to_pandas()
    assert len(data["rows"]) == len(ref) and data["rows"][-1][0] == hi


@pytest.mark.parametrize(("params", "message"), [
    ({"limit": "0"}, "limit must be between 1 and 1000"),
    ({"limit": "many"}, "is not a whole number"),
    ({"version": "no-such-tag"}, "no-such-tag"),
    ({"version": "999"}, "999"),
    ({"start": "m", "end": "a"}, "after its end"),
    ({"keys": "x" * 10_001}, "longer than"),
])
def test_query_api_refuses_bad_input(server: Server, params: dict[str, str],
                                     message: str) -> None:
    data = get_json(server, "/api/tables/events/query?" + urllib.parse.urlencode(params), 400)
    assert message in data["error"]


def test_unknown_tables_are_404(server: Server) -> None:
    for path in ("/api/tables/nope", "/api/tables/nope/partitions",
                 "/api/tables/nope/query", "/api/tables/..%2F..", "/api/tables/%3Cb%3E"):
        assert "error" in get_json(server, path, 404)
    for path in ("/tables/nope", "/tables/nope/query", "/tables/%3Cscript%3E"):
        code, _, body = fetch(server.url + path)
        assert code == 404 and b"<script>" not in body.split(b"<script", 1)[0]


def test_pages(server: Server, store: sd.Store) -> None:
    for path, view in (("/", "store"), ("/tables/events", "table"),
                       ("/tables/events/query?start=a&end=c&limit=5", "query"),
                       ("/tables/idle", "table"), ("/tables/idle/query", "query")):
        code, headers, body = fetch(server.url + path)
        assert code == 200, (path, body[:300])
        assert headers["content-type"].startswith("text/html")
        text = body.decode()
        assert f'data-view="{view}"' in text
        # every script and style sheet comes from this server: no CDN
        srcs = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', text)
        assert srcs and all(s.startswith(("/static/", "data:")) for s in srcs), srcs
        assert "/static/plotly.min.js" in srcs or view == "login"
        assert "content-security-policy" in headers
    data = page_data(fetch(server.url + "/tables/events")[2])
    assert data["view"]["table"]["name"] == "events" and data["tree"]["nodes"]
    assert data["view"]["table"] == get_json(server, "/api/tables/events")["table"]
    assert page_data(fetch(server.url + "/")[2])["tables"] == \
        get_json(server, "/api/store")["tables"]
    code, _, body = fetch(server.url + "/tables/events/query?limit=0")
    assert code == 400 and "limit must be" in page_data(body)["error"]


def test_static_files(server: Server) -> None:
    import plotly

    code, headers, body = fetch(server.url + "/static/plotly.min.js")
    assert code == 200 and len(body) > 1_000_000
    bundled = (plotly.__path__[0] + "/package_data/plotly.min.js")
    with open(bundled, "rb") as f:
        assert body == f.read()
    for name in ("dashboard.js", "dashboard.css"):
        assert fetch(server.url + f"/static/{name}")[0] == 200
    for name in ("..%2Fapp.py", "nope.js", ".hidden"):
        assert fetch(server.url + f"/static/{name}")[0] == 404


def test_read_only(server: Server) -> None:
    for path in ("/", "/api/store", "/api/tables/events", "/tables/events/query"):
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            req = urllib.request.Request(server.url + path, data=b"x", method=method)
            try:
                urllib.request.urlopen(req, timeout=10)
                raise AssertionError(f"{method} {path} was accepted")
            except urllib.error.HTTPError as e:
                assert e.code == 405, (method, path, e.code)


def test_html_in_keys_and_values_is_escaped(server: Server) -> None:
    """Keys, split points and values made of HTML reach the pages only as JSON text."""
    code, _, body = fetch(server.url + "/tables/web")
    assert code == 200
    for payload in HTML_KEYS:
        assert payload.encode() not in body
    assert b"<img" not in body and b"<script>alert" not in body
    tree = page_data(body)["tree"]
    regions = " ".join(n["region"] for n in tree["nodes"])
    assert all(repr(k) in regions for k in HTML_KEYS)  # shown, as text
    # the query form echoes what was typed, escaped; the records hold the payloads
    q = urllib.parse.urlencode({"keys": "\n".join(HTML_KEYS), "start": HTML_KEYS[1],
                                "end": HTML_KEYS[0], "end_inclusive": "1"})
    code, _, body = fetch(server.url + "/tables/web/query?" + q)
    assert code == 200
    text = body.decode()
    for payload in HTML_KEYS:
        assert payload not in text
    assert str(escape(HTML_KEYS[1])) in text  # in the form's fields, as Jinja escapes them
    assert f'<textarea name="keys" rows="3">{escape(chr(10).join(HTML_KEYS))}</textarea>' in text
    data = page_data(body)
    assert sorted(r[0] for r in data["rows"]) == sorted(HTML_KEYS)
    assert "<b>bold</b>" in [r[2] for r in data["rows"]]
    assert b"<b>bold</b>" not in body and b"<iframe" not in body


def test_table_page_says_what_gc_keeps(server: Server, store: sd.Store) -> None:
    """The table view carries GC's survey (``sediment.maintenance.kept``): bytes by reason,
    equal to what a GC pass would report, and the page has its table."""
    from sediment.maintenance.gc import survey

    code, _, body = fetch(server.url + "/tables/events")
    assert code == 200 and b'id="gc-kept"' in body
    view = get_json(server, "/api/tables/events")["gc"]
    plan = survey(store.table("events")._handle)
    assert view["unreferenced_bytes"] == plan.unreferenced_bytes > 0
    assert view["orphan_bytes"] == plan.orphan_bytes
    rows = {(k["class"], k["reason"]): (k["files"], k["bytes"]) for k in view["kept"]}
    assert rows == {("unreferenced", r): (k.files, k.bytes)
                    for r, k in plan.kept.unreferenced.items()}
    # the tag taken before maintenance holds the files maintenance replaced
    assert ("unreferenced", "tag") in rows and ("unreferenced", "retention") in rows
    assert sum(b for _, b in rows.values()) == plan.unreferenced_bytes
    # and where all of the table's bytes go, as ``sediment du`` and Table.usage() say
    assert b'id="usage"' in body
    # each is one listing of the table's folder at its moment, and a metadata object may
    # land between two readings (one did, 316 bytes, in a full suite run): the page is
    # compared with Table.usage() read just before and just after it, unchanged
    for _ in range(5):
        before = store.table("events").usage().to_json()
        usage = get_json(server, "/api/tables/events")["gc"]["usage"]
        if store.table("events").usage().to_json() == before:
            break
    assert usage == before
    assert sum(view["usage"]["unreferenced"].values()) == plan.unreferenced_bytes


def test_store_api_shows_batcher_queues_and_maintainers(server: Server, store: sd.Store,
                                                        tmp_path: Path) -> None:
    """Each table's batcher queue (depth, oldest request) and the maintainers with their
    leases, as `batcher status` and `report maintainers` give them."""
    import pyarrow.parquet as pq

    from helpers import rows
    from sediment.handle import handle_of
    from sediment.ingest import batcher
    from sediment.maintenance.lease_store import LeaseHolder

    web = store.table("web")
    path = tmp_path / "queued.parquet"
    pq.write_table(rows(10, seed=1), path)
    queued = batcher.submit(web, [str(path)], now=1_000.0)  # long ago: an age to check
    holder = LeaseHolder(store.objects, timeout=600.0, member="dash-test")
    holder.offer(["web"])
    try:
        data = get_json(server, "/api/store")
        by_name = {t["name"]: t["batcher"] for t in data["tables"]}
        assert by_name["web"]["queue_depth"] == 1 == batcher.status(web)["pending"]["requests"]
        assert by_name["web"]["oldest_age_seconds"] > 1e9
        assert all(b == {"queue_depth": 0, "oldest_age_seconds": None}
                   for n, b in by_name.items() if n != "web")
        m = data["maintainers"]
        assert [(r["member"], r["live"], r["leases"]) for r in m["members"]] == \
            [("dash-test", True, ["(store)", "web"])]
        assert {(r["lease"], r["member"], r["state"]) for r in m["leases"]} == \
            {("web", "dash-test", "held"), ("(store)", "dash-test", "held")}
    finally:
        holder.close()
        handle_of(web).objects.delete_many([f"batcher/requests/{r.id}.json" for r in queued])


def test_a_damaged_table_does_not_take_the_store_page_down(tmp_path: Path) -> None:
    """A table whose log cannot be replayed is listed with its error (as sediment doctor
    lists it); the other tables show, and the store page answers 200 (it was a 500 for
    all of them)."""
    from dashboard_helpers import start, stop

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    store.create_table("good", SCHEMA).ingest(
        pd.DataFrame({"key": ["a"], "timestamp": [1], "value": ["x"],
                      "nullable_value": [None]}))
    bad = store.create_table("bad", SCHEMA)
    bad._handle.objects.put(f"log/{bad.version + 1:020d}.json", b"{not json")
    proc, server = start(store.uri, tmp_path / "dashboard.log")
    try:
        data = get_json(server, "/api/store")
        assert [t["name"] for t in data["tables"]] == ["good"]
        (unreadable,) = data["unreadable"]
        assert unreadable["name"] == "bad"
        assert unreadable["error"].startswith("CorruptMetadataError") \
            and "table bad" in unreadable["error"]
        status, _, body = fetch(server.url + "/")
        assert status == 200, body[:300]
    finally:
        stop(proc)
