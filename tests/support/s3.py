"""The loopback S3 fake of the tests and the benchmarks: a moto server on 127.0.0.1.

No test or benchmark may reach real AWS: the server listens on loopback with dummy credentials,
every client is given its endpoint explicitly, and the server's environment has the AWS
variables replaced by dummies.

moto's S3 server checks ``If-None-Match: *`` and then stores the object without a lock, so two
concurrent conditional PUTs of one key can both succeed. Real S3 (and MinIO) decide this
atomically. :data:`SERIALISED_MOTO` serves moto's own WSGI app behind one lock, so each request
runs alone and conditional writes are atomic, as Sediment's commit protocol requires of its
object store. It also lists each incomplete multipart upload with its real start (moto's own
listing dates every one 2010-11-10), as S3 does: GC judges an upload's age by it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

S3_REGION = "us-east-1"
S3_CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing"}
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": S3_REGION,
    "AWS_REGION": S3_REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}
UNSET_AWS_ENV = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE",
                 "AWS_SHARED_CREDENTIALS_FILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE")
STARTUP_SECONDS = 15.0
PART_MIN_SIZE = 64 * 1024
"""The smallest part (but the last) the server takes in a multipart upload (moto's
``S3_UPLOAD_PART_MIN_SIZE``; S3's is 5 MiB): the tests prove multipart uploads, copies and
their resumption on objects of a few MiB with parts of a few hundred KiB."""

SERIALISED_MOTO = """
import re, sys, threading, time
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication, MotoRequestHandler, create_backend_app)
import moto.backends
host, port = sys.argv[1], int(sys.argv[2])
# moto looks a request's host up in the names of its service folders, listed from disk twice a
# request (some 180 stat calls: a third of its time per request); the folders do not change
modules = tuple(moto.backends.list_of_moto_modules())
moto.backends.list_of_moto_modules = lambda: iter(modules)
app = DomainDispatcherApplication(create_backend_app)
# a host's backend is found by matching every service's URL patterns (some 90 regex matches, twice
# a request); the answer for a host never changes
import functools
app.get_backend_for_host = functools.lru_cache(maxsize=256)(app.get_backend_for_host)
lock = threading.Lock()
# moto lists every incomplete multipart upload as started on 2010-11-10, so a collector judging
# an upload's age by its listed start (as GC does on S3) takes a live writer's for a dead one;
# each upload's real start is kept and listed instead (the same length: no header changes)
started = {}
FIXED = b"<Initiated>2010-11-10T20:48:33.000Z</Initiated>"
def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t)).encode()
def dated(match):
    upload = match.group(0)
    found = re.search(rb"<UploadId>([^<]+)</UploadId>", upload)
    when = started.get(found.group(1), time.time()) if found else time.time()
    return upload.replace(FIXED, b"<Initiated>" + iso(when) + b"</Initiated>")
def serialised(environ, start_response):
    with lock:
        body = list(app(environ, start_response))
        if "uploads" in environ.get("QUERY_STRING", ""):
            data = b"".join(body)
            if environ["REQUEST_METHOD"] == "POST":
                for upload_id in re.findall(rb"<UploadId>([^<]+)</UploadId>", data):
                    started[upload_id] = time.time()
            elif FIXED in data:
                return [re.sub(rb"<Upload>.*?</Upload>", dated, data, flags=re.S)]
        return body
# a listing's every LastModified is parsed from its text by dateutil to be written back as text,
# a third of a LIST's CPU; the text of one (value, format) never changes: kept, boundedly
import moto.core.serialize as serialize
to_text = serialize.TimestampSerializer._convert_timestamp_to_str
texts = {}
def cached_text(self, value, timestamp_format):
    try:
        return texts[value, timestamp_format]
    except KeyError:
        pass
    except TypeError:  # an unhashable value: converted each time
        return to_text(self, value, timestamp_format)
    if len(texts) > 100000:
        texts.clear()
    out = texts[value, timestamp_format] = to_text(self, value, timestamp_format)
    return out
serialize.TimestampSerializer._convert_timestamp_to_str = cached_text
# no access-log line per request: werkzeug formats and writes one under a logging lock, some
# 7% of the server's CPU per request; the log keeps start-up output and errors
class Quiet(MotoRequestHandler):
    def log_request(self, code="-", size="-"):
        pass
