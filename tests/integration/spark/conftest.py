"""Spark fixtures: one ``local[2,2]`` session and one standalone cluster on 127.0.0.1, shared.

Only one SparkContext can live in a process, so a session-scoped manager holds whichever session
is current and swaps it (stop one, start the other) on demand. Tests are reordered so that every
test on the local session runs before any test on the cluster: each is started once.

* ``spark_local``: ``sediment.spark.session("local[2,2]")`` (2 threads, a failed task is retried
  once: ``local[N,F]`` sets ``spark.task.maxFailures``).
* ``spark_cluster``: a Spark standalone master and one worker (1 core, 1 GiB), started from the
  pyspark package with ``java -cp <pyspark>/jars/*``, and a session on ``spark://127.0.0.1:P``.
* ``spark``: parametrized over both.

The master and worker are children of the test process that die with it (``PR_SET_PDEATHSIG``)
and are stopped at the end of the session.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TEST_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",  # tiny inputs: fewer, cheaper tasks
    "spark.default.parallelism": "2",
    "spark.python.worker.reuse": "true",
    # short runs on a small machine: the C1 JIT alone warms up faster than tiered C2
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}
CLUSTER_CONF: dict[str, str] = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "1",
    "spark.task.maxFailures": "2",
    "spark.executor.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}
_JVM_OPTS = ["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
_CLUSTER_START_SECONDS = 150.0
_PYSPARK_PANDAS_WARNING = "ignore:PySpark does not yet fully support pandas:FutureWarning"


# ---- test order and marks ------------------------------------------------------------------
def _uses_cluster(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("spark") == "cluster":
        return True
    return "spark_cluster" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Local-session tests first, cluster tests last (each session starts once); every test
    here is a ``slow`` one (``-m "not slow"`` leaves Spark out)."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.filterwarnings(_PYSPARK_PANDAS_WARNING))
            item.add_marker(pytest.mark.slow)
    items.sort(key=_uses_cluster)  # stable: the rest keep their order


# ---- the standalone cluster ----------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child before exec
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class StandaloneCluster:
    """A Spark master and one worker on 127.0.0.1, run from the pyspark package's jars."""

    def __init__(self, workdir: Path) -> None:
        import pyspark

        home = Path(pyspark.__file__).parent
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port, self.master_ui = _free_port(), _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_SCALA_VERSION": "2.13",
               "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
               "SPARK_NO_DAEMONIZE": "1"}
        classpath = ["-cp", str(home / "jars" / "*")]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs = {"master": workdir / "master.log", "worker": workdir / "worker.log"}
        self._start("master", ["java", *_JVM_OPTS, *classpath,
                               "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(self.master_ui)],
                    env)
        self._start("worker", ["java", *_JVM_OPTS, *classpath,
                               "org.apache.spark.deploy.worker.Worker", self.url,
                               "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                               "--webui-port", str(_free_port()),
                               "--work-dir", str(workdir / "work")], env)
        atexit.register(self.stop)
        try:
            self._wait_for_worker()
        except BaseException:
            self.stop()
            raise

    def _start(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        with open(self.logs[name], "wb") as out:
            self.procs.append(subprocess.Popen(cmd, env=env, stdout=out,
                                               stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL,
                                               preexec_fn=_die_with_parent))

    def _log_tails(self) -> str:
        return "\n".join(f"--- {n} ---\n{p.read_text(errors='replace')[-1500:]}"
                         for n, p in self.logs.items() if p.exists())

    def _wait_for_worker(self) -> None:
        """Bounded wait until the master's JSON status lists an ALIVE worker."""
        deadline = time.monotonic() + _CLUSTER_START_SECONDS
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"Spark {p.args[-1]!r} exited with {p.returncode}:\n"
                                       f"{self._log_tails()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.master_ui}/json/",
                                            timeout=2) as r:
                    status = json.load(r)
                if any(w.get("state") == "ALIVE" for w in status.get("workers", [])):
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.25)
        raise RuntimeError(f"no Spark worker registered with {self.url} within "
                           f"{_CLUSTER_START_SECONDS:.0f}s:\n{self._log_tails()}")

    def stop(self) -> None:
        for p in reversed(self.procs):  # the worker first: it stops its executors
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.procs.clear()


# ---- sessions ------------------------------------------------------------------------------
class SparkSessions:
    """The one live SparkSession of this process, local or on the cluster, swapped on demand."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.kind: str | None = None
        self.spark: Any = None
        self.cluster: StandaloneCluster | None = None

    def get(self, kind: str) -> Any:
        if self.kind == kind and self.spark is not None:
            return self.spark
        self.stop()
        from sediment.spark import session

        if kind == "local":
            self.spark = session("local[2,2]", app_name="sediment-tests-local", conf=TEST_CONF)
        elif kind == "cluster":
            self.cluster = StandaloneCluster(self.workdir / "cluster")
            self.spark = session(self.cluster.url, app_name="sediment-tests-cluster",
                                 conf={**TEST_CONF, **CLUSTER_CONF})
        else:
            raise ValueError(kind)
        self.kind = kind
        return self.spark

    def stop(self) -> None:
        if self.spark is not None:
            with contextlib.suppress(Exception):
                self.spark.stop()
            self.spark, self.kind = None, None
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None


@pytest.fixture(scope="session")
def spark_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSessions]:
    sessions = SparkSessions(tmp_path_factory.mktemp("spark"))
    try:
        yield sessions
    finally:
        sessions.stop()


@pytest.fixture
def spark_local(spark_sessions: SparkSessions) -> Any:
    """The shared ``local[2,2]`` session (started once; the cluster session is stopped)."""
    return spark_sessions.get("local")


@pytest.fixture
def spark_cluster(spark_sessions: SparkSessions) -> Any:
    """A session on the shared standalone cluster (started once, after the local tests)."""
    return spark_sessions.get("cluster")


@pytest.fixture(params=["local", "cluster"])
def spark(request: pytest.FixtureRequest, spark_sessions: SparkSessions) -> Any:
    """The local session, then the cluster session."""
    return spark_sessions.get(request.param)
