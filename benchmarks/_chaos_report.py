"""The figures of ``benchmarks/soak.py --chaos`` (``_chaos.py``'s run): printed, judged
against their goals and saved under ``benchmarks/results/``."""

from __future__ import annotations

import json
from typing import Any

import _common

ZERO_TARGETS = ("records_lost", "records_duplicated", "records_unexpected", "commits_missing",
                "commits_duplicated", "commits_misreported", "wrong_answers",
                "versions_unverifiable", "leftovers")


def report_chaos(r: dict[str, Any], args: Any) -> int:
    """Print the figures and the goals, save them (``benchmarks/results/soak_chaos_<n>min``);
    the exit status (1: a goal missed)."""
    f = r["faults"]
    print(f"\n[chaos] {r['seconds']:.0f} s: {r['requests']} requests "
          f"({r['requests_per_second']:.0f}/s), faults by kind {json.dumps(f['by_kind'])}")
    print(f"  faults by rule {json.dumps(f['by_rule'])}")
    print(f"  kills {json.dumps(r['kills'])}; unexpected exits {json.dumps(r['unexpected_exits'])}")
    print(f"  committed writes {r['committed_writes']} ({r['writer_ops_committed']} writer "
          f"operations, {r['schema_changes']} new columns, {r['sink_writes_committed']} sink "
          f"writes in {r['sink_commits']} micro-batches: {r['write_commits']} commits); given "
          f"up {r['ops_given_up']} + {r['sink_batches_given_up']}")
    print(f"  records {r['records']}: lost {r['records_lost']}, duplicated "
          f"{r['records_duplicated']}, unexpected {r['records_unexpected']}; answers checked "
          f"{r['answers_checked']}, wrong {r['wrong_answers']}, failed cleanly "
          f"{r['query_errors']} {json.dumps(r['query_error_kinds'])}")
    print(f"  versions {r['versions']} {json.dumps(r['log_kinds'])}; seen by readers "
          f"{r['versions_seen']}, unverifiable {r['versions_unverifiable']}; dump of version "
          f"{r['dump_version']} loaded equal: {r['dump_loaded_equal']}")
    print(f"  settle {r['settle_seconds']:.1f} s: leftovers {r['leftovers']} "
          f"{json.dumps(r['leftover_examples'])}; objects {json.dumps(r['objects_by_folder'])}")
    print(f"  seconds past the writers' deadline until each was done "
          f"{json.dumps({k: round(v, 1) for k, v in r['seconds_past_deadline'].items()})}; "
          f"checks {r['check_seconds']:.1f} s")
    for example in r["wrong_examples"]:
        print(f"  wrong answer: {example}")
    goals = [_common.goal_line(f"chaos {k}", r[k], 0, "", higher_is_better=False)
             for k in ZERO_TARGETS]
    goals.append(_common.goal_line("chaos dump loaded equal", int(bool(r["dump_loaded_equal"])),
                                   1, ""))
    goals.append(_common.goal_line("chaos content kept by settle", int(r["content_kept"]), 1,
                                   ""))
    goals.append(_common.goal_line("chaos committed writes per hour of writing",
                                   r["committed_writes"] * 60 / args.minutes, 1000, ""))
    if not args.no_save:
        _common.save_results(f"soak_chaos_{args.minutes:g}min",
                             {"parameters": dict(vars(args)), "runs": [r], "goals": goals},
                             quick=args.quick)
    return 0 if all(g["passed"] for g in goals) else 1
