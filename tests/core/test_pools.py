"""sediment.pools: one pool per name and process, its threads started once, fork-safe."""

from __future__ import annotations

import os
import threading

import pytest

from sediment.pools import shared_pool


def test_a_name_gives_the_same_pool_and_its_threads_are_reused() -> None:
    pool = shared_pool("test-reuse", 4)
    assert shared_pool("test-reuse", 4) is pool
    assert shared_pool("test-other", 4) is not pool
    for _ in range(3):  # threads are started once, at most 4, then reused
        idents = set(pool.map(lambda _: threading.get_ident(), range(16)))
        assert len(idents) <= 4
    names = {t.name for t in threading.enumerate() if t.ident in idents}
    assert names and all(n.startswith("sediment-test-reuse") for n in names)

@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_makes_its_own_pool_and_it_runs() -> None:
    parent = shared_pool("test-fork", 2)
    assert list(parent.map(lambda x: x * 2, range(3))) == [0, 2, 4]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool has no threads here
        try:
            child = shared_pool("test-fork", 2)
            ok = child is not parent and list(child.map(lambda x: x + 1, range(3))) == [1, 2, 3]
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as r:
        answer = r.read()
    os.waitpid(pid, 0)
    assert answer == b"1"
