"""`github_repository` session resources: validation, and their sealed authorization tokens.

A token is write-only. It is sealed with the vault keyring (AES-GCM, bound to the resource
id, so a sealed value copied elsewhere will not open) and kept in its own resource row of
kind `repository_token`, never in the session body: the session, its resources and its
events are rendered from the body, so nothing sealed or plain can reach a response that way.
The hands read the current token per use (`current`), so a rotation applies to the very next
clone, fetch or push. See docs/repositories.md.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Any
from urllib.parse import urlsplit

from corral.errors import BadRequest
from corral.ids import new_id, now_rfc3339
from corral.netpolicy import AddressPolicy
from corral.store.base import Resource, ResourceStore
from corral.vault.crypto import Keyring
from corral.vault.secrets import all_rows
from corral.wire.sessions import GithubRepository

TOKEN_KIND = "repository_token"
WORKSPACE = "/workspace"
_MAX_URL = 2048
_MAX_TOKEN = 4096
_REF_NAME = re.compile(r"[A-Za-z0-9._/+-]{1,255}")
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_REPO_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")


def token_bound_to(resource_id: str) -> str:
    """What a repository token is sealed for (a token moved to another resource will not open)."""
    return f"repository/{resource_id}"


def check_url(raw: str, where: str, private: AddressPolicy) -> str:
    """The repository URL as stored: `https://`, or `http://` only to a destination the
    operator opened in `[egress] allow_private` (local stand-ins; elsewhere the token would
    cross the network in clear). No credentials, query or fragment in it.

    Raises:
        BadRequest: naming `<where>.url`.
    """
    field = f"{where}.url"
    if len(raw) > _MAX_URL or any(ord(c) < 33 or ord(c) == 127 for c in raw):
        raise BadRequest(f"{field}: must be a URL without spaces or control characters")
    try:
        url = urlsplit(raw)
        port = url.port
    except ValueError as exc:
        raise BadRequest(f"{field}: not a valid URL ({exc})") from None
    if url.scheme not in ("https", "http") or not url.hostname:
        raise BadRequest(f"{field}: must be an https:// URL of a git repository")
    if url.username is not None or url.password is not None:
        raise BadRequest(f"{field}: must not contain credentials; use authorization_token")
    if url.query or url.fragment:
        raise BadRequest(f"{field}: must not have a query or fragment")
    if url.scheme == "http" and not _operator_opened(url.hostname, port or 80, private):
        raise BadRequest(
            f"{field}: plain http:// is accepted only for hosts the operator lists in "
            "[egress] allow_private; use https://"
        )
    if not repo_name(raw):
        raise BadRequest(f"{field}: must name a repository (e.g. https://host/owner/name)")
    return raw.rstrip("/")


def _operator_opened(host: str, port: int, private: AddressPolicy) -> bool:
    try:
        return private.operator_allows(host, port, ipaddress.ip_address(host.strip("[]")))
    except ValueError:  # a name: only a rule naming it (any port, or this one) opens it
        name = host.rstrip(".").lower()
        return any(r.name == name and r.port in (None, port) for r in private.rules)


def repo_name(url: str) -> str:
    """The repository's name: the URL's last path segment without `.git` ("" when none)."""
    last = urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]
    name = last.removesuffix(".git")
    return name if _REPO_NAME.fullmatch(name) and name not in (".", "..") else ""


def check_mount_path(requested: str | None, url: str, where: str) -> str:
    """Where the clone appears: under /workspace (default `/workspace/<repo name>`).

    Raises:
        BadRequest: naming `<where>.mount_path`.
    """
    raw = requested if requested is not None else f"{WORKSPACE}/{repo_name(url)}"
    field = f"{where}.mount_path"
    if not raw or len(raw) > 1024 or any(ord(c) < 32 or ord(c) == 127 for c in raw):
        raise BadRequest(f"{field}: must be a path without control characters")
    path = posixpath.normpath(raw if raw.startswith("/") else f"{WORKSPACE}/{raw}")
    if ".." in raw.split("/") or not path.startswith(WORKSPACE + "/"):
        raise BadRequest(f"{field}: must be a directory under {WORKSPACE}/ (got {raw!r})")
    return path


def check_checkout(checkout: dict[str, Any] | None, where: str) -> dict[str, str] | None:
    """`{type: branch, name}` or `{type: commit, sha}` (a full hex sha), or None.

    Raises:
        BadRequest: naming the offending field.
    """
    if checkout is None:
        return None
    field = f"{where}.checkout"
    kind = checkout.get("type")
    extra = set(checkout) - {"type", "name", "sha"}
    if extra:
        raise BadRequest(f"{field}.{sorted(extra)[0]}: unknown field")
    if kind == "branch":
        name = checkout.get("name")
        if not isinstance(name, str) or not _REF_NAME.fullmatch(name) or _bad_ref(name):
            raise BadRequest(f"{field}.name: must be a branch name")
        return {"type": "branch", "name": name}
    if kind == "commit":
        sha = checkout.get("sha")
        if not isinstance(sha, str) or not _SHA.fullmatch(sha):
            raise BadRequest(f"{field}.sha: must be a full commit sha (40 lowercase hex digits)")
        return {"type": "commit", "sha": sha}
    raise BadRequest(f"{field}.type: must be 'branch' or 'commit'")


def _bad_ref(name: str) -> bool:
    """What git refuses in a ref name (and a leading dash, which would read as an option)."""
    return (
        name.startswith(("-", "/", "."))
        or name.endswith(("/", ".", ".lock"))
        or ".." in name
        or "//" in name
        or "/." in name
    )


def check_token(token: str | None, where: str) -> str | None:
    """A token goes into an HTTP header: printable ASCII only.

    Raises:
        BadRequest: naming `<where>.authorization_token` (never echoing it).
    """
    if token is None:
        return None
    field = f"{where}.authorization_token"
    if not token or len(token) > _MAX_TOKEN:
        raise BadRequest(f"{field}: must be 1-{_MAX_TOKEN} characters")
    if any(not 32 < ord(c) < 127 for c in token):
        raise BadRequest(f"{field}: must be printable ASCII without spaces")
    return token


class RepositoryTokens:
    """Sealed repository tokens in the resource store, one row per repository resource."""

    def __init__(self, store: ResourceStore, keyring: Keyring) -> None:
        self._store = store
        self._keyring = keyring

    async def put(self, session_id: str, resource_id: str, token: str) -> None:
        """Store (or replace) the resource's token, sealed."""
        sealed = self._keyring.seal({"token": token}, token_bound_to(resource_id))
        now = now_rfc3339()
        row = Resource(
            kind=TOKEN_KIND,
            id=resource_id,
            created_at=now,
            body={"session_id": session_id, "sealed": sealed},
        )
        if await self._store.get_resource(TOKEN_KIND, resource_id) is None:
            await self._store.insert_resource(row)
        else:
            await self._store.replace_resource(row)

    async def current(self, resource_id: str) -> str | None:
        """The plaintext token now (None: the repository is used without one)."""
        row = await self._store.get_resource(TOKEN_KIND, resource_id)
        if row is None:
            return None
        return self._keyring.open(str(row.body["sealed"]), token_bound_to(resource_id)).values[
            "token"
        ]

    async def rekey(self) -> int:
        """Re-seal every token sealed under a non-primary key (`corral vault-rekey`)."""
        count = 0
        for row in await all_rows(self._store, TOKEN_KIND, include_archived=True):
            if not str(row.body["sealed"]).startswith(f"v1.{self._keyring.primary_id}."):
                token = await self.current(row.id)
                if token is not None:
                    await self.put(str(row.body["session_id"]), row.id, token)
                    count += 1
        return count

    async def forget(self, resource_ids: list[str]) -> None:
        """Delete the tokens of removed resources or a deleted session."""
        for resource_id in resource_ids:
            await self._store.delete_resource(TOKEN_KIND, resource_id)


class RepositoryResources:
    """Builds stored `github_repository` entries (the token goes to `RepositoryTokens`)."""

    def __init__(self, tokens: RepositoryTokens, private: AddressPolicy) -> None:
        self.tokens = tokens
        self._private = private

    def build(self, item: GithubRepository, where: str, taken: set[str]) -> dict[str, Any]:
        """A stored entry (no token in it; see `pending_token`)."""
        url = check_url(item.url, where, self._private)
        path = check_mount_path(item.mount_path, url, where)
        if any(path == t or path.startswith(t + "/") or t.startswith(path + "/") for t in taken):
            raise BadRequest(f"{where}.mount_path: {path} overlaps another resource's mount path")
        checkout = check_checkout(item.checkout, where)
        check_token(item.authorization_token, where)
        taken.add(path)
        now = now_rfc3339()
        return {
            "id": new_id("sesrsc"),
            "type": "github_repository",
            "url": url,
            "mount_path": path,
            "checkout": checkout,
            "created_at": now,
            "updated_at": now,
        }
