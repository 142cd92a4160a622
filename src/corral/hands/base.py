"""The seam between the brain and the places where code runs.

The brain knows only `provision(recipe) -> Sandbox` and `Sandbox.execute(name, input)`.
Sandboxes are cattle: any of them may die at any time; the brain turns that into a tool
error and provisions a fresh one from the same recipe on the next call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

SKILLS_DIR = "/mnt/skills"
"""Where a session's skills are mounted read-only (`/mnt/skills/<name>`): outside /workspace,
so no mount point ever lies in a tree the sandbox can write."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    """A host path made visible inside the sandbox."""

    host_path: Path
    sandbox_path: str
    read_only: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Resource limits applied to every command run in a sandbox."""

    cpu_seconds: int = 120
    memory_bytes: int = 1024 * 1024 * 1024
    max_processes: int = 256
    wall_seconds: float = 120.0
    output_bytes: int = 100 * 1024
    disk_bytes: int = 4 * 1024**3
    """Quota on /workspace plus outputs together; also the largest size of any one file."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Networking:
    """Egress policy, enforced outside the sandbox."""

    type: Literal["unrestricted", "limited", "none"] = "unrestricted"
    allowed_hosts: tuple[str, ...] = ()
    allow_package_managers: bool = False


class Hidden:
    """A secret in transit to the egress proxy; `str()`/`repr()` are redacted so a recipe can
    be logged or compared without revealing it."""

    __slots__ = ("_value",)

    def __init__(self, value: bytes) -> None:
        self._value = value

    def reveal(self) -> bytes:
        """The plaintext, for the one place that sends it (the egress proxy)."""
        return self._value

    def __repr__(self) -> str:
        return "Hidden('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hidden) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Injection:
    """One `environment_variable` credential as the egress proxy applies it: the sandbox
    holds `placeholder`; the proxy puts `secret` in its place on requests to `hosts`."""

    placeholder: str
    secret: Hidden
    hosts: tuple[str, ...] | None
    """Exact names/IPv4s or `*.suffix` (subdomains only); None: any host the sandbox may reach."""
    header: bool
    body: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Interception:
    """What the egress proxy needs to substitute credentials: the environment's CA (which
    the sandbox trusts) to terminate TLS for credential hosts, and the credentials."""

    ca_cert_pem: bytes
    ca_key_pem: Hidden
    injections: tuple[Injection, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Repository:
    """A git repository cloned host-side into the workspace (`docs/repositories.md`).

    No secret here: the token is looked up per use by the resource id."""

    resource_id: str
    url: str
    mount_path: str
    """Absolute, under /workspace."""
    checkout: tuple[Literal["branch", "commit"], str] | None = None
    """(kind, branch name or commit sha); None for the remote's default branch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxRecipe:
    """Everything needed to (re)make a session's sandbox identically."""

    session_id: str
    workspace: Path
    """Host directory mounted read-write at /workspace; it outlives any one sandbox."""
    outputs: Path
    """Host directory mounted read-write at /mnt/session/outputs."""
    mounts: tuple[Mount, ...] = ()
    networking: Networking = field(default_factory=Networking)
    limits: Limits = field(default_factory=Limits)
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for commands; never secrets."""
    repositories: tuple[Repository, ...] = ()
    """Cloned into the workspace before the sandbox starts; fetched and pushed through the
    host's git forwarder (`hands._gitproxy`)."""
    interception: Interception | None = None
    """Credentials the egress proxy substitutes (the placeholders are in `env`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput:
    """What a tool returned: content blocks for the model and whether it failed."""

    content: list[dict[str, Any]]
    is_error: bool = False

    @classmethod
    def text(cls, text: str, *, is_error: bool = False) -> ToolOutput:
        """A single text block."""
        return cls(content=[{"type": "text", "text": text}], is_error=is_error)


class Sandbox(Protocol):
    """One live sandbox."""

    async def execute(self, name: str, input: dict[str, Any]) -> ToolOutput:
        """Run built-in tool `name` with `input`.

        Tool-level failures (non-zero exit, file not found, limit hit) come back as
        `ToolOutput(is_error=True)`.

        Raises:
            HandsError: the sandbox itself died or could not run the call.
        """
        ...

    async def destroy(self) -> None:
        """Kill every process of the sandbox; idempotent. Files under the workspace stay."""
        ...

    @property
    def alive(self) -> bool:
        """False once the sandbox is known to be dead or destroyed."""
        ...


class Hands(Protocol):
    """A provider of sandboxes."""

    async def provision(self, recipe: SandboxRecipe) -> Sandbox:
        """Make a sandbox from `recipe`.

        Raises:
            HandsError: the sandbox could not be made (e.g. bubblewrap missing).
        """
        ...

    async def aclose(self) -> None:
        """Destroy every sandbox this provider made."""
        ...
