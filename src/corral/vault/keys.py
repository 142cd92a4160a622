"""Where the vault key comes from: `CORRAL_VAULT_KEY` (comma-separated, newest first), or a
key generated once into the data dir (mode 0600). Never prints or logs a key, only its id
and the file's location.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from corral.vault.crypto import Keyring, decode_key, encode_key, new_key

KEY_FILE = "vault.key"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedKeys:
    """The keyring, and the key file when the key came from (or was just written to) disk."""

    keyring: Keyring
    key_file: Path | None = None
    generated: bool = False


def parse_keys(text: str) -> Keyring:
    """A keyring from `new,old,…` key texts.

    Raises:
        ValueError: an entry is not a 32-byte urlsafe base64 key.
    """
    entries = [e for e in (p.strip() for p in text.split(",")) if e]
    if not entries:
        raise ValueError("CORRAL_VAULT_KEY is empty")
    keys = []
    for index, entry in enumerate(entries):
        try:
            keys.append(decode_key(entry))
        except ValueError as exc:
            raise ValueError(f"CORRAL_VAULT_KEY entry {index + 1}: {exc}") from exc
    return Keyring(keys)


def load_keys(configured: str | None, data_dir: Path) -> LoadedKeys:
    """The configured keys, else the data dir's key file, created on first use."""
    if configured:
        return LoadedKeys(keyring=parse_keys(configured))
    path = data_dir / KEY_FILE
    generated = False
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        generated = _write_new(path)
    return LoadedKeys(keyring=parse_keys(path.read_text()), key_file=path, generated=generated)


def _write_new(path: Path) -> bool:
    """Write a new key beside `path`, then hard-link it into place, so a concurrent reader
    never sees a half-written file; False when another process created it first."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(encode_key(new_key()) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True
