"""A lone surrogate in a read's keys or range ends (issue 34, item 4): refused with the
DataError ingest gives the same value, naming the table, on every local route and the CLI
(the Flight routes: tests/integration/serve/test_serve_surrogates.py).

Arrow cannot encode a ``str`` holding a lone surrogate (``"\\ud800"``; a command line makes
``"\\udcff"`` of a byte that is not UTF-8), so these reads used to end in a raw
UnicodeEncodeError (the CLI: "internal error"). Every read normalises its keys and ranges in
one place (``sediment.query.planner``), which now refuses them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli import app
from sediment.errors import DataError, QueryError

SCHEMA = sd.Schema(row_keys=[("key", pa.string()), ("n", pa.int64())],
                   values=[("value", pa.int64())])
BAD = "ab\ud800"
FROM_ARGV = "ab\udcff"  # what Python makes of the bytes b"ab\xff" on a command line


@pytest.fixture
def table(tmp_path: Path) -> sd.Table:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    t = store.create_table("events", SCHEMA, split_points=["m"])
    t.ingest(pa.table({"key": ["a", "ab", "z"], "n": [1, 2, 3], "value": [1, 2, 3]}))
    return t


READS: dict[str, Callable[[sd.Table, Path], Any]] = {
    "query keys": lambda t, _: t.query(keys=[BAD]),
    "query key tuple": lambda t, _: t.query(keys=[("a", 1), (BAD, 2)]),
    "query range start": lambda t, _: t.query(ranges=[sd.Range(BAD, None)]),
    "query range end": lambda t, _: t.query(ranges=sd.Range("a", (BAD, 5))),
    "query region": lambda t, _: t.query(ranges=[sd.Region({"key": sd.Range("a", BAD)})]),
    "to_arrow keys": lambda t, _: t.to_arrow(keys=["a", FROM_ARGV]),
    "to_pandas ranges": lambda t, _: t.to_pandas(ranges=[sd.Range(FROM_ARGV, "z")]),
    "to_batches keys": lambda t, _: list(t.to_batches(keys=[BAD])),
    "scan keys": lambda t, _: t.scan(keys=[BAD]).read_all(),
    "plan_files keys": lambda t, _: t.plan_files(keys=[BAD]),
    "join keys": lambda t, _: sd.join(t, t, on=["key", "n"], keys=[BAD]),
    "dump range": lambda t, p: t.dump(str(p / "out"), range=sd.Range(BAD, None)),
}


@pytest.mark.parametrize("read", list(READS))
def test_lone_surrogate_is_refused_on_every_local_read(table: sd.Table, tmp_path: Path,
                                                       read: str) -> None:
    version = table.version
    with pytest.raises(DataError) as e:
        READS[read](table, tmp_path)
    message = str(e.value)
    assert "table events" in message and "lone surrogate" in message, message
    assert "field 'key'" in message, message
    message.encode("utf-8")  # shown escaped: prints anywhere, travels in gRPC metadata
    assert "\\ud800" in message or "\\udcff" in message, message
    assert table.version == version
    assert not (tmp_path / "out").exists()  # the dump refused before writing anything
    # the table answers the same query without the bad key
    assert table.query(keys=["ab"]).column("value").to_pylist() == [2]


def test_ingest_refuses_the_same_value_with_the_same_class(table: sd.Table) -> None:
    """The class the reads raise is the one ingest raises for the same key."""
    import pandas as pd

    with pytest.raises(DataError, match="table events"):
        table.ingest(pd.DataFrame({"key": [BAD], "n": [1], "value": [1]}))


def test_valid_text_and_wrong_types_read_as_before(table: sd.Table) -> None:
    """Text beyond the basic plane (an emoji: a surrogate pair in UTF-16, one code point
    here) reads as before; a value of the wrong type is still the QueryError it was."""
    table.ingest(pa.table({"key": ["\U0001f600"], "n": [9], "value": [9]}))
    assert table.query(keys=["\U0001f600"]).column("value").to_pylist() == [9]
    with pytest.raises(QueryError, match="not a valid string"):
        table.query(keys=[5])


def test_a_dump_range_is_checked_as_a_query_range(tmp_path: Path) -> None:
    """The dump range goes through the queries' check too: a wrong type is a QueryError (it
    was a raw TypeError), and temporal ends are taken (they failed writing the lock)."""
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    t = store.create_table("ts", sd.Schema(row_keys=[("t", pa.timestamp("us"))],
                                           values=[("v", pa.int64())]))
    t.ingest(pa.table({"t": pa.array([1, 2, 3_000_000], pa.timestamp("us")), "v": [1, 2, 3]}))
    with pytest.raises(QueryError, match="table ts: dump range .* is empty or invalid: .*"
                                         "not a valid timestamp"):
        t.dump(str(tmp_path / "bad"), range=sd.Range("a", None))
    epoch = dt.datetime(1970, 1, 1)
    job = t.dump(str(tmp_path / "out"),
                 range=sd.Range(epoch, epoch + dt.timedelta(seconds=2)))
    assert job.rows == 2


@pytest.mark.parametrize("args", [["--key", FROM_ARGV], ["--key", '["ab\\udcff", 2]'],
                                  ["--range", f"[{FROM_ARGV},)"],
                                  ["--region", f"key=[a,{FROM_ARGV})"]])
def test_cli_query_refuses_a_lone_surrogate_cleanly(table: sd.Table, tmp_path: Path,
                                                    args: list[str]) -> None:
    result = CliRunner().invoke(app, ["query", "--store", str(tmp_path / "store"), "events",
                                      *args])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: "), result.output
    assert "internal error" not in result.output
    assert "table events" in result.output and "lone surrogate" in result.output


def test_a_join_column_neither_table_has_is_refused(table: sd.Table) -> None:
    """``sd.join(columns=...)`` reads from each table the columns it has: a name neither
    has is a typo, refused as ``query(columns=...)`` refuses it (it was left out)."""
    with pytest.raises(QueryError, match=r"join of tables events and events: neither has "
                                         r"column 'vaule'.*'value'"):
        sd.join(table, table, on=["key", "n"], columns=["vaule"])
