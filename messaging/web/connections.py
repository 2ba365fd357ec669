"""The API's HTTP connections: uvicorn's httptools protocol with deadlines and caps.

uvicorn gives a keep-alive timeout between requests (``timeout_keep_alive``)
but nothing for a client that opens a connection and sends its headers a byte
at a time, or never: such a connection stays open for as long as the client
likes (httptools also keeps headers of any size). Here each connection must
send the request line and headers of each request within ``HEADER_TIMEOUT_S``
of opening (or of the previous answer), in at most ``MAX_HEADER_BYTES``
however they arrive.

A client (``messaging.web.addresses``: every loopback address is one client)
may hold at most ``max_per_address`` connections at once, and at most
``max_pending_per_address`` of them waiting for the rest of a request's
headers; past that its oldest pending connection is closed (408), so a client
that stalls connections only ever takes the room of its own stalled ones,
never that of requests under way or to come. Trusted proxies are not counted:
they carry many clients. With several API processes on one port, each holds
its even share of both caps, so that together they never hold more.

Refusals (the caps, the deadlines, a request httptools cannot parse) are
answered in the API's error shape, counted as refusals like every other
answer (``messaging.web.refusals``), and the connection is closed.

The body is read from the socket only once the app asks for it (uvicorn reads
ahead otherwise), and its pace is the app's to check (``messaging.web.bodylimit``).
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any, ClassVar

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from messaging.config import get_settings
from messaging.errors import CourierError
from messaging.web import refusals
from messaging.web.addresses import Holdings, State, counted_as

# A client sends each request's line and headers within this long.
HEADER_TIMEOUT_S = 10.0
# A new connection that has sent nothing this long counts as pending.
SILENT_S = 1.0
# The request line and headers of one request: room for any token and the usual
# headers. h11 refuses past 16 KiB by default (h11_max_incomplete_event_size).
MAX_HEADER_BYTES = 32 * 1024
# What a header costs beyond its name and value (": " and CRLF).
HEADER_OVERHEAD_BYTES = 4
CONNECTIONS_RETRY_AFTER_S = 5

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def raw_answer(err: CourierError) -> bytes:
    """An HTTP/1.1 answer carrying ``err`` in the API's shape, closing the connection."""
    body = orjson.dumps(err.body())
    head = [f"HTTP/1.1 {err.status} {_REASONS.get(err.status, 'Error')}",
            "content-type: application/json", f"content-length: {len(body)}",
            "connection: close", *(f"{k.lower()}: {v}" for k, v in err.headers.items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


_REASONS = {408: "Request Timeout", 422: "Unprocessable Content", 429: "Too Many Requests",
            431: "Request Header Fields Too Large"}


def malformed(reason: str) -> CourierError:
    """The answer to a request httptools cannot parse (``reason``: what it says)."""
    return CourierError("INVALID_ARGUMENT", f"the request is not valid HTTP/1.1: {reason}",
                        {"field": "http", "reason": reason})


class CourierHttp(HttpToolsProtocol):
    """One HTTP connection with header deadlines, a header size cap and per-client caps."""

    max_per_address: ClassVar[int] = 0
    max_pending_per_address: ClassVar[int] = 0
    trusted: ClassVar[tuple[Network, ...]] = ()
    configured: ClassVar[bool] = False
    # Every capped connection of this process, by client.
    holdings: ClassVar[Holdings[CourierHttp]] = Holdings()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._capped = False  # tracked in holdings
        self._header_timer: asyncio.TimerHandle | None = None
        self._silent_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0  # bytes read while waiting for headers, across reads
        self._request_bytes = 0  # the request line and headers parsed, of this request
        self._awaiting_headers = True

    @classmethod
    def configure(cls, max_per_address: int, trusted: list[str], processes: int = 1,
                  max_pending_per_address: int = 0) -> None:
        """Set the per-client caps (of all ``processes`` together) and the proxies they
        do not apply to."""
        cls.max_per_address = share(max_per_address, processes)
        cls.max_pending_per_address = share(max_pending_per_address, processes)
        cls.holdings = Holdings(cls.max_per_address, cls.max_pending_per_address)
        cls.trusted = tuple(ipaddress.ip_network(t, strict=False) for t in trusted)
        cls.configured = True

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if not self.configured:  # an API process of several, started by uvicorn's supervisor
            settings = get_settings()
            self.configure(settings.max_connections_per_address, settings.trusted_proxy_list,
                           settings.api_processes, settings.max_pending_connections_per_address)
        super().connection_made(transport)
        address = self.client[0] if self.client else ""
        if (self.max_per_address or self.max_pending_per_address) and not self._is_trusted(
                address):
            self._capped = True
            self.holdings.opened(self, counted_as(address))
            if not self.transport.is_closing():  # not evicted at once
                self._silent_timer = self.loop.call_later(SILENT_S, self._silent)
        if not self.transport.is_closing():
            self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timers()
        if self._capped:
            self.holdings.drop(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # as uvicorn answers it
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            self._unparsable(exc)
            return
        if self._awaiting_headers and not self.transport.is_closing():
            # Counted after parsing: what completed a request's headers in this chunk
            # (and its body after them) is not held against the next.
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._refuse(headers_too_large())
            elif not self._hold(State.PENDING):
                self._refuse(self._no_room())

    def evict(self, state: State) -> None:
        """Close this connection to make room for another of its client's."""
        if self.transport.is_closing():
            return
        if state is State.IDLE:  # between requests: closed as an idle keep-alive is
            self._stop_timers()
            self.transport.close()
        elif state is State.PENDING:
            self._refuse(CourierError(
                "REQUEST_TIMEOUT", "the request's headers had not arrived when newer "
                "connections from this address needed the room",
                {"pending_max": self.max_pending_per_address}))
        else:
            self._refuse(self._no_room())

    # Parser callbacks: the request line and headers counted as they are parsed.

    def on_message_begin(self) -> None:
        self._request_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._add_request_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._add_request_bytes(len(name) + len(value) + HEADER_OVERHEAD_BYTES)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._stop_timers()
        if not self._hold(State.ACTIVE):
            raise self._no_room()  # the parser stops; answered by data_received
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
            self._hold(State.IDLE)
            self._await_headers()

    # Deadlines and refusals.

    def _add_request_bytes(self, n: int) -> None:
        self._request_bytes += n
        if self._request_bytes > MAX_HEADER_BYTES:
            raise headers_too_large()  # the parser stops; answered by data_received

    def _hold(self, state: State) -> bool:
        """This connection counted in ``state``; False when it has no room."""
        if self._silent_timer is not None:
            self._silent_timer.cancel()
            self._silent_timer = None
        return not self._capped or self.holdings.count(self, state)

    def _silent(self) -> None:
        self._silent_timer = None
        if self._awaiting_headers and not self.transport.is_closing() and not self._hold(
                State.PENDING):
            self._refuse(self._no_room())

    def _no_room(self) -> CourierError:
        return CourierError(
            "RATE_LIMITED", f"more than {self.max_per_address} connections open from this "
            "address", {"connections_max": self.max_per_address},
            headers={"Retry-After": str(CONNECTIONS_RETRY_AFTER_S)})

    def _await_headers(self) -> None:
        self._awaiting_headers = True
        self._header_bytes = 0
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_late)

    def _stop_timers(self) -> None:
        for timer in (self._header_timer, self._silent_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._silent_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._awaiting_headers and not self.transport.is_closing():
            self._refuse(CourierError(
                "REQUEST_TIMEOUT", f"the request's headers did not arrive within "
                f"{HEADER_TIMEOUT_S:g} s", {"timeout_s": HEADER_TIMEOUT_S}))

    def _unparsable(self, exc: httptools.HttpParserError) -> None:
        """Answer a request the parser stopped at: for a refusal a callback raised, that
        refusal; for bytes that are not HTTP/1.1 (framing, a header line), 422."""
        if self.transport.is_closing():
            return
        cause = exc.__context__
        err = cause if isinstance(cause, CourierError) else malformed(str(exc) or "unparsable")
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # Broken inside a body the app is reading: it is told the client left, and
            # what it answers goes nowhere; an answer under way is cut short.
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:
                self._stop_timers()
                self.transport.close()
                return
        self._refuse(err)

    def _refuse(self, err: CourierError) -> None:
        self._stop_timers()
        self._awaiting_headers = False
        refusals.count(err.code, "http")
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


def share(cap: int, processes: int) -> int:
    """One process's even share of a cap of all of them (``0``: no cap)."""
    return cap and max(1, cap // processes)


def headers_too_large() -> CourierError:
    """The 431 of a request whose line and headers are over ``MAX_HEADER_BYTES``."""
    return CourierError("HEADERS_TOO_LARGE", f"the request line and headers are over "
                        f"{MAX_HEADER_BYTES} bytes", {"max_bytes": MAX_HEADER_BYTES})
