"""CLI command: ``sediment serve``, the Arrow Flight service over a store.

Every check of the command line (a token for a non-loopback address, TLS files) runs before
the store is opened or anything is bound, so a refused command has touched nothing.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from sediment.access import is_loopback
from sediment.cli.errors import CliError
from sediment.cli.metrics_options import (
    MetricsHostOption,
    MetricsPortOption,
    check_metrics,
    start_metrics,
)
from sediment.cli.options import (
    TOKENS_FILE_FORMAT,
    StoreOption,
    check_port_free,
    open_store,
    read_token,
    read_tokens,
)

commands = typer.Typer()
"""This group's commands (added to the root app by ``sediment.cli.app``)."""

TOKEN_ENV = "SEDIMENT_SERVE_TOKEN"
"""Environment variable holding the bearer token when neither option names one."""


@commands.command()
def serve(
    store: StoreOption = None,
    host: Annotated[str, typer.Option("--host", help="Address to bind. Anything but "
                                      "loopback needs a token (or --insecure).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to bind (0: any free port; the "
                                      "log says which).")] = 8815,
    read_only: Annotated[bool, typer.Option("--read-only", help="Refuse puts and mutating "
                                            "actions.")] = False,
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", help="File holding the bearer token clients must send.")] = None,
    token_env: Annotated[str | None, typer.Option(
        "--token-env", metavar="NAME",
        help=f"Environment variable holding the token (default: ${TOKEN_ENV}).")] = None,
    tokens_file: Annotated[Path | None, typer.Option(
        "--tokens-file", metavar="FILE",
        help=TOKENS_FILE_FORMAT + "Each call may do only what its token's scope allows "
             "(read < write < admin); refusals are logged with the token's name. A "
             "--token-file token, if any, keeps every right.")] = None,
    insecure: Annotated[bool, typer.Option(
        "--insecure", help="Allow a non-loopback bind without a token.")] = False,
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help="PEM certificate "
                                                  "(with --tls-key): serve grpc+tls.")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key.")] = None,
    max_concurrency: Annotated[int, typer.Option(
        "--max-concurrency", help="Calls served at once; more are refused as busy.")] = 32,
    idle_timeout: Annotated[float, typer.Option(
        "--idle-timeout", metavar="SECONDS",
        help="How long a call may wait on its client (a read it stopped taking, a put it "
             "stopped sending) before its --max-concurrency slot is freed and the call "
             "abandoned (a put commits nothing).")] = 60.0,
    group_commit_ms: Annotated[float, typer.Option(
        "--group-commit-ms", metavar="MS",
        help="Group commit: puts to one table arriving within this many milliseconds are "
             "committed as one transaction, each acknowledged once it has landed (a table's "
             "write.group_commit_ms overrides it; 0 turns it off). The least a group "
             "gathers: under load the window grows (write.group_commit_max_rate).")] = 20.0,
    group_commit_max_bytes: Annotated[int, typer.Option(
        "--group-commit-max-bytes", metavar="BYTES",
        help="Most put bytes held in memory waiting for group commits (all tables); past "
             "it a put is refused as busy with a retry-after hint. A group is cut at a "
             "quarter of it; a larger put streams into a commit of its own.")] = 256 << 20,
    shutdown_grace: Annotated[float, typer.Option(
        "--shutdown-grace", metavar="SECONDS",
        help="After SIGTERM/SIGINT, how long running calls may go on; past it the server "
             "exits (status 1) and a put still streaming commits nothing.")] = 30.0,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = "127.0.0.1",
) -> None:
    """Serve the store over Arrow Flight (queries, ingest, actions) until SIGTERM/SIGINT."""
    token = read_token(token_file, TOKEN_ENV, env_option=token_env)
    tokens = read_tokens(tokens_file)
    if not is_loopback(host) and token is None and tokens is None and not insecure:
        raise CliError(f"refusing to bind {host}: a non-loopback address needs a token "
                       f"(--token-file, --token-env, ${TOKEN_ENV} or --tokens-file) or an "
                       f"explicit --insecure")
    if (tls_cert is None) != (tls_key is None):
        raise CliError("--tls-cert and --tls-key go together")
    if max_concurrency < 1:
        raise CliError("--max-concurrency must be at least 1")
    if not 0 < idle_timeout <= 86_400:
        raise CliError("--idle-timeout must be more than 0 and at most 86400 seconds")
    if not 0 <= group_commit_ms <= 10_000:
        raise CliError("--group-commit-ms must be 0 (off) to 10000 milliseconds")
    if group_commit_max_bytes < 1:
        raise CliError("--group-commit-max-bytes must be at least 1")
    if shutdown_grace < 0:
        raise CliError("--shutdown-grace must be 0 or more seconds")
    if not 0 <= port <= 65535:
        raise CliError(f"--port {port} is not a port number")
    check_metrics(metrics_port, metrics_host, token)
    certificates = None
    if tls_cert is not None and tls_key is not None:
        try:
            certificates = [(tls_cert.read_bytes(), tls_key.read_bytes())]
        except OSError as e:
            raise CliError(f"cannot read TLS file: {e.strerror or e}: {e.filename}") from None
    opened = open_store(store)
    check_port_free(host, port, what="serve")  # after the store: a wrong --store comes first
    start_metrics(metrics_port, metrics_host, token)  # before the first request: all counted

    from sediment.serve.server import SedimentFlightServer

    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    scheme = "grpc+tls" if certificates else "grpc"
    bind = f"[{host}]" if ":" in host else host
    server = SedimentFlightServer(opened, f"{scheme}://{bind}:{port}", token=token,
                                  tokens=tokens,
                                  read_only=read_only, max_concurrency=max_concurrency,
                                  idle_timeout=idle_timeout,
                                  tls_certificates=certificates,
                                  group_commit_ms=group_commit_ms,
                                  group_commit_max_bytes=group_commit_max_bytes)
    log = logging.getLogger("sediment.serve")
    stopping: list[threading.Thread] = []
    requested = threading.Event()

    def give_up() -> None:
        # a client holding a put open must not hold the shutdown forever; the put commits
        # only once its stream ends, so leaving now commits nothing of it (its files, if
        # any, are orphans for GC)
        log.warning("calls still running %.1f s after the signal: exiting without them",
                    shutdown_grace)
        logging.shutdown()
        os._exit(1)

    def stop(signum: int, frame: FrameType | None) -> None:
        if requested.is_set():
            return
        requested.set()
        log.info("signal %d: refusing new calls, waiting for running ones", signum)
        stopping.append(server.drain())
        timer = threading.Timer(shutdown_grace, give_up)
        timer.daemon = True
        timer.start()

    # The main thread waits here in Python, not in pyarrow's serve(): serve() takes SIGTERM
    # and SIGINT itself and runs Python's handlers only once every running call has ended,
    # which would leave a put held open able to hold the shutdown forever.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("serving %s on %s://%s:%d%s%s", opened.uri, scheme, bind, server.port,
             " (read-only)" if read_only else "",
             " (token required)" if token or tokens else " (no token)")
    while not requested.wait(0.5):
        pass
    for t in stopping:
        t.join()
    log.info("stopped")
