"""The webhook transport: a signed POST per delivery (Standard Webhooks).

What an answer means (API.md, "Webhook transport"):
    2xx                              accepted (``{"displayed": true}``: observed)
    408, 429, 5xx                    retried on the same URL after the schedule's
                                     next wait, then ``failed``
    any other 4xx, 3xx               rejected
    no connection (refused, DNS)     retried like a 5xx: nothing was handed off
    timeout or drop after sending    unknown: never retried by itself
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from standardwebhooks import Webhook

from messaging.config import get_settings
from messaging.service.views import message_view
from messaging.store.deliveries import DeliveryStore, EndpointHealth, Leased, Result

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 429})
# Before hand-off: the request never left this machine.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout,
            httpx.UnsupportedProtocol, httpx.LocalProtocolError)
SECRET_PREFIX = "whsec_"


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to."""

    kind: str  # accepted | rejected | retry | unknown
    error: str = ""
    displayed: bool = False

    @property
    def endpoint(self) -> str:
        """What the attempt says of the endpoint's health."""
        if self.kind in ("accepted", "rejected"):
            return "ok"
        return "down" if self.kind == "retry" else ""


def signer(secret: str) -> Webhook:
    """A Standard Webhooks signer: ``whsec_`` secrets are base64, others raw UTF-8."""
    if secret.startswith(SECRET_PREFIX):
        return Webhook(secret)
    return Webhook(secret.encode())


def signed_headers(delivery_id: str, body: str, secret: str | None) -> dict[str, str]:
    """``webhook-id`` (the delivery id), ``webhook-timestamp``, ``webhook-signature``."""
    now = datetime.now(tz=UTC)
    headers = {
        "content-type": "application/json",
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(now.timestamp())),
    }
    if secret:
        headers["webhook-signature"] = signer(secret).sign(delivery_id, now, body)
    return headers


def classify(response: httpx.Response) -> Outcome:
    """The outcome of an answered request."""
    code = response.status_code
    if 200 <= code < 300:
        return Outcome("accepted", displayed=_displayed(response))
    if code in RETRY_STATUSES or code >= 500:
        return Outcome("retry", f"HTTP {code}")
    return Outcome("rejected", f"HTTP {code}")


def _displayed(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("displayed") is True


def post(client: httpx.Client, url: str, delivery_id: str, body: str,
         secret: str | None) -> Outcome:
    """One attempt; never raises for network trouble, it is an outcome."""
    try:
        response = client.post(url, content=body.encode(),
                               headers=signed_headers(delivery_id, body, secret))
    except NOT_SENT as e:
        return Outcome("retry", f"not sent: {type(e).__name__}: {e}")
    except httpx.TimeoutException as e:
        return Outcome("unknown", f"timed out after sending: {type(e).__name__}")
    except httpx.TransportError as e:
        return Outcome("unknown", f"connection lost after sending: {type(e).__name__}: {e}")
    return classify(response)


class WebhookTransport:
    """POSTs each delivery to the recipient agent's URL."""

    kind = "webhook"
    # A receiver may act on a request we never hear back about: a second
    # worker must not finish a delivery whose worker died.
    idempotent = False

    def __init__(self) -> None:
        settings = get_settings()
        self.timeout_s = settings.webhook_timeout_s
        self.schedule_s = settings.retry_schedule_s
        self.lease_s = self.timeout_s + settings.webhook_lease_margin_s
        self.health = EndpointHealth(
            failures=settings.webhook_unhealthy_failures,
            after_ms=int(settings.webhook_unhealthy_after_s * 1000),
            probe_ms=int(settings.webhook_probe_interval_s * 1000),
        )
        self._client: httpx.Client | None = None

    @property
    def client(self) -> httpx.Client:
        """One client per process; no kept-alive connections, so a stale one can
        never turn a request that was not sent into an `unknown`."""
        if self._client is None:
            self._client = httpx.Client(
                timeout=self.timeout_s, follow_redirects=False,
                limits=httpx.Limits(max_keepalive_connections=0),
            )
        return self._client

    def deliver(self, store: DeliveryStore, project_id: str, leased: list[Leased]) -> None:
        """Send each leased delivery and record its outcome under its token."""
        for lease, (record, agent) in zip(leased, store.load_for_send(project_id, leased),
                                          strict=True):
            outcome = self._attempt(lease, record, agent)
            self._record(store, project_id, lease, outcome)

    def _attempt(self, lease: Leased, record: dict[str, Any] | None,
                 agent: dict[str, Any] | None) -> Outcome:
        if record is None or agent is None or agent["transport"].get("kind") != self.kind:
            return Outcome("rejected", "recipient or message missing: nothing was sent")
        payload = message_view(record, full=False, viewer_id=lease.agent_id)
        payload["delivery_id"] = lease.delivery_id
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        transport = agent["transport"]
        return post(self.client, transport["url"], lease.delivery_id, body,
                    transport.get("secret"))

    def _record(self, store: DeliveryStore, project_id: str, lease: Leased,
                outcome: Outcome) -> None:
        kind, retry_at_ms = outcome.kind, 0
        if kind == "retry":
            if lease.round_attempt <= len(self.schedule_s):
                wait_s = self.schedule_s[lease.round_attempt - 1]
                retry_at_ms = int((time.time() + wait_s) * 1000)
            else:
                kind = "failed"
        result = Result(kind, retry_at_ms, outcome.error, outcome.displayed, outcome.endpoint)
        recorded = store.record_outcome(project_id, lease, result, self.health)
        if not recorded:
            log.warning("delivery %s: lease lost before its outcome (%s) was recorded",
                        lease.delivery_id, kind)
