"""The CLI keeps its documented promises: --json everywhere, --format a fixed
choice, --version takes tags, --store before the command, literal help texts, a clean
``demo --json``, progress bars with real totals and rounded numbers, a streaming --limit,
``batcher run --now``, bulk-import input checks, and one-line errors for every failure."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner, Result

import sediment as sd
from sediment.cli import app
from sediment.cli import humanize as cli_humanize
from sediment.cli import terminal as cli_terminal

SCRIPT = Path(sys.executable).with_name("sediment")
LONG_FLOAT = re.compile(r"\d\.\d{4,}")  # 0.2701268340001661: not for people


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)
    monkeypatch.delenv("SEDIMENT_DEBUG", raising=False)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def run(runner: CliRunner, *args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, list(args), env=env)


def ok(runner: CliRunner, *args: str, env: dict[str, str] | None = None) -> Result:
    result = run(runner, *args, env=env)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def fails(runner: CliRunner, *args: str, env: dict[str, str] | None = None) -> str:
    """A clean failure: exit code 1, one ``error:`` line on stderr, no traceback."""
    result = run(runner, *args, env=env)
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.stderr.startswith("error: "), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.output
    return result.stderr


def rows_file(path: Path, keys: list[str], start: int = 0) -> Path:
    pq.write_table(pa.table({"key": keys, "ts": list(range(start, start + len(keys))),
                             "value": [f"v{i}" for i in range(len(keys))]}), path)
    return path


@pytest.fixture
def store(tmp_path: Path) -> str:
    """Table ``events`` (3 leaves): version 2 holds 6 rows and is tagged ``v1``; version 3
    holds 9."""
    root = str(tmp_path / "store")
    st = sd.Store.open(root, create=True)
    schema = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("value", pa.string())])
    t = st.create_table("events", schema, split_points=["g", "p"])
    t.ingest(pa.table({"key": ["a", "b", "h", "i", "q", "r"], "ts": list(range(6)),
                       "value": list("abcdef")}))
    t.tag("v1")
    t.ingest(pa.table({"key": ["c", "j", "s"], "ts": [6, 7, 8], "value": list("ghi")}))
    return root


# ---- 1. --json on every read command; --format a fixed choice --------------------------------
READ_COMMANDS = [
    ["tables"], ["describe", "events"], ["history", "events"], ["properties"],
    ["tags", "events"], ["diff", "events", "v1"], ["report", "partitions", "-t", "events"],
    ["report", "files", "-t", "events"], ["report", "jobs", "-t", "events"],
    ["report", "tasks", "-t", "events"], ["batcher", "status", "events"],
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_json_on_read_commands(runner: CliRunner, store: str, args: list[str]) -> None:
    json.loads(ok(runner, *args, "--store", store, "--json").stdout)


def test_query_json_is_an_alias_of_format_json(runner: CliRunner, store: str) -> None:
    a = ok(runner, "query", "events", "--store", store, "--json").stdout
    b = ok(runner, "query", "events", "--store", store, "--format", "json").stdout
    assert a == b
    rows = [json.loads(line) for line in a.splitlines()]
    assert [r["key"] for r in rows] == ["a", "b", "c", "h", "i", "j", "q", "r", "s"]
    # the same format twice is fine; two different ones are a clear error
    ok(runner, "query", "events", "--store", store, "--json", "--format", "json")
    assert "--json" in fails(runner, "query", "events", "--store", store, "--json",
                             "--format", "csv")


def test_format_is_a_fixed_choice(runner: CliRunner, store: str) -> None:
    result = run(runner, "query", "events", "--store", store, "--format", "xml")
    assert result.exit_code == 2 and "xml" in result.output and "parquet" in result.output
    for command in get_command(app).commands.values():  # type: ignore[attr-defined]
        for param in command.params:
            if "--format" in getattr(param, "opts", []):
                # an Enum: a fixed choice (typer >= 0.29 keeps it; before, a click Choice)
                descriptor = getattr(param, "type_descriptor", None)
                values = ({c.value for c in descriptor.annotation} if descriptor is not None
                          else set(param.type.choices))
                assert values == {"table", "csv", "json", "parquet"}


def test_query_formats(runner: CliRunner, store: str, tmp_path: Path) -> None:
    csv = ok(runner, "query", "events", "--store", store, "-f", "csv", "--key", "h").stdout
    assert csv.splitlines() == ['"key","ts","value"', '"h",2,"c"']
    out = tmp_path / "out.parquet"
    ok(runner, "query", "events", "--store", store, "-f", "parquet", "-o", str(out))
    assert pq.read_table(out).num_rows == 9
    # parquet to a stdout that is not a terminal: the file's bytes
    piped = ok(runner, "query", "events", "--store", store, "-f", "parquet", "--limit", "4")
    assert pq.read_table(io.BytesIO(piped.stdout_bytes)).num_rows == 4
    assert "--output" in fails(runner, "query", "events", "--store", store,
                               "-o", str(tmp_path / "x.txt"))


def test_parquet_to_a_pipe_from_the_console_script(store: str) -> None:
    done = subprocess.run([str(SCRIPT), "--store", store, "query", "events", "-f", "parquet"],
                          capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert pq.read_table(io.BytesIO(done.stdout)).num_rows == 9


def test_a_reader_that_went_away_ends_the_command_quietly(store: str) -> None:
    """``sediment query ... | head -1``: the pipe's reader is gone, so the command stops
    with the code a shell gives a process SIGPIPE ended, and says nothing on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before the first write: every write fails
    try:
        done = subprocess.run([str(SCRIPT), "--store", store, "query", "events", "--json"],
                              stdout=write_end, stderr=subprocess.PIPE, timeout=120,
                              check=False)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (128 + 13, b"")


