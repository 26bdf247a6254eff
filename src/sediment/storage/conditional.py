"""Conditional creation whose outcome is always learned, never guessed.

``put_if_absent`` answers False both when another writer holds the key and when this writer's
own earlier try landed but its response was lost (a dropped connection after the write: the
client's retry then finds the key taken). :func:`create_once` tells the two apart by reading
the object back: callers give bytes that only they could have written (a random id inside), so
equal bytes mean the object is theirs. A put that gets no answer at all is followed by the same
read, and an empty key by the same put again: the bytes are identical, so a late duplicate of
the first put can never create a second, different object.

A read-back that differs and fails its own checksum is no answer either: a byte changed on the
way must not pass for another writer's object (a committer would then take its own entry for
a lost race and retry at the next version, reporting a failure for a commit that landed), so
the object is read again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from sediment.errors import (
    AccessDeniedError,
    ObjectNotFoundError,
    StorageError,
    WriteOutcomeUnknownError,
    WriteRefusedError,
)
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import TRAILER_BYTES, ChecksumMismatch, unseal_json

ATTEMPTS = 8
"""Puts and reads spent on one key before its outcome is declared unknown (about 20 s of
backoff in all, beyond the client's own retries)."""


def create_once(objects: ObjectStore, key: str, data: bytes, *,
                attempts: int | None = None,
                verify: Callable[[bytes], object] | None = None) -> bool:
    """Create ``key`` holding ``data`` unless it exists. True when the object now holds exactly
    ``data`` (written by this call, or by an earlier try of it whose answer was lost), False
    when it holds anything else. Raises WriteOutcomeUnknownError when the store never answers
    well enough to tell.

    ``verify`` checks a read-back that differs from ``data`` (raising ChecksumMismatch when it
    fails: then it is read again, never taken for another writer's object); by default a
    sealed ``data`` (``checksums.seal_json``) has the read-back's seal checked."""
    if verify is None and len(data) >= TRAILER_BYTES and unseal_json(data):
        verify = unseal_json
    error: Exception | None = None
    for attempt in range(ATTEMPTS if attempts is None else attempts):
        if attempt:
            time.sleep(min(4.0, 0.05 * 2 ** attempt) * random.uniform(0.5, 1.5))
        try:
            if objects.put_if_absent(key, data):
                return True
        except (AccessDeniedError, WriteRefusedError):
            if error is None:  # refused, and no earlier try of ours can have landed
                raise
            # an earlier try's answer was lost: the read-back below tells
        except StorageError as e:  # no answer: the put may or may not have landed
            error = e
        try:
            held = objects.get(key)
        except ObjectNotFoundError:
            continue  # not there (yet): put the same bytes again
        except (StorageError, ChecksumMismatch) as e:  # no read-back, or a damaged one
            error = e
            continue
        if held != data and verify is not None:
            try:
                verify(held)
            except ChecksumMismatch as e:  # damaged on the way: not an answer
                error = e
                continue
        return held == data
    raise WriteOutcomeUnknownError(
        f"could not learn whether {key!r} in {objects.uri} was created: {error}")
