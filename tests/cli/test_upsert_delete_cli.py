"""``sediment upsert`` and ``sediment delete``: their answers against an independent pandas
reference, their output, and their refusals (one ``error:`` line, nothing committed).

The reference's semantics, written out: an ingest appends its records; an upsert first keeps
the last of its own records of each record key (key, ts) in input order, then removes every
earlier record of those keys and appends its own; a delete removes the records of its keys, of
its key ranges and/or matching its condition (with keys or ranges: only theirs that match).
The scenario runs in process (typer's runner: the commands' own code, quick); the console
script runs a shorter one as separate processes.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner, Result

import sediment as sd
from sediment.cli import app

SCRIPT = Path(sys.executable).with_name("sediment")
SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string()), ("n", pa.int64())])
COLUMNS = ["key", "ts", "value", "n"]
RECORD_KEY = ["key", "ts"]


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)


def _table(tmp_path: Path, **props: Any) -> tuple[str, sd.Table]:
    store = str(tmp_path / "store")
    table = sd.Store.open(store, create=True).create_table(
        "events", SCHEMA, split_points=["m"],
        properties={"state.cache.refresh_seconds": 0, **props})
    return store, table


def _records(n: int, seed: int) -> pd.DataFrame:
    """``n`` records over few record keys (many repeats), values unique by seed and row."""
    rng = random.Random(seed)
    return pd.DataFrame({
        "key": [rng.choice("abcdmnqxz") + rng.choice("ab") for _ in range(n)],
        "ts": [rng.randrange(3) for _ in range(n)],
        "value": [f"s{seed}r{i}" for i in range(n)],
        "n": [rng.randrange(10) for _ in range(n)]})


def _upserted(ref: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    new = new.drop_duplicates(RECORD_KEY, keep="last")
    hit = ref.set_index(RECORD_KEY).index.isin(new.set_index(RECORD_KEY).index)
    return pd.concat([ref[~hit], new], ignore_index=True)


def _sorted(df: pd.DataFrame) -> list[dict[str, Any]]:
    return df[COLUMNS].sort_values(COLUMNS).to_dict("records")  # type: ignore[no-any-return]


def _answer(store: str) -> list[dict[str, Any]]:
    """The table's records read through a fresh handle, in the reference's order."""
    return _sorted(sd.Store.open(store).table("events").query().to_pandas())


def _cli(*args: str) -> Result:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def _refused(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.output
    return result.stderr


def test_upsert_and_deletes_match_the_reference(tmp_path: Path) -> None:
    store, table = _table(tmp_path)
    base = _records(120, seed=1)
    table.ingest(pa.Table.from_pandas(base, preserve_index=False))
    ref = base
    # an upsert of two files: of equal record keys the last in file order wins, also
    # across the two files (a CSV, then Parquet)
    first, second = _records(40, seed=2), _records(40, seed=3)
    first.to_csv(tmp_path / "first.csv", index=False)
    pq.write_table(pa.Table.from_pandas(second, preserve_index=False),
                   tmp_path / "second.parquet")
    out = json.loads(_cli("upsert", "events", str(tmp_path / "first.csv"),
                          str(tmp_path / "second.parquet"), "--store", store,
                          "--json").stdout)
    assert out["rows"] == 80 and out["table"] == "events"
    assert out["version"] == table.version
    ref = _upserted(ref, pd.concat([first, second], ignore_index=True))
    assert _answer(store) == _sorted(ref)

    # deletes: keys, a range, a condition, keys with a condition; each prints its version
    steps: list[tuple[list[str], Any]] = [
        (["--key", "aa", "--key", "qb"], lambda r: r[~r.key.isin(["aa", "qb"])]),
        (["--range", "[m,q)"], lambda r: r[~((r.key >= "m") & (r.key < "q"))]),
        (["--where", "n >= 7 AND ts = 1"], lambda r: r[~((r.n >= 7) & (r.ts == 1))]),
        (["-k", "xa", "-k", "za", "-w", "n < 3"],
         lambda r: r[~(r.key.isin(["xa", "za"]) & (r.n < 3))]),
    ]
    for args, apply in steps:
        before = table.version
        text = _cli("delete", "events", *args, "--store", store).stdout
        assert text.strip() == f"deleted from table events: version {before + 1}"
        ref = apply(ref)
        assert _answer(store) == _sorted(ref), args
    # a deleted key written again is kept: the delete covers only what came before it
    again = _records(5, seed=4).assign(key="aa")
    again.to_json(tmp_path / "again.jsonl", orient="records", lines=True)
    _cli("upsert", "events", str(tmp_path / "again.jsonl"), "--store", store)
    ref = _upserted(ref, again)
    assert _answer(store) == _sorted(ref)
    # an empty range deletes nothing and commits nothing; --json says so
    before = table.version
    out = json.loads(_cli("delete", "events", "--range", "[m,m)", "--store", store,
                          "--json").stdout)
    assert out == {"table": "events", "version": before, "committed": False,
                   "replayed": False}
    # time travel still sees what was deleted
    old = sd.Store.open(store).table("events").query(version=out["version"] - 5)
    assert len(old) > len(ref)


def test_upsert_replaces_whatever_the_merge_rule(tmp_path: Path) -> None:
    store, table = _table(tmp_path, merge="first")
    (tmp_path / "a.csv").write_text("key,ts,value,n\nb,1,old,1\n")
    (tmp_path / "b.csv").write_text("key,ts,value,n\nb,1,ignored,2\n")
    (tmp_path / "c.csv").write_text("key,ts,value,n\nb,1,replaced,3\nb,1,last,4\n")
    _cli("ingest", "events", str(tmp_path / "a.csv"), "--store", store)
    _cli("ingest", "events", str(tmp_path / "b.csv"), "--store", store)
    assert table.query().column("value").to_pylist() == ["old"]  # merge="first"
    text = _cli("upsert", "events", str(tmp_path / "c.csv"), "--store", store).stdout
    assert "upsert" in text and "rows" in text  # ingest's key-value table, titled upsert
    assert table.query().to_pylist() == [{"key": "b", "ts": 1, "value": "last", "n": 4}]


def test_refusals_name_the_table_and_commit_nothing(tmp_path: Path) -> None:
    store, table = _table(tmp_path)
    table.ingest(pa.table({"key": ["a"], "ts": [1], "value": ["x"], "n": [1]}))
    before = table.version
    err = _refused("delete", "events", "--store", store)
    assert "events" in err and "sediment clear events" in err
    err = _refused("delete", "events", "--where", "colour = 'red'", "--store", store)
    assert "table events" in err and "'colour'" in err
    err = _refused("delete", "events", "--where", "value > 3", "--store", store)
    assert "table events" in err and "'value'" in err  # 3 does not fit a string
    assert "range" in _refused("delete", "events", "--range", "a,m", "--store", store)
    assert "'ghost'" in _refused("delete", "ghost", "--key", "a", "--store", store)
    (tmp_path / "bad.csv").write_text("key,ts,value,n,colour\nb,1,x,1,red\n")
    err = _refused("upsert", "events", str(tmp_path / "bad.csv"), "--store", store)
    assert "upsert into table events" in err and "'colour'" in err
    # a key array longer than the row key is refused, not cut to it (a delete of every
    # record of the shorter key)
    err = _refused("delete", "events", "--key", '["a", 1]', "--store", store)
    assert "must have 1..1 values (key)" in err
    assert table.version == before
    assert table.query().to_pylist() == [{"key": "a", "ts": 1, "value": "x", "n": 1}]


def test_the_console_script(tmp_path: Path) -> None:
    """The installed ``sediment`` as separate processes: an upsert, then a delete."""
    store, table = _table(tmp_path)
    table.ingest(pa.table({"key": ["a", "b", "n"], "ts": [1, 1, 1], "value": ["x", "y", "z"],
                           "n": [1, 2, 3]}))
    (tmp_path / "up.csv").write_text("key,ts,value,n\na,1,new,9\nq,2,add,4\n")
    env = {**os.environ, "SEDIMENT_STORE": store}

    def sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                              timeout=120, check=False)

    up = sh("upsert", "events", str(tmp_path / "up.csv"), "--json")
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout)["rows"] == 2
    gone = sh("delete", "events", "--range", "(a,n]", "--where", "n > 1")
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.strip() == f"deleted from table events: version {table.version}"
    assert table.query().to_pylist() == [
        {"key": "a", "ts": 1, "value": "new", "n": 9},
        {"key": "q", "ts": 2, "value": "add", "n": 4}]
