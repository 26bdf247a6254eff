"""Reading data-file samples from a store, with a small cache (samples are immutable)."""

from __future__ import annotations

import io
import threading
from collections import OrderedDict

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.errors import CorruptMetadataError, ObjectNotFoundError
from sediment.files.sidecars import SAMPLE, read_sidecar, sidecar_name
from sediment.storage.base import ObjectStore


class SampleReader:
    """Loads data files' samples (``_<stem>.sample``, or the legacy ``<stem>.sample.parquet``:
see sediment.files.sidecars), keeping the most recent ``capacity``."""

    def __init__(self, objects: ObjectStore, capacity: int = 4096) -> None:
        self.objects = objects
        self.capacity = capacity
        self._cache: OrderedDict[str, pa.Table] = OrderedDict()
        self._lock = threading.Lock()

    def sample(self, filename: str) -> pa.Table:
        with self._lock:
            t = self._cache.get(filename)
            if t is not None:
                self._cache.move_to_end(filename)
                return t
        key = sidecar_name(filename, SAMPLE)
        try:
            key, raw = read_sidecar(self.objects, filename, SAMPLE)
            t = pq.read_table(io.BytesIO(raw))
        except ObjectNotFoundError:
            raise CorruptMetadataError(f"sample {key} of data file {filename} is missing "
                                       f"from {self.objects.uri}") from None
        except (pa.ArrowException, OSError) as e:
            raise CorruptMetadataError(f"sample {key} in {self.objects.uri} is corrupt: {e}"
                                       ) from e
        with self._lock:
            self._cache[filename] = t
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return t
