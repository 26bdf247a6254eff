"""Shared fixtures: a moto S3 server on 127.0.0.1, fresh buckets, and object stores of each kind.

No test may reach real AWS: the server runs on loopback with dummy credentials, every S3 client
is given the server's endpoint explicitly, and the AWS environment variables of the test process
are replaced by dummies for the duration of each S3 test.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sediment.storage import LocalObjectStore, MemoryObjectStore, ObjectStore, open_object_store
from support.lanes import quick_examples as _quick_examples
from support.s3 import DUMMY_AWS_ENV as _DUMMY_AWS_ENV
from support.s3 import S3_CREDENTIALS, S3_REGION, moto_s3_server, plain_moto_binary, s3_client
from support.s3 import UNSET_AWS_ENV as _UNSET_AWS_ENV

SPARK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The options of every Spark driver JVM the tests start through ``spark-submit`` (a session in a
test process, ``sediment bulk-import`` in a command process a docs page runs): short runs on a
small machine, where the C1 JIT alone warms up faster than tiered C2 (measured on 2 busy cores:
a session's start and first bulk import 25-27 s against 34-45 s). ``SPARK_SUBMIT_OPTS`` reaches
the JVM and nothing else; the processes the tests start inherit it."""
os.environ.setdefault("SPARK_SUBMIT_OPTS", SPARK_JVM_OPTIONS)


def _built_once() -> None:
    """``typer.testing.CliRunner.invoke`` builds the app's click command anew on every call:
    0.12 s of CPU for Sediment's 46 commands, more than most commands a test invokes take
    to run. A command tree is reusable (click runs one many times), so the tests' runners
    build it once per process: what a command does is unchanged; only its assembly is not
    repeated."""
    import typer.testing

    build = typer.testing._get_command
    built: dict[int, tuple[Any, tuple[int, ...], Any]] = {}

    def get_command(app: Any) -> Any:
        # built again when commands were added or removed since (a test registers its own)
        shape = tuple(map(id, [*app.registered_commands, *app.registered_groups]))
        held = built.get(id(app))
        if held is None or held[0] is not app or held[1] != shape:
            held = built[id(app)] = (app, shape, build(app))
        return held[2]

    typer.testing._get_command = get_command


_built_once()


@pytest.fixture(scope="session", autouse=True)
def _disk_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The disk cache of S3 reads (sediment.storage.diskcache) in the session's temp folder,
    never the user's cache folder (the processes tests start inherit it)."""
    old = os.environ.get("SEDIMENT_CACHE_DIR")
    os.environ["SEDIMENT_CACHE_DIR"] = str(tmp_path_factory.mktemp("disk-cache"))
    yield
    if old is None:
        os.environ.pop("SEDIMENT_CACHE_DIR", None)
    else:
        os.environ["SEDIMENT_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Endpoint URL of a moto S3 server on 127.0.0.1 (support.s3: serialised, so conditional
    PUTs are atomic), started once per session. ``SEDIMENT_TEST_PLAIN_MOTO=1`` runs the stock
    ``moto_server`` next to ``sys.executable`` instead (its conditional PUT is racy under
    concurrent writers)."""
    plain = os.environ.get("SEDIMENT_TEST_PLAIN_MOTO") == "1"
    if plain and not plain_moto_binary().exists():
        pytest.skip(f"moto_server not found next to {sys.executable}")
    with moto_s3_server(tmp_path_factory.mktemp("moto") / "server.log", plain=plain) as server:
        yield server.endpoint_url


@pytest.fixture
def aws_test_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy AWS credentials in this process (and the processes it starts) for one test."""
    for k in _UNSET_AWS_ENV:
        monkeypatch.delenv(k, raising=False)
    for k, v in _DUMMY_AWS_ENV.items():
        monkeypatch.setenv(k, v)


@pytest.fixture
def s3_client_at() -> Any:
    """``s3_client`` for tests: a boto3 client for a loopback endpoint (a proxy, say)."""
    return s3_client


@pytest.fixture
def s3_store_uri(s3_server: str, aws_test_env: None) -> tuple[str, dict[str, Any]]:
    """``("s3://<fresh bucket>/<prefix>", storage options)`` on the moto server."""
    bucket = f"sediment-test-{uuid.uuid4().hex[:20]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    options = {"endpoint_url": s3_server, "region": S3_REGION, **S3_CREDENTIALS}
    return f"s3://{bucket}/store", options


