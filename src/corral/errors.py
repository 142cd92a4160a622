"""Corral's error tree; every API error maps one-to-one to the wire error envelope.

    CorralError
    ├── ApiError(status, type, message, error_code)      -> {"type":"error","error":{...}}
    │   ├── BadRequest          400 invalid_request_error
    │   ├── Unauthorized        401 authentication_error
    │   ├── Forbidden           403 permission_error
    │   ├── NotFound            404 not_found_error
    │   ├── Conflict            409 conflict_error
    │   │   ├── MemoryPreconditionFailed  409 memory_precondition_failed_error
    │   │   └── MemoryPathConflict        409 memory_path_conflict_error
    │   ├── PreconditionFailed  412 invalid_request_error (a stale view of a work lease)
    │   ├── PayloadTooLarge     413 request_too_large
    │   ├── StoreUnavailable    503 api_error (store unreachable or past its time bound)
    │   └── StorageFailure      the store cannot write: the operator must act
    │       ├── DiskFull        507 api_error (error_code disk_full)
    │       └── StorageIOError  503 api_error (error_code storage_io_error)
    ├── LeaseLost             a brain's fencing token is stale; its append was rejected
    ├── StartupError(exit_code)  a process cannot start: one line for the operator, no traceback
    └── HandsError(code, retryable)  the sandbox failed (dead, timed out, could not start)

This module must not import anything else from corral.
"""

from __future__ import annotations

from typing import Any


class CorralError(Exception):
    """Root of every error Corral raises on purpose."""


class ApiError(CorralError):
    """An error with a wire representation; raised by services, rendered by `api/`."""

    status: int = 500
    type: str = "api_error"

    def __init__(
        self,
        message: str,
        *,
        error_code: str | None = None,
        details: dict[str, Any] | None = None,
        should_retry: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code
        self.details = dict(details or {})
        self.should_retry = should_retry

    def body(self, request_id: str) -> dict[str, Any]:
        """The JSON envelope the SDK parses."""
        details = dict(self.details)
        if self.error_code is not None:
            details["error_code"] = self.error_code
        error: dict[str, Any] = {"type": self.type, "message": self.message}
        if details:
            error["details"] = details
        return {"type": "error", "error": error, "request_id": request_id}


class BadRequest(ApiError):
    """The request is malformed or names something it may not use."""

    status = 400
    type = "invalid_request_error"


class Unauthorized(ApiError):
    """No API key, or an unknown one."""

    status = 401
    type = "authentication_error"


class NotFound(ApiError):
    """The addressed object does not exist (or was deleted)."""

    status = 404
    type = "not_found_error"


class Conflict(ApiError):
    """The request races a concurrent change (e.g. a stale agent `version`)."""

    status = 409
    type = "conflict_error"

    def __init__(self, message: str, **kwargs: Any) -> None:
        kwargs.setdefault("should_retry", False)
        super().__init__(message, **kwargs)


class MemoryPreconditionFailed(Conflict):
    """A memory's content is not the `content_sha256` the request expected."""

    type = "memory_precondition_failed_error"


class MemoryPathConflict(Conflict):
    """Another memory of the store already has the requested path."""

    type = "memory_path_conflict_error"


class Forbidden(ApiError):
    """403: a valid credential asked for something outside its scope."""

    status = 403
    type = "permission_error"


class PreconditionFailed(ApiError):
    """412: the caller's view of a work lease is stale (another worker may hold it)."""

    status = 412
    type = "invalid_request_error"


class PayloadTooLarge(ApiError):
    """The request body exceeds a configured limit."""

    status = 413
    type = "request_too_large"


class StoreUnavailable(ApiError):
    """The store did not answer within `store_timeout_seconds` (or the connection to it was
    lost). When `outcome_unknown` is false the request was not applied and the SDK may
    retry it; when true, a commit was in flight and may have applied, so the answer tells
    the client not to retry blindly (`x-should-retry: false`)."""

    status = 503
    type = "api_error"

    def __init__(self, message: str, *, outcome_unknown: bool = False) -> None:
        super().__init__(
            message,
            error_code="store_unavailable",
            should_retry=not outcome_unknown,
        )
        self.outcome_unknown = outcome_unknown


class StorageFailure(ApiError):
    """The store's disk refuses writes; `condition` is the operator's one log line for it."""

    def __init__(self, message: str, *, condition: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.condition = condition


class DiskFull(StorageFailure):
    """The data directory's disk is full: nothing can be written until space returns.

    Not worth the SDK's automatic retries (seconds apart): it lasts until someone frees space.
    """

    status = 507

    def __init__(self, message: str, *, condition: str) -> None:
        super().__init__(message, condition=condition, error_code="disk_full", should_retry=False)


class StorageIOError(StorageFailure):
    """The data directory's disk failed a read or write (an I/O error); it may pass."""

    status = 503

    def __init__(self, message: str, *, condition: str) -> None:
        super().__init__(message, condition=condition, error_code="storage_io_error")


class LeaseLost(CorralError):
    """A brain tried to append with a fencing token that is no longer current."""


class StartupError(CorralError):
    """A process cannot start (port taken, database missing, wrong vault key...).

    The message is one line saying what is wrong and what to do; the command line prints it
    and exits with `exit_code` (2: the configuration is wrong; 1: the world is not as it
    needs to be), never with a traceback.
    """

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class HandsError(CorralError):
    """The sandbox itself failed; `retryable` says whether a fresh sandbox may succeed."""

    def __init__(self, code: str, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
