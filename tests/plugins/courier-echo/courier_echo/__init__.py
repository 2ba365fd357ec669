"""The echo transport: POSTs the message JSON to a loopback URL, unsigned.

Its settings may carry a fault: an exception raised at a named point of the
call, before or after hand-off, so tests can watch what Courier records.
"""

from __future__ import annotations

import builtins
import json
from typing import ClassVar, Literal, get_args

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from messaging.transports.base import (
    Delivery,
    Outcome,
    OutcomeKind,
    Transport,
    TransportSettings,
)

Point = Literal["start", "before_hand_off", "after_hand_off", "after_reply"]
Error = Literal["ValueError", "KeyError", "RuntimeError", "OSError", "TypeError",
                "ZeroDivisionError", "MemoryError", "TimeoutError"]
ERRORS = get_args(Error)


class Fault(BaseModel):
    """Raise ``error(message)`` at ``at``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: Point
    error: Error = "RuntimeError"
    message: str = Field(default="injected", max_length=200)


class EchoSettings(TransportSettings):
    """``{"kind": "echo", "url", "fault"?}``."""

    url: str = Field(min_length=1, max_length=2048)
    fault: Fault | None = None

    @field_validator("url")
    @classmethod
    def _loopback(cls, value: str) -> str:
        if not value.startswith(("http://127.0.0.1:", "http://localhost:")):
            raise ValueError("must be a loopback http URL")
        return value


class EchoTransport(Transport):
    """Echoes deliveries to a loopback receiver; 5xx is retried, 4xx rejected."""

    kind: ClassVar[str] = "echo"
    settings_model = EchoSettings
    batch_size = 10
    idempotent = False
    # Several deliveries of a send are carried at once, each on its own thread.
    parallel = 4

    def deliver(self, delivery: Delivery) -> Outcome:
        settings = delivery.settings
        assert isinstance(settings, EchoSettings)
        self._fault(settings, "start")
        body = json.dumps(delivery.message, separators=(",", ":"))
        self._fault(settings, "before_hand_off")
        delivery.hand_off()
        self._fault(settings, "after_hand_off")
        try:
            response = httpx.post(settings.url, content=body.encode(), timeout=5.0,
                                  headers={"echo-id": delivery.delivery_id,
                                           "content-type": "application/json"})
        except httpx.ConnectError as e:
            return Outcome(OutcomeKind.RETRY, f"not sent: {type(e).__name__}")
        self._fault(settings, "after_reply")
        if response.is_success:
            return Outcome(OutcomeKind.ACCEPTED)
        if response.status_code >= 500:
            return Outcome(OutcomeKind.RETRY, f"HTTP {response.status_code}")
        return Outcome(OutcomeKind.REJECTED, f"HTTP {response.status_code}")

    @staticmethod
    def _fault(settings: EchoSettings, point: str) -> None:
        fault = settings.fault
        if fault is not None and fault.at == point:
            raise getattr(builtins, fault.error)(fault.message)