# ---- 2. --version takes tags everywhere ------------------------------------------------------
def test_version_accepts_tags(runner: CliRunner, store: str, tmp_path: Path) -> None:
    def keys(*args: str) -> list[str]:
        out = ok(runner, "query", "events", "--store", store, "--json", *args).stdout
        return [json.loads(line)["key"] for line in out.splitlines()]

    assert keys("--version", "v1") == keys("--version", "2") == ["a", "b", "h", "i", "q", "r"]
    d = json.loads(ok(runner, "describe", "events", "--store", store, "--version", "v1",
                      "--json").stdout)
    assert d["version"] == 2 and d["records"] == 6
    files = json.loads(ok(runner, "report", "files", "-t", "events", "--store", store,
                          "--version", "v1", "--json").stdout)
    latest = json.loads(ok(runner, "report", "files", "-t", "events", "--store", store,
                           "--json").stdout)
    assert len(files) < len(latest)
    parts = json.loads(ok(runner, "report", "partitions", "-t", "events", "--store", store,
                          "--version", "v1", "--json").stdout)
    assert sum(p["records"] for p in parts if p["leaf"]) == 6
    tagged = json.loads(ok(runner, "tag", "events", "again", "--version", "v1", "--store",
                           store, "--json").stdout)
    assert tagged["version"] == 2
    diff = json.loads(ok(runner, "diff", "events", "v1", "--store", store, "--json").stdout)
    assert diff["from_version"] == 2 and diff["records_change"] == 3
    assert diff["deletions_added"] == [] and diff["deletions_removed"] == []
    # a delete keeps its files until compaction: diff names it all the same
    ok(runner, "delete", "events", "--key", "a", "--store", store)
    diff = json.loads(ok(runner, "diff", "events", "v1", "--store", store, "--json").stdout)
    assert [d["ranges"] for d in diff["deletions_added"]] == [1]
    assert diff["deletions_added"][0]["filter"] is False
    assert "deletions_added" in ok(runner, "diff", "events", "v1", "--store", store).stdout
    job = json.loads(ok(runner, "dump", "events", str(tmp_path / "d"), "--version", "v1",
                        "--store", store, "--json").stdout)
    assert job["version"] == 2 and job["rows"] == 6
    assert "nope" in fails(runner, "query", "events", "--store", store, "--version", "nope")
    assert "nope" in fails(runner, "describe", "events", "--store", store, "--version", "nope")


# ---- 3. --store before the command -----------------------------------------------------------
def test_store_before_the_command(runner: CliRunner, store: str, tmp_path: Path) -> None:
    assert json.loads(ok(runner, "--store", store, "tables", "--json").stdout) == ["events"]
    ok(runner, "--store", store, "query", "events", "--key", "a")
    ok(runner, "--store", store, "batcher", "status", "events")
    wrong = str(tmp_path / "nowhere")
    # both: the one after the command wins, either way round
    ok(runner, "--store", wrong, "describe", "events", "--store", store)
    assert "nowhere" in fails(runner, "--store", store, "describe", "events", "--store", wrong)
    # the environment variable still works, and either option beats it
    ok(runner, "describe", "events", env={"SEDIMENT_STORE": store})
    ok(runner, "--store", store, "describe", "events", env={"SEDIMENT_STORE": wrong})
    assert "nowhere" in fails(runner, "--store", wrong, "describe", "events",
                              env={"SEDIMENT_STORE": store})
    # the root option does not leak into the next invocation in the same process
    assert "no store given" in fails(runner, "tables")


