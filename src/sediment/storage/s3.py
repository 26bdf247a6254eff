"""S3 (and S3-compatible) object store over boto3, with ``If-None-Match: *`` for put-if-absent."""

from __future__ import annotations

import builtins
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow.fs as pafs
from botocore.exceptions import BotoCoreError, ClientError, FlexibleChecksumError

from sediment.errors import AccessDeniedError, ObjectNotFoundError, PropertyError, StorageError
from sediment.storage.base import ObjectInfo, ObjectStore
from sediment.storage.checksums import ChecksumMismatch
from sediment.storage.streams import CopyResult, MultipartUpload, ObjectWriter

_S3_ERRORS = (ClientError, BotoCoreError)
"""What a failed S3 request raises: the service's answer, or botocore's own failure (no
connection, no credentials, a broken response stream). Anything else is a bug, not storage."""
_NOT_FOUND = ("NoSuchKey", "404", "NotFound")
_DENIED = ("AccessDenied", "403", "Forbidden")
CHECKSUM_READS = 3
"""Whole GETs of an object whose body fails the checksum S3 sent with it
(``x-amz-checksum-crc32``, checked by botocore) before it counts as damaged: a byte changed on
the way is gone on the next read, so it is read again, as Sediment's own checks do
(``storage.checksums.get_verified``)."""

RETRIES = 5
"""Retries of a failed S3 request (throttling, 5xx, a dropped connection) after its first
try, unless ``$AWS_MAX_ATTEMPTS`` says otherwise."""
MAX_ATTEMPTS_ENV = "AWS_MAX_ATTEMPTS"
"""The AWS SDKs' own setting: tries of one request in all, the first included."""


def request_retries() -> int:
    """Retries of one S3 request after its first try: ``$AWS_MAX_ATTEMPTS`` - 1 when it is
    set (as the AWS SDKs read it; a client configured in code ignores it otherwise), else
    :data:`RETRIES`. PropertyError naming the variable when it is not a whole number >= 1.

    Fewer retries answer sooner when S3 does not: a write whose answer was lost is resolved by
    reading it back (``storage.conditional``), not by the client's retries, which find the
    object taken and back off up to 31 s in all for nothing."""
    raw = os.environ.get(MAX_ATTEMPTS_ENV, "").strip()
    if not raw:
        return RETRIES
    try:
        attempts = int(raw)
    except ValueError:
        attempts = 0
    if attempts < 1:
        raise PropertyError(f"${MAX_ATTEMPTS_ENV} must be a whole number of tries >= 1 "
                            f"(the first included), not {raw!r}")
    return attempts - 1


_LOADER: Any = None
_LOADER_LOCK = threading.Lock()


def _session() -> Any:
    """A fresh boto3 session (its own credentials, resolved as boto3 always does) whose
    botocore data loader is shared by every session of the process. A new session otherwise
    loads and parses S3's service model, its endpoint rules and partitions (some megabytes
    of JSON) again for each client: ~170 ms a store opened on S3, against ~16 ms with the
    loader shared. The loader only reads the files botocore ships (and ``$AWS_DATA_PATH``),
    which do not change while the process runs; it caches what it parsed and holds no
    credentials, sockets or threads, so a forked child can keep it."""
    import boto3
    import botocore.session

    global _LOADER
    core = botocore.session.get_session()
    with _LOADER_LOCK:
        if _LOADER is None:
            _LOADER = core.get_component("data_loader")
        else:
            core.register_component("data_loader", _LOADER)
    return boto3.session.Session(botocore_session=core)


S3_OPTIONS = ("endpoint_url", "region", "access_key_id", "secret_access_key", "session_token")
"""The options an S3 store takes (each defaults to its AWS environment variable)."""


