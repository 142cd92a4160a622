"""Sealing secrets at rest: AES-256-GCM from `cryptography`, with key ids for rotation.

A sealed token is `v1.<key id>.<base64url(nonce || ciphertext+tag)>`; the associated data
binds it to one row, so a token copied onto another credential does not open. This module
knows nothing of stores or HTTP and must never log or render a plaintext.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
_NONCE_BYTES = 12
_VERSION = "v1"


class VaultKeyError(Exception):
    """A sealed secret cannot be opened: its key is not configured, or it was tampered with."""


def key_id(key: bytes) -> str:
    """A short public fingerprint naming which key sealed a token (never the key itself)."""
    return hashlib.sha256(b"corral-vault-key-id\x00" + key).hexdigest()[:12]


def decode_key(text: str) -> bytes:
    """A 32-byte key from its urlsafe base64 text form (padding optional).

    Raises:
        ValueError: not base64 or not 32 bytes (the message never echoes the text).
    """
    raw = text.strip()
    try:
        key = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("vault key is not urlsafe base64") from exc
    if len(key) != KEY_BYTES:
        raise ValueError(f"vault key must decode to {KEY_BYTES} bytes, got {len(key)}")
    return key


def encode_key(key: bytes) -> str:
    """The text form `decode_key` reads."""
    return base64.urlsafe_b64encode(key).decode().rstrip("=")


def new_key() -> bytes:
    """A fresh random key."""
    return AESGCM.generate_key(bit_length=KEY_BYTES * 8)


@dataclass(frozen=True, slots=True)
class Opened:
    """A token's plaintext, and whether it was sealed under a key other than the primary."""

    values: dict[str, str]
    stale: bool

    def __repr__(self) -> str:
        return f"Opened(keys={sorted(self.values)}, stale={self.stale})"


class Keyring:
    """Seals with the first key; opens with whichever configured key sealed the token."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("a keyring needs at least one key")
        self._primary = keys[0]
        self._by_id = {key_id(k): AESGCM(k) for k in keys}
        self.primary_id = key_id(self._primary)

    def __repr__(self) -> str:
        return f"Keyring(primary={self.primary_id}, keys={len(self._by_id)})"

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Fingerprints of every configured key, primary first."""
        return tuple(self._by_id)

    def seal(self, values: dict[str, str], bound_to: str) -> str:
        """Encrypt `values` under the primary key, bound to the row named `bound_to`."""
        nonce = os.urandom(_NONCE_BYTES)
        plain = json.dumps(values, sort_keys=True).encode()
        sealed = AESGCM(self._primary).encrypt(nonce, plain, self._aad(bound_to))
        blob = base64.urlsafe_b64encode(nonce + sealed).decode()
        return f"{_VERSION}.{self.primary_id}.{blob}"

    def open(self, token: str, bound_to: str) -> Opened:
        """Decrypt a token sealed for `bound_to`.

        Raises:
            VaultKeyError: unknown format or key id, wrong row, or a tampered token.
        """
        version, kid, blob = (token.split(".", 2) + ["", ""])[:3]
        aead = self._by_id.get(kid)
        if version != _VERSION or aead is None:
            raise VaultKeyError(
                f"secret was sealed under vault key {kid or '?'}, which is not configured "
                "(set CORRAL_VAULT_KEY to include it)"
            )
        try:
            raw = base64.urlsafe_b64decode(blob)
            plain = aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], self._aad(bound_to))
        except (InvalidTag, ValueError, binascii.Error) as exc:
            raise VaultKeyError("sealed secret failed authentication") from exc
        return Opened(values=dict(json.loads(plain)), stale=kid != self.primary_id)

    def mac(self, label: str) -> str:
        """A keyed hex fingerprint of `label` (HMAC-SHA256 under the primary key, domain
        separated from sealing): stable while the primary key is, unguessable without it."""
        return hmac.new(
            self._primary, b"corral-vault-mac\x00" + label.encode(), "sha256"
        ).hexdigest()

    @staticmethod
    def _aad(bound_to: str) -> bytes:
        return f"corral-vault:{bound_to}".encode()
