"""The chaos soak for under a minute (24 s of writing, then the checks;
``benchmarks/soak.py --chaos``; ``./dev soak`` runs it for 5
and 60 minutes): FoundationDB's S3 fault mix through the fault proxy, keyed writers (ingest,
upsert, deletes, a new column), the streaming sink, a reader, a maintainer, GC and prune
under a clock 5 minutes ahead, a dump and load, and a kill -9 every ~5 s (at least two,
whatever the draws: each comes 2.5-7.5 s after the last, on the harness's next one-second
tick, so the second is in by 17 s, before the kill window closes at 19 s). Every answer and
the final table are checked against the reference the harness replays from the log; then one
GC and prune with every delay at 0 leave nothing but what the head references.

Short: fewer processes than the long runs (the machine has 2 cores), the dump is not among
the processes killed (a killed dump's lock holds the next one off for two minutes), and a
maintainer or GC still busy 5 s after the writers are done is killed, not waited for; a reader
gets up to a minute to end its last query (every reader process answers one at least: under
the fault mix, S3's backoff can hold a query past the writing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _chaos  # noqa: E402
from _chaos_report import ZERO_TARGETS  # noqa: E402


@pytest.mark.slow
@pytest.mark.faults
@pytest.mark.s3
@pytest.mark.timeout(400)
def test_chaos_minute(tmp_path: Path) -> None:
    args = argparse.Namespace(minutes=0.4, writers=3, readers=1, maintainers=1,
                              chaos_seconds=5.0, seed=7, fault_scale=1.0,
                              work=str(tmp_path / "work"), kill_dump=False, dump_at=0.05,
                              stop_grace=5.0)
    r = _chaos.run_chaos(args)
    problems = {k: r[k] for k in ZERO_TARGETS if r[k]}
    assert not problems, f"{problems}: {r['wrong_examples']} {r['leftover_examples']}"
    assert r["dump_loaded_equal"] and r["content_kept"], r
    assert r["committed_writes"] > 0 and r["answers_checked"] > 0, r
    assert sum(r["kills"].values()) >= 2, r["kills"]
    kinds = r["faults"]["by_kind"]
    assert kinds.get("status", 0) > 0 and kinds.get("delay", 0) > 0, kinds
