"""``sediment serve`` that SIGKILLs itself right after its first group commit lands, before any
put of that group is answered (for ``test_serve_group_commit.py``):
``python group_commit_killer.py serve --store URI ...`` (the CLI's arguments)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[3] / "src")]

from sediment.cli.app import main  # noqa: E402 (after the checkout's path)
from sediment.serve.puts import GroupedPuts  # noqa: E402


def kill(results: list[Any]) -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # the group is committed; no put is answered


GroupedPuts.after_commit = kill
sys.argv[0] = "sediment"
main()
