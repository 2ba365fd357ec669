"""``courier up``: the Procfile's processes, in the foreground, on one machine.

Order of things: the Procfile's ``store`` starts first and must answer (with
``COURIER_REDIS_URL`` set it is not run: the configured store must answer),
then every other process of the Procfile, the ``workers`` line as one worker
per installed transport (``workerpool``'s commands, each child named and
prefixed on its own). Children run as ``children`` runs them; the store stops
last. If any child or the store exits on its own, all the rest are stopped
and ``run_up`` returns 1, naming the one that died.

``courier up --lane NAME`` (``run_lane``) runs only one lane's workers against
the configured store and broker: no store of its own, no API, no beat, no
Flower; for another machine, or beside a running ``courier up``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import redis

from messaging.config import Settings, SettingsError, StoreUrlError
from messaging.launch import procfile, workerpool
from messaging.launch.embedded import (
    EmbeddedStoreError,
    StoreAuthError,
    server_binary,
    wait_ready,
)
from messaging.launch.flower import USER as FLOWER_USER
from messaging.runtime import children, logs
from messaging.runtime.children import Child, Output
from messaging.store.connect import redacted
from messaging.store.deliveries import DeliveryStore

API_APP = "messaging.web.app:app"
CELERY_APP = workerpool.CELERY_APP
# The Procfile line that stands for one worker per installed transport.
WORKERS = "workers"
STORE_START_TIMEOUT_S = 10.0
# How long one readiness probe of a starting store waits before checking the child.
STORE_PROBE_S = 0.5
SUPERVISOR_NAME = "courier"


def process_table(settings: Settings) -> dict[str, list[str]]:
    """The Procfile's processes but the store, as run in the children's environment.

    The ``workers`` line becomes ``worker-<kind>`` for every installed transport.
    """
    table = procfile.commands(child_env(settings))
    table.pop(procfile.STORE, None)
    expanded: dict[str, list[str]] = {}
    for name, command in table.items():
        if name == WORKERS:
            expanded.update(workerpool.commands(concurrency=settings.worker_concurrency,
                                                 settings=settings))
        else:
            expanded[name] = command
    return expanded


def child_env(settings: Settings) -> dict[str, str]:
    """Our environment plus every set COURIER_* setting, so children agree on the store."""
    env = dict(os.environ)
    for name, value in settings.model_dump().items():
        if value is not None:
            env[f"COURIER_{name.upper()}"] = str(value)
    env["PYTHONUNBUFFERED"] = "1"  # lines as they come, not when a buffer fills
    return env


def run_up(settings: Settings) -> int:
    """Run the store and every process until Ctrl-C or SIGTERM (0) or one of them dies (1)."""
    settings = settings.model_copy(update={"data_dir": settings.data_dir.resolve()})
    env = child_env(settings)
    table = process_table(settings)
    store_command = procfile.commands(env).get(procfile.STORE)
    out = Output([SUPERVISOR_NAME, procfile.STORE, *table], settings.log_format == logs.JSON)
    if not _broker_usable(settings, out):
        return 2
    if settings.embedded and store_command:
        try:
            server_binary()
        except EmbeddedStoreError as exc:
            out.line(SUPERVISOR_NAME, f"cannot start: {exc}")
            return 1
    store: Child | None = None
    with children.stop_signals() as stopping:
        try:
            if settings.embedded and store_command:
                store = children.spawn(procfile.STORE, store_command, env, out)
            if not _store_ready(store, settings, out):
                return 1
            _announce(settings, out)
            return children.supervise(table, env, out, stopping, SUPERVISOR_NAME,
                                      watched=[store] if store else [])
        finally:
            if store is not None:  # last: the others may still write to it
                children.stop([store], out, SUPERVISOR_NAME)


def run_lane(settings: Settings, lane: str) -> int:
    """Run one lane's workers until Ctrl-C or SIGTERM (0) or one of them dies (1).

    Returns 2 before starting anything when the lane name or the broker is
    unusable, 1 when the configured store does not answer.
    """
    settings = settings.model_copy(update={"data_dir": settings.data_dir.resolve()})
    try:
        table = workerpool.commands(workerpool.check_lane(lane), settings.worker_concurrency,
                                    settings)
    except workerpool.LaneNameError as exc:
        Output([SUPERVISOR_NAME], settings.log_format == logs.JSON).line(
            SUPERVISOR_NAME, f"cannot start: {exc}")
        return 2
    out = Output([SUPERVISOR_NAME, procfile.STORE, *table], settings.log_format == logs.JSON)
    if not _broker_usable(settings, out):
        return 2
    if not _store_ready(None, settings, out):
        out.line(SUPERVISOR_NAME, "lane workers serve the store of a running Courier: set "
                                  "COURIER_REDIS_URL (and COURIER_BROKER_URL if it has one), "
                                  "or run `courier up` first")
        return 1
    store = DeliveryStore.from_url(settings.store_url)
    try:
        known = store.lanes()
    finally:
        store.close()
    if lane not in known:
        out.line(SUPERVISOR_NAME, f"no project is on lane {lane} yet (lanes: "
                                  f"{', '.join(known) or 'none'}); its workers wait for one")
    out.line(SUPERVISOR_NAME, "lane workers for " + ", ".join(
        argv[argv.index("-Q") + 1] for argv in table.values()))
    with children.stop_signals() as stopping:
        return children.supervise(table, child_env(settings), out, stopping, SUPERVISOR_NAME)


def _broker_usable(settings: Settings, out: Output) -> bool:
    """False, said in one line, when these settings give no broker to use."""
    try:
        settings.celery_broker_url  # noqa: B018 - raises when no broker can be used
    except SettingsError as exc:
        out.line(SUPERVISOR_NAME, f"cannot start: {exc}")
        return False
    return True


def _store_ready(store: Child | None, settings: Settings, out: Output) -> bool:
    """Wait until the store answers; False if it exits or stays silent too long."""
    if store is None:
        out.line(procfile.STORE, f"using {redacted(settings.store_url)}")
    deadline = time.monotonic() + STORE_START_TIMEOUT_S
    while True:
        if store is not None and (code := store.proc.poll()) is not None:
            out.line(SUPERVISOR_NAME, f"the store exited (code {code}) before it answered")
            return False
        try:
            wait_ready(settings.store_url, STORE_PROBE_S)
            return True
        except TimeoutError as exc:
            if time.monotonic() >= deadline:
                out.line(SUPERVISOR_NAME, str(exc))
                return False
        except StoreAuthError as exc:
            # Our own store may refuse us until its password file is written
            # (the URL is read again each time); another store's refusal stands.
            if store is None or time.monotonic() >= deadline:
                out.line(SUPERVISOR_NAME, str(exc))
                return False
        except (StoreUrlError, redis.RedisError) as exc:
            out.line(SUPERVISOR_NAME, f"the store at {redacted(settings.store_url)}: {exc}")
            return False


def init_home(settings: Settings) -> tuple[Path, bool]:
    """Make the data directory and its operator token unless there is one:
    (the data directory, whether a token was created). Only ``courier up`` and
    ``courier init`` call this."""
    data_dir = settings.data_dir.resolve()
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    existed = settings.find_operator_token() is not None
    settings.resolve_operator_token()
    return data_dir, not existed


def _announce(settings: Settings, out: Output) -> None:
    """Print the data directory, where the API and Flower answer, and which file
    holds the operator token (never the token)."""
    token_path = settings.operator_token_path
    existed = token_path.exists()
    settings.resolve_operator_token()
    out.line(SUPERVISOR_NAME, f"data:   {settings.data_dir} (COURIER_DATA_DIR)")
    out.line(SUPERVISOR_NAME, f"API:    {_http_url(settings.host, settings.port)}")
    if settings.operator_token:
        where = "COURIER_OPERATOR_TOKEN"
        out.line(SUPERVISOR_NAME, "operator token: the one in COURIER_OPERATOR_TOKEN")
    elif existed:
        where = str(token_path)
        out.line(SUPERVISOR_NAME, f"operator token: in {token_path}")
    else:
        where = str(token_path)
        out.line(SUPERVISOR_NAME, f"operator token: new, in {token_path} (readable by "
                                  f"its owner only)")
    out.line(SUPERVISOR_NAME, f"Flower: {_http_url(settings.flower_host, settings.flower_port)} "
                              f"(user {FLOWER_USER}, password: the operator token, in {where})")


def _http_url(host: str, port: int) -> str:
    """``http://host:port/``, with brackets around an IPv6 address."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
