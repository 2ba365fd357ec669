"""A real HTTP webhook receiver on loopback whose behaviour each test scripts."""

from __future__ import annotations

import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    """One request as it arrived."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float


# A behaviour gets the request number on its path (1, 2, ...) and answers with
# (status, body bytes), or "hang" (sleep past any timeout), or "drop" (close
# the connection after reading the request, without an answer).
Behaviour = Callable[[int], Any]


@dataclass
class Receiver:
    """Records every request; answers each path as its behaviour says."""

    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    received: dict[str, list[Received]] = field(default_factory=lambda: defaultdict(list))
    hang_s: float = 5.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    host: str = "127.0.0.1"
    port: int = 0  # a free one

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                with receiver.lock:
                    seen = receiver.received[self.path]
                    seen.append(Received(self.path, dict(self.headers.items()), body,
                                         time.time()))
                    n = len(seen)
                behaviour = receiver.behaviours.get(self.path, lambda n: (200, b"{}"))
                answer = behaviour(n)
                if answer == "hang":
                    time.sleep(receiver.hang_s)
                    return
                if answer == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, payload = answer
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the sender died while we answered: that is the test

        self.server = ThreadingHTTPServer((self.host, self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}{path}"

    def count(self, path: str) -> int:
        with self.lock:
            return len(self.received[path])

    def requests(self, path: str) -> list[Received]:
        with self.lock:
            return list(self.received[path])

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
