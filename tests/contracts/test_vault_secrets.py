"""The vault seam others build on: sealing, key files, rotation, `resolve_secret`,
on every store backend, in process (no HTTP)."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from corral.service.vaults import VaultService
from corral.store.base import Store
from corral.vault.crypto import Keyring, VaultKeyError, encode_key, new_key
from corral.vault.keys import KEY_FILE, load_keys, parse_keys
from corral.vault.secrets import SEALED, SecretMatch, VaultSecrets, credential_kind
from corral.wire.vaults import CredentialCreate, CredentialUpdate, VaultCreate

MCP = "https://mcp.example.com/sse"


def test_sealed_token_opens_only_for_its_row_and_key() -> None:
    ring = Keyring([new_key()])
    token = ring.seal({"token": "s3cret"}, "vlt_a/vcrd_a")
    assert "s3cret" not in token
    assert ring.open(token, "vlt_a/vcrd_a").values == {"token": "s3cret"}
    with pytest.raises(VaultKeyError):
        ring.open(token, "vlt_a/vcrd_b")  # moved onto another credential
    version, kid, blob = token.split(".")
    # flip one bit of the ciphertext itself: editing the base64 text can hit padding bits
    raw = bytearray(base64.urlsafe_b64decode(blob))
    raw[-1] ^= 1
    flipped = base64.urlsafe_b64encode(bytes(raw)).decode()
    with pytest.raises(VaultKeyError):
        ring.open(f"{version}.{kid}.{flipped}", "vlt_a/vcrd_a")
    other = Keyring([new_key()])
    with pytest.raises(VaultKeyError, match=kid):
        other.open(token, "vlt_a/vcrd_a")


def test_key_file_is_generated_once_private_and_reused(tmp_path: Path) -> None:
    first = load_keys(None, tmp_path)
    assert first.generated and first.key_file == tmp_path / KEY_FILE
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600
    again = load_keys(None, tmp_path)
    assert not again.generated
    assert again.keyring.primary_id == first.keyring.primary_id
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEY_FILE]


def test_configured_keys_win_and_bad_ones_are_not_echoed(tmp_path: Path) -> None:
    new, old = encode_key(new_key()), encode_key(new_key())
    loaded = load_keys(f"{new}, {old}", tmp_path)
    assert loaded.key_file is None and not (tmp_path / KEY_FILE).exists()
    assert len(loaded.keyring.key_ids) == 2
    bad = "not-a-key-but-a-secret-looking-string"
    with pytest.raises(ValueError, match="entry 2") as caught:
        parse_keys(f"{new},{bad}")
    assert bad not in str(caught.value)
    with pytest.raises(ValueError):
        parse_keys(encode_key(b"short"))


def _service(store: Store, *keys: bytes) -> VaultService:
    return VaultService(VaultSecrets(store, Keyring(list(keys))))


async def _vault(service: VaultService, name: str = "v") -> str:
    return str((await service.create(VaultCreate(display_name=name)))["id"])


async def _credential(service: VaultService, vault_id: str, auth: dict[str, object]) -> str:
    created = await service.create_credential(
        vault_id, CredentialCreate.model_validate({"auth": auth})
    )
    return str(created["id"])


@pytest.mark.anyio
async def test_resolve_secret_finds_the_first_active_match(store: Store) -> None:
    service = _service(store, new_key())
    first, second = await _vault(service, "a"), await _vault(service, "b")
    await _credential(
        service, second, {"type": "static_bearer", "mcp_server_url": MCP, "token": "b-tok"}
    )
    cred = await _credential(
        service, first, {"type": "static_bearer", "mcp_server_url": MCP, "token": "a-tok"}
    )
    oauth = {
        "type": "mcp_oauth",
        "mcp_server_url": "https://other.example.com/mcp",
        "access_token": "acc",
        "refresh": {
            "client_id": "cid",
            "refresh_token": "ref",
            "token_endpoint": "https://auth.example.com/token",
            "token_endpoint_auth": {"type": "client_secret_post", "client_secret": "cs"},
        },
    }
    await _credential(service, second, oauth)
    secrets = service.secrets
    found = await secrets.resolve_secret([first, second], SecretMatch(mcp_server_url=MCP))
    assert found is not None and found.credential_id == cred and found.vault_id == first
    assert found.secrets["token"].reveal() == "a-tok"
    assert "a-tok" not in repr(found) and "a-tok" not in str(found.secrets)
    later = await secrets.resolve_secret([second, first], SecretMatch(mcp_server_url=MCP))
    assert later is not None and later.secrets["token"].reveal() == "b-tok"
    got = await secrets.resolve_secret([second], SecretMatch(type="mcp_oauth"))
    assert got is not None
    assert {k: v.reveal() for k, v in got.secrets.items()} == {
        "access_token": "acc",
        "refresh_token": "ref",
        "client_secret": "cs",
    }
    assert await secrets.resolve_secret([first], SecretMatch(type="mcp_oauth")) is None
    assert await secrets.resolve_secret(["vlt_unknown"], SecretMatch()) is None
    await service.archive_credential(first, cred)
    fallback = await secrets.resolve_secret([first, second], SecretMatch(mcp_server_url=MCP))
    assert fallback is not None and fallback.vault_id == second
    await service.archive(second)
    assert await secrets.resolve_secret([first, second], SecretMatch(mcp_server_url=MCP)) is None


@pytest.mark.anyio
async def test_resolve_all_returns_every_environment_variable(store: Store) -> None:
    service = _service(store, new_key())
    vault = await _vault(service)
    for name in ("A_KEY", "B_KEY"):
        await _credential(
            service,
            vault,
            {
                "type": "environment_variable",
                "secret_name": name,
                "secret_value": f"value-of-{name}",
                "networking": {"type": "limited", "allowed_hosts": ["api.example.com"]},
            },
        )
    found = await service.secrets.resolve_all([vault], SecretMatch(type="environment_variable"))
    # ids order by creation only to the millisecond, so compare without order
    assert sorted((r.auth["secret_name"], r.secrets["secret_value"].reveal()) for r in found) == [
        ("A_KEY", "value-of-A_KEY"),
        ("B_KEY", "value-of-B_KEY"),
    ]
    assert found[0].auth["injection_location"] == {"header": True, "body": False}


@pytest.mark.anyio
async def test_update_keeps_untouched_secrets(store: Store) -> None:
    service = _service(store, new_key())
    vault = await _vault(service)
    oauth = {
        "type": "mcp_oauth",
        "mcp_server_url": MCP,
        "access_token": "old-acc",
        "refresh": {
            "client_id": "cid",
            "refresh_token": "ref",
            "token_endpoint": "https://auth.example.com/token",
            "token_endpoint_auth": {"type": "client_secret_basic", "client_secret": "cs"},
        },
    }
    cred = await _credential(service, vault, oauth)
    update = {
        "type": "mcp_oauth",
        "access_token": "new-acc",
        "refresh": {"scope": "read", "token_endpoint_auth": {"type": "client_secret_post"}},
    }
    await service.update_credential(vault, cred, CredentialUpdate.model_validate({"auth": update}))
    found = await service.secrets.resolve_secret([vault], SecretMatch())
    assert found is not None
    assert {k: v.reveal() for k, v in found.secrets.items()} == {
        "access_token": "new-acc",
        "refresh_token": "ref",
        "client_secret": "cs",
    }
    assert found.auth["refresh"]["scope"] == "read"
    # the method is kept even when the other secret-bearing type is sent (as the SDK says)
    assert found.auth["refresh"]["token_endpoint_auth"] == {"type": "client_secret_basic"}


@pytest.mark.anyio
async def test_rotation_reseals_on_read_and_by_rekey(store: Store) -> None:
    old, new = new_key(), new_key()
    before = _service(store, old)
    vault = await _vault(before)
    used = await _credential(
        before, vault, {"type": "static_bearer", "mcp_server_url": MCP, "token": "t1"}
    )
    idle = await _credential(
        before,
        vault,
        {"type": "static_bearer", "mcp_server_url": "https://x.example.com", "token": "t2"},
    )
    rotated = _service(store, new, old)
    found = await rotated.secrets.resolve_secret([vault], SecretMatch(mcp_server_url=MCP))
    assert found is not None and found.secrets["token"].reveal() == "t1"
    new_id = Keyring([new]).primary_id
    row = await store.get_resource(credential_kind(vault), used)
    assert row is not None and str(row.body[SEALED]).startswith(f"v1.{new_id}.")
    only_new = _service(store, new)
    with pytest.raises(VaultKeyError):  # not yet re-sealed: the old key is still needed
        await only_new.secrets.resolve_secret(
            [vault], SecretMatch(mcp_server_url="https://x.example.com")
        )
    assert await rotated.secrets.rekey() == 1
    assert await rotated.secrets.rekey() == 0
    again = await only_new.secrets.resolve_secret(
        [vault], SecretMatch(mcp_server_url="https://x.example.com")
    )
    assert again is not None and again.credential_id == idle
    assert again.secrets["token"].reveal() == "t2"


@pytest.mark.anyio
async def test_store_refreshed_keeps_new_tokens_sealed(store: Store) -> None:
    service = _service(store, new_key())
    vault = await _vault(service)
    oauth = {
        "type": "mcp_oauth",
        "mcp_server_url": MCP,
        "access_token": "stale",
        "refresh": {
            "client_id": "cid",
            "refresh_token": "ref1",
            "token_endpoint": "https://auth.example.com/token",
            "token_endpoint_auth": {"type": "none"},
        },
    }
    cred = await _credential(service, vault, oauth)
    found = await service.secrets.resolve_secret([vault], SecretMatch(type="mcp_oauth"))
    assert found is not None
    later = "2999-01-01T00:00:00.000000Z"
    await service.secrets.store_refreshed(
        found, {"access_token": "fresh-access", "refresh_token": "ref2"}, expires_at=later
    )
    again = await service.secrets.resolve_secret([vault], SecretMatch(type="mcp_oauth"))
    assert again is not None and again.auth["expires_at"] == later
    assert {k: v.reveal() for k, v in again.secrets.items()} == {
        "access_token": "fresh-access",
        "refresh_token": "ref2",
    }
    row = await store.get_resource(credential_kind(vault), cred)
    assert row is not None and "fresh-access" not in str(row.body)
    await service.archive_credential(vault, cred)
    with pytest.raises(LookupError):
        await service.secrets.store_refreshed(found, {"access_token": "x"})
