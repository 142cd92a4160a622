"""Maps a provider's HTTP failure (status and error type) to a `ModelError`.

Shared by the HTTP providers so they retry alike; it knows no SDK and makes no calls.
"""

from __future__ import annotations

from corral.models.base import ModelError, ModelErrorKind

_BY_TYPE: dict[str, tuple[ModelErrorKind, bool]] = {
    "overloaded_error": ("overloaded", True),
    "rate_limit_error": ("rate_limited", True),
    "authentication_error": ("authentication", False),
    "permission_error": ("authentication", False),
    "invalid_request_error": ("invalid_request", False),
    "not_found_error": ("invalid_request", False),
    "request_too_large": ("invalid_request", False),
}


def _kind_for_status(status: int) -> tuple[ModelErrorKind, bool] | None:
    if status == 529:
        return "overloaded", True
    if status == 429:
        return "rate_limited", True
    if status in (401, 403):
        return "authentication", False
    # 408 and 409 are transient for the Messages API (its SDK retries them too).
    if status >= 500 or status in (408, 409):
        return "request_failed", True
    if 400 <= status < 500:
        return "invalid_request", False
    return None


def error_for_status(
    provider: str,
    status: int | None,
    error_type: str | None,
    message: str,
    *,
    retry_after: float | None = None,
) -> ModelError:
    """The `ModelError` for an HTTP error status, or for an error event inside a 200 stream.

    An `overloaded_error` type wins over the status; without an error status (mid-stream) the
    type decides and unknown types count as retryable failures, since the request itself was
    accepted. `retry_after`: the wait the provider's headers asked for, if any.
    """
    found: tuple[ModelErrorKind, bool] | None = None
    if error_type == "overloaded_error":
        found = ("overloaded", True)
    elif status is not None:
        found = _kind_for_status(status)
    if found is None:
        found = _BY_TYPE.get(error_type or "", ("request_failed", True))
    kind, retryable = found
    label = " ".join(str(p) for p in (status, error_type) if p is not None)
    return ModelError(
        kind,
        f"{provider}: {label}: {message}",
        retryable=retryable,
        status=status,
        retry_after=retry_after,
    )


def missing_key(key_name: str, model: str) -> ModelError:
    """The call could not be made: the route's key variable is not set (or empty)."""
    return ModelError(
        "authentication",
        f"{key_name} is not set on the Corral server: set it in the environment of `corral "
        f"serve` (and of every `corral worker`) and restart, to call {model!r}",
        retryable=False,
    )


def connection_error(provider: str, detail: str) -> ModelError:
    """A connection failure or timeout; always worth a retry."""
    return ModelError("request_failed", f"{provider}: connection failed: {detail}", retryable=True)


def stall_error(provider: str, seconds: float) -> ModelError:
    """The provider sent nothing (no answer head, no byte of the stream) for `seconds`: the
    call is given up and retried, rather than holding the turn for as long as it stays silent."""
    return ModelError(
        "request_failed",
        f"{provider}: the model sent nothing for {seconds:g} s (model_stall_timeout_seconds)",
        retryable=True,
    )
