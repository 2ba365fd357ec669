"""``courier up``: the Procfile's processes, in the foreground, on one machine.

Order of things: the Procfile's ``store`` starts first and must answer (with
``COURIER_REDIS_URL`` set it is not run: the configured store must answer),
then every other process of the Procfile, each in a session of its own so that
a Ctrl-C reaches only this supervisor, which then stops the children (SIGTERM,
a grace period, SIGKILL) and the store last. Children's output comes back line
by line, prefixed with their name. If any child or the store exits on its own,
all the rest are stopped and ``run_up`` returns 1, naming the one that died.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import IO, cast

import redis

from messaging.config import Settings, SettingsError
from messaging.runtime import procfile
from messaging.runtime.embedded import wait_ready
from messaging.store.connect import StoreUrlError

API_APP = "messaging.web.app:app"
CELERY_APP = "workers.app"
STORE_START_TIMEOUT_S = 10.0
# How long one readiness probe of a starting store waits before checking the child.
STORE_PROBE_S = 0.5
# A worker's warm shutdown waits for running tasks, and a webhook may take its timeout.
CHILD_STOP_TIMEOUT_S = 15.0
WATCH_INTERVAL_S = 0.2
READER_JOIN_TIMEOUT_S = 1.0
SUPERVISOR_NAME = "courier"
COLORS = ("36", "33", "32", "35", "34", "31", "96", "93")


def process_table(settings: Settings) -> dict[str, list[str]]:
    """The Procfile's processes but the store, as run in the children's environment."""
    table = procfile.commands(child_env(settings))
    table.pop(procfile.STORE, None)
    return table


def child_env(settings: Settings) -> dict[str, str]:
    """Our environment plus every set COURIER_* setting, so children agree on the store."""
    env = dict(os.environ)
    for name, value in settings.model_dump().items():
        if value is not None:
            env[f"COURIER_{name.upper()}"] = str(value)
    env["PYTHONUNBUFFERED"] = "1"  # lines as they come, not when a buffer fills
    return env


@contextmanager
def stop_signals() -> Iterator[threading.Event]:
    """An event that SIGINT and SIGTERM set while inside; the old handlers come back after."""
    stopping = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopping
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Output:
    """Writes lines to stdout, each prefixed with the name of the process it came from."""

    def __init__(self, names: Iterable[str]) -> None:
        names = list(names)
        self._width = max(map(len, names))
        self._colors = {name: COLORS[i % len(COLORS)] for i, name in enumerate(names)}
        self._tty = sys.stdout.isatty()
        self._lock = threading.Lock()

    def line(self, name: str, text: str) -> None:
        """Write one line for ``name``."""
        prefix = f"{name:<{self._width}} | "
        if self._tty:
            prefix = f"\033[{self._colors.get(name, '0')}m{prefix}\033[0m"
        with self._lock:
            sys.stdout.write(prefix + text + "\n")
            sys.stdout.flush()

    def pump(self, name: str, stream: IO[bytes]) -> None:
        """Copy ``stream`` line by line until it closes."""
        with stream:
            for raw in iter(stream.readline, b""):
                self.line(name, raw.decode(errors="replace").rstrip("\r\n"))


@dataclass
class Child:
    """One running process of the table, and the thread copying its output."""

    name: str
    proc: subprocess.Popen[bytes]
    reader: threading.Thread


def spawn(name: str, command: list[str], env: dict[str, str], out: Output) -> Child:
    """Start ``command`` in a session of its own, its stdout and stderr going to ``out``."""
    proc = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    stream = cast(IO[bytes], proc.stdout)  # not None: stdout=PIPE
    reader = threading.Thread(target=out.pump, args=(name, stream), daemon=True)
    reader.start()
    return Child(name, proc, reader)


def run_up(settings: Settings) -> int:
    """Run the store and every process until Ctrl-C or SIGTERM (0) or one of them dies (1)."""
    settings = settings.model_copy(update={"data_dir": settings.data_dir.resolve()})
    env = child_env(settings)
    table = procfile.commands(env)
    store_command = table.pop(procfile.STORE, None)
    out = Output([SUPERVISOR_NAME, procfile.STORE, *table])
    try:
        settings.celery_broker_url  # noqa: B018 - raises when no broker can be used
    except SettingsError as exc:
        out.line(SUPERVISOR_NAME, f"cannot start: {exc}")
        return 2
    store: Child | None = None
    children: list[Child] = []
    with stop_signals() as stopping:
        try:
            if settings.embedded and store_command:
                store = spawn(procfile.STORE, store_command, env, out)
            if not _store_ready(store, settings, out):
                return 1
            _announce(settings, out)
            children = [spawn(name, command, env, out) for name, command in table.items()]
            return _watch([*children, *([store] if store else [])], stopping, out)
        finally:
            _stop_children(children, out)
            if store is not None:
                _stop_children([store], out)  # last: the others may still write to it


def _store_ready(store: Child | None, settings: Settings, out: Output) -> bool:
    """Wait until the store answers; False if it exits or stays silent too long."""
    if store is None:
        out.line(procfile.STORE, f"using {_redacted(settings.store_url)}")
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
        except (StoreUrlError, redis.RedisError) as exc:
            out.line(SUPERVISOR_NAME, f"the store at {_redacted(settings.store_url)}: {exc}")
            return False


def _announce(settings: Settings, out: Output) -> None:
    """Print where the API and Flower answer, and where the operator token is."""
    token_path = settings.operator_token_path
    existed = token_path.exists()
    token = settings.resolve_operator_token()
    out.line(SUPERVISOR_NAME, f"API:    {_http_url(settings.host, settings.port)}")
    out.line(SUPERVISOR_NAME, f"Flower: {_http_url(settings.flower_host, settings.flower_port)}")
    if settings.operator_token:
        out.line(SUPERVISOR_NAME, "operator token: the one in COURIER_OPERATOR_TOKEN")
    elif existed:
        out.line(SUPERVISOR_NAME, f"operator token: in {token_path}")
    else:
        out.line(SUPERVISOR_NAME, f"operator token: {token} (new, kept in {token_path})")


def _watch(children: list[Child], stopping: threading.Event, out: Output) -> int:
    """Wait for a stop signal (0) or for a child to exit on its own (1)."""
    while not stopping.wait(WATCH_INTERVAL_S):
        for child in children:
            code = child.proc.poll()
            if code is not None:
                out.line(
                    SUPERVISOR_NAME,
                    f"{child.name} exited unexpectedly (code {code}); stopping everything",
                )
                return 1
    out.line(SUPERVISOR_NAME, "stopping")
    return 0


def _stop_children(children: list[Child], out: Output) -> None:
    """SIGTERM every child, wait the grace period, then SIGKILL the sessions still running."""
    for child in children:
        if child.proc.poll() is None:
            child.proc.terminate()
    deadline = time.monotonic() + CHILD_STOP_TIMEOUT_S
    for child in children:
        try:
            child.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            out.line(SUPERVISOR_NAME, f"{child.name} did not stop in time; killing it")
            # The whole session, so that no pool process outlives its master.
            os.killpg(child.proc.pid, signal.SIGKILL)
            child.proc.wait()
    for child in children:
        child.reader.join(READER_JOIN_TIMEOUT_S)


def _http_url(host: str, port: int) -> str:
    """``http://host:port/``, with brackets around an IPv6 address."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _redacted(url: str) -> str:
    """``url`` without its password, fit to print."""
    scheme, sep, rest = url.partition("://")
    creds, at, location = rest.rpartition("@")
    if not sep or not at:
        return url
    user = creds.partition(":")[0]
    return f"{scheme}://{user}:***@{location}" if user else f"{scheme}://***@{location}"
