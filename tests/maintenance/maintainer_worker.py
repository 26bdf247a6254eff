"""``sediment maintain ...`` in a process that records every compaction job it runs (for
``test_maintainers.py``): ``python maintainer_worker.py JOURNAL ARGS...``.

Each job appends ``{"pid", "job", "table", "start", "assigned"}`` before it runs (``assigned``:
when the table's state gave the job its id) and ``{"pid", "job", "end", "committed"}`` after,
one JSON line each, flushed at once (a SIGKILLed process keeps what it wrote: the lines are in
the kernel's page cache). The test then checks that no two processes ran one job at the same
time unless the second took it up as stale, and that each job committed at most once.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[2] / "src")]

from sediment.cli.app import main  # noqa: E402 (after the checkout's path)
from sediment.maintenance import continuous  # noqa: E402

_lock = threading.Lock()


def journal(path: str) -> Any:
    out = open(path, "a", buffering=1)  # noqa: SIM115 - the process's life

    def write(doc: dict[str, Any]) -> None:
        with _lock:
            out.write(json.dumps({"pid": os.getpid(), **doc}) + "\n")
            out.flush()

    return write


if __name__ == "__main__":
    write = journal(sys.argv[1])
    real = continuous.run_job

    def run_job(table: Any, state: Any, job: Any, **kw: Any) -> Any:
        assigned = state.jobs.get(job.job_id, (None, None))[1]  # when its job id was given
        write({"job": job.job_id, "table": table.name, "start": time.time(),
               "assigned": assigned})
        r = real(table, state, job, **kw)
        write({"job": job.job_id, "table": table.name, "end": time.time(),
               "committed": r.committed})
        return r

    continuous.run_job = run_job  # type: ignore[assignment]
    sys.argv = ["sediment", *sys.argv[2:]]
    main()
