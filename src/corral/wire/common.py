"""Shared wire pieces: strict request base, metadata maps, permission policies."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """Request bodies reject unknown fields, so typos are a 400 naming the field."""

    model_config = ConfigDict(extra="forbid", strict=False)


def _check_metadata(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 16:
        raise ValueError("at most 16 metadata pairs")
    for key, item in value.items():
        if not key or len(key) > 64:
            raise ValueError(f"metadata key {key!r} must be 1-64 characters")
        if len(item) > 512:
            raise ValueError(f"metadata value of {key!r} exceeds 512 characters")
    return value


def _check_metadata_patch(value: dict[str, str | None]) -> dict[str, str | None]:
    for key, item in value.items():
        if not key or len(key) > 64:
            raise ValueError(f"metadata key {key!r} must be 1-64 characters")
        if item is not None and len(item) > 512:
            raise ValueError(f"metadata value of {key!r} exceeds 512 characters")
    return value


Metadata = Annotated[dict[str, str], AfterValidator(_check_metadata)]
MetadataPatch = Annotated[dict[str, str | None], AfterValidator(_check_metadata_patch)]


class AlwaysAllow(Strict):
    """Run without asking."""

    type: Literal["always_allow"]


class AlwaysAsk(Strict):
    """Pause for a `user.tool_confirmation`."""

    type: Literal["always_ask"]


class Auto(Strict):
    """Server judges each call."""

    type: Literal["auto"]


PermissionPolicy = Annotated[AlwaysAllow | AlwaysAsk | Auto, Field(discriminator="type")]

NonEmpty = Annotated[str, Field(min_length=1)]
