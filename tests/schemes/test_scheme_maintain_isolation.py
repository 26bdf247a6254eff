"""One member of a partition scheme with a damaged log entry (issue 34): ``Table.maintain()``
of every other member goes on (the scheme splits, they follow and compact), the damaged one
is named in the result and in the CLI's report, its own ``maintain`` fails naming the entry,
and once the entry is mended it catches up with the scheme."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli.app import app
from sediment.errors import CorruptMetadataError
from sediment.state.log import log_key
from support.races import as_another_process

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())])
NO_CACHE = {"state.cache.refresh_seconds": 0}
THRESHOLD = 150


def _rows(lo: int, hi: int, tag: int) -> pa.Table:
    return pa.table({"key": [f"k{i:05d}" for i in range(lo, hi)],
                     "v": [i * 10 + tag for i in range(lo, hi)]})


def _leaves(t: sd.Table) -> set[str]:
    return {p.id for p in t.partitions() if p.is_leaf}


def _members(tmp_path: Path) -> tuple[sd.Store, dict[str, sd.Table], dict[str, pa.Table]]:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    store.create_scheme("sc", [("key", pa.string())],
                        properties={"partition.split.threshold": THRESHOLD})
    tables = {n: store.create_table(n, SCHEMA, scheme="sc", properties=NO_CACHE)
              for n in ("a", "b", "c")}
    want = {}
    for tag, (name, t) in enumerate(tables.items()):
        parts = [_rows(i * 60, (i + 1) * 60, tag) for i in range(3)]
        for p in parts:
            t.ingest(p)
        want[name] = pa.concat_tables(parts).sort_by("key")
    return store, tables, want


def _damage(t: sd.Table) -> tuple[Path, bytes]:
    """Cut the table's newest log entry short on disk, as a torn write would; returns the
    file and its bytes (to mend it later)."""
    path = Path(t._handle.objects.local_path(log_key(t.version)))
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    return path, good


def test_a_damaged_member_does_not_stop_the_others(tmp_path: Path) -> None:
    store, tables, want = _members(tmp_path)
    a, b, c = tables["a"], tables["b"], tables["c"]
    path, good = _damage(b)
    with pytest.raises(CorruptMetadataError, match="table b"):
        # a process that has not read it yet
        as_another_process(sd.Store.open(store.uri).table("b")).query()

    result = a.maintain()
    assert result.splits >= 1
    assert len(result.errors) == 1
    assert result.errors[0].startswith("table b: CorruptMetadataError")
    assert "log/" in result.errors[0]
    scheme = store.describe_scheme("sc")
    assert scheme.leaves >= 2
    # a and c follow the scheme's tree (a compacted too); their answers are unchanged
    for t in (a, c):
        assert len(_leaves(t)) == scheme.leaves
        assert t.query().sort_by("key").to_pylist() == want[t.name].to_pylist()
    assert {r.partition_id for r in a.files()} <= _leaves(a)
    assert c.maintain().errors == result.errors
    assert {r.partition_id for r in c.files()} <= _leaves(c)

    # the damaged member's own maintenance (in a process that has not read it yet) fails
    # naming what is damaged
    with pytest.raises(CorruptMetadataError, match=r"table b .*log/"):
        as_another_process(sd.Store.open(store.uri).table("b")).maintain()

    # the command line: the others are maintained, the damaged one named on stderr, exit 0
    run = CliRunner().invoke(app, ["maintain", "--table", "a", "--store", store.uri, "--json"])
    assert run.exit_code == 0, run.output
    assert "table b: CorruptMetadataError" in run.stderr

    # mended, it catches up with the scheme at the next maintenance of any member
    path.write_bytes(good)
    assert a.maintain().errors == ()
    assert _leaves(b) == _leaves(a)
    b.maintain()
    assert {r.partition_id for r in b.files()} <= _leaves(b)
    for name, t in tables.items():
        assert t.query().sort_by("key").to_pylist() == want[name].to_pylist()


def test_a_split_scheme_call_names_the_damaged_member(tmp_path: Path) -> None:
    store, tables, want = _members(tmp_path)
    _damage(tables["c"])
    result = store.split_scheme("sc")
    assert result.splits >= 1
    assert [e.split(":")[0] for e in result.errors] == ["table c"]
    assert _leaves(tables["a"]) == _leaves(tables["b"])
    assert len(_leaves(tables["a"])) == store.describe_scheme("sc").leaves
    for name in ("a", "b"):
        assert tables[name].query().sort_by("key").to_pylist() == want[name].to_pylist()
