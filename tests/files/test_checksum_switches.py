"""The checksum benchmark's two switches (``storage.checksums.VERIFY_READS`` and ``WRITE_SUMS``):
off, they turn off every check and every sum they name, read when each check runs, so the
benchmark's unchecked runs time the same reads and writes without them; on (the default,
restored here after each test), everything is checked again at once.

Each check is shown off against damage it finds when on: a flipped data-page byte (the
flipped value is then the answer: nothing checked it), a footer, file and sample that differ
from their sums, a key filter's header and block failing their CRCs, an undecodable file
(``decode_all``), a snapshot object failing its digest and a damaged metadata seal.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sediment as sd
from sediment.compaction.sources import verify_local
from sediment.core.model import FileSums
from sediment.errors import CorruptDataError
from sediment.files.keyfilter import FilterLayout
from sediment.files.samples_io import decode_sample
from sediment.files.verified import VERIFY, decode_all, footer_problem, whole_problem
from sediment.state.documents import open_sealed, sealed
from sediment.state.log import log_key
from sediment.state.snapshot import OBJECT_PREFIX, _get_object
from sediment.storage import checksums
from sediment.storage.memory import MemoryObjectStore

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string())])
PROPS = {"state.cache.refresh_seconds": 0, "parquet.compression": "none",
         "parquet.row_group_rows": 256}
N = 1000


def _rows() -> pa.Table:
    return pa.table({"key": [f"k{i:05d}" for i in range(N)], "ts": list(range(N)),
                     "value": [f"v-{i:06d}" for i in range(N)]}, schema=SCHEMA.to_arrow())


def _table(tmp_path: Path) -> sd.Table:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties=PROPS)
    table.ingest(_rows())
    return table


def _flip_value(table: sd.Table) -> Path:
    """``v-000700`` becomes ``v-000701`` in the data file's bytes (uncompressed pages)."""
    (ref,) = table.files()
    path = Path(table._handle.objects.local_path(ref.filename) or "")
    raw = bytearray(path.read_bytes())
    raw[raw.index(b"v-000700") + 7] ^= 0x01
    path.write_bytes(bytes(raw))
    return path


def _value(tmp_path: Path, key: str) -> list[str]:
    fresh = sd.Store.open(str(tmp_path / "s")).table("t")  # no footer cached
    return fresh.query(keys=[key]).column("value").to_pylist()


def test_unchecked_reads_return_what_is_stored_and_checks_resume_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path)
    (ref,) = table.files()
    assert table.state().file_sums(ref.filename) is not None  # the footer is checked too
    _flip_value(table)
    with pytest.raises(CorruptDataError):
        _value(tmp_path, "k00700")
    monkeypatch.setattr(checksums, "VERIFY_READS", False)
    assert dict(VERIFY) == {"page_checksum_verification": False}
    assert _value(tmp_path, "k00700") == ["v-000701"]  # nothing checked the page
    monkeypatch.setattr(checksums, "VERIFY_READS", True)
    assert dict(VERIFY) == {"page_checksum_verification": True}
    with pytest.raises(CorruptDataError):
        _value(tmp_path, "k00700")


def test_every_read_side_check_follows_the_switch(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sample = pa.BufferOutputStream()
    pq.write_table(pa.table({"key": ["a", "b"]}), sample, write_page_checksum=True)
    raw_sample = sample.getvalue().to_pybytes()
    local = tmp_path / "f.parquet"
    pq.write_table(_rows(), local)
    size = local.stat().st_size
    tail = local.read_bytes()
    wrong = FileSums(size, 1, 2, zlib.crc32(raw_sample) ^ 1)  # footer, file and sample wrong
    layout = FilterLayout.for_rows(256, 10)
    header = bytearray(layout.header())
    header[-1] ^= 0x01
    block = bytearray(layout.build(np.arange(3, dtype=np.uint64)))
    block[0] ^= 0x01
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
    objects = MemoryObjectStore("switches")
    key = f"{OBJECT_PREFIX}{'0' * 64}.json"
    objects.put(key, b"{}")
    seal = sealed({"a": 1})
    damaged_seal = seal[:-3] + bytes([seal[-3] ^ 0x01]) + seal[-2:]

    def checks() -> list[object]:
        """Each check's verdict: an error's class name, else what it returned."""
        out: list[object] = []
        for check in (
                lambda: footer_problem(tail, size, wrong),
                lambda: whole_problem(size, 0, wrong),
                lambda: decode_sample(raw_sample, wrong).num_rows,
                lambda: FilterLayout.parse(bytes(header), "h").block_bytes,
                lambda: len(layout.block(bytes(block[:layout.stride]), "b")),
                lambda: decode_all(str(garbage)),
                lambda: verify_local(str(local), "f", wrong, "t", "here"),
                lambda: _get_object(objects, key, "snapshot"),
                lambda: open_sealed(damaged_seal, "doc")):
            try:
                out.append(check())
            except Exception as e:
                out.append(type(e).__name__)
        return out

    on = checks()
    assert all(isinstance(v, str) for v in on[:2]), on  # the problems found
    assert on[2:] == ["CorruptionError", "CorruptDataError", "CorruptDataError",
                      on[5], "CorruptDataError", "CorruptMetadataError",
                      "MetadataChecksumMismatch"], on
    assert on[5] in ("ArrowInvalid", "OSError"), on
    monkeypatch.setattr(checksums, "VERIFY_READS", False)
    assert checks() == [None, None, 2, layout.block_bytes, layout.block_bytes, None, None,
                        b"{}", {"a": 1}]
    monkeypatch.setattr(checksums, "VERIFY_READS", True)
    assert checks() == on


def test_unsummed_writes_are_plain_files_read_as_old_ones(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(checksums, "WRITE_SUMS", False)
    table = _table(tmp_path)
    (ref,) = table.files()
    assert table.state().file_sums(ref.filename) is None
    log = table._handle.states.objects.get(log_key(table.state().version))
    assert json.loads(log)["kind"] == "add_files"
    assert "checksums" not in json.loads(log)["transaction"]
    monkeypatch.setattr(checksums, "WRITE_SUMS", True)
    # no page CRCs: a flipped value passes verification (as in a file written before them)
    path = _flip_value(table)
    assert pq.read_table(path, page_checksum_verification=True).column("value")[700].as_py() \
        == "v-000701"
    assert _value(tmp_path, "k00700") == ["v-000701"]
