"""A data file with a damaged page behind a real ``sediment serve``: the client gets one clear
CorruptDataError naming the table and the file, and the server keeps serving (issue 38)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from serve_helpers import SCHEMA, rows

import sediment as sd
import sediment.files.writer as writer_module
from sediment.errors import CorruptDataError

KEYS = [f"k{i:05d}" for i in range(2000)]


def test_damaged_page_is_one_clear_error_and_the_server_keeps_serving(
        tmp_path: Path, start_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = writer_module.writer_options  # page CRCs, as the writer writes them with sums
    monkeypatch.setattr(writer_module, "writer_options",
                        lambda *a, **k: {**plain(*a, **k), "write_page_checksum": True})
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    props = {"parquet.compression": "none", "parquet.row_group_rows": 256}
    bad = store.create_table("bad", SCHEMA, properties=props)
    bad.ingest(rows(KEYS))
    good = store.create_table("good", SCHEMA, properties=props)
    good.ingest(rows(KEYS[:10]))
    (ref,) = bad.files()
    path = Path(bad._handle.objects.local_path(ref.filename) or "")
    raw = bytearray(path.read_bytes())
    raw[raw.index(b"n1003") + 4] ^= 0x02  # a note value's last digit (not a bound)
    path.write_bytes(bytes(raw))
    server = start_server(store.uri)
    with server.connect() as client:
        for _ in range(2):  # the same answer each time: the server did not fall over
            with pytest.raises(CorruptDataError) as err:
                client.table("bad").query()
            text = str(err.value)
            assert "table bad" in text and ref.filename in text, text
            got = client.table("good").query()
            assert got.num_rows == 10
            assert client.table("bad").query(keys=["k01999"]).column("value").to_pylist() \
                == [1999]
    assert server.proc.poll() is None
    assert isinstance(got, pa.Table)
