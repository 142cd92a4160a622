"""Each environment's interception CA: made once, its key sealed with the vault keyring.

The egress proxy terminates TLS for credential hosts with leaves this CA signs, and sandboxes
of the environment trust it. Stored as `<data dir>/ca/<environment id>.json` (mode 0600 in a
0700 directory): `{"cert": <PEM>, "key": <sealed PEM>}`; the key is sealed exactly like a
credential's secrets (AES-256-GCM, bound to `ca/<environment id>`), so the file alone opens
nothing. The key never leaves this module but inside a `Secret`.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from corral.vault.crypto import Keyring, VaultKeyError
from corral.vault.secrets import Secret

log = logging.getLogger("corral.vault")
CA_DIR = "ca"
_CA_YEARS = 10
_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass(frozen=True, slots=True)
class EnvironmentCA:
    """An environment's CA certificate (public) and key (secret)."""

    cert_pem: bytes
    key_pem: Secret


def load_or_create_ca(data_dir: Path, keyring: Keyring, environment_id: str) -> EnvironmentCA:
    """The environment's CA, made on first use; re-sealed under the primary key if an older
    key sealed it; made anew if no configured key opens it (sandboxes then get the new one).

    Raises:
        ValueError: an environment id unfit for a file name.
    """
    if not _SAFE_ID.match(environment_id):
        raise ValueError(f"bad environment id {environment_id!r}")
    directory = data_dir / CA_DIR
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"{environment_id}.json"
    bound = f"ca/{environment_id}"
    for _ in range(3):
        if not path.exists():
            _write(path, _new_ca(environment_id), keyring, bound, replace=False)
        stored = json.loads(path.read_text())
        try:
            opened = keyring.open(str(stored["key"]), bound)
        except VaultKeyError:
            log.warning("the CA of %s was sealed under an unknown key; making a new one", bound)
            path.unlink(missing_ok=True)
            continue
        ca = EnvironmentCA(str(stored["cert"]).encode(), Secret(opened.values["key"]))
        if opened.stale:
            _write(path, ca, keyring, bound, replace=True)
        return ca
    raise VaultKeyError(f"cannot keep a CA for {bound}")


def _new_ca(environment_id: str) -> EnvironmentCA:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Corral"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"Corral egress CA {environment_id}"[:64]),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=365 * _CA_YEARS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return EnvironmentCA(cert.public_bytes(serialization.Encoding.PEM), Secret(key_pem.decode()))


def _write(path: Path, ca: EnvironmentCA, keyring: Keyring, bound: str, *, replace: bool) -> None:
    """Write beside `path`, then link (first writer wins) or rename it into place."""
    text = json.dumps(
        {"cert": ca.cert_pem.decode(), "key": keyring.seal({"key": ca.key_pem.reveal()}, bound)}
    )
    # A name of its own per call: the sandboxes of one environment start concurrently (threads
    # of one process), and a shared name let one writer's cleanup pull another's file away.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except FileExistsError:
        pass  # another process made it first: use theirs
    finally:
        tmp.unlink(missing_ok=True)
