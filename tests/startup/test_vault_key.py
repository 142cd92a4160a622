"""A vault key that opens none of the stored secrets stops the start, in one line naming
where the key came from (issue 18); before, it showed only as a session's unknown_error."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from corral.errors import StartupError
from corral.preflight import check_vault_key
from corral.service.repositories import RepositoryTokens
from corral.service.vaults import VaultService
from corral.store.sqlite import SqliteStore
from corral.vault.crypto import Keyring, decode_key, encode_key, key_id, new_key
from corral.vault.secrets import VaultSecrets
from corral.wire.vaults import CredentialCreate, VaultCreate
from tests.server import free_port
from tests.startup.support import assert_one_line_error, corral, started

LISTENING = "Corral listening on"


async def _seal_credential(data_dir: Path, key: str) -> None:
    """One vault with one credential sealed under `key`, written through the vault service
    (the store makes the data dir)."""
    store = SqliteStore(data_dir / "corral.db")
    await store.open()
    try:
        service = VaultService(VaultSecrets(store, Keyring([decode_key(key)])))
        vault = (await service.create(VaultCreate(display_name="ops")))["id"]
        auth = {"type": "static_bearer", "mcp_server_url": "https://mcp.example/sse", "token": "t"}
        await service.create_credential(vault, CredentialCreate.model_validate({"auth": auth}))
    finally:
        await store.aclose()


def test_wrong_corral_vault_key(tmp_path: Path) -> None:
    sealed_with, wrong = encode_key(new_key()), encode_key(new_key())
    anyio.run(_seal_credential, tmp_path / ".corral", sealed_with)
    port = str(free_port())
    done = corral(tmp_path, "serve", "--port", port, env={"CORRAL_VAULT_KEY": wrong})
    assert done.code == 2
    assert_one_line_error(
        done, "CORRAL_VAULT_KEY", key_id(decode_key(sealed_with)), "--accept-lost-vault-key"
    )
    assert wrong not in done.stderr and sealed_with not in done.stderr
    # A lost key: the operator may still start, to delete and re-create the credentials.
    env = {"CORRAL_VAULT_KEY": wrong}
    with started(tmp_path, "serve", "--port", port, "--accept-lost-vault-key", env=env) as srv:
        srv.wait_for(LISTENING)
    # Rotation (new key first, old still listed) opens them.
    env = {"CORRAL_VAULT_KEY": f"{wrong},{sealed_with}"}
    with started(tmp_path, "serve", "--port", port, env=env) as srv:
        srv.wait_for(LISTENING)


def test_replaced_key_file(tmp_path: Path) -> None:
    data_dir = tmp_path / ".corral"
    sealed_with = encode_key(new_key())
    anyio.run(_seal_credential, data_dir, sealed_with)
    (data_dir / "vault.key").write_text(encode_key(new_key()) + "\n")
    done = corral(tmp_path, "serve", "--port", str(free_port()))
    assert done.code == 2
    assert_one_line_error(done, str(data_dir / "vault.key"), "CORRAL_VAULT_KEY")


def test_a_repository_token_is_checked_too(tmp_path: Path) -> None:
    async def run() -> None:
        store = SqliteStore(tmp_path / "corral.db")
        await store.open()
        try:
            sealed_with = Keyring([new_key()])
            await RepositoryTokens(store, sealed_with).put("sesn_a", "sesrsc_a", "ghp_x")
            await check_vault_key(store, sealed_with, "CORRAL_VAULT_KEY")  # opens: no error
            with pytest.raises(StartupError, match="CORRAL_VAULT_KEY"):
                await check_vault_key(store, Keyring([new_key()]), "CORRAL_VAULT_KEY")
        finally:
            await store.aclose()

    anyio.run(run)
