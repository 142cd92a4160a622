"""A local HTTPS host with a certificate from a test CA, recording every request it gets.

Stands in for an API a credential is meant for. The server under test trusts the test CA
through `SSL_CERT_FILE` (the bundle written here also holds the system roots)."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Seen:
    """One request as the host received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class TlsHost:
    """A running HTTPS host on 127.0.0.1."""

    port: int
    ca_file: Path
    """The test CA alone."""
    bundle: Path
    """System roots plus the test CA (what the server's `SSL_CERT_FILE` points at)."""
    seen: list[Seen] = field(default_factory=list)
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_certs(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path, Path]:
    """(CA cert, leaf cert+key, bundle of system roots + CA) for `host`."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("test CA"))
        .issuer_name(_name("test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(host))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    ca_file, leaf_file, bundle = (directory / n for n in ("ca.pem", "leaf.pem", "bundle.pem"))
    ca_file.write_bytes(ca_pem)
    leaf_file.write_bytes(_pem(key) + leaf.public_bytes(serialization.Encoding.PEM))
    system = Path(ssl.get_default_verify_paths().openssl_cafile)
    bundle.write_bytes((system.read_bytes() if system.is_file() else b"") + b"\n" + ca_pem)
    return ca_file, leaf_file, bundle


def start_tls_host(directory: Path) -> TlsHost:
    """Serve HTTPS on 127.0.0.1 (any method): records the request, answers `ok <n>`."""
    ca_file, leaf_file, bundle = make_certs(directory)
    host = TlsHost(port=0, ca_file=ca_file, bundle=bundle)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = _read_chunked(self.rfile)
            host.seen.append(Seen(self.command, self.path, dict(self.headers.items()), body))
            answer = f"ok {len(host.seen)}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = do_PUT = _any

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(leaf_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    host.port = server.server_address[1]
    host.server = server
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return host


def _read_chunked(rfile: object) -> bytes:
    out = b""
    while True:
        size = int(rfile.readline().split(b";")[0], 16)  # type: ignore[attr-defined]
        if size == 0:
            while rfile.readline() not in (b"\r\n", b""):  # type: ignore[attr-defined]
                pass
            return out
        out += rfile.read(size)  # type: ignore[attr-defined]
        rfile.readline()  # type: ignore[attr-defined]
