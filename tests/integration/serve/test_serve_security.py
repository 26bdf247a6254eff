"""Security and admission of ``sediment serve``: bearer tokens, the non-loopback refusal
(checked before anything is opened or bound), read-only servers, the busy limit, TLS."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from serve_helpers import SCHEMA, Server, rows
from typer.testing import CliRunner

import sediment as sd
from sediment.cli.app import app
from sediment.errors import AuthenticationError, ReadOnlyError, ServerBusyError

TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> sd.Store:
    s = sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)
    s.create_table("events", SCHEMA).ingest(rows(["a", "b", "c"]))
    return s


@pytest.fixture(scope="module")
def guarded(store: sd.Store, start_server: Any, tmp_path_factory: pytest.TempPathFactory
            ) -> Server:
    """A server with a token (from a file) and room for one call at a time."""
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN + "\n")
    return start_server(store.uri, "--token-file", str(token_file), "--max-concurrency", "1",
                        token=TOKEN)


def test_calls_need_the_token(guarded: Server, store: sd.Store) -> None:
    expected = store.table("events").query()
    assert guarded.connect().table("events").query().equals(expected)
    for token in (None, "wrong", TOKEN + "x", ""):
        # a forgotten token and a refused one are told apart (never what was sent)
        said = "the token sent is not one this server accepts" if token else \
            "send the server.s token"
        with pytest.raises(AuthenticationError, match=f"authentication required: {said}"):
            guarded.connect(token).table("events").query()
    with pytest.raises(fl.FlightUnauthenticatedError):
        fl.FlightClient(guarded.uri).list_flights().__next__()
    assert guarded.connect().stats()["refused_auth"] >= 5


def test_calls_past_the_limit_are_refused_as_busy(guarded: Server, store: sd.Store) -> None:
    client = fl.FlightClient(guarded.uri)
    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {TOKEN}".encode())])
    descriptor = fl.FlightDescriptor.for_command(b'{"table": "events", "end_marker": true}')
    writer, _meta = client.do_put(descriptor, SCHEMA.to_arrow(), options)
    writer.write_table(rows(["held"]))  # the one slot stays taken while the put is open
    before = store.table("events").version
    try:
        with pytest.raises(ServerBusyError, match="server busy.*--max-concurrency 1"):
            guarded.connect().table("events").query()
    finally:
        try:
            writer.close()  # no end marker: an abandoned put
        except fl.FlightError as e:
            assert "end marker" in str(e)
    assert guarded.connect().health()["status"] == "ok"  # the slot is free again
    assert store.table("events").version == before  # and nothing was committed
    assert guarded.connect().stats()["refused_busy"] >= 1


def _serve(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, ["serve", *args], env=env)


def test_non_loopback_bind_without_token_is_refused_before_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sediment.serve.server as server_module

    def no_server(*a: Any, **k: Any) -> None:
        raise AssertionError("a server was built")

    monkeypatch.setattr(server_module, "SedimentFlightServer", no_server)
    monkeypatch.delenv("SEDIMENT_SERVE_TOKEN", raising=False)
    missing = str(tmp_path / "no-store-here")  # opening it would be another error
    for host in ("192.0.2.10", "0.0.0.0", "::", "example.com"):
        result = _serve("--store", missing, "--host", host)
        assert result.exit_code == 1
        assert f"refusing to bind {host}: a non-loopback address needs a token" in \
            result.output
    # with a token (variable or file) or --insecure, the command goes on: to the store,
    # which does not exist here, so nothing is bound either
    (tmp_path / "t").write_text("tok")
    for extra, env in ((["--insecure"], None), ([], {"SEDIMENT_SERVE_TOKEN": "tok"}),
                       (["--token-file", str(tmp_path / "t")], None)):
        result = _serve("--store", missing, "--host", "192.0.2.10", *extra, env=env)
        assert result.exit_code == 1 and "no Sediment store" in result.output
    result = _serve("--store", missing, "--token-env", "NOT_SET_ANYWHERE_X")
    assert "--token-env NOT_SET_ANYWHERE_X: the variable is not set" in result.output


def test_read_only_server_refuses_writes(store: sd.Store, start_server: Any) -> None:
    server = start_server(store.uri, "--read-only")
    remote = server.connect()
    table = remote.table("events")
    before = store.table("events").version
    assert table.query().equals(store.table("events").query())
    assert table.describe()["version"] == before
    with pytest.raises(ReadOnlyError, match="read-only"):
        table.ingest(rows(["x"]))
    for call in (lambda: table.tag("t1"), lambda: table.restore(1), table.compact,
                 table.maintain, lambda: remote.drop_table("events"),
                 lambda: remote.create_table("other", SCHEMA)):
        with pytest.raises(ReadOnlyError, match="read-only"):
            call()
    assert store.tables() == ["events"] and store.table("events").version == before
    assert store.table("events").tags() == []


def _self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.mark.slow
def test_tls_with_a_self_signed_certificate(store: sd.Store, start_server: Any,
                                            tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    server = start_server(store.uri, "--tls-cert", str(cert), "--tls-key", str(key),
                          scheme="grpc+tls", roots=cert.read_bytes())
    table = server.connect().table("events")
    assert table.query().equals(store.table("events").query())
    assert table.ingest(pa.table(rows(["tls"]))).version == store.table("events").version
    # a client that does not trust the certificate gets no answer
    with pytest.raises(sd.SedimentError):
        sd.connect(server.uri).table("events")
    # and the plain protocol is not served
    with pytest.raises(sd.SedimentError):
        sd.connect(server.uri.replace("grpc+tls", "grpc")).table("events")
    # tls_root_certs may be a path as well
    assert sd.connect(server.uri, tls_root_certs=str(cert)).table("events").query().num_rows
