"""The Python client of ``sediment serve``: ``sd.connect(uri)`` returns a :class:`RemoteStore`
whose tables offer the local API's reads and writes over Arrow Flight.

Arguments travel as the JSON of :mod:`sediment.serve.protocol` and are checked by the server's
own ``Table.prepare`` (one normalisation, the local API's messages); those that cannot travel
(iterator objects, callables, server-side folders) are refused here with a BadRequestError
(a QueryError), and so are filters the wire form cannot say (a FilterError). Errors come
back as the Sediment class the server raised.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from sediment.errors import BadRequestError, SchemaError, SedimentError
from sediment.ingest import IngestResult
from sediment.query.request import ReadRequest
from sediment.schema import Schema
from sediment.schema_changes import add_args, drop_args
from sediment.serve.protocol import (
    END_OF_STREAM,
    dumps,
    encode_query,
    encode_value,
    from_flight_error,
)
from sediment.state.log import HistoryEntry
from sediment.state.versions import Tag

FETCH_THREADS = 8
"""Endpoints of one query fetched at once."""

SCAN_PREFETCH = 4
"""Batches a scan reads ahead of its consumer (memory stays bounded by them)."""

_END = object()

PUT_BATCH_ROWS = 65_536
"""Rows per message of a put: the server ingests while later messages are still on the way."""


def _tls_roots(roots: bytes | str | os.PathLike[str] | None) -> bytes | None:
    """PEM bytes from PEM bytes/text or from the path of a PEM file."""
    if roots is None or isinstance(roots, bytes):
        return roots
    text = str(roots)
    if "-----BEGIN" in text:
        return text.encode()
    return Path(text).read_bytes()


class RemoteStore:
    """A store behind ``sediment serve``. Obtain one with ``sd.connect(uri)``."""

    def __init__(self, uri: str, token: str | None = None,
                 tls_root_certs: bytes | str | os.PathLike[str] | None = None) -> None:
        if not uri.startswith(("grpc://", "grpc+tcp://", "grpc+tls://")):
            raise BadRequestError(f"sd.connect needs grpc://host:port or grpc+tls://host:port, "
                                  f"not {uri!r}")
        self.uri = uri
        roots = _tls_roots(tls_root_certs)
        kwargs: dict[str, Any] = {} if roots is None else {"tls_root_certs": roots}
        self.client = fl.FlightClient(uri, **kwargs)
        headers = [] if token is None else [(b"authorization", f"Bearer {token}".encode())]
        self.options = fl.FlightCallOptions(headers=headers)

    # ---- transport ----------------------------------------------------------------------
    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args, options)`` with Flight errors raised as Sediment errors."""
        try:
            return fn(*args, self.options)
        except fl.FlightError as e:
            raise from_flight_error(e) from e

    def action(self, kind: str, body: dict[str, Any] | None = None) -> Any:
        """Run action ``kind`` (see :mod:`sediment.serve.actions`); its JSON answer."""
        results = self.call(lambda a, o: list(self.client.do_action(a, o)),
                            fl.Action(kind, dumps(body or {})))
        return json.loads(results[0].body.to_pybytes()) if results else None

    # ---- the store's API ------------------------------------------------------------------
    def table(self, name: str) -> RemoteTable:
        """Table ``name`` (TableNotFoundError, InvalidTableNameError as ``Store.table``)."""
        self.action("open-table", {"table": name})
        return RemoteTable(self, name)

    def tables(self) -> list[str]:
        """The tables' names, sorted (the server's ``list_flights``)."""
        infos = self.call(lambda o: list(self.client.list_flights(b"", o)))
        return sorted(i.descriptor.path[0].decode() for i in infos)

    def create_table(self, name: str, schema: Schema, *,
                     split_points: Sequence[Any] | None = None,
                     properties: dict[str, Any] | None = None) -> RemoteTable:
        self.action("create-table", {
            "name": name, "schema": schema.to_json(),
            "split_points": None if split_points is None
            else encode_value(list(split_points), "split_points"),
            "properties": properties or {}})
        return RemoteTable(self, name)

    def drop_table(self, name: str) -> None:
        self.action("drop-table", {"name": name})

    def health(self) -> dict[str, Any]:
        return dict(self.action("health"))

    def stats(self) -> dict[str, Any]:
        return dict(self.action("stats"))

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RemoteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteStore({self.uri!r})"


