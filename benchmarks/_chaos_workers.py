"""The processes of ``benchmarks/soak.py --chaos`` (run as ``python _chaos_workers.py MODE
'<json args>'``); each opens its own Store through the fault proxy, so processes race only
through the object store. The harness (``_chaos.py``) kills any of them with SIGKILL and
starts it again with the same arguments: every mode resumes from its own log.

``writer``  operations ``0, 1, ...`` of one writer (``tests/proof/keyed_workers.py``'s
            ``make_op``: ingests, upserts and deletes by keys, ranges and filters), each under
            the idempotency key ``"<writer>#<op>"`` and retried until it commits, so a commit
            whose answer was lost, or a writer killed mid-commit, commits exactly once. Every
            ``schema_every``-th operation adds a column instead (named after the operation: a
            retry that finds it added is done). Appends ``{"op", "start"}`` then ``{"op",
            "version"}`` (or ``"error"`` when it gave up) to ``out``; a restarted writer first
            runs again the operation its predecessor started and did not finish.
``sink``    the streaming sink: small writes into ``Table.writer()`` (the buffered writer's
            micro-batches, each write under the key ``"sink#<n>"``), flushed every few
            writes; ``{"flushed": last}`` after each flush.
``reader``  until ``stop`` exists: a random key range at the head (the versions before and
            after, and a digest of the answer's values in order) or at a recent version.
``gc``      until ``stop`` exists: ``gc()`` then ``prune()``, every ``interval`` seconds (the
            harness runs it under ``faketime``: its clock is skewed).
``dump``    dump the head under ``root`` (resuming an interrupted dump), then load it into a
            new table; ``{"version", "table"}`` to ``out``.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "tests" / "proof"))
if __name__ == "__main__":  # run as a script: make ``sediment`` importable from the checkout
    sys.path.insert(0, str(HERE.parents[1] / "src"))

import keyed_workers as kw  # noqa: E402
import workers as w  # noqa: E402

import sediment as sd  # noqa: E402

KINDS = ["ingest", "upsert", "delete_keys", "upsert", "delete_range", "ingest", "upsert",
         "delete_filter"]
"""The cycle of a writer's operations (one in ``schema_every`` adds a column instead)."""
SINK_ROWS = 4


def sink_rows(n: int) -> list[w.Row]:
    """The records of sink write ``n``: keys ``"0<n>-<i>"`` sort before every letter key (no
    writer's delete names them: keys, ranges and filters there start at ``a`` or match a
    non-null ``n``), one record per record key, so their order in a read is fixed."""
    return [(f"0{n:07d}-{i}", 0, f"sink-{n}-{i}", None) for i in range(SINK_ROWS)]


def answer_digest(values: list[str]) -> str:
    """Digest of an answer's values in order (what a reader records, and the check
    recomputes from the reference)."""
    return hashlib.sha256("\n".join(values).encode()).hexdigest()[:32]


def _append(path: str, doc: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(doc) + "\n")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a worker's log; a line a kill cut short is skipped."""
    p = Path(path)
    out = []
    for line in p.read_text().splitlines() if p.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def is_schema_op(args: dict[str, Any], i: int) -> bool:
    every = int(args.get("schema_every", 0))
    return bool(every) and i % every == every - 1


def column_name(writer: str, i: int) -> str:
    return f"c_{writer}_{i}".replace(".", "_")


def open_table(args: dict[str, Any]) -> sd.Table:
    """The table, opened again until the faults let it be (a worker that cannot open it
    would only be started again)."""
    for attempt in range(30):
        try:
            return w.open_table(args)
        except sd.SedimentError:
            if attempt == 29:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def run_op(table: sd.Table, args: dict[str, Any], i: int) -> int:
    """Commit operation ``i`` (exactly once: its idempotency key); the version it committed
    (a column that exists already: the version that added it)."""
    writer = args["writer"]
    if is_schema_op(args, i):
        name = column_name(writer, i)
        if name in table.schema.value_names:
            return -1  # added by the attempt whose answer was lost
        return table.add_columns([(name, "int64")])
    op = kw.make_op(writer, i, KINDS, rows=args["rows"], seed=args["seed"])
    key = f"{writer}#{i}"
    if op.kind == "ingest":
        return table.ingest(w.to_arrow(op.rows), idempotency_key=key).version
    if op.kind == "upsert":
        return table.upsert(w.to_arrow(op.rows), idempotency_key=key).version
    if op.kind == "delete_keys":
        return table.delete(keys=list(op.keys), idempotency_key=key)
    if op.kind == "delete_range":
        return table.delete(ranges=[sd.Range(op.lo, op.hi)], idempotency_key=key)
    return table.delete(filter=op.filter(), idempotency_key=key)


