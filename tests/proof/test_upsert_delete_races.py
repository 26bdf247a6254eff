"""Concurrency of upserts and deletes: writer processes upserting and ingesting, a process
deleting by keys, ranges and filters, ``sediment maintain --loop`` compacting and splitting
(a small split threshold), and a reader, all at once; on local disk and on S3 through the
fault proxy (tests/faultproxy.py's random faults: lost answers of log writes, so ambiguous
commits, lost write answers, resets, 503s).

Each worker reports the version each of its operations committed at (keyed_workers.py);
the operations are regenerated from their indices and replayed in commit order into the
reference. Then, on a handle opened without faults:

- each reported version is the log entry of its operation's kind, no two operations claim
  one, and the log holds no upsert, ingest or delete that no worker acknowledged (a failed
  operation, under faults, committed nothing);
- every version of the log reads exactly as the replay says, records in order: a deleted
  record never comes back (whatever compaction, split or ambiguous commit came after its
  delete), a record upserted or inserted after a delete of its key is never lost, and of the
  upserts of one record key the last committed wins;
- every query the reader answered during the run equals the table at a version committed
  while it ran;
- after ``maintain`` + ``gc`` nothing is left over, every deletion is settled and the content
  is unchanged.

The runner is test_concurrent_processes.py's (its maintainers, start and stop, clean-up
check), with keyed_workers.py's processes in the writers' and readers' places.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import keyed_workers as kw
import pytest
import test_concurrent_processes as tcp
import workers as w

import sediment as sd
from faultproxy import ProxiedS3, random_fault_specs

PROPERTIES = {
    "partition.split.threshold": 150,
    "compaction.batch_size": 3,
    "compaction.job_timeout_seconds": 2,
}


class KeyedRun(tcp.Run):
    """tcp.Run with keyed_workers processes: ``plans`` gives each writer process its cycle of
    operation kinds (``writer-i`` runs ``plans[i]``), readers run keyed_workers' reader."""

    def __init__(self, uri: str, options: dict[str, Any], tmp: Path, *,
                 plans: list[list[str]], ops: int, rows: int = 30, readers: int = 1,
                 letters: str = kw.LETTERS, pause: float = 0.05, base_batches: int = 3,
                 **kwargs: Any) -> None:
        kwargs["properties"] = {**PROPERTIES, **kwargs.get("properties", {})}
        super().__init__(uri, options, tmp, writers=len(plans), batches=ops, rows=rows,
                         readers=readers, **kwargs)
        self.plans, self.ops, self.letters, self.pause = plans, ops, letters, pause
        self.base: list[tuple[int, kw.Op]] = []
        for b in range(base_batches):  # records the writers' operations meet
            op = kw.Op("ingest", rows=tuple(w.batch_rows("base", b, 60)))
            self.base.append((op.run(self.table), op))

    def _start(self, name: str, argv: list[str]) -> None:
        base = {"uri": self.uri, "options": self.options}
        role, _, index = name.partition("-")
        if role == "writer":
            i = int(index)
            argv = kw.command("keyed", {
                **base, "writer": f"w{i}", "kinds": self.plans[i], "count": self.ops,
                "rows": self.rows, "letters": self.letters, "pause": self.pause,
                "out": str(self.tmp / f"{name}.jsonl")})
        elif role == "reader":
            argv = kw.command("reader", {**base, "seed": int(index), "stop": str(self.stop),
                                         "out": str(self.tmp / f"{name}.jsonl")})
        super()._start(name, argv)

    # ---- checks -----------------------------------------------------------------------------
    def committed(self) -> tuple[list[tuple[int, kw.Op]], Counter[str]]:  # type: ignore[override]
        """(version, op) of every acknowledged operation (the base ingests too); failures."""
        out = list(self.base)
        failed: Counter[str] = Counter()
        for i, kinds in enumerate(self.plans):
            done, errors, unfinished = kw.read_op_log(self.tmp / f"writer-{i}.jsonl")
            assert unfinished is None and len(done) + len(errors) == self.ops, \
                f"writer {i} reported {len(done) + len(errors)} operations"
            failed.update(e.split(":")[0] for e in errors.values())
            out.extend((v, kw.make_op(f"w{i}", op, kinds, rows=self.rows, letters=self.letters))
                       for op, v in done.items())
        return sorted(out, key=lambda x: x[0]), failed

    def model_check(self, options: dict[str, Any], *, failures: bool = False
                    ) -> dict[str, Any]:
        commits, failed = self.committed()
        assert failures or not failed, f"operations failed: {dict(failed)}"
        versions = [v for v, _ in commits]
        assert len(set(versions)) == len(versions), "two operations claim one version"
        table = sd.Store.open(self.uri, **options).table(w.TABLE)
        history = table.history()
        kinds = {e.version: e.kind for e in history}
        for v, op in commits:
            assert kinds.get(v) == kw.COMMIT_KINDS[op.kind], \
                f"{op.kind} {op.tag} acknowledged at version {v}: a {kinds.get(v)}"
        unclaimed = [v for v, k in kinds.items()
                     if k in ("add_files", "delete_records") and v not in set(versions)]
        assert not unclaimed, f"versions {unclaimed} acknowledged by no worker"
        contents = kw.replay(kw.Reference(), commits)
        for e in history:  # every version, as the replay says
            want = kw.content_at(contents, [], e.version)
            got = w.rows_of(table.query(version=e.version))
            if got != want:
                raise AssertionError(describe(got, want, e.version, commits))
        assert w.rows_of(table.query()) == kw.content_at(contents, [], table.version)
        answered = self.check_reads(contents)
        return {"versions": table.version, "records": len(contents[max(contents)]),
                "failed": dict(failed), "reads": answered,
                "reinserted": reinserted(commits), "deletes_in_jobs": deletes_in_jobs(history),
                "transactions": dict(Counter(kinds.values()))}

    def check_reads(self, contents: dict[int, list[w.Row]]) -> int:
        answered = 0
        for i in range(self.readers):
            path = self.tmp / f"reader-{i}.jsonl"
            for line in path.read_text().splitlines() if path.exists() else []:
                q = json.loads(line)
                if "error" in q:
                    continue
                lo, hi = q["lo"], q["hi"]
                candidates = [q["v0"], *(v for v in contents if q["v0"] < v <= q["v1"])]
                assert any(q["values"] == [r[2] for r in kw.content_at(contents, [], v)
                                           if w.in_range(r[0], lo, hi)]
                           for v in candidates), \
                    f"a read of [{lo}, {hi}) between versions {q['v0']} and {q['v1']} " \
                    f"equals no committed version"
                answered += 1
        assert answered > 0 or not self.readers, "no read answered"
        return answered

    def settle(self, options: dict[str, Any]) -> None:
        """tcp.Run's clean-up check, then: every deletion settled."""
        self.options = options
        self.settle_and_check_files()
        state = sd.Store.open(self.uri, **options).table(w.TABLE).state()
        assert not state.deletions, \
            f"deletions pending after maintain: {[d.to_json() for d in state.deletions]}"


