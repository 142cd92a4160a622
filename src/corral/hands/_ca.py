"""Leaf certificates for the hosts the egress proxy intercepts, issued by the environment's CA.

The CA (its certificate and key) comes in the recipe's `Interception`; the key stays in this
process's memory. A leaf is made on first use of a host and cached for the proxy's life, as a
ready server-side `ssl.SSLContext`. Leaf keys touch the disk only for the instant
`load_cert_chain` needs a file, in a directory of the server's that no sandbox can enter.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_LEAF_DAYS = 30
_CACHE = 256
"""Leaf contexts kept per proxy (one per intercepted host name)."""


class LeafIssuer:
    """Issues and caches one TLS server context per intercepted host."""

    def __init__(self, ca_cert_pem: bytes, ca_key_pem: bytes, scratch: Path) -> None:
        """`scratch`: a private server directory where a leaf is written for an instant."""
        self._ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
        key = serialization.load_pem_private_key(ca_key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the environment CA key must be an EC key")
        self._ca_key = key
        self._scratch = scratch
        self._contexts: dict[str, ssl.SSLContext] = {}

    def __repr__(self) -> str:
        return f"LeafIssuer(hosts={len(self._contexts)})"

    def context_for(self, host: str) -> ssl.SSLContext:
        """A server context presenting a leaf for `host` (a name or an IP address)."""
        context = self._contexts.get(host)
        if context is None:
            if len(self._contexts) >= _CACHE:
                self._contexts.pop(next(iter(self._contexts)))
            context = self._new_context(host)
            self._contexts[host] = context
        return context

    def _new_context(self, host: str) -> ssl.SSLContext:
        cert_pem, key_pem = self._issue(host)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])  # the proxy rewrites HTTP/1.1 only
        path = self._scratch / f".leaf-{secrets.token_hex(8)}.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(key_pem + cert_pem)
            context.load_cert_chain(path)
        finally:
            path.unlink(missing_ok=True)
        return context

    def _issue(self, host: str) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        ca_ski = self._ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=_LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )  # fmt: skip
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski.value),
                critical=False,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(self._ca_key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem
