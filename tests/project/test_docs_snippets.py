"""Every Python and shell snippet of README.md and docs/**/*.md runs, as written.

Each fenced ``python``, ``bash``, ``sh`` or ``console`` block of a page is one test, id
``<page>:<n>`` (n counts the page's runnable blocks from 1), so a failure names the page and the
block. A page's blocks run in order in one fresh working directory: Python blocks share one
namespace per page, shell blocks run with bash (``-eo pipefail``), see each other's exported
variables and have ``sediment`` (this interpreter's console script) first on the PATH. Running
one block alone runs the page's earlier blocks first.

What the test environment changes, and nothing else:

- S3: a page that names ``s3://`` runs against the moto server of ``tests/conftest.py``: every
  bucket the page names is created there, ``AWS_ENDPOINT_URL`` and dummy credentials point at
  it, and the MinIO endpoint the docs use (``http://127.0.0.1:9000``) is replaced by the
  server's. Such pages are marked ``s3``.
- Spark: cluster URLs (``spark://host:port``) are replaced by ``local[2]``; pages that use Spark
  are marked ``spark`` and ``slow`` and run together on one worker (tests/conftest.py's
  ``spark-pages`` group, beside the Spark tests' own worker), where ``session()`` finds the
  local session the first of them started and reuses it. A Spark session the pages start
  themselves is stopped at the end of this module, not after each page. Every Spark
  driver JVM, the page's own or a command's, takes the tests' ``SPARK_SUBMIT_OPTS`` (JIT and GC
  options for short runs: ``tests/conftest.py``).
- ``REWRITES`` below: each replacement applied to the code before it runs, with its reason.
- ``PRELUDES``: input files a page refers to without making them (the README's reference card).

A block that cannot run here carries ``<!-- no-run: reason -->`` on the line before its fence;
``EXEMPT`` lists every one, and ``test_exemptions_are_listed`` keeps the two in step.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RUN_LANGS = ("python", "bash", "sh", "console")
NO_RUN = re.compile(r"<!--\s*no-run:\s*(?P<reason>.*?)\s*-->")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,})(?P<lang>[\w+-]*)")
MOTO_PLACEHOLDER = "http://127.0.0.1:9000"
SHELL_TIMEOUT = 900
"""A hung shell block's bound: the README's reference card runs some 40 commands, each a new
process that imports Sediment, a second each on a quiet machine and up to 7 s on 2 cores under
a load of 15 (a 300 s bound failed there)."""

EXEMPT: dict[str, str] = {
    "README.md:1": "installs packages",
    "README.md:2": "runs the demo and the whole test suite",
    "docs/coming-from.md:1": "needs the deltalake package, not a Sediment dependency",
    "docs/howto/cosharding.md:3": "needs a Spark session "
                                  "(tests/integration/spark/test_cojoin.py runs the same)",
    "docs/howto/engines.md:9": "needs the store above, from the shell",
    "docs/howto/maintainer.md:4": "installs a systemd service (needs root and systemd)",
    "docs/howto/operating.md:4": "needs a Spark session "
                                 "(tests/integration/spark/test_spark_iterators.py runs the same)",
    "docs/howto/spark.md:1": "installs packages on cluster machines",
    "docs/howto/streams.md:4": "reads a Spark stream of an S3 store "
                               "(tests/integration/spark/test_stream_source.py runs the same)",
    "docs/howto/streams.md:5": "runs a Spark stream "
                               "(tests/integration/spark/test_stream_sink.py runs the same)",
    "docs/howto/streams.md:6": "runs until stopped "
                               "(tests/integration/spark/test_stream_pipeline.py runs the same)",
    "docs/index.md:1": "installs packages",
    "docs/index.md:2": "builds the site; ./dev test runs the same build",
    "docs/quickstart.md:1": "installs packages",
}
"""Every block marked ``no-run``, with its reason (as in the page)."""

REWRITES: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"spark://[\w.-]+(:\d+)?"), "local[2]", "no Spark cluster here"),
    (re.compile(r"(maintain --loop --interval) \d+(?!.*--max-loops)"), r"\1 0.2 --max-loops 2",
     "the maintainer runs until interrupted: two short passes instead"),
    (re.compile(r"aws s3 mb s3://[\w.-]+"), "true", "the test creates every bucket a page names"),
    (re.compile(r"sediment bulk-import (\S+ '[^']+') --master '[^']+'"), r"sediment ingest \1",
     "the command's own Spark driver costs a minute of the suite: tests/integration/spark/"
     "test_bulk_import.py runs the same command on the Spark lane's session"),
]


def _readme_inputs(workdir: Path, s3: Callable[[str, str, bytes], None] | None) -> None:
    """The files README.md's reference card ingests: in/*.parquet, more.csv, and
    s3://bucket/in/*.parquet (rows of its events schema: key, ts, value)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pa.table({"key": ["a", "c", "n", "x"], "ts": [10, 11, 12, 13],
                     "value": ["p", "q", "r", "s"]})
    (workdir / "in").mkdir()
    pq.write_table(rows, workdir / "in" / "part-0.parquet")
    (workdir / "more.csv").write_text("key,ts,value\nb,20,t\no,21,u\n")
    if s3 is not None:
        buf = io.BytesIO()
        pq.write_table(rows, buf)
        s3("bucket", "in/part-0.parquet", buf.getvalue())


