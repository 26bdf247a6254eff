"""Operations of the upsert and delete proofs, their reference, and subprocess entry points.

Run as ``python tests/proof/keyed_workers.py MODE '<json args>'``. Like ``workers.py`` (whose
schema, rows and helpers these share), each worker opens its own Store, so processes race
only through the object store.

An operation is fixed by ``(writer, index, seed)`` and the list of kinds it cycles through
(:func:`make_op`): the checking process regenerates every operation a worker ran from the
index and version the worker reported (or, after a kill, from the table's history), never
shipping rows around. Records keep the identity of ``workers.py`` (``value`` is
``"<writer>-<op>-<row>"``, unique over a run). Row keys are two letters, the second one of
``abcd`` (104 row keys, three ``ts`` each: 312 record keys), so upserts and deletes of
different operations hit the same records often.

The reference (:class:`Reference`) replays operations in commit order, with the semantics
the model test (tests/ingest/test_upsert_delete_model.py) writes out: an ingest adds its
records; an upsert keeps the last of its records of each record key ``(key, ts)`` and removes
every older record of those record keys; a delete removes the records committed before it of
its keys, its range ``[lo, hi)`` or matching its filter (a null ``n`` matches nothing).
Reads return records sorted by record key and, within one, in commit order.

Modes:

``keyed``   run operations ``first`` .. ``first + count - 1`` (or until ``until``), appending
            ``{"op", "start"}`` then ``{"op", "version"}`` or ``{"op", "error"}`` to ``out``.
``crash``   touch ``ready``, wait for ``go``, then run operations from 0 on forever (with
            ``compact_every``, a compaction after every so many); the test SIGKILLs it, or
            ``kill_at`` (as in workers.py) makes it kill itself at a log write.
``reader``  until ``stop`` exists: range queries, each appended to ``out`` with the versions
            around it and the result's values in order.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

if __name__ == "__main__":  # run as a script: make ``sediment`` and workers importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import workers as w

import sediment as sd

HERE = Path(__file__).resolve()
LETTERS = "abcdefghijklmnopqrstuvwxyz"
SECOND = "abcd"
WRITES = ("ingest", "upsert")
DELETES = ("delete_keys", "delete_range", "delete_filter", "purge_keys")
COMMIT_KINDS = {"ingest": "add_files", "upsert": "add_files", "delete_keys": "delete_records",
                "delete_range": "delete_records", "delete_filter": "delete_records",
                "purge_keys": "delete_records"}
"""The log entry each operation commits (exactly one; a purge's rewrite commits a job
assignment and a batch of job commits besides, which change no content)."""

Row = w.Row


@dataclass(frozen=True)
class Op:
    """One operation: what it writes or what it deletes."""

    kind: str
    rows: tuple[Row, ...] = ()
    keys: tuple[str, ...] = ()
    lo: str | None = None
    hi: str | None = None
    n_lo: int = 0
    n_hi: int = 0
    key_from: str | None = None
    text: bool = False
    tag: str = field(default="", compare=False)

    def run(self, table: sd.Table) -> int:
        """Commit this operation on ``table``; the version it committed."""
        if self.kind == "ingest":
            return table.ingest(w.to_arrow(self.rows)).version
        if self.kind == "upsert":
            return table.upsert(w.to_arrow(self.rows)).version
        if self.kind == "delete_keys":
            return table.delete(keys=list(self.keys))
        if self.kind == "delete_range":
            return table.delete(ranges=[sd.Range(self.lo, self.hi)])
        if self.kind == "delete_filter":
            return table.delete(filter=self.filter())
        if self.kind == "purge_keys":
            return table.purge(keys=list(self.keys)).version
        raise ValueError(self.kind)

    def filter(self) -> Any:
        if self.text:
            where = f"n >= {self.n_lo} AND n < {self.n_hi}"
            return where if self.key_from is None else f"{where} AND key >= '{self.key_from}'"
        expr = (pc.field("n") >= self.n_lo) & (pc.field("n") < self.n_hi)
        return expr if self.key_from is None else expr & (pc.field("key") >= self.key_from)

    def removes(self, r: Row) -> bool:
        """Whether this delete removes record ``r`` (committed before it)."""
        if self.kind in ("delete_keys", "purge_keys"):
            return r[0] in self.keys
        if self.kind == "delete_range":
            return w.in_range(r[0], self.lo, self.hi)
        if self.kind == "delete_filter":
            return r[3] is not None and self.n_lo <= r[3] < self.n_hi and \
                (self.key_from is None or r[0] >= self.key_from)
        return False


def random_key(rng: random.Random, letters: str = LETTERS) -> str:
    return rng.choice(letters) + rng.choice(SECOND)


def make_op(writer: str, i: int, kinds: Sequence[str], *, rows: int = 30, seed: int = 0,
            letters: str = LETTERS) -> Op:
    """Operation ``i`` of ``writer``: of kind ``kinds[i % len(kinds)]``; the row keys it
    writes start with one of ``letters``."""
    kind = kinds[i % len(kinds)]
    rng = random.Random(f"{seed}/{writer}/{i}")
    tag = f"{writer}#{i}"
    if kind in WRITES:
        out = []
        for r in range(rows):
            n = None if rng.random() < 0.1 else rng.randrange(-1000, 1000)
            out.append((random_key(rng, letters), rng.randrange(3), f"{writer}-{i}-{r}", n))
        return Op(kind, rows=tuple(out), tag=tag)
    if kind in ("delete_keys", "purge_keys"):
        return Op(kind, keys=tuple(random_key(rng) for _ in range(rng.randint(1, 3))), tag=tag)
    if kind == "delete_range":
        first = rng.choice(LETTERS)
        if rng.random() < 0.3:  # a whole letter: may cross a leaf's end
            nxt = LETTERS[LETTERS.index(first) + 1] if first != "z" else None
            return Op(kind, lo=first, hi=nxt, tag=tag)
        a = rng.randrange(len(SECOND))
        b = rng.randint(a + 1, len(SECOND))
        return Op(kind, lo=first + SECOND[a],
                  hi=first + SECOND[b] if b < len(SECOND) else first + "e", tag=tag)
    if kind == "delete_filter":
        n_lo = rng.randrange(-1000, 1000)
        return Op(kind, n_lo=n_lo, n_hi=n_lo + rng.randint(40, 120),
                  key_from=rng.choice(LETTERS) if rng.random() < 0.3 else None,
                  text=rng.random() < 0.5, tag=tag)
    raise ValueError(kind)


class Reference:
    """A table's records under the operations replayed in commit order (module docs)."""

    def __init__(self, records: Iterable[Row] = ()) -> None:
        self.records: list[Row] = list(records)  # in commit order

    def copy(self) -> Reference:
        return Reference(self.records)

    def apply(self, op: Op) -> None:
        if op.kind == "ingest":
            self.records.extend(op.rows)
        elif op.kind == "upsert":
            last: dict[tuple[str, int], Row] = {}
            for r in op.rows:
                last.pop((r[0], r[1]), None)
                last[(r[0], r[1])] = r  # input order of the kept (last) occurrences
            self.records = [r for r in self.records if (r[0], r[1]) not in last]
            self.records.extend(last.values())
        else:
            self.records = [r for r in self.records if not op.removes(r)]

    def content(self) -> list[Row]:
        """What a read returns: by record key, each record key's records in commit order."""
        return sorted(self.records, key=lambda r: (r[0], r[1]))