@pytest.fixture(params=["memory", pytest.param("local"), pytest.param("s3", marks=pytest.mark.s3),
                        pytest.param("s3-proxy", marks=[pytest.mark.s3, pytest.mark.faults]),
                        pytest.param("s3-faults", marks=[pytest.mark.s3, pytest.mark.faults])])
def object_store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """A fresh, empty ObjectStore of each implementation: in memory, on local disk, on S3
    (moto), and on S3 through the fault proxy, with no faults (``s3-proxy``) and with the
    transient ones the S3 store's retries absorb (``s3-faults``:
    :func:`faultproxy.transient_fault_specs`)."""
    if request.param == "memory":
        return MemoryObjectStore(f"test-{uuid.uuid4().hex}")
    if request.param == "local":
        return LocalObjectStore(tmp_path / "objects")
    if request.param.startswith("s3-"):
        from faultproxy import transient_fault_specs

        proxied = request.getfixturevalue("proxied_s3")
        if request.param == "s3-faults":
            proxied.proxy.add_rules(transient_fault_specs())
        return open_object_store(proxied.uri, **proxied.options)
    uri, options = request.getfixturevalue("s3_store_uri")
    return open_object_store(uri, **options)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """``(uri, storage_options)`` for ``sediment.Store.open(uri, **options)``."""
    if request.param == "local":
        return str(tmp_path / "store"), {}
    return request.getfixturevalue("s3_store_uri")


@pytest.fixture
def no_prune_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let tests prune entries they just wrote (production keeps 5 minutes of log; see
    sediment.state.store.PRUNE_GRACE_SECONDS)."""
    import sediment.state.versions as versions

    monkeypatch.setattr(versions, "PRUNE_GRACE_SECONDS", 0.0)
    monkeypatch.setattr(versions, "CLOCK_SKEW_SECONDS", 0.0)


# ---- fault injection (tests/faultproxy.py) ---------------------------------------------------
def _no_retry_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore in this process retries every fault as it does in production, only without
    the seconds of backoff between tries: Sediment's clients retry in botocore's "legacy"
    mode (storage/s3.py), whose handler returns a random delay of up to 2^n s before try n+1
    (1+2+4+8+16 s for a request that fails every try: most of a fault test's time, spent
    asleep); capped here at 1 ms. Standard mode's backoff is capped too. What a retry proves
    (the request sent again, its answer settled) is unchanged; processes a test starts keep
    the real backoff."""
    from botocore import retryhandler
    from botocore.retries import standard

    legacy = retryhandler.RetryHandler.__call__

    def no_wait(self: Any, attempts: int, response: Any, caught_exception: Any,
                **kwargs: Any) -> float | None:
        delay = legacy(self, attempts, response, caught_exception, **kwargs)
        return None if delay is None else min(delay, 0.001)

    monkeypatch.setattr(retryhandler.RetryHandler, "__call__", no_wait)
    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, ctx: 0.001)


