"""The Flight server: a stateless face over one :class:`~sediment.store.Store`.

Every method reads and writes through the local API (``Table.prepare``, ``Table.ingest``,
``describe``, ``history``...), so answers, errors and commits are the library's own. The
server keeps nothing but caches (its open tables, which share their state caches): several
servers over one store answer consistently, each seeing another's commits within
``state.cache.refresh_seconds``.

* ``list_flights``: one FlightInfo per table (its schema; descriptor path ``[name]``).
* ``get_flight_info``: the query descriptor (JSON, see :mod:`sediment.serve.protocol`) is
  planned; one endpoint per leaf it touches, each ticket pinning the plan's version, and the
  records estimate.
* ``do_get``: streams one leaf (or a whole query) as Arrow batches in bounded memory (a
  query of exact keys only is read at once: its answer is those keys' records).
* ``do_put`` (:mod:`sediment.serve.put_handler`): with group commit on (the default;
  ``write.group_commit_ms``, ``serve
  --group-commit-ms``), puts to one table arriving within the window are committed together
  as one transaction, each answered once that commit has landed (:mod:`sediment.serve.puts`);
  otherwise each put ingests its stream in one transaction when it ends (upserts it with
  ``"write": "upsert"`` in the descriptor: ``Table.upsert``); a broken or cancelled
  stream (a client that died) fails the ingest and commits nothing. With
  ``"end_marker": true`` in the descriptor (the Python client's way), the stream must also
  end with a message whose app metadata is ``END_OF_STREAM``: a client that gives up and
  closes its stream cleanly commits nothing either. The reply metadata is the result as JSON
  (version, rows...). ``"idempotency_key"`` in the descriptor commits the put at most once
  under that key (``Table.ingest(..., idempotency_key=)``), across retries, restarts and
  servers over the same store.
* ``do_action``: see :mod:`sediment.serve.actions`.

No request reaches a client as a traceback: Sediment errors (and Arrow's errors of bad input)
travel as their class and message, cut to a bounded size; anything else is logged with its
traceback under a reference, and the client gets a short message naming that reference.
"""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as fl

from sediment import metrics
from sediment.errors import (
    BadRequestError,
    ReadOnlyError,
    SedimentError,
    ServiceError,
)
from sediment.handle import handle_of
from sediment.properties import defaults
from sediment.query.estimate import estimate_records
from sediment.query.planner import QueryPlan
from sediment.query.scan import Scan
from sediment.serve.actions import ACTIONS, run_action
from sediment.serve.middleware import LIGHT_ACTIONS, Admission, Call
from sediment.serve.protocol import (
    dumps,
    parse_json,
    read_request,
    table_name,
    to_flight_error,
)
from sediment.serve.put_handler import serve_put
from sediment.serve.puts import GROUP_COMMIT_MAX_BYTES, GROUP_COMMIT_MS, GroupedPuts
from sediment.serve.stats import LOG, Request, Stats, log_value, outcome_of
from sediment.store import Store
from sediment.table import Table
from sediment.tokens import ANYONE, Right, Tokens

T = TypeVar("T")

ARROW_INPUT_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)
"""Arrow's errors that a request's own input causes: sent as BadRequestError."""


class _Detached:
    """What a handler called without a Flight context (in-process) has for its call."""

    table = ""
    scope = ANYONE

    def allow(self, right: Right, table: str | None, what: str) -> None:
        return None

    def waiting(self) -> None:
        return None

    def working(self) -> None:
        return None


def call_of(context: Any) -> Call | _Detached:
    """The admitted call a handler serves (its slot and idle state)."""
    call = context.get_middleware("admission") if context is not None else None
    return call if isinstance(call, Call) else _Detached()


