"""Environment request bodies."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from corral.wire.common import Metadata, MetadataPatch, Strict

_HOST = r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(:\d{1,5})?$"


class Unrestricted(Strict):
    """Full egress."""

    type: Literal["unrestricted"]


class Limited(Strict):
    """Egress only to listed hosts."""

    type: Literal["limited"]
    allowed_hosts: list[Annotated[str, Field(pattern=_HOST)]] | None = None
    allow_mcp_servers: bool | None = None
    allow_package_managers: bool | None = None


Networking = Annotated[Unrestricted | Limited, Field(discriminator="type")]
_PACKAGE = r"^[A-Za-z0-9@][A-Za-z0-9@._+:/=<>!~\-\[\], ]*$"
PackageList = list[Annotated[str, Field(min_length=1, max_length=200, pattern=_PACKAGE)]]


class Packages(Strict):
    """Packages installed once per environment."""

    type: Literal["packages"] | None = None
    apt: PackageList | None = None
    cargo: PackageList | None = None
    gem: PackageList | None = None
    go: PackageList | None = None
    npm: PackageList | None = None
    pip: PackageList | None = None


class CloudConfig(Strict):
    """Sandboxes run by this server."""

    type: Literal["cloud"]
    networking: Networking | None = None
    packages: Packages | None = None


class SelfHostedConfig(Strict):
    """Sandboxes run by the caller's workers."""

    type: Literal["self_hosted"]


EnvironmentConfig = Annotated[CloudConfig | SelfHostedConfig, Field(discriminator="type")]


class EnvironmentCreate(Strict):
    """POST /v1/environments."""

    name: Annotated[str, Field(min_length=1, max_length=256)]
    config: EnvironmentConfig | None = None
    description: Annotated[str, Field(max_length=2048)] | None = None
    metadata: Metadata | None = None
    scope: Literal["organization", "account"] | None = None


class EnvironmentUpdate(Strict):
    """POST /v1/environments/{id}."""

    name: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    config: EnvironmentConfig | None = None
    description: Annotated[str, Field(max_length=2048)] | None = None
    metadata: MetadataPatch | None = None
    scope: Literal["organization", "account"] | None = None

    @field_validator("metadata")
    @classmethod
    def _empty_deletes(cls, value: dict[str, str | None] | None) -> dict[str, str | None] | None:
        return None if value is None else {k: (v or None) for k, v in value.items()}