PRELUDES: dict[str, Callable[[Path, Callable[[str, str, bytes], None] | None], None]] = {
    "README.md": _readme_inputs,
}


# ---- pages and blocks ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    page: str
    number: int
    lang: str
    line: int
    code: str
    no_run: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.number}"


def pages() -> list[str]:
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    return ["README.md", *docs]


def parse_blocks(page: str) -> list[Block]:
    """The runnable fenced blocks of a page, in order."""
    lines = (ROOT / page).read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        ticks, lang, start = m["ticks"], m["lang"].lower(), i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(ticks):
            j += 1
        if lang in RUN_LANGS:
            indent = len(m["indent"])
            code = "\n".join(ln[indent:] for ln in lines[start + 1:j]) + "\n"
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            marker = NO_RUN.search(lines[k]) if k >= 0 else None
            out.append(Block(page, len(out) + 1, lang, start + 1, code,
                             marker["reason"] if marker else None))
        i = j + 1
    return out


def _needs(blocks: list[Block]) -> tuple[bool, bool]:
    """(S3, Spark) for a page's runnable blocks."""
    code = "".join(b.code for b in blocks if b.no_run is None)
    s3 = "s3://" in code
    spark = bool(re.search(r"sediment\.spark|bulk-import|--spark\b|runner=\"spark\"|--master",
                           code))
    return s3, spark


def _params() -> list[Any]:
    """One param per block, marked by what its page needs: ``s3``, ``spark`` (and ``slow``),
    and ``slow`` for a page with shell blocks (each command a new process that imports
    Sediment: the page's time is its process starts; the full lane runs it, and
    ``pytest tests/project/test_docs_snippets.py -k <page>`` runs one page)."""
    params = []
    for page in pages():
        blocks = parse_blocks(page)
        s3, spark = _needs(blocks)
        shell = any(b.lang != "python" and b.no_run is None for b in blocks)
        marks = ([pytest.mark.s3] if s3 else []) + \
            ([pytest.mark.spark, pytest.mark.slow] if spark else []) + \
            ([pytest.mark.slow] if shell and not spark else [])
        params += [pytest.param(b, id=b.id, marks=marks) for b in blocks]
    return params


# ---- running a page -----------------------------------------------------------------------------
@dataclass
class PageRun:
    page: str
    workdir: Path
    env: dict[str, str]
    namespace: dict[str, Any] = field(default_factory=dict)
    done: int = 0
    failed: str | None = None
    spark_before: Any = None

    @property
    def shell_state(self) -> Path:
        return self.workdir.parent / f"{self.workdir.name}.shell-state"


_RUNS: dict[str, PageRun] = {}