def replay(base: Reference, ops: Sequence[tuple[int, Op]]) -> dict[int, list[Row]]:
    """The content after each committed operation, by version (``ops``: (version, op))."""
    ref = base.copy()
    out: dict[int, list[Row]] = {}
    for version, op in sorted(ops, key=lambda x: x[0]):
        ref.apply(op)
        out[version] = ref.content()
    return out


def content_at(contents: dict[int, list[Row]], base: list[Row], version: int) -> list[Row]:
    """The content at ``version``: after the last operation committed at or before it."""
    found = [v for v in contents if v <= version]
    return contents[max(found)] if found else base


def read_op_log(path: str | Path) -> tuple[dict[int, int], dict[int, str], int | None]:
    """(op -> version committed, op -> error, op started but not finished)."""
    done: dict[int, int] = {}
    failed: dict[int, str] = {}
    started: int | None = None
    p = Path(path)
    for line in p.read_text().splitlines() if p.exists() else []:
        doc = json.loads(line)
        if doc.get("start"):
            started = doc["op"]
        elif "version" in doc:
            done[doc["op"]] = doc["version"]
            started = None
        else:
            failed[doc["op"]] = doc["error"]
            started = None
    return done, failed, started


# ---- workers ---------------------------------------------------------------------------------
def _append(path: str, doc: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(doc) + "\n")


def keyed_worker(args: dict[str, Any]) -> None:
    table = w.open_table(args)
    until = float(args.get("until", float("inf")))
    first = int(args.get("first", 0))
    for i in range(first, first + int(args.get("count", 10**9))):
        if time.time() >= until:
            break
        op = make_op(args["writer"], i, args["kinds"], rows=args.get("rows", 30),
                     seed=args.get("seed", 0), letters=args.get("letters", LETTERS))
        _append(args["out"], {"op": i, "start": True})
        try:
            _append(args["out"], {"op": i, "version": op.run(table)})
        except sd.SedimentError as e:
            _append(args["out"], {"op": i, "error": f"{type(e).__name__}: {e}"})
        time.sleep(random.uniform(0, args.get("pause", 0.0)))


def crash_worker(args: dict[str, Any]) -> None:
    if args.get("kill_at"):
        w._install_kill_point(args["kill_at"])
    table = w.open_table(args)
    table._handle.states.head()
    Path(args["ready"]).touch()
    go = Path(args["go"])
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            sys.exit("crash worker: no go signal")
        time.sleep(0.002)
    every = int(args.get("compact_every", 0))
    i = 0
    while True:
        make_op(args["writer"], i, args["kinds"], rows=args["rows"]).run(table)
        i += 1
        if every and i % every == 0:
            print(f"compact: {table.compact()}", flush=True)


def reader_worker(args: dict[str, Any]) -> None:
    table = w.open_table(args)
    rng = random.Random(args.get("seed", 0))
    stop = Path(args["stop"])
    while not stop.exists():
        lo, hi = w.random_range(rng)
        rec: dict[str, Any] = {"lo": lo, "hi": hi, "v0": table.version}
        try:
            res = table.query(ranges=[sd.Range(lo, hi)])
            rec.update(v1=table.version, values=res.column("value").to_pylist())
        except sd.SedimentError as e:
            rec["error"] = f"{type(e).__name__}: {e}"
        _append(args["out"], rec)


MODES = {"keyed": keyed_worker, "crash": crash_worker, "reader": reader_worker}


def command(mode: str, args: dict[str, Any]) -> list[str]:
    """The argv that runs this module as a worker."""
    return [w.PYTHON, str(HERE), mode, json.dumps(args)]


if __name__ == "__main__":
    MODES[sys.argv[1]](json.loads(sys.argv[2]))
