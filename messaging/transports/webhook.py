"""The webhook transport: a signed POST per delivery (Standard Webhooks).

What an answer means:
    2xx                              accepted (``{"displayed": true}``: observed)
    408, 429, 5xx                    retried on the same URL after the schedule's
                                     next wait, then ``failed``
    any other 4xx, 3xx               rejected
    no connection (refused, DNS)     retried like a 5xx: nothing was handed off
    timeout or drop after sending    unknown: never retried by itself

Settings are checked at registration and again at dispatch, where the host's
addresses are resolved and checked too: a URL that may not be used is a
failure before hand-off, never a request.
"""

from __future__ import annotations

import json
import socket
import threading
from datetime import UTC, datetime
from typing import ClassVar
from urllib.parse import urlsplit

import httpx
from pydantic import Field, ValidationInfo, field_validator

from messaging.config import Settings
from messaging.transports import netrules
from messaging.transports.base import (
    Delivery,
    Outcome,
    OutcomeKind,
    Transport,
    TransportSettings,
)

RETRY_STATUSES = frozenset({408, 429})
# Before hand-off: the request never left this machine.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout,
            httpx.UnsupportedProtocol, httpx.LocalProtocolError)


class WebhookSettings(TransportSettings):
    """``{"kind": "webhook", "url", "secret"?}``."""

    url: str = Field(min_length=1, max_length=2048)
    secret: str = Field(default_factory=netrules.new_secret, min_length=1, max_length=512)

    @field_validator("url")
    @classmethod
    def _usable_url(cls, value: str, info: ValidationInfo) -> str:
        netrules.check_url(value, _courier(info))
        return value

    @field_validator("secret")
    @classmethod
    def _usable_secret(cls, value: str) -> str:
        netrules.check_secret(value)
        return value


def _courier(info: ValidationInfo) -> Settings:
    context = info.context or {}
    settings = context.get("settings")
    if not isinstance(settings, Settings):
        raise ValueError("cannot be checked without Courier's settings")
    return settings


def signed_headers(delivery_id: str, body: str, secret: str) -> dict[str, str]:
    """``webhook-id`` (the delivery id), ``webhook-timestamp``, ``webhook-signature``."""
    now = datetime.now(tz=UTC)
    return {
        "content-type": "application/json",
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": netrules.signer(secret).sign(delivery_id, now, body),
    }


def classify(response: httpx.Response) -> Outcome:
    """The outcome of an answered request."""
    code = response.status_code
    if 200 <= code < 300:
        return Outcome(OutcomeKind.ACCEPTED, displayed=_displayed(response))
    if code in RETRY_STATUSES or code >= 500:
        return Outcome(OutcomeKind.RETRY, f"HTTP {code}")
    return Outcome(OutcomeKind.REJECTED, f"HTTP {code}")


def _displayed(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("displayed") is True


class WebhookTransport(Transport):
    """POSTs each delivery to the recipient agent's URL."""

    kind: ClassVar[str] = "webhook"
    settings_model = WebhookSettings
    # A webhook delivery is one request that mostly waits on its receiver: a
    # task carries a few at once, each on its own thread with its own lease,
    # and records each outcome as it comes (a slow receiver holds up no other).
    batch_size = 8
    parallel = 8
    # A receiver may act on a request we never hear back about: a second
    # worker must not finish a delivery whose worker died.
    idempotent = False

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._client: httpx.Client | None = None
        self._making = threading.Lock()

    @property
    def client(self) -> httpx.Client:
        """One client per process; no kept-alive connections, so a stale one can
        never turn a request that was not sent into an `unknown`."""
        with self._making:
            if self._client is None:
                self._client = httpx.Client(
                    timeout=self.courier.webhook_timeout_s, follow_redirects=False,
                    limits=httpx.Limits(max_keepalive_connections=0),
                )
            return self._client

    def deliver(self, delivery: Delivery) -> Outcome:
        """Check where the URL leads today, sign, POST once to an address checked."""
        settings = delivery.settings
        assert isinstance(settings, WebhookSettings)
        try:
            addresses = netrules.check_resolved(settings.url, self.courier)
        except socket.gaierror as e:
            return Outcome(OutcomeKind.RETRY, f"not sent: DNS: {e.strerror or e}")
        body = json.dumps(delivery.message, ensure_ascii=False, separators=(",", ":"))
        headers = signed_headers(delivery.delivery_id, body, settings.secret)
        # TLS still checks the certificate against the URL's own host name.
        extensions = {"sni_hostname": urlsplit(settings.url).hostname or ""}
        delivery.hand_off()
        refused = "no address"
        for address in addresses:
            url, headers["host"] = netrules.pinned(settings.url, address)
            try:
                response = self.client.post(url, content=body.encode(), headers=headers,
                                            extensions=extensions)
            except httpx.ConnectError as e:
                refused = type(e).__name__  # nothing left: the next address may answer
                continue
            except NOT_SENT as e:  # a timeout spends the lease: no next address
                return Outcome(OutcomeKind.RETRY, f"not sent: {type(e).__name__}")
            except httpx.TimeoutException as e:
                return Outcome(OutcomeKind.UNKNOWN,
                               f"timed out after sending: {type(e).__name__}")
            except httpx.TransportError as e:
                return Outcome(OutcomeKind.UNKNOWN,
                               f"connection lost after sending: {type(e).__name__}")
            return classify(response)
        return Outcome(OutcomeKind.RETRY, f"not sent: {refused}")
