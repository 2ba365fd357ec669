"""The API's HTTP connections: uvicorn's httptools protocol with deadlines and caps.

uvicorn gives a keep-alive timeout between requests (``timeout_keep_alive``)
but nothing for a client that opens a connection and sends its headers a byte
at a time, or never: such a connection stays open for as long as the client
likes (httptools also keeps headers of any size). Here each connection must
send the request line and headers of each request within ``HEADER_TIMEOUT_S``
of opening (or of the previous answer), in at most ``MAX_HEADER_BYTES``; a
client address may hold at most ``max_per_address`` connections at once
(trusted proxies are not counted: they carry many clients). With several API
processes on one port, each holds its even share of the cap, so that together
they never hold more. Refusals are
answered in the API's error shape and the connection is closed.

The body is read from the socket only once the app asks for it (uvicorn reads
ahead otherwise), and its pace is the app's to check (``messaging.web.bodylimit``).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter
from typing import Any, ClassVar

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from messaging.config import get_settings
from messaging.errors import CourierError

# A client sends each request's line and headers within this long.
HEADER_TIMEOUT_S = 10.0
# The request line and headers of one request: room for any token and the usual
# headers. h11 refuses past 16 KiB by default (h11_max_incomplete_event_size).
MAX_HEADER_BYTES = 32 * 1024
CONNECTIONS_RETRY_AFTER_S = 5

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def raw_answer(err: CourierError) -> bytes:
    """An HTTP/1.1 answer carrying ``err`` in the API's shape, closing the connection."""
    body = orjson.dumps(err.body())
    head = [f"HTTP/1.1 {err.status} {_REASONS.get(err.status, 'Error')}",
            "content-type: application/json", f"content-length: {len(body)}",
            "connection: close", *(f"{k.lower()}: {v}" for k, v in err.headers.items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


_REASONS = {408: "Request Timeout", 429: "Too Many Requests",
            431: "Request Header Fields Too Large"}


class CourierHttp(HttpToolsProtocol):
    """One HTTP connection with a header deadline, a header size cap and a per-address cap."""

    max_per_address: ClassVar[int] = 0
    trusted: ClassVar[tuple[Network, ...]] = ()
    configured: ClassVar[bool] = False
    # Connections open per client address, for the whole process.
    open_per_address: ClassVar[Counter[str]] = Counter()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._address: str | None = None  # counted in open_per_address
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._awaiting_headers = True

    @classmethod
    def configure(cls, max_per_address: int, trusted: list[str], processes: int = 1) -> None:
        """Set the per-address cap (of all ``processes`` together) and the proxies it does
        not apply to."""
        cls.max_per_address = max_per_address and max(1, max_per_address // processes)
        cls.trusted = tuple(ipaddress.ip_network(t, strict=False) for t in trusted)
        cls.configured = True

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if not self.configured:  # an API process of several, started by uvicorn's supervisor
            settings = get_settings()
            self.configure(settings.max_connections_per_address, settings.trusted_proxy_list,
                           settings.api_processes)
        super().connection_made(transport)
        address = self.client[0] if self.client else ""
        if self.max_per_address and not self._is_trusted(address):
            if self.open_per_address[address] >= self.max_per_address:
                self._refuse(CourierError(
                    "RATE_LIMITED", f"more than {self.max_per_address} connections open from "
                    "this address", {"connections_max": self.max_per_address},
                    headers={"Retry-After": str(CONNECTIONS_RETRY_AFTER_S)}))
                return
            self.open_per_address[address] += 1
            self._address = address
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        if self._address is not None:
            self.open_per_address[self._address] -= 1
            if self.open_per_address[self._address] <= 0:
                del self.open_per_address[self._address]
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._awaiting_headers and not self.transport.is_closing():
            # Counted after parsing: what completed a request's headers in this chunk
            # (and its body after them) is not held against the next.
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._refuse(CourierError(
                    "HEADERS_TOO_LARGE", f"the request line and headers are over "
                    f"{MAX_HEADER_BYTES} bytes", {"max_bytes": MAX_HEADER_BYTES}))

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._stop_header_timer()
        super().on_headers_complete()
        # A body stays in the socket until the app asks for it (uvicorn's receive()
        # resumes reading): a request answered from its headers (401) never has its
        # body read into the process.
        if any(name in (b"content-length", b"transfer-encoding") and value.strip() != b"0"
               for name, value in self.headers):
            self.flow.pause_reading()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline:
            self._await_headers()

    def _await_headers(self) -> None:
        self._awaiting_headers = True
        self._header_bytes = 0
        self._stop_header_timer()
        self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_late)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._awaiting_headers and not self.transport.is_closing():
            self._refuse(CourierError(
                "REQUEST_TIMEOUT", f"the request's headers did not arrive within "
                f"{HEADER_TIMEOUT_S:g} s", {"timeout_s": HEADER_TIMEOUT_S}))

    def _refuse(self, err: CourierError) -> None:
        self._stop_header_timer()
        self._awaiting_headers = False
        self.transport.write(raw_answer(err))
        self.transport.close()

    def _is_trusted(self, address: str) -> bool:
        if not self.trusted:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.trusted)