# ---- 4. help texts print their examples as written ------------------------------------------
def test_help_renders_examples_literally(runner: CliRunner) -> None:
    out = ok(runner, "query", "--help").stdout
    assert "[a,m)" in out and "(a,]" in out
    assert "[a,m)" in ok(runner, "dump", "--help").stdout


# ---- 5. demo --json, the Java check ---------------------------------------------------------
def test_demo_json_writes_only_json(tmp_path: Path) -> None:
    env = {**os.environ, "SEDIMENT_STORE": str(tmp_path / "demo")}
    done = subprocess.run([str(SCRIPT), "demo", "--rows", "3000", "--no-spark", "--json"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # stdout is exactly one JSON document
    assert result["rows"] == 3000 and result["scan_rows"] == 3300
    assert "Sediment demo" in done.stderr and "--no-spark" in done.stderr
    assert "Java not found" not in done.stderr


def _fake_java(folder: Path, banner: str) -> Path:
    """A ``java`` that prints its version banner on stderr, like the real one."""
    (folder / "bin").mkdir(parents=True)
    java = folder / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return java


@pytest.mark.skipif(os.name == "nt", reason="a shell script stands in for java")
def test_demo_java_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sediment import demo

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert demo.java_command() is None and "Java not found" in (demo.java_problem() or "")
    # JAVA_HOME alone (no java on the PATH) is enough, as for Spark's launcher
    home = tmp_path / "jdk17"
    _fake_java(home, 'openjdk version "17.0.15" 2025-04-15')
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert demo.java_version() == 17 and demo.java_problem() is None
    # on the PATH without JAVA_HOME
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(home / "bin"))
    assert demo.java_version() == 17 and demo._java_available()
    # too old (Java 8 says "1.8.0_392")
    old = tmp_path / "jdk8"
    _fake_java(old, 'java version "1.8.0_392"')
    monkeypatch.setenv("JAVA_HOME", str(old))
    assert demo.java_version() == 8
    assert "Java 8" in (demo.java_problem() or "") and not demo._java_available()


# ---- 6. progress bars with real totals; numbers for people ----------------------------------
def test_progress_only_for_people_at_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not cli_terminal.show_progress(False)
    monkeypatch.setattr(sys, "stderr", Tty())
    assert cli_terminal.show_progress(False)
    assert not cli_terminal.show_progress(True)  # --json: never


def test_progress_counts_show_real_totals() -> None:
    bar = cli_terminal.progress_bar(True, "tasks")
    task_id = bar.add_task("dump", total=None)
    column = cli_terminal._CountColumn("tasks")
    assert str(column.render(bar.tasks[0])) == "0 tasks"  # never "0/None"
    bar.update(task_id, completed=2, total=12)
    assert str(column.render(bar.tasks[0])) == "2/12 tasks"


def test_dump_reports_its_total_before_the_first_task(store: str, tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    sd.Store.open(store).table("events").dump(str(tmp_path / "d"),
                                              progress=lambda d, t: calls.append((d, t)))
    assert calls[0] == (0, calls[-1][1]) and calls[-1][0] == calls[-1][1] > 0


@pytest.mark.parametrize("args", [
    ["compact", "--table", "events"], ["maintain"], ["split"], ["gc"],
    ["dump", "events", "DUMP"], ["ingest", "events", "FILE"],
])
def test_bars_on_a_terminal_and_rounded_numbers(runner: CliRunner, store: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                args: list[str]) -> None:
    monkeypatch.setattr(cli_terminal, "show_progress", lambda json_out: not json_out)
    args = [str(tmp_path / "dump") if a == "DUMP" else
            str(rows_file(tmp_path / "in.parquet", ["k", "l"])) if a == "FILE" else a
            for a in args]
    human = ok(runner, *args, "--store", store)
    assert not LONG_FLOAT.search(human.stdout), human.stdout
    assert "None" not in human.stderr
    data = json.loads(ok(runner, *args, "--store", store, "--json").stdout)
    rows = data if isinstance(data, list) else [data]
    seconds = [r["seconds"] for r in rows if isinstance(r, dict) and "seconds" in r]
    assert seconds and all(isinstance(s, float) for s in seconds)  # full values in JSON


def test_report_jobs_rounds_for_people(runner: CliRunner, store: str) -> None:
    ok(runner, "compact", "--full", "--table", "events", "--store", store)
    jobs = json.loads(ok(runner, "report", "jobs", "-t", "events", "--store", store,
                         "--json").stdout)
    assert jobs and any(isinstance(j.get("seconds"), float) for j in jobs)
    text = ok(runner, "report", "jobs", "-t", "events", "--store", store).stdout
    assert not LONG_FLOAT.search(text), text


def test_human_numbers() -> None:
    assert cli_humanize.human_seconds(0.2701268340001661) == "0.27 s"
    assert cli_humanize.human_seconds(12.345) == "12 s"
    assert cli_humanize.human_seconds(0.0004) == "0.4 ms"
    assert cli_humanize.human_seconds(125) == "2 min 05 s"
    assert cli_humanize.human_bytes(5437) == "5.3 KiB"
    assert cli_humanize.human_value("rows_per_second", 2626.1407144527802) == "2,626/s"
    assert cli_humanize.human_value("rows", 1000) == "1,000"
    assert cli_humanize.human_value("version", 12) == 12


# ---- 7. --limit streams ----------------------------------------------------------------------
def test_limit_streams(runner: CliRunner, store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pulled: list[int] = []
    schema = pa.schema([("key", pa.string()), ("ts", pa.int64()), ("value", pa.string())])

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(1000):
            pulled.append(i)
            yield pa.record_batch([[f"k{i:04d}a", f"k{i:04d}b"], [i, i], ["x", "y"]],
                                  schema=schema)

    def scan(self: Any, *args: Any, **kwargs: Any) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(schema, batches())

    def query(self: Any, *args: Any, **kwargs: Any) -> pa.Table:
        raise AssertionError("query must stream, not load the whole result")

    monkeypatch.setattr(sd.Scan, "to_batches", scan)  # what sediment query reads through
    monkeypatch.setattr(sd.Scan, "to_arrow", query)
    for fmt in ("json", "csv", "parquet"):
        pulled.clear()
        out = ok(runner, "query", "events", "--store", store, "-f", fmt, "--limit", "5")
        assert len(pulled) <= 4, (fmt, len(pulled))
        if fmt == "json":
            assert len(out.stdout.splitlines()) == 5
    pulled.clear()
    out = ok(runner, "query", "events", "--store", store, "--limit", "3")
    assert len(pulled) <= 3 and "first 3 rows" in out.stdout and "more rows" in out.stdout
    pulled.clear()
    ok(runner, "query", "events", "--store", store)  # the table view stops at 100 rows
    assert len(pulled) <= 51


def test_limit_on_real_data(runner: CliRunner, store: str) -> None:
    out = ok(runner, "query", "events", "--store", store, "--json", "--limit", "4").stdout
    assert [json.loads(line)["key"] for line in out.splitlines()] == ["a", "b", "c", "h"]
    assert ok(runner, "query", "events", "--store", store, "--json", "-n", "0").stdout == ""
    table = ok(runner, "query", "events", "--store", store).stdout
    assert "9 rows" in table and "more rows" not in table


# ---- 8. batcher run --now ------------------------------------------------------------------
def test_batcher_run_now(runner: CliRunner, store: str, tmp_path: Path) -> None:
    f = rows_file(tmp_path / "b.parquet", ["x1", "x2", "x3"], start=100)
    ok(runner, "batcher", "submit", "events", str(f), "--store", store)
    waiting = json.loads(ok(runner, "batcher", "run", "events", "--store", store,
                            "--json").stdout)
    assert waiting["jobs"] == [] and waiting["waiting"] == 1  # not full, not old: it waits
    flushed = json.loads(ok(runner, "batcher", "run", "events", "--store", store, "--now",
                            "--json").stdout)
    assert [j["state"] for j in flushed["jobs"]] == ["committed"] and flushed["waiting"] == 0
    assert sd.Store.open(store).table("events").describe()["records"] == 12
    assert "--now" in ok(runner, "batcher", "run", "--help").stdout


# ---- 9. bulk-import checks its inputs before Spark -----------------------------------------
@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark must not start: the inputs are checked first."""
    try:
        import sediment.spark as spark_pkg
    except ImportError:  # pragma: no cover - pyspark missing: it cannot start anyway
        return

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Spark started before the inputs were checked")

    monkeypatch.setattr(spark_pkg, "session", boom, raising=False)


def test_bulk_import_checks_inputs_first(runner: CliRunner, store: str, tmp_path: Path,
                                         no_spark: None) -> None:
    good = rows_file(tmp_path / "good.parquet", ["a"])
    missing = tmp_path / "missing.parquet"
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 this is not parquet at all PAR1")
    for bad in (missing, corrupt):
        err = fails(runner, "bulk-import", "events", str(good), str(bad), "--store", store)
        assert str(bad) in err, err
    assert "nothing-" in fails(runner, "bulk-import", "events", str(tmp_path / "nothing-*"),
                               "--store", store)
    unknown = tmp_path / "data.txt"
    unknown.write_text("x")
    assert "data.txt" in fails(runner, "bulk-import", "events", str(unknown), "--store", store)


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0,
                    reason="file permissions do not bind root")
def test_bulk_import_unreadable_input(runner: CliRunner, store: str, tmp_path: Path,
                                      no_spark: None) -> None:
    f = rows_file(tmp_path / "locked.parquet", ["a"])
    f.chmod(0)
    try:
        assert "locked.parquet" in fails(runner, "bulk-import", "events", str(f),
                                         "--store", store)
    finally:
        f.chmod(0o644)


# ---- 10. every failure: one ``error:`` line, exit code 1 ------------------------------------
def test_bad_input_files_are_one_line_errors(runner: CliRunner, store: str,
                                             tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"not a parquet file")
    assert "corrupt.parquet" in fails(runner, "ingest", "events", str(corrupt),
                                      "--store", store)
    assert "missing.parquet" in fails(runner, "ingest", "events",
                                      str(tmp_path / "missing.parquet"), "--store", store)
    assert "x.csv" in fails(runner, "query", "events", "--store", store, "-f", "csv", "-o",
                            str(tmp_path / "no" / "such" / "dir" / "x.csv"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    fails(runner, "init", "--store", str(blocker / "store"))


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0,
                    reason="file permissions do not bind root")
def test_read_only_directory(runner: CliRunner, store: str, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        fails(runner, "init", "--store", str(ro / "store"))
        fails(runner, "dump", "events", str(ro / "dump"), "--store", store)
        fails(runner, "query", "events", "--store", store, "-f", "csv", "-o", str(ro / "x"))
    finally:
        ro.chmod(0o755)


def _raise_on_query(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise exc

    monkeypatch.setattr(sd.Table, "prepare", prepare)  # every read goes through it


def _boto_errors() -> list[BaseException]:
    from botocore.exceptions import ClientError, EndpointConnectionError

    return [ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}},
                        "GetObject"),
            EndpointConnectionError(endpoint_url="http://127.0.0.1:1")]


@pytest.mark.parametrize("exc", [
    PermissionError(13, "Permission denied", "/data/store/x.parquet"),
    FileNotFoundError(2, "No such file or directory", "/data/in.parquet"),
    OSError(30, "Read-only file system", "/mnt/ro"),
    pa.ArrowInvalid("Parquet magic bytes not found in footer.\nEither the file is corrupted "
                    "or this is not a parquet file."),
    pa.ArrowIOError("Failed to open local file"),
    *_boto_errors(),
], ids=lambda e: type(e).__name__)
def test_io_errors_are_one_line(runner: CliRunner, store: str, monkeypatch: pytest.MonkeyPatch,
                                exc: BaseException) -> None:
    _raise_on_query(monkeypatch, exc)
    err = fails(runner, "query", "events", "--store", store)
    if isinstance(exc, OSError) and exc.filename:
        assert exc.filename in err and (exc.strerror or "") in err
    if isinstance(exc, pa.ArrowInvalid):
        assert "magic bytes" in err


def test_multi_line_errors_become_one_line(runner: CliRunner, store: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from sediment.errors import DataError

    _raise_on_query(monkeypatch, DataError(
        "bulk import failed: An exception was thrown from the Python worker:\n"
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
        "ModuleNotFoundError: No module named 'sediment'\n"))
    err = fails(runner, "query", "events", "--store", store)
    assert "bulk import failed" in err and "No module named 'sediment'" in err


def test_batcher_failed_job_is_an_error_line(runner: CliRunner, store: str,
                                             tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"other": [1]}), bad)
    ok(runner, "batcher", "submit", "events", str(bad), "--store", store)
    err = fails(runner, "batcher", "run", "events", "--now", "--store", store)
    assert "did not commit" in err


def test_usage_errors_still_exit_2(runner: CliRunner) -> None:
    result = run(runner, "query", "--no-such-option")
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_internal_errors_are_one_line_too(runner: CliRunner, store: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _raise_on_query(monkeypatch, KeyError("bug"))
    assert "internal error: KeyError" in fails(runner, "query", "events", "--store", store)
    monkeypatch.setenv("SEDIMENT_DEBUG", "1")
    result = run(runner, "query", "events", "--store", store)
    assert isinstance(result.exception, KeyError)


def test_typer_is_the_cli_framework() -> None:  # the CliRunner above drives the real app
    assert isinstance(app, typer.Typer)
