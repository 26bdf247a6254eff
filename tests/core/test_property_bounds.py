"""Property values that made every later write fail, refused when they are set (issue 34,
item 4): a row-group size past what the key filter's header packs (``struct.error``), a
compression level past a C int (``OverflowError``) or past gzip's 9 (a "storage" error),
and an iterator list nested deeper than Python's recursion limit (``RecursionError``).

Every refusal is a PropertyError naming the table (or store) and the property, and leaves the
table as it was; values at the bounds work.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli import app
from sediment.errors import PropertyError
from sediment.files.keyfilter import FilterLayout
from sediment.properties import PROPERTIES

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())])
ROWS = pa.table({"key": ["a", "b", "c"], "v": [1, 2, 3]})
MAX_GROUP = int(PROPERTIES["parquet.row_group_rows"].maximum or 0)
DEEP = "[" * 100_000 + "]" * 100_000
DEEP_IN_A_CONFIG = json.dumps([{"type": "age_off", "field": "v", "ttl_seconds": 5}])[:-2] + \
    ', "x": ' + "[" * 5000 + "]" * 5000 + "}]"

BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"parquet.row_group_rows": 2**32}, "parquet.row_group_rows", f"is above {MAX_GROUP}"),
    ({"parquet.row_group_rows": MAX_GROUP + 1}, "parquet.row_group_rows", "is above"),
    ({"parquet.compression_level": 2**31}, "parquet.compression_level", "is above 22"),
    ({"parquet.compression_level": 23}, "parquet.compression_level", "is above 22"),
    ({"parquet.compression": "gzip", "parquet.compression_level": 10},
     "parquet.compression_level", "above gzip's maximum 9"),
    ({"query.iterators": DEEP}, "query.iterators", "nested too deeply"),
    ({"compaction.iterators": DEEP_IN_A_CONFIG}, "compaction.iterators",
     "nested too deeply"),
]
IDS = ["rows 2^32", "rows past the cap", "level 2^31", "level 23", "gzip level 10",
       "deep list", "deep config value"]


def _assert_names(e: pytest.ExceptionInfo[PropertyError], where: str, prop: str,
                  message: str) -> None:
    text = str(e.value)
    assert where in text and prop in text and message in text, text


@pytest.mark.parametrize("props,prop,message", BAD, ids=IDS)
def test_refused_when_set_on_a_table(tmp_path: Path, props: dict[str, Any], prop: str,
                                     message: str) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    with pytest.raises(PropertyError) as e:
        store.create_table("fresh", SCHEMA, properties=props)
    _assert_names(e, "table fresh", prop, message)
    assert store.tables() == []

    table = store.create_table("events", SCHEMA)
    table.ingest(ROWS)
    version = table.version
    with pytest.raises(PropertyError) as e:
        table.set_properties(props)
    _assert_names(e, "table events", prop, message)
    assert table.version == version
    table.ingest(ROWS)  # writes go on as before
    assert table.query().num_rows == 6


@pytest.mark.parametrize("props,prop,message", BAD, ids=IDS)
def test_refused_as_a_store_default(tmp_path: Path, props: dict[str, Any], prop: str,
                                    message: str) -> None:
    with pytest.raises(PropertyError) as e:
        sd.Store.open(str(tmp_path / "s"), create=True, properties=props)
    _assert_names(e, "store", prop, message)
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())
    store = sd.Store.open(str(tmp_path / "t"), create=True)
    with pytest.raises(PropertyError):
        sd.Store.open(str(tmp_path / "t"), properties=props)
    assert store.properties == sd.Store.open(str(tmp_path / "t")).properties


def test_gzip_level_is_checked_against_the_codec_either_way(tmp_path: Path) -> None:
    """A level fine for zstd and then the codec switched to gzip, or the other way round,
    is refused; putting both right in one change is taken."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("events", SCHEMA, properties={"parquet.compression_level": 15})
    with pytest.raises(PropertyError, match="table events.*above gzip's maximum 9"):
        table.set_properties({"parquet.compression": "gzip"})
    table.set_properties({"parquet.compression": "gzip", "parquet.compression_level": 9})
    with pytest.raises(PropertyError, match="above gzip's maximum 9"):
        table.set_properties({"parquet.compression_level": 12})
    table.set_properties({"parquet.compression": "zstd", "parquet.compression_level": 12})
    with pytest.raises(PropertyError, match="above gzip's maximum 9"):
        table.set_properties({"parquet.compression": "gzip"})
    table.set_properties({"parquet.compression": "gzip"}, remove=["parquet.compression_level"])
    # a store's default level meets the table's codec
    zstd = sd.Store.open(str(tmp_path / "z"), create=True,
                         properties={"parquet.compression_level": 15})
    with pytest.raises(PropertyError, match="table gz.*above gzip's maximum 9"):
        zstd.create_table("gz", SCHEMA, properties={"parquet.compression": "gzip"})
    table.ingest(ROWS)
    assert table.query().num_rows == 3


def test_values_at_the_bounds_work(tmp_path: Path) -> None:
    """The largest row group (its key-filter header packs even at 64 bits per key) and the
    largest zstd and gzip levels write and read back."""
    assert FilterLayout.for_rows(MAX_GROUP, 64).header()
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    for name, props in {"big": {"parquet.row_group_rows": MAX_GROUP},
                        "zstd": {"parquet.compression_level": 22},
                        "gzip": {"parquet.compression": "gzip",
                                 "parquet.compression_level": 9}}.items():
        table = store.create_table(name, SCHEMA, properties=props)
        table.ingest(ROWS)
        assert table.query() == ROWS.cast(SCHEMA.to_arrow())
    gzip = store.table("gzip")
    meta = pq.read_metadata(str(tmp_path / "s" / "tables" / gzip.table_id /
                                gzip.files()[0].filename))
    assert meta.row_group(0).column(0).compression == "GZIP"


@pytest.mark.parametrize("prop,value,message", [
    ("parquet.row_group_rows", str(2**32), "is above"),
    ("query.iterators", DEEP, "nested too deeply"),
])
def test_cli_refuses_with_one_error_line(tmp_path: Path, prop: str, value: str,
                                         message: str) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    store.create_table("events", SCHEMA)
    result = CliRunner().invoke(app, ["set-properties", "--store", str(tmp_path / "s"), "events",
                       f"{prop}={value}"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: ") and message in result.output, result.output
    assert "internal error" not in result.output
