"""Seals of JSON metadata and reads that check them (sediment.storage.checksums).

The reference for a seal is computed here independently: ``zlib.crc32`` of every byte before
the trailer, against the hex digits the trailer holds. Faults are exact: a memory store whose
first GETs of a key return a byte flipped, and one whose bytes are damaged for good.
"""

from __future__ import annotations

import json
import pickle
import zlib

import pytest

import sediment as sd
from sediment.errors import CorruptDataError, CorruptionError, CorruptMetadataError, DataError
from sediment.storage.checksums import (
    TRAILER_BYTES,
    ChecksumMismatch,
    crc32,
    get_verified,
    seal_json,
    unseal_json,
)
from sediment.storage.memory import MemoryObjectStore

DOC = {"format": 1, "name": "ünïcode", "n": 1.5, "list": [1, 2, {"x": None}], "e": {}}


class FlippingStore(MemoryObjectStore):
    """A memory store whose next ``flips`` GETs return the object with one byte flipped."""

    def __init__(self, name: str, flips: int, at: int = 3) -> None:
        super().__init__(name)
        self.flips = flips
        self.at = at
        self.gets = 0

    def get(self, key: str) -> bytes:
        self.gets += 1
        data = super().get(key)
        if self.flips:
            self.flips -= 1
            data = bytearray(data)
            data[self.at] ^= 0x01
            data = bytes(data)
        return data


@pytest.mark.parametrize("dumps_kw", [{"separators": (",", ":")}, {},
                                      {"indent": 1, "sort_keys": True}])
def test_a_seal_is_valid_json_with_the_crc_of_the_bytes_before_it(dumps_kw: dict) -> None:
    body = json.dumps(DOC, **dumps_kw).encode()
    sealed = seal_json(body)
    assert json.loads(sealed) == {**DOC, "crc32": sealed[-10:-2].decode()}
    assert sealed[:-TRAILER_BYTES] == body[:-1]
    assert int(sealed[-10:-2], 16) == zlib.crc32(body[:-1])
    assert crc32(body[:-1]) == zlib.crc32(body[:-1])
    assert crc32(body[5:], crc32(body[:5])) == zlib.crc32(body)
    assert unseal_json(sealed) is True


def test_only_json_objects_with_a_field_are_sealed() -> None:
    for bad in (b"{}", b"[1]", b'"x"', b"{\n}"):
        with pytest.raises(ValueError):
            seal_json(bad)


def test_objects_without_a_seal_read_unchecked() -> None:
    for legacy in (b'{"a":1}', json.dumps(DOC, indent=1).encode(), b"commit", b""):
        assert unseal_json(legacy) is None


def test_every_flipped_byte_of_a_sealed_object_is_a_mismatch() -> None:
    sealed = seal_json(json.dumps(DOC, separators=(",", ":")).encode())
    for i in range(len(sealed)):
        for bit in (0x01, 0x20, 0x80):
            damaged = bytearray(sealed)
            damaged[i] ^= bit
            with pytest.raises(ChecksumMismatch):
                unseal_json(bytes(damaged))


def test_a_mismatch_is_a_corruption_error_and_not_bad_input() -> None:
    assert issubclass(ChecksumMismatch, CorruptionError)
    assert issubclass(CorruptMetadataError, CorruptionError)
    assert issubclass(CorruptDataError, CorruptionError)
    for cls in (CorruptionError, CorruptMetadataError, CorruptDataError):
        assert not issubclass(cls, DataError)
        assert getattr(sd, cls.__name__) is cls


def test_get_verified_reads_again_after_a_transient_flip() -> None:
    objects = FlippingStore("transient-flip", flips=2)
    sealed = seal_json(b'{"a":1}')
    objects.put("k.json", sealed)
    assert get_verified(objects, "k.json", lambda d: (unseal_json(d), d)[1],
                        error_cls=CorruptMetadataError, where="thing") == sealed
    assert objects.gets == 3


def test_get_verified_raises_the_callers_error_naming_the_object_when_damage_persists() -> None:
    objects = FlippingStore("lasting-flip", flips=100)
    objects.put("dir/k.json", seal_json(b'{"a":1}'))
    with pytest.raises(CorruptMetadataError, match=r"tag x of table t \(dir/k.json\): checksum "
                                                   r"mismatch after 3 reads"):
        get_verified(objects, "dir/k.json", unseal_json, error_cls=CorruptMetadataError,
                     where="tag x of table t")
    assert objects.gets == 3


def test_get_verified_raises_corrupt_data_error_naming_the_table_and_the_file() -> None:
    objects = FlippingStore("lasting-data-flip", flips=100)
    objects.put("data/f.parquet", b"PAR1 bytes")

    def check(data: bytes) -> bytes:
        if zlib.crc32(data) != zlib.crc32(b"PAR1 bytes"):
            raise ChecksumMismatch("whole-file CRC differs")
        return data

    with pytest.raises(CorruptDataError) as caught:
        get_verified(objects, "data/f.parquet", check, error_cls=CorruptDataError,
                     where="data file data/f.parquet of table events", attempts=2,
                     table="events")
    assert (caught.value.table, caught.value.key) == ("events", "data/f.parquet")
    assert "table events" in str(caught.value) and "data/f.parquet" in str(caught.value)
    assert objects.gets == 2
    again = pickle.loads(pickle.dumps(caught.value))
    assert (type(again), str(again), again.table, again.key) == \
        (CorruptDataError, str(caught.value), "events", "data/f.parquet")
    objects.flips = 0
    assert get_verified(objects, "data/f.parquet", check, error_cls=CorruptDataError,
                        where="data file") == b"PAR1 bytes"
