"""Courier's errors, one table from code to HTTP status.

    CourierError                 code, message, details, persisted
     ├── status 401  UNAUTHENTICATED
     ├── status 403  FORBIDDEN, SENDER_MISMATCH
     ├── status 404  NOT_FOUND
     ├── status 409  PROJECT_EXISTS, IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_KEY_IN_USE,
     │               DELIVERY_NOT_REDRIVABLE, DELIVERY_NOT_HELD
     ├── status 410  ARCHIVED
     ├── status 413  BODY_TOO_LARGE
     ├── status 422  INVALID_ARGUMENT, RECIPIENT_*, BOUND_SOURCE_LOST,
     │               QUIET_NOT_ALLOWED, RESOURCE_NOTICE_INVALID
     ├── status 429  RATE_LIMITED
     └── status 503  STORE_UNAVAILABLE, STORE_FULL

Foreign exceptions (redis, pydantic) are turned into these at the API boundary.
"""

from __future__ import annotations

from typing import Any

STATUS_BY_CODE: dict[str, int] = {
    "UNAUTHENTICATED": 401,
    "FORBIDDEN": 403,
    "SENDER_MISMATCH": 403,
    "NOT_FOUND": 404,
    "PROJECT_EXISTS": 409,
    "IDEMPOTENCY_KEY_CONFLICT": 409,
    "IDEMPOTENCY_KEY_IN_USE": 409,
    "DELIVERY_NOT_REDRIVABLE": 409,
    "DELIVERY_NOT_HELD": 409,
    "ARCHIVED": 410,
    "BODY_TOO_LARGE": 413,
    "INVALID_ARGUMENT": 422,
    "RECIPIENT_NOT_FOUND": 422,
    "RECIPIENT_RETIRED": 422,
    "RECIPIENT_CLOSED": 422,
    "BOUND_SOURCE_LOST": 422,
    "QUIET_NOT_ALLOWED": 422,
    "RESOURCE_NOTICE_INVALID": 422,
    "RATE_LIMITED": 429,
    "STORE_UNAVAILABLE": 503,
    "STORE_FULL": 503,
}

# Recipient failures, in the order that picks the error code of a failed send.
RECIPIENT_REASON_ORDER: tuple[str, ...] = (
    "RECIPIENT_NOT_FOUND",
    "RECIPIENT_RETIRED",
    "RECIPIENT_CLOSED",
    "BOUND_SOURCE_LOST",
)


class CourierError(Exception):
    """An error with a code of the HTTP API's table; ``persisted`` is False unless said so."""

    def __init__(
        self,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        persisted: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        if code not in STATUS_BY_CODE:
            raise ValueError(f"unknown error code {code}")
        self.code = code
        self.message = message
        self.details = details or {}
        self.persisted = persisted
        self.headers = headers or {}

    @property
    def status(self) -> int:
        """The HTTP status of this error's code."""
        return STATUS_BY_CODE[self.code]

    def body(self) -> dict[str, Any]:
        """The error in the HTTP API's JSON shape."""
        return {
            "persisted": self.persisted,
            "error": {"code": self.code, "message": self.message, "details": self.details},
        }


def unauthenticated(message: str) -> CourierError:
    """A 401 for a missing or unknown token, naming the scheme to use."""
    return CourierError("UNAUTHENTICATED", message, headers={"WWW-Authenticate": "Bearer"})


def not_found(what: str) -> CourierError:
    """A 404 for a thing the caller cannot see (missing or not theirs)."""
    return CourierError("NOT_FOUND", f"no {what} with that id is visible to this token")


def forbidden(message: str) -> CourierError:
    """A 403 for a valid token acting outside its scope."""
    return CourierError("FORBIDDEN", message)


def invalid(field: str, message: str) -> CourierError:
    """A 422 naming one field."""
    return CourierError("INVALID_ARGUMENT", f"{field}: {message}", {"field": field})


def store_unavailable() -> CourierError:
    """A 503 for a store that could not be reached; nothing was written."""
    return CourierError(
        "STORE_UNAVAILABLE", "the store could not be reached; nothing was stored, retry later"
    )


def store_full() -> CourierError:
    """A 503 for a store out of memory (``noeviction``): nothing was written."""
    return CourierError(
        "STORE_FULL", "the store is full (maxmemory reached); nothing was stored. Lower "
        "COURIER_RETENTION_DAYS or raise the store's maxmemory, then retry",
        {"retryable": True},
    )