class SedimentFlightServer(fl.FlightServerBase):
    """``sediment serve``: see the module docstring. ``location``: ``grpc://host:port`` or
    ``grpc+tls://host:port`` (then ``tls_certificates`` as ``[(cert_pem, key_pem)]``).
    ``tokens``: the scoped tokens callers may send (``--tokens-file``); ``token``: one more,
    with every right on every table (``--token-file``); neither: no token is asked for."""

    def __init__(self, store: Store, location: str, *, token: str | None = None,
                 tokens: Tokens | None = None,
                 read_only: bool = False, max_concurrency: int = 32,
                 idle_timeout: float | None = 60.0,
                 tls_certificates: list[tuple[bytes, bytes]] | None = None,
                 group_commit_ms: float = GROUP_COMMIT_MS,
                 group_commit_max_bytes: int = GROUP_COMMIT_MAX_BYTES) -> None:
        self.stats = Stats()
        self.puts = GroupedPuts(group_commit_ms, group_commit_max_bytes)
        metrics.watch_queue("group_commit", self.puts.waiting)
        if token is not None:
            tokens = Tokens.single(token) if tokens is None else tokens.plus(
                Tokens.single(token))
        self.admission = Admission(tokens, max_concurrency, self.stats, idle_timeout)
        super().__init__(location, tls_certificates=tls_certificates or [],
                         middleware={"admission": self.admission})
        self.store = store
        self.read_only = read_only
        self._tables: dict[str, tuple[float, Table]] = {}
        self._rereading: set[str] = set()
        self._lock = threading.Lock()
        # the catalog is re-read as often as table heads are (the store's default)
        self._refresh = float(defaults()["state.cache.refresh_seconds"])

    # ---- helpers ----------------------------------------------------------------------
    def table(self, name: str) -> Table:
        """The open table ``name``: kept between requests so its caches are shared, its
        catalog entry read again past the refresh interval (a table dropped and made again
        by another server is seen then; while one request reads it again, the others are
        answered from the entry as it was)."""
        now = time.monotonic()
        with self._lock:
            hit = self._tables.get(name)
            # one request re-reads an expired entry; the others keep it meanwhile (a herd of
            # puts each reading the catalog again at every expiry made the slowest puts)
            if hit is not None and (now - hit[0] < self._refresh or name in self._rereading):
                return hit[1]
            self._rereading.add(name)
        try:
            fresh = self.store.table(name)  # InvalidTableNameError, TableNotFoundError
        finally:
            with self._lock:
                self._rereading.discard(name)
        if hit is not None and hit[1].table_id == fresh.table_id:
            fresh = hit[1]
        with self._lock:
            self._tables[name] = (now, fresh)
        return fresh

    def forget(self, name: str) -> None:
        with self._lock:
            self._tables.pop(name, None)

    def guard(self, req: Request, body: Callable[[], T]) -> T:
        """Run a handler body: Sediment errors (and Arrow errors of bad input) become Flight
        errors with the same message; anything else is an internal error, logged."""
        try:
            return body()
        except Exception as e:
            out = for_client(e, req)
            if out is e:
                raise
            raise out from e

    def writable(self, what: str) -> None:
        if self.read_only:
            raise ReadOnlyError(f"this server is read-only (--read-only): {what} is refused")

    @staticmethod
    def _command(descriptor: fl.FlightDescriptor, what: str) -> dict[str, Any]:
        if descriptor.descriptor_type == fl.DescriptorType.PATH:
            path = [p.decode() if isinstance(p, bytes) else p for p in descriptor.path or []]
            if len(path) != 1:
                raise BadRequestError(f"malformed {what}: a path descriptor names one table")
            return {"table": path[0]}
        return parse_json(descriptor.command or b"", what)

    def prepare(self, doc: dict[str, Any], what: str) -> tuple[Table, Scan]:
        """The table a descriptor (or a ticket's query) names and its read planned: the
        descriptor's fields but ``table`` are a read request's JSON (see protocol)."""
        table = self.table(table_name(doc, what))
        return table, table.prepare(read_request(doc))

    # ---- Flight methods -----------------------------------------------------------------
    def list_flights(self, context: Any, criteria: bytes) -> Iterator[fl.FlightInfo]:
        call = call_of(context)
        with self.stats.track("list_flights") as req:
            call.working()
            self.guard(req, lambda: call.allow("read", None, "list_flights"))
            infos = self.guard(req, lambda: [self._info_of(n) for n in self.store.tables()
                                             if call.scope.allows("read", n)])
            req.rows = len(infos)
        call.waiting()  # the rest is sending them
        yield from infos

    def _info_of(self, name: str) -> fl.FlightInfo:
        schema = self.table(name).schema.to_arrow()
        return fl.FlightInfo(schema, fl.FlightDescriptor.for_path(name), [], -1, -1)

    def get_flight_info(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        call = call_of(context)
        with self.stats.track("get_flight_info") as req:
            def body() -> fl.FlightInfo:
                call.working()
                doc = self._command(descriptor, "query descriptor")
                req.table = str(doc.get("table", ""))
                call.allow("read", req.table, "get_flight_info")
                if "changes" in doc:
                    return self._changes_info(doc, descriptor)
                table, prepared = self.prepare(doc, "query descriptor")
                plan: QueryPlan = prepared.plan
                # the tickets carry the request as planned, its version pinned
                pinned = {"table": table.name, **prepared.pinned().to_json()}
                endpoints = [fl.FlightEndpoint(dumps({"query": pinned, "leaf": s.leaf_id}), [])
                             for s in plan.subqueries]
                # narrowed by the query's ranges (samples), -1 when a sample is unreadable
                estimate = estimate_records(plan, handle_of(table).samples.sample,
                                            table.schema.row_key_names)
                req.rows = estimate
                return fl.FlightInfo(prepared.arrow_schema, descriptor, endpoints, estimate,
                                     -1)
            return self.guard(req, body)

    def _changes_info(self, doc: dict[str, Any], descriptor: fl.FlightDescriptor
                      ) -> fl.FlightInfo:
        """A changes request's info: one endpoint whose ticket is the request with its end
        version pinned (the head now when not given), so every reader of it gets the same
        rows."""
        table = self.table(table_name(doc, "query descriptor"))
        request = read_request(doc)
        start, end = request.changes_range()
        pinned_end = table.resolve_version(end) if end is not None else table.version
        reader = table.changes(start, pinned_end, columns=request.columns,
                               filter=request.filter)  # checks versions, columns, filter
        schema = reader.schema
        reader.close()
        pinned = request.replace(changes={"from": start, "to": pinned_end})
        ticket = dumps({"query": {"table": table.name, **pinned.to_json()}, "leaf": None})
        return fl.FlightInfo(schema, descriptor, [fl.FlightEndpoint(ticket, [])], -1, -1)

    def do_get(self, context: Any, ticket: fl.Ticket) -> fl.FlightDataStream:
        req = Request("do_get")
        start = time.perf_counter()
        call = call_of(context)

        def body() -> pa.RecordBatchReader | pa.Table:
            call.working()
            doc = parse_json(ticket.ticket, "ticket")
            query, leaf = doc.get("query"), doc.get("leaf")
            if not isinstance(query, dict) or not (leaf is None or isinstance(leaf, str)):
                raise BadRequestError("malformed ticket: expected {\"query\": {...}, "
                                      "\"leaf\": <leaf id or null>}")
            req.table = call.table = str(query.get("table", ""))
            call.allow("read", req.table, "do_get")
            if "changes" in query:
                return self.table(table_name(query, "ticket")).changes_of(
                    read_request(query))
            table, prepared = self._pinned(query)
            if leaf is not None:
                prepared = prepared.only_leaves({leaf})
            if prepared.request.keys is not None and prepared.request.ranges is None:
                # exact keys only: the answer is the records of those keys, read at once
                # and sent from Arrow's side (a lookup's latency is mostly per-call cost)
                answer: pa.Table = prepared.to_arrow()
                return answer
            reader: pa.RecordBatchReader = prepared.to_batches()
            return reader

        try:
            out = self.guard(req, body)
        except BaseException as e:
            req.outcome = outcome_of(e)
            self.stats.record(req, time.perf_counter() - start)
            raise
        if isinstance(out, pa.Table):
            req.rows = out.num_rows
            self.stats.record(req, time.perf_counter() - start)
            call.waiting()  # the rest is Arrow sending it
            return fl.RecordBatchStream(out)
        reader = out

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                for b in reader:
                    req.rows += b.num_rows
                    call.waiting()  # until the client has taken it
                    yield b
                    call.working()
                call.waiting()
            except Exception as e:
                req.outcome = outcome_of(e)
                translated = for_client(e, req)
                if translated is e:
                    raise
                raise translated from e
            except BaseException as e:  # the stream dropped (GeneratorExit), an interrupt
                req.outcome = outcome_of(e)
                raise
            finally:
                self.stats.record(req, time.perf_counter() - start)

        return fl.GeneratorStream(reader.schema, batches())

    def _pinned(self, query: dict[str, Any]) -> tuple[Table, Scan]:
        """Prepare a ticket's query at its pinned version: through the head this process
        shares when that is still the version (no state to rebuild), else at the version."""
        version = query.get("version")
        if isinstance(version, int) and not isinstance(version, bool):
            table, prepared = self.prepare({**query, "version": None}, "ticket")
            if prepared.plan.version == version:
                return table, prepared
        return self.prepare(query, "ticket")

    def do_put(self, context: Any, descriptor: fl.FlightDescriptor,
               reader: fl.MetadataRecordBatchReader, writer: fl.FlightMetadataWriter) -> None:
        call = call_of(context)
        with self.stats.track("do_put") as req:
            def body() -> None:
                call.working()
                doc = self._command(descriptor, "put descriptor")
                serve_put(doc, call, context, reader, writer, req, puts=self.puts,
                          table_of=self.table, writable=self.writable)
            self.guard(req, body)

    def do_action(self, context: Any, action: fl.Action) -> Iterator[fl.Result]:
        kind = action.type
        call = call_of(context)
        # a client's unknown type is not a counter's name (the stats stay bounded)
        with self.stats.track(f"action:{kind if kind in ACTIONS else 'unknown'}") as req:
            def body() -> Any:
                call.working()
                if kind not in LIGHT_ACTIONS and isinstance(call, Call):
                    self.admission.hold(call)  # health and stats never wait behind others
                return run_action(self, kind, action.body, req, call.allow)
            answer = self.guard(req, body)
        yield fl.Result(pa.py_buffer(dumps(answer)))

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        return [(name, doc) for name, (doc, _mutates, _fn) in ACTIONS.items()]

    # Flight's other methods: refused with a message (Arrow's defaults send a traceback);
    # get_schema is refused at admission (Arrow sends a traceback with any error it raises)
    def do_exchange(self, context: Any, descriptor: fl.FlightDescriptor,
                    reader: fl.MetadataRecordBatchReader,
                    writer: fl.MetadataRecordBatchWriter) -> None:
        with self.stats.track("do_exchange"):
            raise to_flight_error(BadRequestError(
                "sediment serve does not offer do_exchange: read with do_get, write with "
                "do_put"))

    # ---- lifecycle ------------------------------------------------------------------------
    def drain(self) -> threading.Thread:
        """Refuse new calls, then shut down once the running ones end (puts commit or
        abort); returns the thread doing it (join it before exiting)."""
        self.admission.draining = True
        stopper = threading.Thread(target=self.shutdown, name="sediment-serve-drain")
        stopper.start()
        return stopper

    def shutdown(self) -> None:
        """Stop serving once the running calls end; the idle watcher stops too."""
        super().shutdown()
        self.admission.close()
        self.puts.close()


def for_client(exc: Exception, req: Request) -> Exception:
    """What a client is sent for ``exc``: a Flight error as it is; a Sediment error (and
    Arrow's errors of bad input) as its class and message; anything else, an internal error
    with a reference, logged here with its traceback (a client never sees one)."""
    if isinstance(exc, fl.FlightError):
        return exc
    if isinstance(exc, SedimentError):
        return to_flight_error(exc)
    if isinstance(exc, ARROW_INPUT_ERRORS) and "Traceback" not in str(exc):
        return to_flight_error(BadRequestError(str(exc)))
    reference = uuid.uuid4().hex[:12]
    # the traceback's frames are the server's code; the message may quote the request, so
    # it is escaped like every logged value (one line: no request forges log lines)
    LOG.error("internal error reference=%s method=%s table=%s error=%s message=%s\n%s",
              reference, log_value(req.method), log_value(req.table or "-"),
              type(exc).__name__, log_value(str(exc)),
              "".join(traceback.format_tb(exc.__traceback__)).rstrip("\n"))
    return to_flight_error(ServiceError(
        f"internal error (reference {reference}): the server could not answer this request; "
        f"its log has the details"))