def writer_worker(args: dict[str, Any]) -> None:
    log = read_jsonl(args["out"])
    started = [d["op"] for d in log if d.get("start")]
    ended = {d["op"] for d in log if not d.get("start")}
    first = started[-1] if started else 0
    resume = bool(started) and first not in ended  # the predecessor's op in flight: again
    if started and not resume:
        first += 1
    table = open_table(args)
    until = float(args["until"])
    rng = random.Random(f"{args['seed']}/{args['writer']}/{first}")
    i = first
    while time.time() < until or (resume and i == first):
        if not (resume and i == first):
            _append(args["out"], {"op": i, "start": True})
        error = ""
        for attempt in range(60):
            try:
                _append(args["out"], {"op": i, "version": run_op(table, args, i),
                                      "attempts": attempt + 1})
                break
            except sd.SedimentError as e:
                error = f"{type(e).__name__}: {e}"
                time.sleep(min(2.0, 0.05 * 2 ** min(attempt, 6)) * rng.random())
        else:
            _append(args["out"], {"op": i, "error": error})
        i += 1
        time.sleep(rng.uniform(0, float(args.get("pause", 0.0))))


def sink_worker(args: dict[str, Any]) -> None:
    flushed = [d["flushed"] for d in read_jsonl(args["out"]) if "flushed" in d]
    n = (flushed[-1] + 1) if flushed else 0
    table = open_table(args)
    until = float(args["until"])
    rng = random.Random(f"{args['seed']}/sink/{n}")
    while time.time() < until:
        batch = list(range(n, n + rng.randint(2, 6)))
        error = ""
        for attempt in range(60):
            writer = None
            try:
                writer = table.writer(max_seconds=0.5)  # reads the head: may fail too
                for m in batch:  # every write again: the keys make a retry exactly once
                    writer.write(w.to_arrow(sink_rows(m)), idempotency_key=f"sink#{m}")
                    time.sleep(rng.uniform(0, 0.05))
                versions = writer.close()
                _append(args["out"], {"flushed": batch[-1], "versions": versions,
                                      "attempts": attempt + 1})
                break
            except sd.SedimentError as e:
                error = f"{type(e).__name__}: {e}"
                try:  # what the writer buffered is dropped
                    if writer is not None:
                        writer.close()
                except sd.SedimentError:
                    pass
                time.sleep(min(2.0, 0.05 * 2 ** min(attempt, 6)) * rng.random())
        else:
            _append(args["out"], {"failed": batch[-1], "error": error})
        n = batch[-1] + 1


def reader_worker(args: dict[str, Any]) -> None:
    table = open_table(args)
    rng = random.Random(f"{args['seed']}/{args['reader']}/{time.time()}")
    stop = Path(args["stop"])
    first = True  # one answer at least per process, however late it started: a reader
    while first or not stop.exists():  # restarted after a kill near the end checks one too
        first = False
        lo, hi = w.random_range(rng)
        rec: dict[str, Any] = {"lo": lo, "hi": hi}
        try:
            head = table.version
            if rng.random() < 0.2 and head > 1:
                v = rng.randint(max(1, head - 30), head)
                res = table.query(ranges=[sd.Range(lo, hi)], version=v, columns=["value"])
                rec["version"] = v
            else:
                rec["v0"] = head
                res = table.query(ranges=[sd.Range(lo, hi)], columns=["value"])
                rec["v1"] = table.version
            values = res.column("value").to_pylist()
            rec.update(rows=len(values), digest=answer_digest(values))
        except sd.SedimentError as e:
            rec["error"] = f"{type(e).__name__}: {e}"[:300]
        _append(args["out"], rec)


def gc_worker(args: dict[str, Any]) -> None:
    table = open_table(args)
    stop = Path(args["stop"])
    while not stop.exists():
        doc: dict[str, Any] = {"t": time.time()}
        try:
            g = table.gc()
            doc["gc"] = str(g)[:300]
            doc["prune"] = str(table.prune())[:300]
        except sd.SedimentError as e:
            doc["error"] = f"{type(e).__name__}: {e}"[:300]
        _append(args["out"], doc)
        time.sleep(float(args.get("interval", 5.0)))


def dump_worker(args: dict[str, Any]) -> None:
    for attempt in range(100):  # a killed predecessor's lock lasts until its heartbeat is old
        try:
            # opened within the attempt: under the fault mix opening the store can exhaust the
            # client's retries too (a dump that died there left the run with no dump at all)
            store = sd.Store.open(args["uri"], **args.get("options", {}))
            table = store.table(w.TABLE)
            job = table.dump(args["root"])
            manifest = job.manifest_uri
            loaded = store.load(manifest, args["table"])
            _append(args["out"], {"version": job.version, "table": args["table"],
                                  "records": loaded.describe()["records"],
                                  "attempts": attempt + 1})
            return
        except sd.SedimentError as e:
            _append(args["out"], {"attempt": attempt, "error": f"{type(e).__name__}: {e}"[:500]})
            time.sleep(5.0)


MODES = {"writer": writer_worker, "sink": sink_worker, "reader": reader_worker,
         "gc": gc_worker, "dump": dump_worker}


def command(mode: str, args: dict[str, Any]) -> list[str]:
    return [w.PYTHON, str(HERE), mode, json.dumps(args)]


if __name__ == "__main__":
    MODES[sys.argv[1]](json.loads(sys.argv[2]))
