"""A writer paused past its lease timeout between its lease check and its log append cannot
commit files GC collected meanwhile.

A real writer process ingests; a test-only hook (installed by this file's worker entry point,
never by the library) stops it at the exact point between ``CommitLoop._check_new_files`` and
its conditional append: the hook touches ``ready`` and waits for ``go``. The test then sends
SIGSTOP (freezing the lease heartbeat too), waits until the store's clock finds the lease dead
(a 2 s timeout, ``$SEDIMENT_LEASE_TIMEOUT_SECONDS``, in both processes), runs GC with no orphan
grace (it records the lease expired, then deletes the writer's files), and sends SIGCONT. The
writer's append meets GC's entry, it re-validates and refuses naming its lease; every file the
table references exists, and what the same writer ingests afterwards lands. Local disk and
moto's S3 server.

Run as ``python tests/proof/test_paused_writer.py '<json args>'`` for the worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # the worker: make ``sediment`` and the test helpers importable
    sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "src"),
                    str(Path(__file__).resolve().parents[1])]

import pytest

import sediment as sd
from helpers import make_table, rows
from reference import Reference, assert_matches

LEASE_TIMEOUT = "2"
HERE = Path(__file__).resolve()


def _worker(args: dict[str, Any]) -> None:
    """Ingest seed 1 paused before its append (the hook), then seed 2; one JSON line each."""
    from sediment.state.commit import CommitLoop

    folder = Path(args["folder"])
    real_append = CommitLoop._append

    def paused(self: CommitLoop, version: int, *rest: Any) -> bool:
        if not (folder / "ready").exists():
            (folder / "ready").touch()
            while not (folder / "go").exists():  # the test SIGSTOPs the process here
                time.sleep(0.01)
        return real_append(self, version, *rest)

    CommitLoop._append = paused  # type: ignore[method-assign]
    table = sd.Store.open(args["uri"], **args["options"]).table(args["table"])
    with (folder / "out.jsonl").open("w") as out:
        for seed in (1, 2):
            try:
                result = table.ingest(rows(400, seed=seed))
                out.write(json.dumps({"seed": seed, "version": result.version}) + "\n")
            except sd.SedimentError as e:
                out.write(json.dumps({"seed": seed, "error": type(e).__name__,
                                      "message": str(e)}) + "\n")
            out.flush()
            # what follows is not about the timeout: the default one, so that a loaded
            # machine stalling this process for 2 s cannot fail the next ingest
            os.environ.pop("SEDIMENT_LEASE_TIMEOUT_SECONDS", None)


def _wait(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_writer_paused_past_its_lease_cannot_commit_collected_files(
        where: str, tmp_path: Path, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sediment.files.sidecars import SAMPLE, sidecar_name
    from sediment.state import pending
    from sediment.storage.clock import object_store_time

    uri, options = (str(tmp_path / "store"), {}) if where == "local" else \
        request.getfixturevalue("s3_store_uri")
    monkeypatch.setenv(pending.LEASE_TIMEOUT_ENV, LEASE_TIMEOUT)  # this process's GC too
    table = make_table(uri, options, name="events", split_points=["m"])
    objects = table._handle.objects
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[2] / "src")}
    args = {"uri": uri, "options": options, "table": "events", "folder": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, str(HERE), json.dumps(args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: (tmp_path / "ready").exists() or proc.poll() is not None,
              "the writer to reach its append")
        assert proc.poll() is None, proc.communicate()[0].decode()
        os.kill(proc.pid, signal.SIGSTOP)
        _wait(lambda: _stopped(proc.pid), "the writer to stop")
        (tmp_path / "go").touch()  # read once it runs again
        written = [o.key for o in objects.list("data/") if o.key.endswith(".parquet")]
        assert len(written) == 2, "the writer staged one file per leaf"

        def lease_dead() -> bool:
            now = object_store_time(objects) or time.time()
            return bool(pending.scan_leases(objects, now).dead)

        _wait(lease_dead, "the writer's lease to die by the store's clock")
        dead = pending.scan_leases(objects, object_store_time(objects) or time.time()).dead_ids
        result = table.gc(orphan_timeout=0)
        assert result.orphans_deleted == 2, "GC collected the paused writer's files"
        assert [h.kind for h in table.history()][-1] == "expire_leases"
        monkeypatch.delenv(pending.LEASE_TIMEOUT_ENV)  # as in the worker, for what follows
        os.kill(proc.pid, signal.SIGCONT)
        output = proc.communicate(timeout=120)[0].decode()
        assert proc.returncode == 0, output
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert lines[0]["error"] == "TransactionInvalidError", lines
    assert f"lease {dead[0]}" in lines[0]["message"] and "expired" in lines[0]["message"]
    assert "version" in lines[1], "the writer's next ingest lands under a fresh lease"
    state = table.state()
    for f in state.refcount:  # nothing references a missing file (or sidecar)
        assert objects.exists(f), f"{f} is referenced but missing"
        assert objects.exists(sidecar_name(f, SAMPLE)), f"{f}'s sample is missing"
    assert not set(written) & set(state.refcount)
    table.ingest(rows(300, seed=3))  # and this process's own ingest lands too
    reference = Reference(table.schema)
    reference.add(rows(400, seed=2))
    reference.add(rows(300, seed=3))
    assert_matches(table.query(), reference)


if __name__ == "__main__":
    _worker(json.loads(sys.argv[1]))