def reinserted(commits: list[tuple[int, kw.Op]]) -> int:
    """Records written after a delete that covered their record key earlier: those a
    resurrection bug would lose or a wrong bound would delete (the proof has power only
    when there are some)."""
    deletes: list[kw.Op] = []
    count = 0
    for _, op in commits:
        if op.kind in kw.DELETES:
            deletes.append(op)
        else:
            count += sum(1 for r in op.rows if any(d.removes(r) for d in deletes))
    return count


def deletes_in_jobs(history: list[Any]) -> int:
    """Deletes committed while a compaction job was assigned and not yet committed (what
    the race is about; reported, not asserted: timing decides how many)."""
    open_jobs = 0
    count = 0
    for e in sorted(history, key=lambda e: e.version):
        if e.kind == "assign_job_ids":
            open_jobs += 1
        elif e.kind == "replace_file_references":
            open_jobs = max(0, open_jobs - 1)
        elif e.kind == "delete_records" and open_jobs:
            count += 1
    return count


def describe(got: list[w.Row], want: list[w.Row], version: int,
             commits: list[tuple[int, kw.Op]]) -> str:
    """What differs at ``version``, and the operations that wrote or deleted it."""
    lost = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    keys = {(r[0], r[1]) for r in [*lost[:3], *extra[:3]]}
    touching = [f"v{v} {op.kind} {op.tag}" for v, op in commits
                if any((r[0], r[1]) in keys for r in op.rows)
                or (op.kind in kw.DELETES and any(op.removes((k, t, "", None)) or
                                                  op.kind == "delete_filter"
                                                  for k, t in keys))]
    return (f"version {version}: {len(lost)} records lost {lost[:3]}, {len(extra)} "
            f"unexpected {extra[:3]} ({len(got)} read, {len(want)} expected); "
            f"operations on those keys: {touching[:20]}")


