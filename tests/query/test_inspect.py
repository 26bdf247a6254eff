"""table.inspect: files, partitions, history and jobs as Arrow tables that
agree with the state they describe, at the head and at an older version."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from helpers import make_table, rows
from sediment.query.inspect import TIME


def test_inspect_tables(tmp_path: Path) -> None:
    t = make_table(tmp_path / "store", split_points=["m"],
                   **{"ingest.write_strategy": "shared_file"})
    t.ingest(rows(200, 1))
    t.tag("one")
    t.ingest(rows(100, 2))
    t.compact(full=True)

    files = t.inspect.files()
    refs = t.files()
    assert files.num_rows == len(refs)
    assert sorted(files["file"].to_pylist()) == sorted(r.filename for r in refs)
    assert pc.sum(files["records"]).as_py() == t.query().num_rows == 300
    assert files.schema.field("region_min").type == pa.string()
    assert all(s is not None and s > 0 for s in files["file_size_bytes"].to_pylist())
    assert all(u.startswith("file://") for u in files["uri"].to_pylist())
    by_leaf = {p.id: p for p in t.partitions()}
    for row in files.to_pylist():
        region = by_leaf[row["partition_id"]].region
        assert (row["region_min"], row["region_max"]) == (
            None if region.min is None else region.min[0],
            None if region.max is None else region.max[0])

    old = t.inspect.files(version="one")
    assert pc.sum(old["records"]).as_py() == 200
    assert old.num_rows == 2 and len(set(old["file"].to_pylist())) == 1  # one shared file

    stats = t.inspect.files(statistics=True)
    assert pc.sum(stats["row_groups"]).as_py() >= stats.num_rows
    for row in stats.to_pylist():
        assert row["key_min"] <= row["key_max"]
        if row["region_max"] is not None:
            assert row["key_max"] < row["region_max"]  # compacted into its own leaf

    parts = t.inspect.partitions()
    assert parts.num_rows == len(t.partitions())
    assert parts["leaf"].to_pylist() == [False, True, True]
    assert parts["depth"].to_pylist() == [0, 1, 1]
    assert parts["split_key"].to_pylist()[0] == "m"
    assert pc.sum(parts["records"]).as_py() == 300
    assert pc.sum(t.inspect.partitions(version="one")["records"]).as_py() == 200

    hist = t.inspect.history()
    assert hist.schema.field("committed_at").type == TIME == pa.timestamp("us", tz="UTC")
    assert hist["version"].to_pylist() == [h.version for h in t.history()]
    assert hist["is_current"].to_pylist()[-1] is True
    newest = t.inspect.history(limit=2)
    assert newest.to_pylist() == hist.slice(hist.num_rows - 2).to_pylist()
    first = t.history()[0]
    assert hist["committed_at"][0].value == round(first.time * 1_000_000)

    jobs = t.inspect.jobs()
    assert jobs.schema.field("time").type == TIME
    assert set(jobs["kind"].to_pylist()) >= {"compaction"}
    assert "committed" in jobs.filter(pc.equal(jobs["kind"], "compaction"))["status"].to_pylist()
    assert all(isinstance(json.loads(d), dict) for d in jobs["details"].to_pylist())
    assert t.inspect.jobs("ingest").num_rows == t.inspect.jobs().filter(
        pc.equal(jobs["kind"], "ingest")).num_rows


def test_inspect_empty_and_multi_field_keys(tmp_path: Path) -> None:
    import sediment as sd

    schema = sd.Schema(row_keys=[("a", pa.string()), ("b", pa.int64())],
                       values=[("v", pa.int64())])
    t = make_table(tmp_path / "store", schema=schema, split_points=[("m", 3)])
    assert t.inspect.files().num_rows == 0
    t.ingest(pa.table({"a": ["a", "z"], "b": [1, 2], "v": [1, 2]}))
    parts = t.inspect.partitions()
    assert parts["split_key"][0].as_py() == repr(("m", 3))
    assert parts.schema.field("region_min").type == pa.string()
    assert t.inspect.files()["records"].to_pylist() == [1, 1]


def test_temporal_key_regions_read_as_dates_and_times(tmp_path: Path) -> None:
    """A region holds a date or timestamp key as the integer it is stored as; every text of a
    region (the inspector's, the CLI's tree, the dashboard's) shows the date or time."""
    import datetime as dt

    from typer.testing import CliRunner

    import sediment as sd
    from sediment.cli.app import app
    from sediment.dashboard.aggregate import compute, tree
    from sediment.types import region_text

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    day = dt.date(2024, 6, 1)
    t = store.create_table("days", sd.Schema(row_keys=[("d", pa.date32())],
                                             values=[("v", pa.int64())]), split_points=[day])
    t.ingest(pa.table({"d": pa.array([dt.date(2024, 1, 1), dt.date(2024, 7, 1)]),
                       "v": [1, 2]}))
    assert t.inspect.partitions()["region"].to_pylist() == [
        "[-inf, +inf)", "[-inf, 2024-06-01)", "[2024-06-01, +inf)"]
    out = CliRunner().invoke(app, ["report", "partitions", "-t", "days", "--store",
                                   str(tmp_path / "s")])
    assert out.exit_code == 0 and "[2024-06-01, +inf)" in out.stdout, out.output
    nodes = tree(compute(t.state()))["nodes"]
    assert {n["split_key"] for n in nodes} == {"2024-06-01", None}
    assert "[-inf, 2024-06-01)" in {n["region"] for n in nodes}
    # a timestamp with a time zone, in a two-field key; a string stays quoted
    ts = pa.timestamp("ms", tz="UTC")
    region = sd.Region(min=(1717200000000, "a"), max=None)
    assert region_text(region, [ts, pa.string()]) == "[(2024-06-01T00:00:00+00:00, 'a'), +inf)"