class S3ObjectStore(ObjectStore):
    """Objects under ``s3://bucket/prefix``. Credentials, region and endpoint come from the
    options or the usual AWS environment variables."""

    probe_limit = 1  # one GET finds "nothing new"; otherwise LIST + parallel GETs is fewer trips
    list_page_size = 1000
    """Keys asked for per LIST page (S3 answers at most 1000); the tests lower it to prove
    paging over a few dozen keys instead of a thousand puts."""
    delete_batch_size = 1000
    """Keys per DeleteObjects request (S3's limit is 1000); lowered as ``list_page_size``."""
    copy_limit = 5 * 1024**3
    """Largest object copied by one ``CopyObject`` (S3's limit); larger ones are copied in
    parts (``UploadPartCopy``). The tests lower it, and ``part_size`` and
    ``copy_part_size``, to prove multipart paths on objects of a few MiB."""
    copy_part_size = 512 * 1024**2
    """Bytes per ``UploadPartCopy`` (no memory: S3 moves them; at most 5 GiB)."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 region: str | None = None, access_key_id: str | None = None,
                 secret_access_key: str | None = None,
                 session_token: str | None = None) -> None:
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.uri = f"s3://{bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self.endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or \
            os.environ.get("AWS_ENDPOINT_URL")
        self.region = region or os.environ.get("AWS_REGION") or \
            os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self._creds = {
            "aws_access_key_id": access_key_id or os.environ.get("AWS_ACCESS_KEY_ID"),
            "aws_secret_access_key": secret_access_key or os.environ.get("AWS_SECRET_ACCESS_KEY"),
            "aws_session_token": session_token or os.environ.get("AWS_SESSION_TOKEN"),
        }
        self._client = _session().client(
            "s3", endpoint_url=self.endpoint_url, region_name=self.region,
            # "legacy": the same retries of throttling, 5xx and dropped connections, with no retry
            # quota: standard mode's (500 tokens, 14 a retried error, 1 back a clean answer)
            # empties under a sustained error rate and turns retries off for the client's life
            # (benchmarks/soak.py --chaos: one operation in two then failed at a 35% rate)
            # (botocore's legacy "max_attempts" counts the retries after the first try)
            config=Config(retries={"max_attempts": request_retries(), "mode": "legacy"},
                          max_pool_connections=32),
            aws_access_key_id=self._creds["aws_access_key_id"] or None,
            aws_secret_access_key=self._creds["aws_secret_access_key"] or None,
            aws_session_token=self._creds["aws_session_token"] or None,
        )
        self._fs: pafs.S3FileSystem | None = None

    # ---- helpers ---------------------------------------------------------------------
    @property
    def identity(self) -> str:
        # one bucket name on two endpoints (AWS and a MinIO, two test servers) is two stores
        return f"{self.uri} at {self.endpoint_url or 'the default endpoint'}"

    def _k(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _strip(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

    def _error(self, op: str, key: str, e: ClientError | BotoCoreError) -> StorageError:
        message = f"S3 {op} of {key!r} in {self.uri} failed: {e}"
        if self._code(e) in _DENIED:
            return AccessDeniedError(message)
        return StorageError(message)

    def _unparsed(self, op: str, key: str, e: ValueError) -> StorageError:
        """A listing whose answer botocore could not parse (a byte changed on the way: the
        parser raises ValueError, not a BotoCoreError): a failed request, as any other."""
        return StorageError(f"S3 {op} of {key!r} in {self.uri} failed: its answer does not "
                            f"parse ({e})")

    @staticmethod
    def _code(e: ClientError | BotoCoreError) -> str:
        """The S3 error code of a service answer ("" for botocore's own failures)."""
        if isinstance(e, ClientError):
            return str(e.response.get("Error", {}).get("Code", ""))
        return ""

    # ---- interface -------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        """The object's bytes. botocore checks a whole GET's body against the checksum S3
        sends with it (``FlexibleChecksumError`` while the body is read, past its retries): a
        mismatch is read again, and one that persists over :data:`CHECKSUM_READS` reads
        raises ChecksumMismatch (a CorruptionError, not a StorageError), which the caller
        turns into its own error naming the object (CorruptMetadataError, CorruptDataError)."""
        for _ in range(CHECKSUM_READS):
            try:
                return self._client.get_object(Bucket=self.bucket,
                                               Key=self._k(key))["Body"].read()
            except FlexibleChecksumError as e:
                mismatch = e
            except _S3_ERRORS as e:
                if self._code(e) in _NOT_FOUND:
                    raise ObjectNotFoundError(f"no object {key!r} in {self.uri}") from None
                raise self._error("get", key, e) from e
        detail = f"its body fails the checksum S3 sent with it in {CHECKSUM_READS} reads " \
                 f"({mismatch})"
        raise ChecksumMismatch(f"S3 get of {key!r} in {self.uri}: {detail}", detail) \
            from mismatch

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        try:
            r = self._client.get_object(Bucket=self.bucket, Key=self._k(key),
                                        Range=f"bytes={start}-{end - 1}")
            return r["Body"].read()
        except _S3_ERRORS as e:
            if self._code(e) in _NOT_FOUND:
                raise ObjectNotFoundError(f"no object {key!r} in {self.uri}") from None
            if self._code(e) == "InvalidRange":
                return b""
            raise self._error("ranged get", key, e) from e

    def put(self, key: str, data: bytes) -> None:
        try:
            self._client.put_object(Bucket=self.bucket, Key=self._k(key), Body=data)
        except _S3_ERRORS as e:
            raise self._error("put", key, e) from e

    def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            self._client.put_object(Bucket=self.bucket, Key=self._k(key), Body=data,
                                    IfNoneMatch="*")
            return True
        except _S3_ERRORS as e:
            if self._code(e) in ("PreconditionFailed", "412", "ConditionalRequestConflict",
                                 "409"):
                return False
            raise self._error("conditional put", key, e) from e

    # ---- objects of any size (sediment.storage.streams, s3_multipart) -------------------
    def open_writer(self, key: str, *, size: int | None = None) -> ObjectWriter:
        """A multipart upload fed as bytes come (one PUT when under a part)."""
        from sediment.storage.s3_multipart import S3Writer

        return S3Writer(self, key, size)

    def same_service(self, other: ObjectStore) -> bool:
        """Does ``other`` reach the same S3 service as this store, with the same
        credentials (so a copy request here may name its objects)?"""
        return isinstance(other, S3ObjectStore) and other.endpoint_url == self.endpoint_url \
            and other.region == self.region and other._creds == self._creds

    def copy_from(self, source: ObjectStore, source_key: str, key: str) -> CopyResult | None:
        """A copy inside S3 when ``source`` is on the same service (:meth:`same_service`),
        else None."""
        from sediment.storage.s3_multipart import copy_object

        store, full = source.locate(source_key)
        if not isinstance(store, S3ObjectStore) or not self.same_service(store):
            return None
        return copy_object(self, store, full, key)

    def multipart_uploads(self, prefix: str) -> Iterator[MultipartUpload]:
        from sediment.storage.s3_multipart import list_uploads

        return list_uploads(self, prefix)

    def abort_uploads(self, uploads: Iterable[MultipartUpload]) -> int:
        from sediment.storage.s3_multipart import abort_uploads

        return abort_uploads(self, uploads)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._k(prefix)}
        if start_after is not None:
            kwargs["StartAfter"] = self._k(start_after)
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(
                    **kwargs, PaginationConfig={"PageSize": self.list_page_size}):
                for o in page.get("Contents", []):
                    yield ObjectInfo(self._strip(o["Key"]), int(o["Size"]),
                                     o["LastModified"].timestamp())
        except _S3_ERRORS as e:
            raise self._error("list", prefix, e) from e
        except ValueError as e:  # botocore's parser: a garbled time or size in the answer
            raise self._unparsed("list", prefix, e) from e

    def list_folders(self, prefix: str) -> builtins.list[str]:
        full = self._k(prefix)
        names: list[str] = []
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=full, Delimiter="/",
                    PaginationConfig={"PageSize": self.list_page_size}):
                names.extend(p["Prefix"][len(full):].rstrip("/")
                             for p in page.get("CommonPrefixes", []))
        except _S3_ERRORS as e:
            raise self._error("list", prefix, e) from e
        except ValueError as e:
            raise self._unparsed("list", prefix, e) from e
        return sorted(n for n in names if n)

    def delete_many(self, keys: Iterable[str]) -> None:
        batch: list[str] = []

        def flush() -> None:
            if not batch:
                return
            try:
                r = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self._k(k)} for k in batch], "Quiet": True})
            except _S3_ERRORS as e:
                raise self._error("delete", batch[0], e) from e
            errors = r.get("Errors", [])
            if errors:
                raise StorageError(f"S3 delete in {self.uri} failed for "
                                   f"{errors[0].get('Key')}: {errors[0].get('Message')}")
            batch.clear()

        for k in keys:
            batch.append(k)
            if len(batch) >= self.delete_batch_size:
                flush()
        flush()

    def head(self, key: str) -> ObjectInfo | None:
        try:
            r = self._client.head_object(Bucket=self.bucket, Key=self._k(key))
        except _S3_ERRORS as e:
            if self._code(e) in _NOT_FOUND:
                return None
            raise self._error("head", key, e) from e
        return ObjectInfo(key, int(r["ContentLength"]), r["LastModified"].timestamp())

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            kwargs: dict[str, Any] = {"region": self.region}
            if self.endpoint_url:
                scheme, _, host = self.endpoint_url.partition("://")
                kwargs["endpoint_override"] = host or scheme
                kwargs["scheme"] = scheme if host else "https"
            if self._creds["aws_access_key_id"]:
                kwargs["access_key"] = self._creds["aws_access_key_id"]
                kwargs["secret_key"] = self._creds["aws_secret_access_key"]
                if self._creds["aws_session_token"]:
                    kwargs["session_token"] = self._creds["aws_session_token"]
            # as many attempts as the boto3 client's (pyarrow's default, 3, lets one request in 23
            # fail under a 35% error rate), and no retry quota (the AWS SDK's standard strategy
            # has one, as botocore's standard mode: see above)
            kwargs["retry_strategy"] = pafs.AwsDefaultS3RetryStrategy(
                max_attempts=request_retries())  # (the AWS C++ SDK's retries: after the first)
            # an output stream opens nothing until it is written past a part or closed: a
            # file smaller than a part is then one PutObject, not a multipart upload's three
            # requests (create, one part, complete)
            kwargs["allow_delayed_open"] = True
            self._fs = pafs.S3FileSystem(**kwargs)
        base = f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket
        return self._fs, base

    def cache_name(self, key: str) -> str | None:
        """``<endpoint> s3://<bucket>/<full key>``: the endpoint tells apart buckets of one
        name on different services (AWS, MinIO, a test server)."""
        return f"{self.endpoint_url or 'aws:' + self.region} s3://{self.bucket}/{self._k(key)}"

    def reopen_options(self) -> dict[str, Any]:
        """Endpoint, region and credentials as resolved here (options or environment), so a
        store reopened elsewhere (a Spark task) reaches the same objects the same way."""
        out: dict[str, Any] = {"region": self.region}
        if self.endpoint_url:
            out["endpoint_url"] = self.endpoint_url
        out.update({k.removeprefix("aws_"): v for k, v in self._creds.items() if v})
        return out
