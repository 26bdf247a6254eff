"""Parquet files encoded in parts and joined (sediment.files.stitch, sediment.files.parts):
held to pyarrow's own single-writer output, byte for byte."""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sediment.errors import PropertyError
from sediment.files.parts import ENCODE_THREADS_ENV, PartEncoder, encode
from sediment.files.sequence import SEQ_FIELD
from sediment.files.stitch import Stitcher, StitchError, stitch
from sediment.files.writer import SortedFileWriter, writer_options
from sediment.properties import defaults
from sediment.schema import Schema
from sediment.storage import LocalObjectStore
from sediment.workload import benchmark_schema
from support import workload

ROWS = 4096


def _sorted(rows: int) -> pa.Table:
    data = workload.generate(rows, chunk_rows=7_000)
    order = pc.sort_indices(data, [("key", "ascending"), ("timestamp", "ascending")])
    return data.take(order)


def _one_writer(table: pa.Table, options: dict[str, Any]) -> bytes:
    """The reference: pyarrow's writer, the whole table in one call."""
    out = pa.BufferOutputStream()
    with pq.ParquetWriter(out, table.schema, **options) as w:
        w.write_table(table, row_group_size=ROWS)
    return out.getvalue().to_pybytes()


def _nested() -> tuple[Schema, pa.Table]:
    schema = Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                    values=[("tags", pa.list_(pa.string())),
                            ("point", pa.struct([("x", pa.float64()), ("y", pa.int32())])),
                            ("note", pa.string())])
    n = 3 * ROWS + 123
    keys = pa.array([f"k{i:07d}" for i in range(n)])
    table = pa.table({
        "key": keys, "ts": pa.array(range(n), pa.int64()),
        "tags": pa.array([None if i % 7 == 0 else [f"t{i % 5}"] * (i % 3) for i in range(n)]),
        "point": pa.array([None if i % 11 == 0 else {"x": i / 3, "y": i} for i in range(n)],
                          pa.struct([("x", pa.float64()), ("y", pa.int32())])),
        "note": pa.array([None if i % 2 else f"n{i % 13}" for i in range(n)]),
    }, schema=schema.to_arrow(field_ids=True))
    return schema, table