def _active_spark() -> Any:
    if "pyspark" not in sys.modules:
        return None
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def _finish(run: PageRun) -> None:
    """Stop a Spark session the pages started (not one that was running before them)."""
    spark = _active_spark()
    if spark is not None and spark is not run.spark_before:
        spark.stop()


@pytest.fixture(scope="module", autouse=True)
def _finish_pages() -> Iterator[None]:
    yield
    for run in _RUNS.values():
        _finish(run)
    _RUNS.clear()


def rewrite(code: str, env: dict[str, str]) -> str:
    for pattern, replacement, _why in REWRITES:
        code = pattern.sub(replacement, code)
    if "AWS_ENDPOINT_URL" in env:
        code = code.replace(MOTO_PLACEHOLDER, env["AWS_ENDPOINT_URL"])
    return code


def _start(page: str, request: pytest.FixtureRequest) -> PageRun:
    blocks = parse_blocks(page)
    s3, _ = _needs(blocks)
    slug = re.sub(r"\W+", "-", page).strip("-")
    workdir = request.getfixturevalue("tmp_path_factory").mktemp(slug)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SEDIMENT_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    put: Callable[[str, str, bytes], None] | None = None
    if s3:
        # the fixtures, not ``from conftest import``: tests/integration/spark/conftest.py may be the
        # module named conftest when Spark tests ran first
        endpoint = request.getfixturevalue("s3_server")
        s3_client = request.getfixturevalue("s3_client_at")
        env.update({"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1",
                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"})
        client = s3_client(endpoint)
        code = "".join(b.code for b in blocks)
        for bucket in sorted(set(re.findall(r"s3://([a-z0-9][a-z0-9.-]+)", code))):
            client.create_bucket(Bucket=bucket)

        def put(bucket: str, key: str, data: bytes) -> None:
            client.put_object(Bucket=bucket, Key=key, Body=data)
    prelude = PRELUDES.get(page)
    if prelude is not None:
        prelude(workdir, put)
    return PageRun(page, workdir, env, {"__name__": f"snippets:{page}"},
                   spark_before=_active_spark())


def _run_block(run: PageRun, block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    code = rewrite(block.code, run.env)
    where = f"{block.page} block {block.number} (line {block.line})"
    if block.lang == "python":
        with monkeypatch.context() as m:
            m.chdir(run.workdir)
            for k in [k for k in os.environ if k.startswith(("AWS_", "SEDIMENT_"))]:
                m.delenv(k)
            aws = {k: v for k, v in run.env.items() if k.startswith("AWS_")}
            for k, v in aws.items():
                m.setenv(k, v)
            spark = _active_spark()
            if spark is not None:  # a session other tests started: its Python workers take
                # their environment from the context, not from this process's, so the page's
                # S3 endpoint reaches them only this way
                spark.sparkContext.environment.update(aws)
            exec(compile(code, where, "exec"), run.namespace)  # noqa: S102 (the snippet)
        return
    if block.lang == "console":
        code = "\n".join(ln[2:] for ln in code.splitlines() if ln.startswith("$ ")) + "\n"
    state = run.shell_state
    script = (f'if [ -f "{state}" ]; then . "{state}"; fi\n'
              f"trap '{{ export -p; echo \"cd $(printf %q \"$PWD\")\"; }} > \"{state}\"' EXIT\n"
              + code)
    proc = subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=run.workdir,
                          env=run.env, capture_output=True, text=True, timeout=SHELL_TIMEOUT,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        pytest.fail(f"{where} exited with {proc.returncode}\n--- code\n{code}"
                    f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}",
                    pytrace=False)


@pytest.mark.timeout(SHELL_TIMEOUT + 60)
@pytest.mark.parametrize("block", _params())
def test_snippet(block: Block, request: pytest.FixtureRequest,
                 monkeypatch: pytest.MonkeyPatch) -> None:
    if block.no_run is not None:
        pytest.skip(f"no-run: {block.no_run}")
    run = _RUNS.get(block.page)
    if run is None:
        run = _RUNS[block.page] = _start(block.page, request)
    blocks = parse_blocks(block.page)
    for earlier in blocks[run.done:block.number - 1]:  # catch up when run alone
        if earlier.no_run is None and run.failed is None:
            try:
                _run_block(run, earlier, monkeypatch)
            except BaseException:
                run.failed = earlier.id
                raise
    if run.failed is not None:
        pytest.fail(f"not run: {run.failed}, an earlier block of the page, failed",
                    pytrace=False)
    run.done = block.number
    try:
        _run_block(run, block, monkeypatch)
    except BaseException:
        run.failed = block.id
        raise


STORE_FOLDER = re.compile(r"""Store\.open\(\s*["']([^"']+)["']|--store[ =]+["']?([^\s"';)]+)"""
                          r"""|SEDIMENT_STORE=["']?([^\s"';]+)""")
RERUN = ["docs/howto/cosharding.md"]
"""Pages run twice in one folder by ``test_a_page_runs_twice_in_one_folder`` (the page whose
second run failed; every page starts afresh, which the others' guards show and this proves
within the suite's time budget)."""


def store_folders(page: str) -> set[str]:
    """The stores (folders, ``s3://`` prefixes) a page's runnable blocks open, comments aside."""
    code = "\n".join(re.sub(r"(^|\s)#.*$", "", ln) for b in parse_blocks(page)
                     if b.no_run is None for ln in b.code.splitlines())
    return {next(g for g in m.groups() if g).removeprefix("./").rstrip("/")
            for m in STORE_FOLDER.finditer(code)}


def test_pages_use_their_own_store_folders() -> None:
    """Pages run one after the other in one folder (as a reader follows them) must not meet:
    each opens stores no other page opens, so no page finds another's tables or schemes."""
    owner: dict[str, str] = {}
    for page in pages():
        for folder in store_folders(page):
            assert folder not in owner, f"{page} and {owner[folder]} both use {folder}"
            owner[folder] = page
    assert store_folders("docs/howto/cosharding.md") == {"cosharding-store"}


@pytest.mark.slow  # a whole page again (twice when run alone), in subprocesses
@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.xdist_group(f"docs:{p}"))
                                  for p in RERUN])
