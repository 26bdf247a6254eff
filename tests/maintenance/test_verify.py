"""``table.verify`` (issue 38): a clean table verifies with every object counted (against an
enumeration of the store and the states), and a flipped byte on local disk in each kind of
object (data page, footer, sample, key-filter block, log entry, snapshot pointer and object,
tag) or a deleted data file is reported damaged, with the versions and tags it breaks as the
real loader (or the versions' file lists) says. ``deep`` finds a damaged page the shallow
check cannot see (a file without recorded sums), and objects written before checksums are
counted unchecked, not damaged. The CLI's --json says the same and exits 1."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli import app
from sediment.errors import SedimentError
from sediment.files.keyfilter import HEADER_BYTES, HEADER_V1, MAGIC, FilterLayout
from sediment.files.sidecars import KEYS, SAMPLE, sidecar_name
from support.races import as_another_process

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string())])
PROPS = {"state.cache.refresh_seconds": 0, "parquet.row_group_rows": 256,
         "parquet.compression": "none", "state.snapshot.interval": 4}
TAG = "before"


def _rows(start: int, n: int = 1000) -> pa.Table:
    return pa.table({"key": [f"k{i:05d}" for i in range(start, start + n)],
                     "ts": list(range(start, start + n)),
                     "value": [f"v-{i:06d}" for i in range(start, start + n)]},
                    schema=SCHEMA.to_arrow())


def _table(tmp_path: Path, **props: Any) -> sd.Table:
    """v1 create, v2 and v3 ingests (tag ``before`` at 3), a full compaction (v4, v5), an
    ingest at v6: files of the tag and of the head differ, snapshots at 4."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties={**PROPS, **props})
    table.ingest(_rows(0))
    table.ingest(_rows(1000))
    table.tag(TAG)
    assert table.compact(full=True).jobs_committed == 1
    table.ingest(_rows(5000, 300))
    return table


def _fresh(tmp_path: Path) -> sd.Table:
    """The table opened anew: no state cached from before the damage."""
    return as_another_process(sd.Store.open(str(tmp_path / "s")).table("t"))


def _path(table: sd.Table, key: str) -> Path:
    return Path(table._handle.objects.local_path(key) or "")


def _flip(path: Path, at: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at % len(raw)] ^= 0x01
    path.write_bytes(bytes(raw))


def _referencing(table: sd.Table, filename: str) -> set[int]:
    """The versions whose state references ``filename`` (each version's own file list)."""
    return {v for v in range(1, table.version + 1)
            if filename in {r.filename for r in table.files(v)}}


def _unloadable(table: sd.Table, head: int = 6) -> set[int]:
    """The versions up to ``head`` the real loader (newest readable snapshot, then the log)
    cannot load."""
    heads = table._handle.states.heads
    out = set()
    for v in range(1, head + 1):
        try:
            heads.load_from_storage(v)
        except SedimentError:
            out.add(v)
    return out


def _versions(damage: sd.Damage) -> set[int]:
    return {v for r in damage.versions for v in r}


def _tags_at(versions: set[int]) -> tuple[str, ...]:
    return (TAG,) if 3 in versions else ()


def _first_file(table: sd.Table) -> str:
    (ref,) = table.files(2)
    return ref.filename


def _footer_at(path: Path) -> int:
    raw = path.read_bytes()
    return len(raw) - 8 - int.from_bytes(raw[-8:-4], "little") // 2


def _block_at(table: sd.Table, key: str) -> int:
    layout = FilterLayout.parse(_path(table, key).read_bytes()[:HEADER_BYTES], key)
    return layout.block_range(1)[0] + 3


# Each case damages one object of the table and says (kind, key, breaks): ``breaks`` is None
# for a data file's objects (the versions referencing the file) and a set for the rest.
Case = Callable[[sd.Table], tuple[str, str, set[int] | None]]


def _data_page(t: sd.Table) -> tuple[str, str, None]:
    f = _first_file(t)
    raw = _path(t, f).read_bytes()
    _flip(_path(t, f), raw.index(b"v-000700") + 7)
    return "data file", f, None