CASES = {
    "defaults": ({}, False),
    "blooms and dictionaries": ({"parquet.bloom_columns": "value,nullable_value",
                                 "parquet.dictionary_columns": "nullable_value"}, False),
    "no page rows, snappy": ({"parquet.page_rows": 0, "parquet.compression": "snappy"}, False),
    "nested values": ({"parquet.bloom_columns": "note"}, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_joined_parts_are_the_single_writers_file(case: str) -> None:
    props, nested = CASES[case]
    if nested:
        schema, table = _nested()
    else:
        schema = benchmark_schema()
        table = _sorted(5 * ROWS + 1_000).cast(schema.to_arrow(field_ids=True))
    options = writer_options(schema, {**defaults(), **props})
    whole = _one_writer(table, options)
    n = table.num_rows
    for cuts in ([ROWS], [ROWS, 3 * ROWS], [2 * ROWS], [ROWS * (n // ROWS)]):
        bounds = [0, *(c for c in cuts if c < n), n]
        parts = [encode(table.slice(a, b - a), table.schema, options, ROWS).to_pybytes()
                 for a, b in itertools.pairwise(bounds)]
        assert stitch(parts) == whole, f"{case}: cut at {cuts}"


def test_the_sequence_column_of_compaction_output_joins_too() -> None:
    schema = benchmark_schema()
    table = _sorted(3 * ROWS + 5).cast(schema.to_arrow(field_ids=True))
    table = table.append_column(SEQ_FIELD, pa.array([i // 1000 for i in range(len(table))],
                                                    pa.int64()))
    options = writer_options(schema, defaults())
    options["use_dictionary"] = [SEQ_FIELD.name]
    whole = _one_writer(table, options)
    written: list[Any] = []
    # told of fewer rows than it gets: a part per row group, several from one call
    parts = PartEncoder(table.schema, options, ROWS, lambda b: written.append(bytes(b)),
                        rows=ROWS)
    parts.add(table.slice(0, 3 * ROWS))
    parts.add(table.slice(3 * ROWS))
    marked: list[int] = []
    parts.finish(lambda: marked.append(len(written)))
    assert b"".join(written) == whole
    # the mark comes before the tail (page indexes, footer): the footer is whole after it
    assert marked and whole.endswith(b"".join(written[marked[0]:]))


def test_a_writer_of_no_rows_writes_an_empty_file() -> None:
    schema = benchmark_schema().to_arrow(field_ids=True)
    written: list[bytes] = []
    parts = PartEncoder(schema, writer_options(benchmark_schema(), defaults()), ROWS,
                        lambda b: written.append(bytes(b)), rows=0)
    parts.finish(lambda: None)
    data = b"".join(written)
    read = pq.read_table(pa.BufferReader(data))
    assert read.num_rows == 0 and read.schema.names == schema.names


def test_what_is_not_parquet_is_refused() -> None:
    with pytest.raises(StitchError):
        Stitcher().add(b"not a parquet file")
    with pytest.raises(StitchError):
        Stitcher().finish()


@pytest.mark.parametrize("rows_hint", [None, 6 * ROWS + 77])
def test_the_sorted_writer_writes_what_one_parquet_writer_would(
        tmp_path: Any, rows_hint: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows given in pieces of every size (as a merge yields them): the file holds them in
    order, row groups as before, read back equal, and its bytes are the single writer's,
    whether encoded in parts on threads (a small file: ``rows_hint``) or streamed."""
    monkeypatch.setenv(ENCODE_THREADS_ENV, "2")
    schema = benchmark_schema()
    table = _sorted(6 * ROWS + 77).cast(schema.to_arrow(field_ids=True))
    objects = LocalObjectStore(tmp_path)
    writer = SortedFileWriter(objects, "data/p/a.parquet", schema, defaults(),
                              rows_hint=rows_hint)
    assert isinstance(writer._parts, PartEncoder) == (rows_hint is not None)
    start = 0
    for size in itertools.cycle([1, 999, 4096, 5000, 3]):
        if start >= table.num_rows:
            break
        writer.write(table.slice(start, size))
        start += size
    written = writer.close()
    data = (tmp_path / "data/p/a.parquet").read_bytes()
    assert written.rows == table.num_rows and written.bytes == len(data)
    md = pq.ParquetFile(pa.BufferReader(data)).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [ROWS] * 6 + [77]
    assert pq.read_table(pa.BufferReader(data)).equals(table)
    assert data == _one_writer(table.combine_chunks(), writer_options(schema, defaults()))


def test_editing_footer_bytes_matches_decoding_and_encoding_them() -> None:
    """thrift_edit's walk over a real footer against thrift_compact's decode, change and
    encode (the independent reference): an empty plan gives the bytes back, and an edit of
    every chunk's data page offset gives what the decoded route gives."""
    from sediment.files import thrift_compact as tc
    from sediment.files import thrift_edit as te
    from sediment.files.parquet_meta import CC_META, CM_DATA, FMD_GROUPS, RG_COLUMNS

    schema = benchmark_schema()
    options = writer_options(schema, {**defaults(), "parquet.bloom_columns": "value"})
    data = encode(_sorted(3 * ROWS).cast(schema.to_arrow(field_ids=True)),
                  schema.to_arrow(field_ids=True), options, ROWS).to_pybytes()
    n = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - n:-8]
    assert te.edit(footer, {}) == footer
    assert te.skip(footer, 0, tc.STRUCT) == len(footer)
    seen: list[int] = []
    edited = te.edit(footer, {FMD_GROUPS: {RG_COLUMNS: {
        te.START: lambda: seen.append(1),
        CC_META: {CM_DATA: lambda v: v + 1_000_000}}}})
    meta = tc.decode(footer)
    for g in meta[FMD_GROUPS][1].items:
        for c in g[RG_COLUMNS][1].items:
            t, v = c[CC_META][1][CM_DATA]
            c[CC_META][1][CM_DATA] = (t, v + 1_000_000)
    assert edited == tc.encode(meta)
    assert len(seen) == 3 * len(schema.to_arrow())


@pytest.mark.parametrize("threads", ["", "1", "2", "3"])
def test_only_a_small_file_of_several_row_groups_is_encoded_in_parts(
        threads: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """In parts only when ``$SEDIMENT_ENCODE_THREADS`` asks for more than one thread (off by
    default), and then one part per thread."""
    from sediment.files.parts import PARALLEL_MAX_ROWS, StreamEncoder, encoder_for

    monkeypatch.setenv(ENCODE_THREADS_ENV, threads)
    schema = benchmark_schema().to_arrow(field_ids=True)
    options = writer_options(benchmark_schema(), defaults())
    hints = (None, 10, ROWS, ROWS + 1, 13 * ROWS, PARALLEL_MAX_ROWS, PARALLEL_MAX_ROWS + 1)
    made = {h: encoder_for(schema, options, ROWS, pa.BufferOutputStream(), h) for h in hints}
    on = threads not in ("", "1")
    assert {h: type(e) for h, e in made.items()} == {
        None: StreamEncoder, 10: StreamEncoder, ROWS: StreamEncoder,
        ROWS + 1: PartEncoder if on else StreamEncoder,
        13 * ROWS: PartEncoder if on else StreamEncoder,
        PARALLEL_MAX_ROWS: PartEncoder if on else StreamEncoder,
        PARALLEL_MAX_ROWS + 1: StreamEncoder}
    part = made[13 * ROWS]
    if isinstance(part, PartEncoder):
        assert part.part_rows == ROWS * -(-13 // int(threads))


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5"])
def test_encode_threads_not_a_whole_number_above_zero_fail_the_ingest(
        bad: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import sediment as sd

    table = sd.Store.open(str(tmp_path), create=True).create_table("t", benchmark_schema())
    monkeypatch.setenv(ENCODE_THREADS_ENV, bad)
    with pytest.raises(PropertyError,
                       match=rf"\$SEDIMENT_ENCODE_THREADS must be a whole number of threads "
                             rf">= 1, not '{bad}'"):
        table.ingest(workload.generate(10))
    assert table.version == 1 and table.files() == []