class RemoteTable:
    """A table behind ``sediment serve``: ``query``, ``scan``, ``ingest``, ``upsert``,
    ``delete``, ``describe``, ``history``, ``tag`` (and ``restore``, ``compact``,
    ``maintain``, and the schema changes ``add_columns``, ``drop_columns``,
    ``rename_column``, ``widen_column``) as on :class:`~sediment.Table`, with the same
    answers."""

    def __init__(self, store: RemoteStore, name: str) -> None:
        self.store = store
        self.name = name

    # ---- reads ----------------------------------------------------------------------------
    def flight_info(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
                    columns: Sequence[str] | None = None, version: int | str | None = None,
                    iterators: Sequence[Any] | None = None,
                    filter: Any = None) -> fl.FlightInfo:  # noqa: A002 (the public name)
        """The server's plan: one endpoint per leaf, its ticket pinning one version."""
        doc = encode_query(self.name, keys, ranges, columns=columns, version=version,
                           iterators=iterators, filter=filter)
        descriptor = fl.FlightDescriptor.for_command(dumps(doc))
        return self.store.call(self.store.client.get_flight_info, descriptor)

    def _fetch(self, ticket: fl.Ticket) -> pa.Table:
        return self.store.call(lambda t, o: self.store.client.do_get(t, o).read_all(), ticket)

    def query(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
              columns: Sequence[str] | None = None, version: int | str | None = None,
              iterators: Sequence[Any] | None = None,
              filter: Any = None) -> pa.Table:  # noqa: A002 (the public name)
        """As ``Table.query`` (``keys`` may be a :class:`~sediment.ReadRequest`, sent as its
        JSON; ``filter``: a pyarrow expression, sent as the JSON tree of
        :mod:`sediment.query.wire`, which refuses here with a FilterError naming any function
        it cannot carry; or ``--where`` text): the leaves' endpoints are fetched in parallel
        and joined in key order. A query of one exact key is one ``do_get`` of the whole
        query (a lookup is one round trip)."""
        if ranges is None and isinstance(keys, list | tuple) and len(keys) == 1:
            # one exact key: one leaf (or, for a key prefix, a few in a row): the whole
            # query in one do_get, without the round trip of planning
            doc = encode_query(self.name, keys, ranges, columns=columns, version=version,
                               iterators=iterators, filter=filter)
            return self._fetch(fl.Ticket(dumps({"query": doc, "leaf": None})))
        info = self.flight_info(keys, ranges, columns=columns, version=version,
                                iterators=iterators, filter=filter)
        endpoints = list(info.endpoints)
        if not endpoints:
            return info.schema.empty_table()
        tickets = [ep.ticket for ep in endpoints]
        if len(tickets) == 1:
            return self._fetch(tickets[0])
        with ThreadPoolExecutor(min(FETCH_THREADS, len(tickets))) as pool:
            parts = list(pool.map(self._fetch, tickets))
        return pa.concat_tables(parts)

    def changes(self, start_version: int | str, end_version: int | str | None = None, *,
                columns: Sequence[str] | None = None,
                filter: Any = None) -> pa.RecordBatchReader:  # noqa: A002 (the public name)
        """As ``Table.changes``: the server pins the end version (the head when not given)
        in its one endpoint's ticket, and the rows are fetched with one ``do_get``."""
        request = ReadRequest(columns=columns, filter=filter,
                              changes={"from": start_version, "to": end_version})
        descriptor = fl.FlightDescriptor.for_command(
            dumps({"table": self.name, **request.to_json()}))
        info = self.store.call(self.store.client.get_flight_info, descriptor)
        rows = self._fetch(info.endpoints[0].ticket)
        return pa.RecordBatchReader.from_batches(rows.schema, rows.to_batches())

    def scan(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
             columns: Sequence[str] | None = None, version: int | str | None = None,
             iterators: Sequence[Any] | None = None,
             filter: Any = None) -> pa.RecordBatchReader:  # noqa: A002 (the public name)
        """As ``Table.scan``: one stream of the whole query, in key order, in bounded
        memory; the server reads leaf after leaf as ``Table.scan`` does (with its read-ahead)
        and a background thread here decodes a few batches ahead of the caller. A bad query
        fails here, as the local ``scan`` does."""
        store = self.store
        doc = encode_query(self.name, keys, ranges, columns=columns, version=version,
                           iterators=iterators, filter=filter)
        stream = store.call(store.client.do_get, fl.Ticket(dumps({"query": doc, "leaf": None})))
        try:
            schema = stream.schema  # the server's first message: its error, if any, too
        except fl.FlightError as e:
            raise from_flight_error(e) from e

        def produce(out: queue.Queue[Any], stop: threading.Event) -> None:
            """Read the stream into ``out``, a few batches ahead of the consumer."""
            try:
                while not stop.is_set():
                    try:
                        chunk = stream.read_chunk()
                    except StopIteration:
                        break
                    if chunk.data is not None:
                        _offer(out, chunk.data, stop)
            except fl.FlightError as e:
                _offer(out, from_flight_error(e), stop)
            except BaseException as e:  # noqa: BLE001 (handed to the consumer, raised there)
                _offer(out, e, stop)
            finally:
                if stop.is_set():
                    stream.cancel()
            _offer(out, _END, stop)

        def batches() -> Iterator[pa.RecordBatch]:
            out: queue.Queue[Any] = queue.Queue(maxsize=SCAN_PREFETCH)
            stop = threading.Event()
            worker = threading.Thread(target=produce, args=(out, stop), daemon=True,
                                      name="sediment-remote-scan")
            worker.start()
            try:
                while True:
                    item = out.get()
                    if item is _END:
                        return
                    if isinstance(item, BaseException):
                        raise item
                    yield item
            finally:
                stop.set()

        return pa.RecordBatchReader.from_batches(schema, batches())

    # ---- writes ---------------------------------------------------------------------------
    def ingest(self, data: Any, *, progress: Callable[[int], None] | None = None,
               spill_dir: str | None = None,
               idempotency_key: str | None = None) -> IngestResult:
        """As ``Table.ingest``: the records stream to the server, which commits them in one
        transaction when the stream ends (nothing if it breaks off). ``progress(rows)`` is
        called here as batches are sent. ``spill_dir`` is the server's business: refused.
        ``idempotency_key`` travels in the put's descriptor: a put retried with it (after a
        lost answer, to a restarted or another server) commits at most once."""
        return self._put(data, progress, spill_dir, "ingest", idempotency_key)

    def upsert(self, data: Any, *, progress: Callable[[int], None] | None = None,
               spill_dir: str | None = None,
               idempotency_key: str | None = None) -> IngestResult:
        """As ``Table.upsert``: each record replaces every record of its record key written
        before it; of equal keys in ``data``, the last sent wins. Streamed and committed as
        :meth:`ingest` (a put whose descriptor says ``"write": "upsert"``)."""
        return self._put(data, progress, spill_dir, "upsert", idempotency_key)

    def delete(self, keys: Sequence[Any] | None = None, ranges: Any = None, *,
               filter: Any = None,  # noqa: A002 (the public name)
               idempotency_key: str | None = None) -> int:
        """As ``Table.delete``: every record of ``keys``, in ``ranges`` and/or matching
        ``filter`` (``--where`` text or a pyarrow expression, sent as in :meth:`query`), in
        one metadata commit on the server; returns its version. Nothing named is refused by
        the server, naming ``clear()``. ``idempotency_key``: as :meth:`ingest`'s."""
        doc = encode_query(self.name, keys, ranges, filter=filter)
        if idempotency_key is not None:
            doc["idempotency_key"] = idempotency_key
        return int(self.store.action("delete", doc)["version"])

    # ---- schema changes (the ``alter`` action; one transaction each on the server) ---------
    def add_columns(self, columns: Sequence[tuple[str, Any]]) -> int:
        """As ``Table.add_columns``: nullable value columns ``[(name, type), ...]`` (a
        pyarrow type or its text); returns the new version."""
        try:
            args = add_args(columns)  # types as text: the server parses them
        except SchemaError as e:
            raise SchemaError(f"table {self.name}: {e}") from None
        return self._alter("add_columns", args)

    def drop_columns(self, names: Sequence[str]) -> int:
        """As ``Table.drop_columns``; returns the new version."""
        try:
            args = drop_args(names)
        except SchemaError as e:
            raise SchemaError(f"table {self.name}: {e}") from None
        return self._alter("drop_columns", args)

    def rename_column(self, old: str, new: str) -> int:
        """As ``Table.rename_column``; returns the new version."""
        return self._alter("rename_column", {"old": str(old), "new": str(new)})

    def widen_column(self, name: str, type: Any) -> int:  # noqa: A002 (the public name)
        """As ``Table.widen_column`` (``type`` a pyarrow type or its text); returns the new
        version."""
        return self._alter("widen_column", {"name": str(name), "type": str(type)})

    def _alter(self, op: str, args: dict[str, Any]) -> int:
        doc = {"table": self.name, "op": op, "args": args}
        return int(self.store.action("alter", doc)["version"])

    def _put(self, data: Any, progress: Callable[[int], None] | None,
             spill_dir: str | None, write: str, key: str | None = None) -> IngestResult:
        """Stream ``data`` in one put; the server ingests or upserts it (``write``)."""
        if spill_dir is not None:
            raise BadRequestError("spill_dir names a folder on the server's machine and "
                                  "cannot be sent; the server spills to its own")
        if progress is not None and not callable(progress):
            raise BadRequestError("progress must be a callable")
        schema, batches = _batches(data)
        # the end marker: a stream this side closes early (an error while sending) is not
        # taken by the server for a complete one
        doc: dict[str, Any] = {"table": self.name, "end_marker": True}
        if write != "ingest":
            doc["write"] = write
        if key is not None:
            doc["idempotency_key"] = key
        descriptor = fl.FlightDescriptor.for_command(dumps(doc))
        client, options = self.store.client, self.store.options
        try:
            writer, meta = client.do_put(descriptor, schema, options)
            try:
                for b in batches:
                    writer.write_batch(b)
                    if progress is not None:
                        progress(b.num_rows)
            except BaseException:
                # this side failed: close without the marker (the server commits nothing);
                # the server's refusal of the cut stream is no news to the caller
                with contextlib.suppress(fl.FlightError, pa.ArrowException):
                    writer.close()
                raise
            try:
                writer.write_metadata(pa.py_buffer(END_OF_STREAM))
                writer.done_writing()
                answer = meta.read()
            finally:
                writer.close()
        except fl.FlightError as e:
            raise from_flight_error(e) from e
        if answer is None:
            raise SedimentError(f"table {self.name}: the server sent no ingest result")
        doc = json.loads(answer.to_pybytes())
        # the fields this client knows (a newer server may answer with more)
        known = {f.name for f in dataclasses.fields(IngestResult)}
        return IngestResult(**{k: v for k, v in doc.items() if k in known})

    # ---- metadata and versions ------------------------------------------------------------
    def describe(self, version: int | None = None) -> dict[str, Any]:
        return dict(self.store.action("describe", {"table": self.name, "version": version}))

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """As ``Table.history``: ``limit`` newest entries (all when None), in commit order;
        the server reads only those."""
        body: dict[str, Any] = {"table": self.name}
        if limit is not None:
            body["limit"] = limit
        return [HistoryEntry(**e) for e in self.store.action("history", body)]

    def tag(self, name: str, version: int | None = None) -> Tag:
        return Tag(**self.store.action("tag", {"table": self.name, "name": name,
                                               "version": version}))

    def restore(self, version: int | str) -> int:
        return int(self.store.action("restore", {"table": self.name, "version": version})
                   ["version"])

    def compact(self, *, full: bool = False) -> dict[str, Any]:
        """One compaction pass on the server; its CompactionResult as plain data."""
        return dict(self.store.action("compact", {"table": self.name, "full": full}))

    def maintain(self) -> dict[str, Any]:
        """Maintenance until settled on the server; its MaintenanceResult as plain data."""
        return dict(self.store.action("maintain", {"table": self.name}))

    @property
    def version(self) -> int:
        return int(self.describe()["version"])

    def __repr__(self) -> str:
        return f"RemoteTable({self.name!r}, store={self.store.uri!r})"


