"""The webhook transport: a signed POST per delivery (Standard Webhooks).

What an answer means:
    2xx                              accepted (``{"displayed": true}``: observed)
    408, 429, 5xx                    retried on the same URL after the schedule's
                                     next wait, then ``failed``
    any other 4xx, 3xx               rejected
    no connection (refused, DNS)     retried like a 5xx: nothing was handed off
    timeout or drop after sending    unknown: never retried by itself

One deadline (``COURIER_WEBHOOK_TIMEOUT_S``) bounds the whole exchange:
connecting, sending, and reading the answer, however slowly its bytes come.
An answer is read up to ANSWER_MAX_BYTES and parsed only when it is that
small; past that, its status alone counts.

Settings are checked at registration and again at dispatch, where the host's
addresses are resolved and checked too: a URL that may not be used is a
failure before hand-off, never a request.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from datetime import UTC, datetime
from typing import Any, ClassVar
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
# The most of an answer's body read; a larger one is not parsed (not ``displayed``).
ANSWER_MAX_BYTES = 64 * 1024
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


def classify(code: int, answer: bytes | None) -> Outcome:
    """The outcome of an answered request: its status, and its body when it was
    small enough to read (None: larger than ANSWER_MAX_BYTES)."""
    if 200 <= code < 300:
        return Outcome(OutcomeKind.ACCEPTED, displayed=_displayed(answer))
    if code in RETRY_STATUSES or code >= 500:
        return Outcome(OutcomeKind.RETRY, f"HTTP {code}")
    return Outcome(OutcomeKind.REJECTED, f"HTTP {code}")


def _displayed(answer: bytes | None) -> bool:
    if not answer:
        return False
    try:
        body = json.loads(answer)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("displayed") is True


def read_answer(response: httpx.Response) -> bytes | None:
    """The answer's body, or None once it is larger than ANSWER_MAX_BYTES (the rest
    is never read), or sent encoded (it was asked for as is)."""
    if response.headers.get("content-encoding", "identity").lower() != "identity":
        return None
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_raw():
        size += len(chunk)
        if size > ANSWER_MAX_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class Deadline:
    """The whole exchange's deadline: when it passes, the connection's socket is shut,
    whatever the request is waiting for (a per-read timeout never ends a receiver
    that sends a byte now and then).

    It learns the socket and whether the request began to leave from httpcore's
    trace events; a deadline that passes before the socket exists shuts it as
    soon as it does (the connect timeout ends a connect by itself).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.passed = False
        self.sending = False  # the request began to leave
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._pass)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's ``trace`` extension."""
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            with self._lock:
                self._sock = info["return_value"].get_extra_info("socket")
                if self.passed:
                    self._shut()
        elif event == "http11.send_request_headers.started":
            self.sending = True

    def _pass(self) -> None:
        with self._lock:
            self.passed = True
            self._shut()

    def _shut(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):  # closed already
                self._sock.shutdown(socket.SHUT_RDWR)

    def left(self, started: float) -> float:
        """Seconds left of the deadline, at least a millisecond."""
        return max(0.001, self.seconds - (time.monotonic() - started))


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
        """Check where the URL leads today, sign, POST once to an address checked,
        all within the deadline."""
        settings = delivery.settings
        assert isinstance(settings, WebhookSettings)
        started = time.monotonic()
        try:
            addresses = netrules.check_resolved(settings.url, self.courier)
        except socket.gaierror as e:
            return Outcome(OutcomeKind.RETRY, f"not sent: DNS: {e.strerror or e}")
        body = json.dumps(delivery.message, ensure_ascii=False, separators=(",", ":"))
        headers = signed_headers(delivery.delivery_id, body, settings.secret)
        headers["accept-encoding"] = "identity"
        delivery.hand_off()
        refused = "no address"
        with Deadline(self.courier.webhook_timeout_s) as deadline:
            # TLS still checks the certificate against the URL's own host name.
            extensions = {"sni_hostname": urlsplit(settings.url).hostname or "",
                          "trace": deadline.trace}
            for address in addresses:
                url, headers["host"] = netrules.pinned(settings.url, address)
                try:
                    with self.client.stream("POST", url, content=body.encode(), headers=headers,
                                            extensions=extensions,
                                            timeout=deadline.left(started)) as response:
                        return classify(response.status_code, read_answer(response))
                except httpx.ConnectError as e:
                    refused = type(e).__name__  # nothing left: the next address may answer
                    continue
                except httpx.TransportError as e:
                    return _unanswered(e, deadline)
        return Outcome(OutcomeKind.RETRY, f"not sent: {refused}")


def _unanswered(e: httpx.TransportError, deadline: Deadline) -> Outcome:
    """A request that ended without a whole answer: before hand-off a retry, after it
    (the receiver may have it) unknown."""
    if isinstance(e, NOT_SENT) or (deadline.passed and not deadline.sending):
        return Outcome(OutcomeKind.RETRY, f"not sent: {type(e).__name__}")
    if deadline.passed or isinstance(e, httpx.TimeoutException):
        # The client's own timeouts are what is left of the deadline: either one ends it.
        return Outcome(OutcomeKind.UNKNOWN,
                       f"no whole answer within the {deadline.seconds:g} s deadline")
    return Outcome(OutcomeKind.UNKNOWN, f"connection lost after sending: {type(e).__name__}")
