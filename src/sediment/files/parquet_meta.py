"""Parquet's metadata structs as :mod:`sediment.files.thrift_compact` decodes them: the field
ids used here (apache/parquet-format ``src/main/thrift/parquet.thrift``), checked access to a
decoded struct's fields, and the pieces of a column chunk's metadata a one-page file reuses
(``sediment.files.pages``)."""

from __future__ import annotations

from typing import Any, NamedTuple

from sediment.files import thrift_compact as tc
from sediment.files.thrift_compact import I32, LIST, Struct, ThriftError

MAGIC = b"PAR1"

# field ids: FileMetaData, SchemaElement, RowGroup, ColumnChunk, ColumnMetaData, OffsetIndex,
# PageLocation, ColumnIndex
FMD_VERSION, FMD_SCHEMA, FMD_ROWS, FMD_GROUPS, FMD_KV, FMD_BY, FMD_ORDERS, FMD_CRYPT = \
    range(1, 9)
SE_TYPE, SE_REPETITION, SE_NAME, SE_CHILDREN = 1, 3, 4, 5
REPEATED = 2
RG_COLUMNS, RG_BYTES, RG_ROWS = 1, 2, 3
(CC_PATH, CC_FILE_OFFSET, CC_META, CC_OI_OFF, CC_OI_LEN, CC_CI_OFF, CC_CI_LEN,
 CC_CRYPT) = range(1, 9)
CM_TYPE, CM_ENCODINGS, CM_PATH, CM_CODEC, CM_VALUES, CM_USIZE, CM_CSIZE = range(1, 8)
CM_DATA, CM_DICT, CM_ENCODING_STATS = 9, 11, 13
CM_KEPT = (CM_TYPE, CM_ENCODINGS, CM_PATH, CM_CODEC)
CM_TEMPLATE = (*CM_KEPT, CM_ENCODING_STATS)
"""ColumnMetaData fields a one-page file keeps (with the encoding stats); statistics, bloom
filter, size statistics and the page index describe the whole chunk and are dropped."""
OI_PAGES = 1
PL_OFFSET, PL_SIZE, PL_FIRST = 1, 2, 3
CI_NULL_PAGES, CI_MINS, CI_MAXS, CI_ORDER = 1, 2, 3, 4
ASCENDING = 1
ARROW_SCHEMA = b"ARROW:schema"


def get_field(s: Struct, fid: int, t: int, default: Any = ThriftError) -> Any:
    """Field ``fid`` of a decoded struct, checked to be of type ``t``; ``default`` when absent
    (a missing required field is damage)."""
    got = s.get(fid)
    if got is None:
        if default is ThriftError:
            raise ThriftError(f"field {fid} is missing")
        return default
    if got[0] != t:
        raise ThriftError(f"field {fid} has type {got[0]} where {t} is expected")
    return got[1]


def struct_list(s: Struct, fid: int) -> list[Struct]:
    """Field ``fid`` of a decoded struct, checked to be a list of structs."""
    items = get_field(s, fid, LIST).items
    if items and not isinstance(items[0], dict):
        raise ThriftError(f"field {fid} is not a list of structs")
    return items


class Template(NamedTuple):
    """The constant pieces of a chunk's ColumnMetaData in a one-page file: fields 1-4 (type,
    encodings, path, codec), then its encoding stats as they follow field 9 or 11 (empty
    when it has none)."""

    head: bytes
    after_data: bytes
    after_dictionary: bytes


def template(meta: Struct) -> Template:
    """The pieces of a chunk's ColumnMetaData ``meta`` a one-page file keeps."""
    head: Struct = {}
    for k in CM_KEPT:
        get_field(meta, k, LIST if k in (CM_ENCODINGS, CM_PATH) else I32)
        head[k] = meta[k]
    if CM_ENCODING_STATS not in meta:
        return Template(tc.encode_fields(head), b"", b"")
    stats = tc.encode_fields({CM_ENCODING_STATS: meta[CM_ENCODING_STATS]}, after=CM_DATA)
    # after field 11 rather than 9, only its header's delta differs
    after_dictionary = bytes([(CM_ENCODING_STATS - CM_DICT) << 4 | stats[0] & 0x0F])
    return Template(tc.encode_fields(head), stats, after_dictionary + stats[1:])
