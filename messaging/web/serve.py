"""The API process: ``python -m messaging.web.serve APP --host H --port P``.

uvicorn serving ``APP`` with Courier's connection rules (``messaging.web.connections``)
and proxy headers believed only from ``COURIER_TRUSTED_PROXIES``: uvicorn's own
default believes ``X-Forwarded-For`` from loopback, which would let any local
process pick the address its requests are rate-limited by.
"""

from __future__ import annotations

import argparse
import sys

import uvicorn

from messaging.config import get_settings
from messaging.web.connections import CourierHttp

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
    CourierHttp.configure(settings.max_connections_per_address, trusted)
    # uvicorn's limit_concurrency is not used: it answers 503 to everyone once any
    # client holds that many connections, health checks included.
    uvicorn.run(
        args.app, host=args.host or settings.host, port=args.port or settings.port,
        http=CourierHttp, log_level=args.log_level, timeout_keep_alive=KEEP_ALIVE_S,
        proxy_headers=bool(trusted), forwarded_allow_ips=trusted or [],
    )


if __name__ == "__main__":
    main(sys.argv[1:])
