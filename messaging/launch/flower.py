"""Flower behind the operator token: ``python -m messaging.launch.flower [flower options]``.

Every route, its pages, its HTTP API, ``/metrics``, ``/healthcheck`` and its
static files included, asks for HTTP basic auth, user ``operator``, password
the operator token. Flower itself checks it only on the routes it marks
``authenticated``: here its application checks it before it looks for a
handler, so no route, present or future, answers without it. The credentials go to Flower in its
environment (``FLOWER_BASIC_AUTH``), never on a command line that ``ps`` would
show.

Flower lists (on its broker page and in ``/api/queues/length``) the queues
that running workers consume, or the app's configured queues when no worker
runs: a lane whose workers are not running would be missing exactly while its
mail piles up. So Flower runs in this process, and its one source of queue
names (``BaseHandler.get_active_queue_names``) also gets every Courier queue
the store knows, read at each request: lanes created after Flower started
appear with their first project.

Flower inspects the workers once, as it starts: started before them (as
``courier up`` may start it), or joined later by a worker, its ``/api/workers``
would miss them until someone asked it to refresh. So every FOLLOW_S it
compares the workers its events show alive with those it inspected, and
inspects again when one is missing.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import os
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from messaging.config import OperatorTokenMissing, Settings, get_settings
from messaging.runtime import logs
from messaging.runtime.celeryconf import courier_queues
from messaging.store import connect
from messaging.store.deliveries import DeliveryStore

USER = "operator"
CELERY_APP = "workers.app"
# Flower answers from one event loop: a store that does not answer must not hold it long.
STORE_TIMEOUT_S = 1.0
# How often Flower's list of workers is checked against those its events show alive.
FOLLOW_S = 2.0

log = logging.getLogger(__name__)


def flower_env(token: str) -> dict[str, str]:
    """Our environment, with Flower's basic auth set to the operator token."""
    return {**os.environ, "FLOWER_BASIC_AUTH": f"{USER}:{token}"}


def lane_aware(flowers: Callable[[Any], list[str]],
               settings: Settings) -> Callable[[Any], list[str]]:
    """Flower's queue-name method, joined by every Courier queue, lanes' included."""
    stores: list[DeliveryStore] = []

    def names(handler: Any) -> list[str]:
        known = set(flowers(handler))
        try:
            if not stores:
                stores.append(DeliveryStore.from_url(settings.store_url,
                                                     timeout_s=STORE_TIMEOUT_S))
            known.update(courier_queues(stores[0].lanes()))
        except connect.STORE_DOWN as exc:
            log.warning("lane queues not listed: the store does not answer (%s)", exc)
        return sorted(known)

    return names


def authorized(header: str, token: str) -> bool:
    """True when an ``Authorization`` header carries user ``operator`` and the token."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        given = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(given, f"{USER}:{token}".encode())


def guard_every_route(application: type[Any], token: str) -> None:
    """Make ``application`` (Flower's Tornado application class) answer 401 to any
    request without the operator's credentials, before it looks for a handler."""
    from tornado.web import RequestHandler

    class Unauthorized(RequestHandler):
        """401 with the basic-auth challenge, whatever the method."""

        def prepare(self) -> None:
            self.set_status(401)
            self.set_header("WWW-Authenticate", 'Basic realm="flower"')
            self.finish("Access denied")

    find = application.find_handler

    def find_handler(self: Any, request: Any, **kwargs: Any) -> Any:
        if not authorized(request.headers.get("Authorization", ""), token):
            return self.get_handler_delegate(request, Unauthorized)
        return find(self, request, **kwargs)

    application.find_handler = find_handler


def follow_workers(app: Any) -> None:
    """Have Flower inspect the workers again when it lists none, or not one that its
    events show alive."""
    listed = set(app.inspector.workers)
    alive = {name for name, worker in app.events.state.workers.items() if worker.alive}
    if not listed or alive - listed:
        app.update_workers()


def following(start: Callable[[Any], None]) -> Callable[[Any], None]:
    """Flower's ``start``, with follow_workers every FOLLOW_S on its loop."""
    from tornado.ioloop import PeriodicCallback

    def start_following(app: Any) -> None:
        PeriodicCallback(partial(follow_workers, app), FOLLOW_S * 1000).start()
        start(app)

    return start_following


def main() -> None:
    """Run Flower in this process, the operator token guarding it, every lane queue listed."""
    from celery.bin.celery import main as celery_main
    from flower import command
    from flower.app import Flower
    from flower.views import BaseHandler

    settings = get_settings()
    try:
        token = settings.require_operator_token()
    except OperatorTokenMissing as exc:
        sys.exit(f"flower: {exc}")
    os.environ.update(flower_env(token))
    guard_every_route(Flower, token)
    Flower.start = following(Flower.start)
    BaseHandler.get_active_queue_names = lane_aware(BaseHandler.get_active_queue_names, settings)
    tornado_logging = command.setup_logging

    def setup_logging() -> None:
        """Tornado's logging, then the deployment's format and outage lines."""
        tornado_logging()
        logs.setup("flower", settings)

    command.setup_logging = setup_logging
    sys.argv = ["celery", "-A", CELERY_APP, "flower", *sys.argv[1:]]
    sys.exit(celery_main())


if __name__ == "__main__":
    main()
