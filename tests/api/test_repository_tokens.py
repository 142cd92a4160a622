"""Repository tokens at rest: sealed in their own rows, bound to their resource, re-sealed by
`corral vault-rekey` so a server given only the new key still opens them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from corral.service.repositories import TOKEN_KIND, RepositoryTokens
from corral.store.base import Resource
from corral.store.sqlite import SqliteStore
from corral.vault.crypto import Keyring, VaultKeyError, decode_key, encode_key, new_key

TOKEN = "ghp_REPO_CANARY_5c1d9e"


async def _with_store(data_dir: Path, keys: list[str], work: object) -> object:
    store = SqliteStore(data_dir / "corral.db")
    await store.open()
    try:
        tokens = RepositoryTokens(store, Keyring([decode_key(k) for k in keys]))
        return await work(store, tokens)  # type: ignore[operator]
    finally:
        await store.aclose()


def test_sealed_bound_rotated_and_forgotten(tmp_path: Path) -> None:
    old, new = encode_key(new_key()), encode_key(new_key())

    async def seal(store: SqliteStore, tokens: RepositoryTokens) -> None:
        await tokens.put("sesn_a", "sesrsc_a", TOKEN)
        await tokens.put("sesn_a", "sesrsc_b", "second")
        assert await tokens.current("sesrsc_a") == TOKEN
        assert await tokens.current("sesrsc_missing") is None
        row = await store.get_resource(TOKEN_KIND, "sesrsc_a")
        assert row is not None and TOKEN not in str(row.body)
        # A sealed value moved onto another resource does not open there.
        moved = Resource(kind=TOKEN_KIND, id="sesrsc_c", body=row.body, created_at="x")
        await store.insert_resource(moved)
        with pytest.raises(VaultKeyError):
            await tokens.current("sesrsc_c")
        await store.delete_resource(TOKEN_KIND, "sesrsc_c")

    anyio.run(_with_store, tmp_path, [old], seal)
    assert TOKEN.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())

    env = {**os.environ, "CORRAL_VAULT_KEY": f"{new},{old}"}
    env["CORRAL_CONFIG"] = os.devnull  # no config file
    args = [sys.executable, "-m", "corral", "vault-rekey", "--data-dir", str(tmp_path)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    assert "2 repository token(s)" in done.stdout + done.stderr

    async def only_new(store: SqliteStore, tokens: RepositoryTokens) -> None:
        assert await tokens.current("sesrsc_a") == TOKEN
        await tokens.forget(["sesrsc_a", "sesrsc_b"])
        assert await store.get_resource(TOKEN_KIND, "sesrsc_a") is None

    anyio.run(_with_store, tmp_path, [new], only_new)
