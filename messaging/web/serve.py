"""The API: ``python -m messaging.web.serve APP --host H --port P``.

uvicorn serving ``APP`` with Courier's connection rules (``messaging.web.connections``)
and proxy headers believed only from ``COURIER_TRUSTED_PROXIES``: uvicorn's own
default believes ``X-Forwarded-For`` from loopback, which would let any local
process pick the address its requests are rate-limited by.

``COURIER_API_PROCESSES`` processes (default: the machine's cores) serve the
one port, under uvicorn's supervisor, which restarts one that dies; each
stops when the supervisor dies, however it dies. What a
process would otherwise keep for itself is shared: rate limits and stream
slots live in the store, the per-address connection cap is split evenly, and
``/metrics`` adds up every process's counters (prometheus-client's
multiprocess mode, in a directory of this start's own).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import uvicorn

from messaging.config import get_settings
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
        CourierHttp.configure(settings.max_connections_per_address, trusted)
    try:
        # uvicorn's limit_concurrency is not used: it answers 503 to everyone once any
        # client holds that many connections, health checks included.
        uvicorn.run(
            args.app, host=args.host or settings.host, port=args.port or settings.port,
            http=CourierHttp, log_level=args.log_level, timeout_keep_alive=KEEP_ALIVE_S,
            proxy_headers=bool(trusted), forwarded_allow_ips=trusted or [],
            workers=processes if processes > 1 else None,
        )
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
