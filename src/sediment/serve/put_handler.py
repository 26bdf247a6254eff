"""``do_put``: one put's stream read, checked and written (see :mod:`sediment.serve.server`).

The put descriptor names the table (and ``"write": "upsert"``, ``"idempotency_key"``,
``"end_marker"``); the stream's batches are counted as they arrive. With group commit on
(``write.group_commit_ms`` / ``serve --group-commit-ms``) the put joins its table's next group
(:mod:`sediment.serve.puts`); otherwise it ingests its stream in one transaction when the
stream ends. A broken or cancelled stream (a client that died), or one that ends without its
end marker when the descriptor asked for one, commits nothing. The reply metadata is the
result as JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.flight as fl

from sediment.errors import BadRequestError, DataError
from sediment.handle import handle_of
from sediment.ingest.standard import IngestResult
from sediment.serve.protocol import END_OF_STREAM, dumps, idempotency_key, quoted, table_name
from sediment.serve.puts import GroupedPuts
from sediment.serve.stats import Request
from sediment.table import Table
from sediment.tokens import Right


class PutCall(Protocol):
    """What a put needs of its admitted call (:class:`~sediment.serve.middleware.Call`)."""

    table: str

    def allow(self, right: Right, table: str | None, what: str) -> None: ...

    def waiting(self) -> None: ...

    def working(self) -> None: ...

PUT_WRITES = ("ingest", "upsert")
"""What a put descriptor's ``"write"`` may ask for (default ``ingest``)."""

PUT_FIELDS = ("table", "write", "idempotency_key", "end_marker")
"""The fields a put descriptor may carry. Any other is refused: a misspelt
``"idempotency_key"`` or ``"write"`` ignored would turn exactly-once or the upsert off
without a word."""


def check_put_fields(doc: dict[str, Any]) -> None:
    """BadRequestError naming the first field of ``doc`` that a put descriptor does not
    have."""
    for name in doc:
        if name not in PUT_FIELDS:
            raise BadRequestError(f"malformed put descriptor: unknown field {quoted(name)} "
                                  f"(fields: {', '.join(PUT_FIELDS)})")


def put_write(doc: dict[str, Any]) -> str:
    """The write a put descriptor asks for: ``"write": "upsert"`` replaces every record of
    each record key the stream carries (``Table.upsert``); ``"ingest"`` (or no ``write``)
    adds the records (``Table.ingest``). BadRequestError for anything else."""
    write = doc.get("write", "ingest")
    if write not in PUT_WRITES:
        raise BadRequestError(f"malformed put descriptor: 'write' must be one of "
                              f"{', '.join(PUT_WRITES)}, not {quoted(write)}")
    return str(write)


def serve_put(doc: dict[str, Any], call: PutCall, context: Any,
              reader: fl.MetadataRecordBatchReader, writer: fl.FlightMetadataWriter,
              req: Request, *, puts: GroupedPuts, table_of: Callable[[str], Table],
              writable: Callable[[str], None]) -> None:
    """Serve one ``do_put`` whose descriptor is ``doc`` (see the module); ``req``: the
    request's stats record; ``puts``, ``table_of`` and ``writable``: the server's group
    commit, open tables and read-only check."""
    name = table_name(doc, "put descriptor")
    req.table = call.table = name
    check_put_fields(doc)
    call.allow("write", name, "do_put")
    upsert = put_write(doc) == "upsert"
    writable(f"{'an upsert' if upsert else 'a put'} into table {name}")
    table = table_of(name)
    write = table.upsert if upsert else table.ingest
    key = idempotency_key(doc, "put descriptor")
    marked = doc.get("end_marker") is True

    def counted() -> Iterator[pa.RecordBatch]:
        while True:
            call.waiting()  # for the client's next message
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                call.working()
                break
            call.working()  # ServiceError if it came past the idle timeout
            if chunk.data is not None and chunk.data.num_rows:
                req.rows += chunk.data.num_rows
                yield chunk.data
            if marked and chunk.app_metadata is not None and \
                    chunk.app_metadata.to_pybytes() == END_OF_STREAM:
                return
        # a client that dies mid-stream ends the stream as if it were done: only the call's
        # cancellation tells the two apart
        what = "upsert" if upsert else "ingest"
        if context is not None and context.is_cancelled():
            raise DataError(f"{what} into table {name}: the client went away mid-stream; "
                            f"nothing is committed")
        if marked:
            raise DataError(f"{what} into table {name}: the put stream ended without its end "
                            f"marker (the client stopped mid-stream); nothing is committed")

    def stream(batches: Iterator[pa.RecordBatch]) -> IngestResult:
        return write(pa.RecordBatchReader.from_batches(reader.schema, batches),
                     idempotency_key=key)

    state = handle_of(table).states.cached_head()
    if puts.window_of(state) > 0:  # group commit (see sediment.serve.puts)
        result = puts.put(table, state, counted(), upsert=upsert, key=key,
                                 stream=stream)
    else:
        result = stream(counted())
    writer.write(pa.py_buffer(dumps(dataclasses.asdict(result))))