def _offer(out: queue.Queue[Any], item: Any, stop: threading.Event) -> None:
    """Put ``item`` unless the consumer has gone (then drop it: nobody will read it)."""
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def _batches(data: Any) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema and batches of what ``ingest`` takes (Table, RecordBatch, reader, pandas,
    or an iterable of those, streamed: the first item gives the schema)."""
    if isinstance(data, pa.Table):
        return data.schema, iter(data.to_batches(max_chunksize=PUT_BATCH_ROWS))
    if isinstance(data, pa.RecordBatch):
        return _batches(pa.Table.from_batches([data]))
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    if type(data).__module__.startswith("pandas"):
        return _batches(pa.Table.from_pandas(data, preserve_index=False))
    if isinstance(data, Iterable) and not isinstance(data, str | bytes | dict):
        items = iter(data)
        try:
            first = next(items)
        except StopIteration:
            raise BadRequestError("ingest: no data to send (an empty iterable has no "
                                  "schema)") from None
        schema, head = _batches(first)

        def rest() -> Iterator[pa.RecordBatch]:
            yield from head
            for item in items:
                yield from _batches(item)[1]

        return schema, rest()
    raise BadRequestError(f"ingest takes a pyarrow Table, RecordBatch, RecordBatchReader, a "
                          f"pandas DataFrame or an iterable of them, not "
                          f"{type(data).__name__}")


def connect(uri: str, token: str | None = None,
            tls_root_certs: bytes | str | os.PathLike[str] | None = None) -> RemoteStore:
    """A client of ``sediment serve`` at ``grpc://host:port`` (``grpc+tls://`` with
    ``tls_root_certs``: PEM bytes or a file; ``token``: the server's bearer token)."""
    return RemoteStore(uri, token=token, tls_root_certs=tls_root_certs)
