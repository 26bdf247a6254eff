"""``sediment doctor``: is a store healthy? Cheap checks of every table (see
:mod:`sediment.doctor.checks`), each finding with what to do; the command exits non-zero when
something needs attention."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from urllib.parse import quote

from sediment.core.units import human_seconds
from sediment.doctor.checks import CHECKS, check_table
from sediment.doctor.findings import DoctorReport, Finding
from sediment.errors import SedimentError
from sediment.handle import TableHandle
from sediment.maintenance.lease_store import MEMBERS, list_maintainers
from sediment.storage.base import ObjectStore

STOPPED_TIMEOUTS = 2
"""A maintainer silent for this many of its lease timeouts has stopped: its leases have
been free for another to take for a whole timeout."""

__all__ = ["CHECKS", "DoctorReport", "Finding", "check_table", "examine", "maintainers"]


def examine(store_uri: str, names: Sequence[str], open_table: Callable[[str], TableHandle],
            *, root: ObjectStore | None = None, now: float | None = None) -> DoctorReport:
    """Check every table of ``names`` (opened with ``open_table``: the store's catalog is
    the caller's); a table that does not open is a finding, the others are still checked.
    ``root``: the store's root, for the heartbeats of its maintainers."""
    started = time.monotonic()
    findings: list[Finding] = [] if root is None else maintainers(root, now)
    for name in names:
        try:
            table = open_table(name)
        except SedimentError as e:
            findings.append(Finding(name, "unopenable", f"table {name} does not open: "
                                    f"{type(e).__name__}: {e}",
                                    f"run `sediment verify {name}`; a damaged catalog entry "
                                    f"or log needs restoring from a backup or a dump"))
            continue
        findings.extend(check_table(table, now=now))
    return DoctorReport(store_uri, tuple(names), tuple(findings), time.monotonic() - started)


def maintainers(root: ObjectStore, now: float | None = None) -> list[Finding]:
    """Maintainers (``maintain --loop``) that stopped beating without stopping cleanly: their
    member objects (``maintainers/members/``, the leases' membership) older than
    :data:`STOPPED_TIMEOUTS` of their lease timeouts. A clean stop deletes the member."""
    out = []
    listing = list_maintainers(root, now=now)
    stopped = {m for m, (age, doc) in listing.members.items()
               if age > STOPPED_TIMEOUTS * float(doc.get("timeout", 30.0) or 30.0)}
    running = len(listing.members) - len(stopped)
    for member, (age, doc) in sorted(listing.members.items()):
        if member not in stopped:
            continue
        timeout = float(doc.get("timeout", 30.0) or 30.0)
        who = f"{doc.get('host', '?')} (process {doc.get('pid', '?')})"
        key = f"{MEMBERS}{quote(member, safe='')}.json"
        # what became of its tables: taken by the maintainers still beating, or by nobody
        taken = (f"the {running} running took its leases after {human_seconds(timeout)}"
                 if running else "no other maintainer is running: its tables are not "
                 "maintained until one is")
        out.append(Finding(None, "maintainer_stopped", f"the maintainer {member} on {who} "
                           f"last beat {human_seconds(age)} ago ({key})",
                           f"restart `sediment maintain --loop` there or elsewhere ({taken}); "
                           f"a maintainer stopped for good is forgotten by the others after "
                           f"10 lease timeouts, or delete {key}"))
    return out
