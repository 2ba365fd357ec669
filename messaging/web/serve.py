"""The API: ``python -m messaging.web.serve APP --host H --port P``.

uvicorn serving ``APP`` with Courier's connection rules (``messaging.web.connections``)
and proxy headers believed only from ``COURIER_TRUSTED_PROXIES``: uvicorn's own
default believes ``X-Forwarded-For`` from loopback, which would let any local
process pick the address its requests are rate-limited by.

``COURIER_API_PROCESSES`` processes (default: the machine's cores) serve the
one port, under uvicorn's supervisor, which restarts one that dies; each
stops when the supervisor dies, however it dies. Each process listens on a
socket of its own (``SO_REUSEPORT``), so the kernel spreads new connections
evenly over them (on one shared socket, whichever process woke first took
every connection waiting). A process that dies loses the connections waiting
in its own socket's queue, not yet accepted (their clients see a reset). What a
process would otherwise keep for itself is shared: rate limits and stream
slots live in the store, the per-address connection caps are split evenly, and
``/metrics`` adds up every process's counters (prometheus-client's
multiprocess mode, in a directory of this start's own).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import sys
import tempfile

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from messaging.config import get_settings
from messaging.runtime.children import die_with_parent
from messaging.web.connections import CourierHttp
from messaging.web.metrics import METRICS_DIR_ENV

# An idle keep-alive connection is closed after this long (uvicorn's default).
KEEP_ALIVE_S = 5


def main(argv: list[str] | None = None) -> None:
    """Serve the app named on the command line until stopped."""
    parser = argparse.ArgumentParser(prog="python -m messaging.web.serve")
    parser.add_argument("app", help="the ASGI app, module:attribute")
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    settings = get_settings()
    trusted = settings.trusted_proxy_list
    processes = settings.api_processes
    metrics_dir = None
    if processes > 1:
        # Set before the processes start (they read both as they import): one count, and
        # counters of this start only.
        os.environ["COURIER_API_PROCESSES"] = str(processes)
        metrics_dir = tempfile.mkdtemp(prefix="courier-api-metrics-")
        os.environ[METRICS_DIR_ENV] = metrics_dir
    else:
        CourierHttp.configure(settings.max_connections_per_address, trusted,
                              max_pending_per_address=settings.max_pending_connections_per_address)
    try:
        # uvicorn's limit_concurrency is not used: it answers 503 to everyone once any
        # client holds that many connections, health checks included.
        config = uvicorn.Config(
            args.app, host=args.host or settings.host, port=args.port or settings.port,
            http=CourierHttp, log_level=args.log_level, timeout_keep_alive=KEEP_ALIVE_S,
            proxy_headers=bool(trusted), forwarded_allow_ips=trusted or [],
            workers=processes,
        )
        if processes > 1:
            Multiprocess(config, sockets=[PortShare.claim(config.host, config.port)]).run()
        else:
            server = uvicorn.Server(config)
            server.run()
            if not server.started:  # the app or the port failed its start, as uvicorn says
                sys.exit(STARTUP_FAILURE)
    except KeyboardInterrupt:
        pass
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


class PortShare(socket.socket):
    """The API's address, claimed by the supervisor and listened on by each process with a
    socket of its own.

    The supervisor binds it (so a taken port fails the start at once) and never listens
    on it. Handed to a process, it arrives as a new socket bound to the same address,
    ready for that process to listen on.
    """

    @classmethod
    def claim(cls, host: str, port: int) -> PortShare:
        """The address bound for sharing; exits as uvicorn does when it is taken."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = cls(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            shareable(sock).bind((host, port))
        except OSError as exc:
            sock.close()
            logging.getLogger("uvicorn.error").error(exc)
            sys.exit(STARTUP_FAILURE)
        where = f"[{host}]" if family == socket.AF_INET6 else host
        logging.getLogger("uvicorn.error").info(
            "Serving http://%s:%d, a socket per process (Press CTRL+C to quit)",
            where, sock.getsockname()[1])
        return sock

    def __reduce__(self) -> tuple[object, tuple[int, str, int, int]]:
        host, port = self.getsockname()[:2]
        return _bound, (self.family, host, port, os.getpid())


def shareable(sock: socket.socket) -> socket.socket:
    """``sock`` set to share its address with the API's other processes."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


def _bound(family: int, host: str, port: int, supervisor: int) -> socket.socket:
    """A process's own socket on the shared address, made as the process starts (before
    it imports the app): from here on it stops when ``supervisor`` dies."""
    die_with_parent(supervisor)
    sock = shareable(socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP))
    sock.bind((host, port))
    return sock


if __name__ == "__main__":
    main(sys.argv[1:])
