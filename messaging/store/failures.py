"""Redis's errors become Courier's at the store's boundary, at this one place.

``courier_error`` says what a failure of the store means to a caller: a
store out of memory refuses writes (503 ``STORE_FULL``), one that cannot be
reached or is moving a slot answers nothing (503 ``STORE_UNAVAILABLE``,
nothing stored), and a write not confirmed at the durability level may have
been stored (503, ``persisted`` null). Any other error of the store is a
failure nobody expected and stays what it is (a 500, logged).

``translated`` applies it to every coroutine method of a class (the API's
``Store`` and the parts it is made of), so that no caller above the store
sees a redis-py exception for these.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.exceptions

from messaging.errors import CourierError, not_durable, store_full, store_unavailable
from messaging.store.connect import STORE_DOWN
from messaging.store.durability import NotDurable

T = TypeVar("T")
# The failures ``courier_error`` turns into Courier's errors.
TRANSLATED: tuple[type[BaseException], ...] = (
    redis.exceptions.OutOfMemoryError, NotDurable, *STORE_DOWN)


def courier_error(exc: BaseException) -> CourierError | None:
    """The Courier error a store failure means; None for any other exception."""
    if isinstance(exc, CourierError):
        return exc
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return store_full()
    if isinstance(exc, STORE_DOWN):
        return store_unavailable()
    if isinstance(exc, NotDurable):
        return not_durable(exc.level.value, exc.reason)
    return None


def _translating(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except TRANSLATED as exc:
            error = courier_error(exc)
            assert error is not None
            raise error from exc
    return run


def translated(cls: type[T]) -> type[T]:
    """``cls`` with each of its public coroutine methods raising Courier's errors for
    the store's (``courier_error``)."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, _translating(member))
    return cls
