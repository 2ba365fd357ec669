"""Transports: how a delivery reaches its recipient.

Built-ins and third-party transports alike are found through the entry point
group ``courier.transports`` (name -> a ``Transport`` subclass). The API reads
their declarations (settings model, batch size) without starting them;
workers start one instance of each per process.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from messaging.config import Settings
from messaging.errors import from_validation, invalid
from messaging.transports.base import Transport, TransportSettings

ENTRY_POINT_GROUP = "courier.transports"


@lru_cache(maxsize=1)
def installed() -> dict[str, type[Transport]]:
    """Every installed transport class, by kind."""
    found: dict[str, type[Transport]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Transport)):
            raise TypeError(f"entry point {ep.name} of {ENTRY_POINT_GROUP} is not a Transport")
        found[cls.kind] = cls
    return dict(sorted(found.items()))


# This process's transports, made on first use with the process's settings.
_INSTANCES: dict[str, Transport] = {}


def get(kind: str, settings: Settings) -> Transport:
    """This process's instance of a transport (made with ``settings`` the first time).

    Raises:
        KeyError: no transport of that kind is installed.
    """
    found = _INSTANCES.get(kind)
    if found is None:
        found = _INSTANCES[kind] = installed()[kind](settings)
    return found


def parse(kind: str, stored: dict[str, Any], settings: Settings) -> TransportSettings:
    """A stored transport's settings, validated against today's rules.

    Raises:
        KeyError: no transport of that kind is installed.
        pydantic.ValidationError: the settings break a rule.
    """
    fields = {k: v for k, v in stored.items() if k != "kind"}
    return installed()[kind].settings_model.model_validate(fields,
                                                           context={"settings": settings})


def validate(raw: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """A registration's ``transport`` object, validated by its transport's settings model.

    Returns what is stored: ``{"kind", ...settings}`` with defaults filled in.

    Raises:
        CourierError: INVALID_ARGUMENT naming the field (``transport.kind``,
            ``transport.url``, ...).
    """
    kind = raw.get("kind")
    kinds = installed()
    if not isinstance(kind, str) or kind not in kinds:
        raise invalid("transport.kind", f"must be one of {', '.join(kinds)}")
    try:
        parsed = parse(kind, raw, settings)
    except ValidationError as e:
        raise from_validation(e, "transport.") from None
    return {"kind": kind, **parsed.model_dump(mode="json", exclude_none=True)}
