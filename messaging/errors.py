"""Courier's errors: a class per status family, one table from code to status.

    CourierError                 code, message, details, persisted, headers
     ├── Unauthenticated   401  UNAUTHENTICATED
     ├── Forbidden         403  FORBIDDEN, SENDER_MISMATCH
     ├── NotFound          404  NOT_FOUND
     ├── RequestTimeout    408  REQUEST_TIMEOUT
     ├── Conflict          409  PROJECT_EXISTS, IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_KEY_IN_USE,
     │                          DELIVERY_NOT_REDRIVABLE, DELIVERY_NOT_HELD
     ├── Gone              410  ARCHIVED
     ├── TooLarge          413  BODY_TOO_LARGE; 431 HEADERS_TOO_LARGE
     ├── Invalid           422  INVALID_ARGUMENT, RECIPIENT_*, BOUND_SOURCE_LOST,
     │                          QUIET_NOT_ALLOWED, RESOURCE_NOTICE_INVALID
     ├── RateLimited       429  RATE_LIMITED
     └── Unavailable       503  STORE_UNAVAILABLE, STORE_FULL

``CourierError(code, ...)`` makes an instance of the family its code's status
belongs to, so ``except NotFound`` catches every 404 whoever raised it.
Foreign exceptions come in at one place each: pydantic's through
``from_validation`` (HTTP bodies, MCP arguments, transport settings), redis's
at the store's boundary (``messaging.store.failures``: every coroutine method of
the API's store raises these for a full, unreachable or unconfirmed store).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

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
    "REQUEST_TIMEOUT": 408,
    "ARCHIVED": 410,
    "BODY_TOO_LARGE": 413,
    "INVALID_ARGUMENT": 422,
    "RECIPIENT_NOT_FOUND": 422,
    "RECIPIENT_RETIRED": 422,
    "RECIPIENT_CLOSED": 422,
    "RECIPIENT_AMBIGUOUS": 422,
    "BOUND_SOURCE_LOST": 422,
    "QUIET_NOT_ALLOWED": 422,
    "RESOURCE_NOTICE_INVALID": 422,
    "RATE_LIMITED": 429,
    "HEADERS_TOO_LARGE": 431,
    "STORE_UNAVAILABLE": 503,
    "STORE_FULL": 503,
}

# Recipient failures, in the order that picks the error code of a failed send.
RECIPIENT_REASON_ORDER: tuple[str, ...] = (
    "RECIPIENT_NOT_FOUND",
    "RECIPIENT_RETIRED",
    "RECIPIENT_CLOSED",
    "BOUND_SOURCE_LOST",
    "RECIPIENT_AMBIGUOUS",
)


class CourierError(Exception):
    """An error with a code of the HTTP API's table; ``persisted`` is False unless said so."""

    status: int = 500

    def __new__(cls, code: str, *args: Any, **kwargs: Any) -> CourierError:
        if code not in STATUS_BY_CODE:
            raise ValueError(f"unknown error code {code}")
        family = _FAMILY_BY_STATUS.get(STATUS_BY_CODE[code], cls)
        if not issubclass(family, cls):
            raise ValueError(f"{code} is not a {cls.__name__}")
        return super().__new__(family)

    def __init__(
        self,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        persisted: bool | None = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}
        self.persisted = persisted
        self.headers = headers or {}
        self.status = STATUS_BY_CODE[code]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.code, self.message, self.details, self.persisted, self.headers))

    def body(self) -> dict[str, Any]:
        """The error in the HTTP API's JSON shape."""
        return {
            "persisted": self.persisted,
            "error": {"code": self.code, "message": self.message, "details": self.details},
        }


def _rebuild(code: str, message: str, details: dict[str, Any], persisted: bool | None,
             headers: dict[str, str]) -> CourierError:
    return CourierError(code, message, details, persisted=persisted, headers=headers)


class Unauthenticated(CourierError):
    """401: no token, or one Courier does not know."""


class Forbidden(CourierError):
    """403: a valid token outside its scope."""


class NotFound(CourierError):
    """404: missing, or not visible to this caller."""


class RequestTimeout(CourierError):
    """408: a client too slow to send its request."""


class Conflict(CourierError):
    """409: the request clashes with what is stored."""


class Gone(CourierError):
    """410: archived and removed from the store."""


class TooLarge(CourierError):
    """413 or 431: a body, or the request's headers, over the limit."""


class Invalid(CourierError):
    """422: a request that breaks a rule of the contract."""


class RateLimited(CourierError):
    """429: too many requests; ``Retry-After`` says when to come back."""


class Unavailable(CourierError):
    """503: the store cannot take the request now; nothing was stored."""


_FAMILY_BY_STATUS: dict[int, type[CourierError]] = {
    family_status: family
    for family_status, family in (
        (401, Unauthenticated), (403, Forbidden), (404, NotFound), (408, RequestTimeout),
        (409, Conflict), (410, Gone), (413, TooLarge), (422, Invalid), (429, RateLimited),
        (431, TooLarge), (503, Unavailable),
    )
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


def not_durable(level: str, reason: str) -> CourierError:
    """A 503 for a write the store did not confirm at its durability level: it may
    have been stored (``persisted`` null), and a retry with the same idempotency
    key replays it if it was."""
    return CourierError(
        "STORE_UNAVAILABLE", f"the store did not confirm the send at durability {level} "
        f"({reason}): it may have been stored; retry with the same idempotency_key, which "
        "replays it if it was", {"durability": level, "retryable": True}, persisted=None)


def store_full() -> CourierError:
    """A 503 for a store out of memory (``noeviction``): nothing was written."""
    return CourierError(
        "STORE_FULL", "the store is full (maxmemory reached); nothing was stored. Lower "
        "COURIER_RETENTION_DAYS or raise the store's maxmemory, then retry",
        {"retryable": True},
    )


class _Validation(Protocol):
    def errors(self) -> Sequence[Any]: ...


def from_validation(error: _Validation, prefix: str = "") -> CourierError:
    """Pydantic's errors as one INVALID_ARGUMENT naming the first field (under ``prefix``).

    ``error`` is pydantic's ValidationError or FastAPI's RequestValidationError.
    """
    rows = [
        {"field": _field(tuple(e["loc"]), prefix),
         "message": e["msg"].removeprefix("Value error, "), "type": e["type"]}
        for e in error.errors()
    ]
    first = rows[0] if rows else {"field": prefix.rstrip(".") or "body", "message": "invalid"}
    return CourierError("INVALID_ARGUMENT", f"{first['field']}: {first['message']}",
                        {"field": first["field"], "errors": rows})


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a dotted field name (``to.2``)."""
    if loc[:1] == ("body",) and len(loc) > 1 and isinstance(loc[1], int):
        return "body"  # a JSON syntax error: loc holds its position, not a field
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def _field(loc: tuple[Any, ...], prefix: str) -> str:
    path = field_path(loc) if loc else ""
    return prefix + path if path else prefix.rstrip(".") or "body"