run_simple(host, port, serialised, threaded=True, request_handler=Quiet)
"""
"""The launcher: ``python -c SERIALISED_MOTO HOST PORT`` (see the module docs)."""


@dataclass
class S3Server:
    """A running moto S3 server on 127.0.0.1."""

    endpoint_url: str
    pid: int
    region: str = S3_REGION
    access_key_id: str = S3_CREDENTIALS["access_key_id"]
    secret_access_key: str = S3_CREDENTIALS["secret_access_key"]

    @property
    def options(self) -> dict[str, Any]:
        """Storage options for ``Store.open`` / ``open_object_store``."""
        return {"endpoint_url": self.endpoint_url, "region": self.region,
                "access_key_id": self.access_key_id,
                "secret_access_key": self.secret_access_key}

    def env(self) -> dict[str, str]:
        """AWS environment variables that send a process (a CLI, a worker) to this server."""
        return {**DUMMY_AWS_ENV, "AWS_ENDPOINT_URL": self.endpoint_url}

    def client(self) -> Any:
        """A boto3 S3 client of this server (one per endpoint, cached)."""
        return s3_client(self.endpoint_url)

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name


@functools.cache
def s3_client(endpoint: str) -> Any:
    """A boto3 S3 client for the server at ``endpoint`` (a proxy, say) with the dummy
    credentials."""
    import boto3

    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name=S3_REGION,
        aws_access_key_id=S3_CREDENTIALS["access_key_id"],
        aws_secret_access_key=S3_CREDENTIALS["secret_access_key"])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(port: int) -> dict[str, str]:
    """This process's environment with the AWS variables replaced by dummies, and loopback
    kept off any HTTP proxy."""
    env = {k: v for k, v in os.environ.items() if k not in UNSET_AWS_ENV}
    env.update(DUMMY_AWS_ENV)
    env["MOTO_PORT"] = str(port)
    env["S3_UPLOAD_PART_MIN_SIZE"] = str(PART_MIN_SIZE)
    no_proxy = ",".join(filter(None, [env.get("NO_PROXY", ""), "127.0.0.1", "localhost"]))
    env["NO_PROXY"] = env["no_proxy"] = no_proxy
    return env


def plain_moto_binary() -> Path:
    """The stock ``moto_server`` next to this interpreter (its conditional PUT is racy)."""
    return Path(sys.executable).with_name("moto_server")


def moto_command(port: int, *, plain: bool = False) -> list[str]:
    """The server command: the serialised launcher run by this interpreter, or with ``plain``
    the stock ``moto_server`` (for comparing with moto's own behaviour)."""
    if plain:
        return [str(plain_moto_binary()), "-H", "127.0.0.1", "-p", str(port)]
    return [sys.executable, "-c", SERIALISED_MOTO, "127.0.0.1", str(port)]


def _log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:]


def wait_until_up(proc: subprocess.Popen[bytes], endpoint: str, log: Path,
                  timeout: float = STARTUP_SECONDS) -> None:
    """Return once the server answers HTTP at ``endpoint``; RuntimeError (with the end of its
    log) when it exits or stays silent for ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with {proc.returncode}: {_log_tail(log)}")
        try:
            with urllib.request.urlopen(endpoint + "/", timeout=1):
                return
        except urllib.error.HTTPError:
            return  # any HTTP answer means it is serving
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise RuntimeError(f"moto server at {endpoint} did not answer within {timeout}s: "
                       f"{_log_tail(log)}")


def stop(proc: subprocess.Popen[Any]) -> None:
    """Terminate a process the tests or benchmarks started (a server), killing it if it does
    not exit in 10 s: the one way both stop their processes (``helpers.stop_process``)."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def moto_s3_server(log: Path | None = None, *, plain: bool = False,
                   timeout: float = STARTUP_SECONDS) -> Iterator[S3Server]:
    """Start a moto S3 server on a free loopback port (its output to ``log``, else a temporary
    file); stop it on exit."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with contextlib.ExitStack() as stack:
        if log is None:
            log = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="sediment-moto-"))) / "server.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(moto_command(port, plain=plain), env=server_env(port),
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        try:
            wait_until_up(proc, endpoint, log, timeout)
            yield S3Server(endpoint, proc.pid)
        finally:
            stop(proc)