WRITER = ["upsert", "ingest", "upsert"]
DELETER = ["delete_keys", "delete_range", "delete_filter"]


def test_upserts_of_the_same_keys_race(tmp_path: Path) -> None:
    """Three processes upsert the same 24 record keys (row keys ``m?`` and ``n?``) while the
    maintainer compacts: for each record key the last committed upsert wins, and the base
    records of other keys stay as they are."""
    run = KeyedRun(str(tmp_path / "store"), {}, tmp_path, plans=[["upsert"]] * 3, ops=10,
                   rows=16, letters="mn", awaits=("replace_file_references",))
    run.execute(timeout=120)
    summary = run.model_check({})
    commits, _ = run.committed()
    winner: dict[tuple[str, int], tuple[int, str]] = {}
    for v, op in commits:
        if op.kind == "upsert":
            for r in op.rows:
                winner[(r[0], r[1])] = (v, r[2])  # in commit order: the last one stays
    final = {(r[0], r[1]): r[2] for r in w.rows_of(run.table.query())
             if (r[0], r[1]) in winner}
    assert final == {k: value for k, (_, value) in winner.items()}
    base = [r for _, op in run.base for r in op.rows if (r[0], r[1]) not in winner]
    assert Counter(base) <= Counter(w.rows_of(run.table.query()))
    print(summary)
    assert summary["transactions"].get("replace_file_references", 0) > 0, summary
    run.settle({})


def test_deletes_race_compaction_and_splits_on_local_disk(tmp_path: Path) -> None:
    run = KeyedRun(str(tmp_path / "store"), {}, tmp_path, plans=[WRITER, WRITER, DELETER],
                   ops=12, split_points=["m"],
                   awaits=("replace_file_references", "split_partition"))
    run.execute(timeout=150)
    summary = run.model_check({})
    print(summary)
    assert summary["transactions"].get("replace_file_references", 0) > 0, summary
    assert summary["transactions"].get("split_partition", 0) > 0, summary
    assert summary["reinserted"] > 0, summary
    run.settle({})


@pytest.mark.s3
def test_deletes_race_compaction_and_splits_through_faults(proxied_s3: ProxiedS3,
                                                           tmp_path: Path) -> None:
    s3 = proxied_s3
    s3.proxy._rng.seed(29 * w.SCALE)
    # fewer operations than on local disk: each is a dozen requests through the proxy, and
    # the check reads every version back over S3 (the suite's time budget)
    run = KeyedRun(s3.uri, s3.options, tmp_path, plans=[WRITER, DELETER], ops=4 * w.SCALE,
                   env=s3.env(), maintain_interval=0.2, split_points=["m"],
                   properties={"partition.split.threshold": 120},
                   awaits=("replace_file_references", "split_partition"))
    # one certain ambiguous commit (a log entry's answer lost), then the random mix
    certain = {"action": "drop_response", "method": "PUT", "path": r"/log/\d{20}\.json$",
               "skip": 3, "count": 1, "name": "lost log-entry answer (certain)"}
    s3.proxy.add_rules([certain, *random_fault_specs()])
    try:
        run.execute(timeout=240 * w.SCALE)
    finally:
        rules = {r.name: r.fired for r in s3.proxy.rules}
        s3.proxy.clear()
    print(json.dumps({"rules": rules}))
    assert rules["lost log-entry answer (certain)"] == 1, rules
    summary = run.model_check(s3.direct_options, failures=True)
    print(json.dumps(summary))
    assert summary["transactions"].get("replace_file_references", 0) > 0, summary
    run.settle(s3.direct_options)
