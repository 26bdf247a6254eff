"""A batcher run in its own process that SIGKILLs itself at a chosen point (for
``test_batcher_recovery.py``): ``python batcher_worker.py '<json args>'``.

Arguments: ``uri`` and ``options`` of the store (table ``events``); ``kill_at`` (as the proof
suites' ``{"kind", "when", "nth"}``: just before or after the nth log entry of that kind);
``kill_after_marker`` (right after this run takes an abandoned job's recovery marker);
``now`` (the run's time, for recovery).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[2] / "src"), str(HERE.parents[1] / "proof")]

import workers  # noqa: E402 (tests/proof/workers.py: the proof suites' kill points)

import sediment as sd  # noqa: E402 (after the checkout's paths)
from sediment.ingest import batcher, batcher_recovery  # noqa: E402


def main(args: dict[str, Any]) -> None:
    if args.get("kill_at"):
        workers._install_kill_point(args["kill_at"])
    if args.get("kill_after_marker"):
        real = batcher_recovery.create_once

        def create_once(objects: Any, key: str, data: bytes, **kw: Any) -> bool:
            won = real(objects, key, data, **kw)
            if won and ".recovering" in key:
                os.kill(os.getpid(), signal.SIGKILL)  # dies holding the job's marker
            return won

        batcher_recovery.create_once = create_once  # type: ignore[assignment]
    table = sd.Store.open(args["uri"], **args["options"]).table("events")
    batcher.run(table, now=args.get("now"), flush=True)
    sys.exit("the worker was never killed")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
