"""Progress with real totals: ``Table.compact``, ``Table.maintain`` (each
pass's jobs) and loads (bytes copied) call ``progress(done, total)`` with the real total first,
then as work ends; the CLI's compact, maintain and load draw a bar with that total, on stderr
at a terminal only, never with --json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import sediment as sd
from helpers import make_table, rows
from sediment.cli import app
from sediment.dump.load import KeyedLoad, copy_and_reference, open_dump

Calls = list[tuple[int, int]]

PROPS = {"compaction.strategy": "basic", "compaction.batch_size": 2}


def recorder() -> tuple[Calls, Any]:
    calls: Calls = []
    return calls, lambda done, total: calls.append((done, total))


def passes(calls: Calls) -> list[Calls]:
    """The calls cut where a new total is announced (``done`` 0)."""
    out: list[Calls] = []
    for c in calls:
        if c[0] == 0:
            out.append([])
        out[-1].append(c)
    return out


def check_pass(calls: Calls, jobs: int) -> None:
    """The total first, equal to the jobs run; ``done`` counts up by one to the total."""
    assert calls[0] == (0, jobs)
    assert [d for d, _ in calls] == list(range(jobs + 1))
    assert {t for _, t in calls} == {jobs}


def fragmented(tmp_path: Path, name: str = "events", leaves: int = 4) -> sd.Table:
    splits = ["d", "h", "p"][: leaves - 1]
    table = make_table(tmp_path / "s", name=name, split_points=splits, **PROPS)
    for seed in range(4):
        table.ingest(rows(400, seed))
    return table


def test_compact_reports_its_jobs_total_first(tmp_path: Path) -> None:
    table = fragmented(tmp_path)
    calls, progress = recorder()
    result = table.compact(progress=progress)
    assert result.jobs_created > 1
    check_pass(calls, result.jobs_created)
    assert result.jobs_committed == result.jobs_created
    # nothing to do: the total (0) is still reported
    table.compact(full=True)
    calls3, progress3 = recorder()
    assert table.compact(progress=progress3).jobs_created == 0
    assert calls3 == [(0, 0)]


def test_compact_with_one_thread_reports_each_job(tmp_path: Path) -> None:
    table = fragmented(tmp_path)
    table.set_properties({"compaction.threads": 1})
    calls, progress = recorder()
    result = table.compact(full=True, progress=progress)
    check_pass(calls, result.jobs_created)
    assert result.jobs_created == 4  # one per leaf


def test_maintain_reports_each_passes_jobs(tmp_path: Path) -> None:
    table = fragmented(tmp_path)
    calls, progress = recorder()
    seen: list[int] = []
    from sediment.handle import handle_of
    from sediment.maintenance.passes import maintain

    m = maintain(handle_of(table), progress=progress,
                 on_pass=lambda n, s, c, g: seen.append(c.jobs_created))
    by_pass = passes(calls)
    assert len(by_pass) == m.passes == len(seen)
    for p, jobs in zip(by_pass, seen, strict=True):
        check_pass(p, jobs)
    assert sum(seen) == m.jobs_committed + m.jobs_failed
    assert seen[0] > 0 and seen[-1] == 0
    # through the façade: the same shape
    table.ingest(rows(400, 9))
    table.ingest(rows(400, 10))
    calls2, progress2 = recorder()
    m2 = table.maintain(progress=progress2)
    assert len(passes(calls2)) == m2.passes
    assert sum(p[-1][1] for p in passes(calls2)) == m2.jobs_committed + m2.jobs_failed


def test_load_reports_bytes_copied(tmp_path: Path) -> None:
    table = fragmented(tmp_path)
    job = table.dump(str(tmp_path / "dump"))
    dump = open_dump(job.manifest_uri, table.store.object_store_at)
    total = sum(f.bytes for f in dump.files)
    assert total > 0 and len(dump.files) > 1
    calls, progress = recorder()
    target = table.store.create_table("copy", table.schema)
    KeyedLoad(dump, progress).into(target._handle)
    assert calls[0] == (0, total)
    assert calls[-1] == (total, total)
    assert len(calls) == len(dump.files) + 1
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert target.query().num_rows == table.query().num_rows
    # Store.load, creating the table
    calls2, progress2 = recorder()
    table.store.load(job.manifest_uri, "copy2", progress=progress2)
    assert calls2[0] == (0, total) and calls2[-1] == (total, total)
    # the keyword is optional: callers that pass nothing report nothing
    target3 = table.store.create_table("copy3", table.schema)
    refs, staging = copy_and_reference(dump, target3._handle)
    assert len(staging.files) == len(dump.files) and refs


# ---- the CLI ----------------------------------------------------------------------------------
class FakeBar:
    """Stands in for the rich Progress of cli.terminal.progress_bar: records tasks and updates."""

    made: list[FakeBar] = []

    def __init__(self, json_out: bool, unit: str) -> None:
        self.json_out, self.unit = json_out, unit
        self.tasks: dict[int, dict[str, Any]] = {}
        FakeBar.made.append(self)

    def __enter__(self) -> FakeBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def add_task(self, description: str, total: float | None = None) -> int:
        self.tasks[len(self.tasks)] = {"description": description, "total": total,
                                       "completed": 0, "history": []}
        return len(self.tasks) - 1

    def update(self, task: int, *, description: str | None = None,
               completed: float | None = None, total: float | None = None) -> None:
        t = self.tasks[task]
        if description is not None:
            t["description"] = description
        if total is not None:
            t["total"] = total
        if completed is not None:
            t["completed"] = completed
            t["history"].append((completed, t["total"]))

    def advance(self, task: int, n: float = 1) -> None:
        self.tasks[task]["completed"] += n


@pytest.fixture
def fake_bars(monkeypatch: pytest.MonkeyPatch) -> list[FakeBar]:
    import sediment.cli.passes as p
    import sediment.cli.versions as v

    FakeBar.made = []
    monkeypatch.setattr(p, "progress_bar", FakeBar)
    monkeypatch.setattr(v, "progress_bar", FakeBar)
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)
    return FakeBar.made


def test_cli_compact_and_maintain_bars_have_the_jobs_total(tmp_path: Path,
                                                           fake_bars: list[FakeBar]) -> None:
    table = fragmented(tmp_path)
    store = str(tmp_path / "s")
    runner = CliRunner()
    r = runner.invoke(app, ["--store", store, "compact", "--table", table.name])
    assert r.exit_code == 0, r.output
    bar = fake_bars[-1]
    assert bar.unit == "jobs" and not bar.json_out
    (task,) = bar.tasks.values()
    jobs = sd.Store.open(store).table(table.name).jobs()
    assert task["total"] == len({j["job_id"] for j in jobs}) > 0
    assert task["completed"] == task["total"]
    assert task["history"][0] == (0, task["total"])

    for seed in (7, 8):
        table.ingest(rows(400, seed))
    r = runner.invoke(app, ["--store", store, "maintain", "--table", table.name])
    assert r.exit_code == 0, r.output
    (task,) = fake_bars[-1].tasks.values()
    assert fake_bars[-1].unit == "jobs"
    assert task["completed"] == task["total"]  # the last pass's jobs, all done
    assert task["description"].startswith(f"maintain {table.name}")


def test_cli_load_bar_counts_bytes(tmp_path: Path, fake_bars: list[FakeBar]) -> None:
    table = fragmented(tmp_path)
    job = table.dump(str(tmp_path / "dump"))
    r = CliRunner().invoke(app, ["--store", str(tmp_path / "s"), "load", job.manifest_uri,
                                 "copy"])
    assert r.exit_code == 0, r.output
    bar = fake_bars[-1]
    assert bar.unit == "bytes"
    (task,) = bar.tasks.values()
    dump = open_dump(job.manifest_uri, table.store.object_store_at)
    assert task["total"] == sum(f.bytes for f in dump.files) > 0
    assert task["history"][0] == (0, task["total"]) and task["completed"] == task["total"]


@pytest.mark.parametrize("command", ["compact", "maintain"])
def test_cli_json_output_has_no_bar(tmp_path: Path, command: str,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)
    table = fragmented(tmp_path)
    r = CliRunner().invoke(app, ["--store", str(tmp_path / "s"), command, "--table",
                                 table.name, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc[0]["table"] == table.name
    assert "jobs" not in r.stderr and "━" not in r.output
