"""``python -m messaging.launch.healthcheck NAME``: exit 0 when this machine's process
NAME answers, 1 (with the reason on stderr) when it does not.

For container healthchecks (docker-compose.yml), one per Procfile process:

- ``api``: ``GET /healthz`` on ``COURIER_PORT`` answers 200;
- ``flower``: ``GET /healthcheck`` on ``COURIER_FLOWER_PORT``, with the operator's
  credentials, answers 200;
- ``workers``: every worker of this host (``<transport>@<hostname>``, as the
  pool names them) answers a Celery ping;
- ``beat``: beat's schedule file in the data dir was written within
  ``BEAT_STALE_S`` (beat writes it every few minutes while it runs).
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable

import httpx
from celery import Celery

from messaging.config import Settings, get_settings
from messaging.launch.flower import USER
from messaging.runtime.celeryconf import celery_config, transport_kinds

TIMEOUT_S = 5.0
# Beat writes its schedule at least every three minutes (Celery's sync interval).
BEAT_STALE_S = 600.0
BEAT_SCHEDULE = "celerybeat-schedule"


class Unhealthy(Exception):
    """The process does not answer as it should."""


def _get(url: str, auth: tuple[str, str] | None = None) -> None:
    try:
        status = httpx.get(url, auth=auth, timeout=TIMEOUT_S).status_code
    except httpx.HTTPError as exc:
        raise Unhealthy(f"{url}: {exc}") from None
    if status != 200:
        raise Unhealthy(f"{url}: {status}")


def api(settings: Settings) -> None:
    """The API answers /healthz."""
    _get(f"http://127.0.0.1:{settings.port}/healthz")


def flower(settings: Settings) -> None:
    """Flower answers /healthcheck to the operator."""
    token = settings.find_operator_token()
    if not token:
        raise Unhealthy(f"no operator token (COURIER_OPERATOR_TOKEN or "
                        f"{settings.operator_token_path})")
    _get(f"http://127.0.0.1:{settings.flower_port}/healthcheck", (USER, token))


def workers(settings: Settings) -> None:
    """Every transport's worker on this host answers a ping."""
    wanted = {f"{kind}@{socket.gethostname()}" for kind in transport_kinds()}
    app = Celery("courier-healthcheck")
    app.conf.update(celery_config(settings))
    try:
        replies = app.control.ping(destination=sorted(wanted), timeout=TIMEOUT_S)
    finally:
        app.close()
    answered = {name for reply in replies for name in reply}
    if missing := wanted - answered:
        raise Unhealthy(f"no answer from {', '.join(sorted(missing))}")


def beat(settings: Settings) -> None:
    """Beat wrote its schedule recently."""
    files = list(settings.data_dir.glob(BEAT_SCHEDULE + "*"))
    if not files:
        raise Unhealthy(f"no {BEAT_SCHEDULE} in {settings.data_dir}")
    age_s = time.time() - max(f.stat().st_mtime for f in files)
    if age_s > BEAT_STALE_S:
        raise Unhealthy(f"{BEAT_SCHEDULE} last written {age_s:.0f} s ago")


CHECKS: dict[str, Callable[[Settings], None]] = {
    "api": api, "flower": flower, "workers": workers, "beat": beat}


def main(argv: list[str]) -> int:
    """Run the check named in ``argv``."""
    if len(argv) != 1 or argv[0] not in CHECKS:
        print(f"usage: python -m messaging.launch.healthcheck {{{','.join(CHECKS)}}}",
              file=sys.stderr)
        return 2
    try:
        CHECKS[argv[0]](get_settings())
    except Unhealthy as exc:
        print(f"{argv[0]}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