@pytest.fixture
def fault_proxy(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A :class:`faultproxy.FaultProxy` in front of the moto server, with no rules yet
    (a seed per test for probabilistic rules), and no retry backoff in this process
    (:func:`_no_retry_backoff`); stopped after the test."""
    from faultproxy import FaultProxy

    _no_retry_backoff(monkeypatch)

    proxy = FaultProxy(s3_server, seed=int(os.environ.get("SEDIMENT_FAULT_SEED", "0"))).start()
    try:
        yield proxy
    finally:
        # the test's leases are written (empty ones deleted) while the proxy still forwards:
        # else this process's lease heartbeat would retry them later against a closed port,
        # with botocore's random jitter, inside whatever test runs then (hypothesis flags a
        # strategy that sees the random module's state change)
        from sediment.state import pending

        proxy.clear()
        pending.flush()
        proxy.stop()


@pytest.fixture
def proxied_s3(fault_proxy: Any, s3_server: str, aws_test_env: None) -> Any:
    """A fresh bucket reachable through the fault proxy (``.uri``, ``.options``, ``.open()``)
    and directly (``.direct_options``, ``.open_direct()``: for checks that must not see
    faults)."""
    from faultproxy import ProxiedS3

    bucket = f"sediment-faults-{uuid.uuid4().hex[:20]}"
    s3_client(s3_server).create_bucket(Bucket=bucket)
    return ProxiedS3(fault_proxy, s3_server, f"s3://{bucket}/store", region=S3_REGION,
                     **S3_CREDENTIALS)


# ---- lanes (./dev test --quick leaves these groups out; CONTRIBUTING.md) ------------------------
_TESTS = Path(__file__).resolve().parent
QUICK_LANE = os.environ.get("SEDIMENT_TEST_LANE") == "quick"
"""Set by ``./dev test --quick``: properties run with a quarter of their examples there."""
_S3_FIXTURES = {"s3_server", "s3_store_uri", "s3_client_at"}


@pytest.hookimpl(tryfirst=True)  # before xdist's hook turns xdist_group marks into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with the groups the quick lane leaves out, by what it uses: ``faults``
    (the S3 fault proxy), ``browser`` (headless Chromium), ``spark``, and ``slow`` for the
    proofs of ``tests/proof`` (processes killed and racing) and for logic tests run over S3
    outside ``tests/storage`` (the storage conformance suite proves there, in the quick lane,
    that S3 answers as local disk does; the same logic over moto repeats its local run at
    moto's per-request cost); and keep together on one xdist worker (``xdist_group``) what
    shares a process's state: every test of the shared Spark sessions (one session and one
    standalone cluster serve them all, instead of one per worker on a 2-core machine), the
    blocks of one docs page (they run in order in one process per page; blocks spread over
    workers would each re-run the page's earlier blocks), and the tests of one server or
    dashboard module (they share the module's server process). The docs pages that use Spark
    and the other Spark tests with a session of their own form a second Spark group, on
    another worker: with them in the first, that one worker's Spark tests took 20 of the
    suite's 24 minutes (a 2026-11-29 timeline), the longest path of the whole run, against
    one more driver JVM's start (some 15 s of CPU)."""
    spark_dir = _TESTS / "integration" / "spark"
    proof_dir = _TESTS / "proof"
    storage_dir = _TESTS / "storage"
    module_groups = (_TESTS / "integration" / "serve", _TESTS / "integration" / "dashboard")
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "fault_proxy" in names or "proxied_s3" in names:
            item.add_marker(pytest.mark.faults)
        if _S3_FIXTURES.intersection(names) and item.get_closest_marker("s3") is None:
            item.add_marker(pytest.mark.s3)
        if item.get_closest_marker("s3") is not None and (
                storage_dir not in item.path.parents
                or item.get_closest_marker("slow_on_s3") is not None):
            item.add_marker(pytest.mark.slow)
        if proof_dir in item.path.parents:  # kill -9, racing processes, models: the full lane
            item.add_marker(pytest.mark.slow)
        if item.path.name == "test_dashboard_browser.py":
            item.add_marker(pytest.mark.browser)
        if spark_dir in item.path.parents or item.get_closest_marker("spark") is not None:
            item.add_marker(pytest.mark.spark)
        if QUICK_LANE:
            _quick_examples(item)
        callspec = getattr(item, "callspec", None)
        block = callspec.params.get("block") if callspec is not None else None
        if "spark_sessions" in names:
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif block is not None and hasattr(block, "page"):
            # the pages that use Spark share one worker and the local session the first of
            # them starts (tests/project/test_docs_snippets.py stops it after the pages)
            spark = item.get_closest_marker("spark") is not None
            item.add_marker(pytest.mark.xdist_group("spark-pages" if spark
                                                    else f"docs:{block.page}"))
        elif any(d in item.path.parents for d in module_groups):
            # a module's server process (a module-scoped fixture) starts once, on one worker
            item.add_marker(pytest.mark.xdist_group(f"module:{item.path.name}"))
        elif item.get_closest_marker("spark") is not None:
            # a Spark test with a session fixture of its own (tests/storage's awkward paths):
            # with the Spark pages, whose local session it finds and reuses
            item.add_marker(pytest.mark.xdist_group("spark-pages"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker with ``--dist loadgroup``, every ``xdist_group`` mark must have reached
    the node id (``<id>@<group>``): pytest 9.2 keeps node ids where pytest-xdist 3.8 cannot
    change them, and the groups were then ignored without a word (pyproject pins pytest
    below 9.2 for that reason)."""
    if not getattr(session.config.option, "loadgroup", False):  # an xdist worker under loadgroup
        return
    lost = [item.nodeid for item in session.items
            if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(f"xdist_group marks were ignored (pytest-xdist cannot set the "
                                f"node ids of this pytest): {lost[:3]}")
