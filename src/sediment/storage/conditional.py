"""Conditional creation whose outcome is always learned, never guessed.

``put_if_absent`` answers False both when another writer holds the key and when this writer's
own earlier try landed but its response was lost (a dropped connection after the write: the
client's retry then finds the key taken). :func:`create_once` tells the two apart by reading
the object back: callers give bytes that only they could have written (a random id inside), so
equal bytes mean the object is theirs. A put that gets no answer at all is followed by the same
read, and an empty key by the same put again: the bytes are identical, so a late duplicate of
the first put can never create a second, different object.
"""

from __future__ import annotations

import random
import time

from sediment.errors import ObjectNotFoundError, StorageError, WriteOutcomeUnknownError
from sediment.storage.base import ObjectStore

ATTEMPTS = 8
"""Puts and reads spent on one key before its outcome is declared unknown (about 20 s of
backoff in all, beyond the client's own retries)."""


def create_once(objects: ObjectStore, key: str, data: bytes, *,
                attempts: int | None = None) -> bool:
    """Create ``key`` holding ``data`` unless it exists. True when the object now holds exactly
    ``data`` (written by this call, or by an earlier try of it whose answer was lost), False
    when it holds anything else. Raises WriteOutcomeUnknownError when the store never answers
    well enough to tell."""
    error: Exception | None = None
    for attempt in range(ATTEMPTS if attempts is None else attempts):
        if attempt:
            time.sleep(min(4.0, 0.05 * 2 ** attempt) * random.uniform(0.5, 1.5))
        try:
            if objects.put_if_absent(key, data):
                return True
        except StorageError as e:  # no answer: the put may or may not have landed
            error = e
        try:
            held = objects.get(key)
        except ObjectNotFoundError:
            continue  # not there (yet): put the same bytes again
        except StorageError as e:
            error = e
            continue
        return held == data
    raise WriteOutcomeUnknownError(
        f"could not learn whether {key!r} in {objects.uri} was created: {error}")
