"""Key rotation end to end: credentials sealed under an old key, `corral vault-rekey` with
`CORRAL_VAULT_KEY=new,old`, then a server given only `new` still uses every credential."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio

from corral.service.vaults import VaultService
from corral.store.sqlite import SqliteStore
from corral.vault.crypto import Keyring, decode_key, encode_key, new_key
from corral.vault.secrets import VaultSecrets
from corral.wire.vaults import CredentialCreate, VaultCreate
from tests.server import ServerProcess

MCP = "https://mcp.example.com/sse"


async def _seal_under(data_dir: Path, key: str) -> tuple[str, list[str]]:
    """A vault with two OAuth credentials sealed under `key`, written straight to the store."""
    store = SqliteStore(data_dir / "corral.db")
    await store.open()
    try:
        service = VaultService(VaultSecrets(store, Keyring([decode_key(key)])))
        vault = (await service.create(VaultCreate(display_name="rotate")))["id"]
        creds = []
        for i in range(2):
            auth = {"type": "mcp_oauth", "mcp_server_url": MCP, "access_token": f"a{i}"}
            body = CredentialCreate.model_validate({"auth": auth})
            creds.append((await service.create_credential(vault, body))["id"])
        return vault, creds
    finally:
        await store.aclose()


def _rekey(data_dir: Path, keys: str) -> str:
    env = {**os.environ, "CORRAL_VAULT_KEY": keys, "CORRAL_CONFIG": os.devnull}
    done = subprocess.run(
        [sys.executable, "-m", "corral", "vault-rekey", "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout + done.stderr


def test_rotation_with_rekey(tmp_path: Path) -> None:
    old, new = encode_key(new_key()), encode_key(new_key())
    vault, creds = anyio.run(_seal_under, tmp_path, old)
    assert "re-sealed 2 credential" in _rekey(tmp_path, f"{new},{old}")
    assert "re-sealed 0 credential" in _rekey(tmp_path, f"{new},{old}")
    server = ServerProcess(tmp_path, env={"CORRAL_VAULT_KEY": new}).start()
    try:
        for cred in creds:  # an auth update opens the sealed secrets first: 500 without the key
            server.client().beta.vaults.credentials.update(
                cred, vault_id=vault, auth={"type": "mcp_oauth", "access_token": "new"}
            )
    finally:
        server.stop()
    assert not (tmp_path / "vault.key").exists()  # a configured key is never written to disk