def test_a_page_runs_twice_in_one_folder(page: str, request: pytest.FixtureRequest,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader runs a page again in the folder of the first run: it starts afresh.

    The first run is the page's own (``test_snippet``'s, on the same worker: this test is in
    the page's ``xdist_group`` and runs after its blocks) when every block of it ran and
    passed; else (this test alone, a block failed) this test runs the page first itself."""
    blocks = [b for b in parse_blocks(page) if b.no_run is None]
    run = _RUNS.get(page)
    if run is None or run.failed is not None or run.done != blocks[-1].number:
        run = _start(page, request)
        runs = 2
    else:
        runs = 1
    for _ in range(runs):
        run.namespace = {"__name__": f"snippets:{page}"}
        for block in blocks:
            _run_block(run, block, monkeypatch)


def test_exemptions_are_listed() -> None:
    """Every no-run block is in EXEMPT with the reason the page gives, and nothing else is."""
    found = {b.id: b.no_run for page in pages() for b in parse_blocks(page)
             if b.no_run is not None}
    assert found == EXEMPT


def test_the_parser_sees_every_fence() -> None:
    """A fence the parser missed would silently skip a page's blocks: count them directly."""
    for page in pages():
        text = (ROOT / page).read_text()
        opened = len(re.findall(r"^\s*```(?:python|bash|sh|console)\s*$", text, re.M))
        assert opened == len(parse_blocks(page)), page


def test_rewrites_apply() -> None:
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}
    assert rewrite('session("spark://host:7077")', env) == 'session("local[2]")'
    assert rewrite("sediment maintain --loop --interval 30", env) == \
        "sediment maintain --loop --interval 0.2 --max-loops 2"
    assert rewrite("sediment bulk-import events 's3://b/in/*.parquet' --master 'local[*]'",
                   env) == "sediment ingest events 's3://b/in/*.parquet'"
    assert rewrite(f"--endpoint {MOTO_PLACEHOLDER}", env) == "--endpoint http://127.0.0.1:1"