def _data_footer(t: sd.Table) -> tuple[str, str, None]:
    f = _first_file(t)
    _flip(_path(t, f), _footer_at(_path(t, f)))
    return "data file", f, None


def _sample(t: sd.Table) -> tuple[str, str, None]:
    key = sidecar_name(_first_file(t), SAMPLE)
    _flip(_path(t, key), len(_path(t, key).read_bytes()) // 2)
    return "sample", key, None


def _key_filter(t: sd.Table) -> tuple[str, str, None]:
    key = sidecar_name(_first_file(t), KEYS)
    _flip(_path(t, key), _block_at(t, key))
    return "key filter", key, None


def _deleted(t: sd.Table) -> tuple[str, str, None]:
    f = _first_file(t)
    _path(t, f).unlink()
    return "data file", f, None


def _log_entry(t: sd.Table) -> tuple[str, str, set[int]]:
    key = "log/00000000000000000002.json"
    _flip(_path(t, key), len(_path(t, key).read_bytes()) // 2)
    return "log entry", key, {2, 3}  # up to the snapshot at 4


def _snapshot(t: sd.Table) -> tuple[str, str, set[int]]:
    key = "snapshots/00000000000000000004.json"
    _flip(_path(t, key), len(_path(t, key).read_bytes()) // 2)
    return "snapshot", key, set()  # the log under it replays


def _snapshot_object(t: sd.Table) -> tuple[str, str, set[int]]:
    objects = t._handle.objects
    key = next(o.key for o in objects.list("objects/") if o.key.endswith(".parquet"))
    _flip(_path(t, key), len(_path(t, key).read_bytes()) // 2)
    return "snapshot object", key, set()


def _tag(t: sd.Table) -> tuple[str, str, set[int]]:
    key = f"tags/{TAG}.json"
    _flip(_path(t, key), len(_path(t, key).read_bytes()) // 2)
    return "tag", key, set()


CASES: dict[str, Case] = {
    "data page": _data_page, "data footer": _data_footer, "sample": _sample,
    "key filter block": _key_filter, "deleted data file": _deleted, "log entry": _log_entry,
    "snapshot pointer": _snapshot, "snapshot object": _snapshot_object, "tag": _tag,
}


def _counts(table: sd.Table) -> dict[str, int]:
    """What a clean table's verify must count, enumerated here: data files (and their
    sidecars) of the head's and the tag's states, and the objects under each folder."""
    objects = table._handle.objects
    files = {r.filename for v in (table.version, table.tag_version(TAG))
             for r in table.files(v)}

    def listed(prefix: str) -> int:
        return sum(1 for _ in objects.list(prefix))

    return {"store file": 1, "catalog entry": 1, "tag": listed("tags/"),
            "log entry": listed("log/"), "snapshot": listed("snapshots/"),
            "snapshot object": listed("objects/"), "data file": len(files),
            "sample": len(files), "key filter": len(files)}


def test_a_clean_table_verifies_with_every_object_counted(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.pin("job", 2, ttl_seconds=3600)
    report = _fresh(tmp_path).verify()
    assert report.ok and report.damaged == () and report.unchecked == {}
    assert report.versions == (2, 3, 6) and table.version == 6  # pin, tag, head
    assert report.checked == _counts(table)
    assert all(n > 0 for n in report.checked.values()) and report.bytes > 0
    deep = _fresh(tmp_path).verify(deep=True)
    assert deep.ok and deep.checked == report.checked
    only = _fresh(tmp_path).verify(version=TAG)
    assert only.versions == (3,) and only.ok
    assert only.checked["data file"] == len(table.files(3)) == 2


@pytest.mark.parametrize("case", list(CASES))
def test_a_flipped_byte_is_reported_with_what_it_breaks(tmp_path: Path, case: str) -> None:
    table = _table(tmp_path)
    kind, key, breaks = CASES[case](table)
    if breaks is None:  # a data file's object: the versions referencing the file
        breaks = _referencing(table, _first_file_of(key))
        assert breaks == {2, 3, 4}  # added at 2, replaced by the compaction at 5
    else:  # metadata: what the real loader can no longer load
        assert _unloadable(_fresh(tmp_path)) == breaks
    report = _fresh(tmp_path).verify()
    assert not report.ok
    (damage,) = report.damaged
    assert (damage.kind, damage.key) == (kind, key), damage
    assert _versions(damage) == breaks, damage
    assert damage.tags == ((TAG,) if kind == "tag" else _tags_at(breaks)), damage
    if case == "data page":
        assert "CRC-32" in damage.problem and "footer" not in damage.problem
    if case == "data footer":
        assert "footer" in damage.problem
    if case == "deleted data file":
        assert damage.problem == "missing"
    result = CliRunner().invoke(app, ["verify", "t", "--store", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["damaged"] == [damage.to_json()]


def _first_file_of(key: str) -> str:
    """The data file an object belongs to (itself, or the file of a sidecar)."""
    from sediment.files.sidecars import data_file_of

    return data_file_of(key)


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite a sealed JSON object without its seal (as written before checksums)."""
    doc = json.loads(path.read_bytes())
    doc.pop("crc32", None)
    edit(doc)
    path.write_text(json.dumps(doc, separators=(",", ":")))


def _without_sums(doc: dict[str, Any]) -> None:
    doc["transaction"].pop("checksums", None)


def _legacy_key_filter(path: Path) -> None:
    """A format 2 key filter rewritten as format 1 (no CRCs), as written before them."""
    raw = path.read_bytes()
    layout = FilterLayout.parse(raw[:HEADER_BYTES], str(path))
    blocks = (len(raw) - HEADER_BYTES) // layout.stride
    body = b"".join(layout.block(raw[slice(*layout.block_range(g))], str(path))
                    for g in range(blocks))
    path.write_bytes(HEADER_V1.pack(MAGIC, 1, layout.probes, layout.block_bytes,
                                    layout.group_rows) + body)


def test_deep_finds_a_damaged_page_of_a_file_without_sums(tmp_path: Path) -> None:
    """The file's commit recorded no sums (its entry rewritten as before checksums, and no
    snapshot holds them): the shallow check cannot tell a flipped page and counts the file
    unchecked; ``deep`` decodes it and the page CRC fails."""
    table = _table(tmp_path, **{"state.snapshot.interval": 100})
    f = _first_file(table)
    _edit_json(_path(table, "log/00000000000000000002.json"), _without_sums)
    assert _fresh(tmp_path).state(3).file_sums(f) is None
    _data_page(table)
    shallow = _fresh(tmp_path).verify()
    assert shallow.ok, shallow.damaged
    assert shallow.unchecked == {"log entry": 1, "data file": 1, "sample": 1}
    deep = _fresh(tmp_path).verify(deep=True)
    (damage,) = deep.damaged
    assert (damage.kind, damage.key, _versions(damage)) == ("data file", f, {2, 3, 4})
    assert "CRC" in damage.problem and damage.tags == (TAG,)


def test_objects_written_before_checksums_are_unchecked(tmp_path: Path) -> None:
    """Every seal and every recorded sum stripped, key filters of format 1: nothing is
    damaged, and every such object is counted unchecked (snapshot objects are named by
    their SHA-256, so they are checked whatever their age)."""
    table = _table(tmp_path, **{"state.snapshot.interval": 100})
    root = tmp_path / "s"
    objects = table._handle.objects
    entries = [o.key for o in objects.list("log/")]
    for key in entries:
        _edit_json(_path(table, key), _without_sums)
    tags = [o.key for o in objects.list("tags/")]
    for key in tags:
        _edit_json(_path(table, key), lambda doc: None)
    _edit_json(root / "store.json", lambda doc: None)
    _edit_json(root / "catalog" / "t.json", lambda doc: None)
    files = {r.filename for v in (3, 6) for r in table.files(v)}
    for f in files:
        _legacy_key_filter(_path(table, sidecar_name(f, KEYS)))
    report = _fresh(tmp_path).verify()
    assert report.ok, report.damaged
    n = len(files)
    assert report.unchecked == {"store file": 1, "catalog entry": 1, "tag": len(tags),
                                "log entry": len(entries), "data file": n, "sample": n,
                                "key filter": n}
    assert report.checked == {}
    # and a flipped page of one of them is still found by deep
    _data_page(table)
    assert _fresh(tmp_path).verify().ok
    assert [d.key for d in _fresh(tmp_path).verify(deep=True).damaged] == [_first_file(table)]


def test_verify_over_s3(s3_store_uri: tuple[str, dict[str, Any]]) -> None:
    """On S3 (moto) the whole-file CRC is streamed through pyarrow's S3 filesystem: a clean
    table verifies, a data file rewritten with one byte flipped, and a sample deleted, are
    reported, with the versions referencing the file."""
    uri, options = s3_store_uri
    store = sd.Store.open(uri, create=True, **options)
    table = store.create_table("t", SCHEMA, properties=PROPS)
    table.ingest(_rows(0))
    table.ingest(_rows(1000))
    clean = table.verify(deep=True)
    assert clean.ok and clean.checked["data file"] == 2 and clean.bytes > 0
    objects = table._handle.objects
    first = _first_file(table)
    (second,) = {r.filename for r in table.files(3)} - {first}
    raw = bytearray(objects.get(first))
    raw[raw.index(b"v-000700") + 7] ^= 0x01
    objects.put(first, bytes(raw))
    objects.delete_many([sidecar_name(second, SAMPLE)])
    report = sd.Store.open(uri, **options).table("t").verify()
    got = {(d.kind, d.key): _versions(d) for d in report.damaged}
    assert got == {("data file", first): {2, 3},
                   ("sample", sidecar_name(second, SAMPLE)): {3}}, report.damaged


def test_files_collected_while_verify_runs_are_no_damage(tmp_path: Path) -> None:
    """The head's files compacted away and deleted by GC after verify listed them (its
    progress callback does it before the first file is read): gone by retention, as the head
    read again says, not damage. A file deleted by hand (the head still knows it) is."""
    table = _table(tmp_path, **{"gc.delay_seconds": 0, "gc.clock_skew_seconds": 0,
                                "retention.seconds": 0})
    table.delete_tag(TAG)
    before = {r.filename for r in table.files()}

    def compact_and_collect(done: int, total: int) -> None:
        if done == 0:
            assert total == len(before) == 2
            table.compact(full=True)
            table.gc()
            assert not any(_path(table, f).exists() for f in before)

    report = table.verify(progress=compact_and_collect)
    assert report.ok, report.damaged
    assert "data file" not in report.checked
    (ref,) = table.files()
    _path(table, ref.filename).unlink()
    (damage,) = table.verify().damaged
    assert (damage.key, damage.problem) == (ref.filename, "missing")


def test_a_damaged_base_snapshot_of_a_pruned_log_breaks_what_it_alone_reached(
        tmp_path: Path, no_prune_grace: None) -> None:
    """Pruned up to the snapshot at 4 (the log goes on from 5): with that snapshot damaged
    nothing reaches 4..6 any more, as the real loader says; a tag keeps nothing older here."""
    table = _table(tmp_path, **{"retention.seconds": 0, "gc.clock_skew_seconds": 0})
    table.delete_tag(TAG)
    assert table.prune().base == 4
    objects = table._handle.objects
    assert [o.key for o in objects.list("log/")][0].endswith("05.json")
    assert _fresh(tmp_path).verify().ok
    kind, key, _ = _snapshot(table)
    assert _unloadable(_fresh(tmp_path)) == {1, 2, 3, 4, 5, 6}  # 1-3 pruned, 4-6 broken
    (damage,) = _fresh(tmp_path).verify().damaged
    assert (damage.kind, damage.key, _versions(damage)) == (kind, key, {4, 5, 6})
