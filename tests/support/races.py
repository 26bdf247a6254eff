"""Forcing a race at one point, for tests: a :class:`Gate` holds a thread where a wrapped
library function calls ``arrive`` until the test, having acted meanwhile, lets it go; an
:class:`InThread` runs the side that is held. Every wait is bounded, so a race that never
reaches its point fails the test instead of hanging it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

WAIT = 60.0
"""Seconds either side waits for the other before the test fails (never reached when it
works)."""


class Gate:
    """Hold one thread at a point (``arrive``) until the test lets it go (``release``)."""

    def __init__(self, timeout: float = WAIT) -> None:
        self.timeout = timeout
        self.arrived = threading.Event()
        self.released = threading.Event()

    def arrive(self) -> None:
        """Called by the held thread at the point: waits there for ``release``."""
        self.arrived.set()
        assert self.released.wait(self.timeout), "the test never let the held thread go"

    def wait_arrived(self, what: str) -> None:
        """Called by the test: returns once the held thread is at the point."""
        assert self.arrived.wait(self.timeout), f"timed out waiting for {what}"

    def release(self) -> None:
        self.released.set()


class InThread:
    """``work()`` on a thread of its own, started at once; :meth:`result` joins it and
    returns what it returned (raising what it raised)."""

    def __init__(self, work: Callable[[], Any], timeout: float = WAIT) -> None:
        self.timeout = timeout
        self._out: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            self._out["result"] = work()
        except BaseException as e:  # noqa: BLE001 - raised again by result()
            self._out["error"] = e

    def result(self) -> Any:
        self._thread.join(self.timeout)
        assert not self._thread.is_alive(), "the thread never finished"
        if "error" in self._out:
            raise self._out["error"]
        return self._out["result"]


def as_another_process(table: Any) -> Any:
    """``table`` (a Table or a handle), its head cache detached from the head its process
    shares with the table's other handles (``sediment.state.head_cache.SharedHead``): it
    sees the others' commits only by reading the log, as another process does. Returns it."""
    from sediment.handle import handle_of
    from sediment.state.head_cache import SharedHead

    handle_of(table).states.heads._shared = SharedHead()
    return table
