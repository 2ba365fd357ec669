"""The processes a benchmark runs: the embedded store, HTTP servers and Celery workers.

Commands come from ``messaging.launch.supervisor.process_table`` (the Procfile's), so
the API serves and the worker works as under ``courier up``; the baselines
change only the app they load. Each cluster has its own ports and temp dir.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from messaging.config import Settings
from messaging.launch.embedded import EmbeddedStore
from messaging.launch.supervisor import API_APP, CELERY_APP, process_table
from messaging.store import connect

ROOT = Path(os.path.abspath(__file__)).parent.parent
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
POLL_S = 0.05
WORKER_PROCESS = "worker-inbox"
DEATHSIG = Path(os.path.abspath(__file__)).parent / "deathsig.py"
# The baselines, served and worked exactly as Courier's API and worker are.
TRIVIAL_APP = "bench.trivial_app:app"
NOOP_APP = "bench.noop_app"


class BenchError(RuntimeError):
    """The harness itself could not run (a process died, a timeout)."""


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` until it is truthy.

    Raises:
        BenchError: not within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(POLL_S)


def dies_with_us(command: list[str]) -> list[str]:
    """``command``, wrapped so that it gets SIGTERM if the harness dies (``bench.deathsig``)."""
    return [sys.executable, str(DEATHSIG), *command]


class Store(EmbeddedStore):
    """The embedded store, dying with the harness like every other process of a run."""

    def command(self) -> list[str]:
        """The server's command line, wrapped."""
        return dies_with_us(super().command())


@dataclass
class Proc:
    """A child process in a session of its own, its output in a log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        """The process id."""
        return self.popen.pid

    def alive(self) -> bool:
        """True while it runs."""
        return self.popen.poll() is None

    def check(self) -> None:
        """Raise if it died."""
        if not self.alive():
            raise BenchError(f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Signal its whole session, then SIGKILL it if it lingers."""
        self.signal(sig)
        self.wait_stopped()

    def signal(self, sig: int) -> None:
        """Send ``sig`` to its whole session, if it still runs."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):  # it just exited
                os.killpg(self.popen.pid, sig)

    def wait_stopped(self) -> None:
        """Wait for it to exit; SIGKILL its session after STOP_TIMEOUT_S."""
        try:
            self.popen.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(STOP_TIMEOUT_S)

    def tail(self, lines: int = 30) -> str:
        """The end of its log."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Cluster:
    """A store of its own and the processes started on it; stops them all on exit."""

    root: Path
    keep: bool = False
    api_processes: int | None = None  # None: the default (the machine's cores)
    store: Store = field(init=False)
    operator_token: str = field(init=False)
    procs: list[Proc] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store = Store(self.root / "data", port=free_port())
        self.operator_token = "cop_" + secrets.token_urlsafe(16)

    def __enter__(self) -> Cluster:
        self.store.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for proc in self.procs:  # all at once: warm shutdowns overlap
            proc.signal(signal.SIGTERM)
        for proc in self.procs:
            proc.wait_stopped()
        self.store.stop()
        if not self.keep and exc is None:
            shutil.rmtree(self.root, ignore_errors=True)

    def settings(self, **overrides: object) -> Settings:
        """The settings every process of this cluster runs with."""
        values: dict[str, object] = {
            "redis_url": self.store.url,
            "data_dir": self.root / "data",
            "operator_token": self.operator_token,
            # The benchmark measures the engine, not the per-agent limiter.
            "rate_limit_per_s": 0.0,
        }
        if self.api_processes is not None:
            values["api_processes"] = self.api_processes
        return Settings(**{**values, **overrides})  # type: ignore[arg-type]

    def env(self, settings: Settings) -> dict[str, str]:
        """Our environment without COURIER_*, then every set setting (as ``courier up``)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
        for name, value in settings.model_dump().items():
            if value is not None:
                env[f"COURIER_{name.upper()}"] = str(value)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def redis(self) -> connect.SyncClient:
        """A client of the store (decoded answers)."""
        return connect.sync_client(self.store.url)

    def spawn(self, name: str, command: list[str], settings: Settings) -> Proc:
        """Start ``command`` in the repository root with the cluster's environment."""
        log = self.root / f"{name}-{len(self.procs)}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(dies_with_us(command), cwd=ROOT, env=self.env(settings),
                                     stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def start_http(self, app: str = API_APP, wait: bool = True,
                   **overrides: object) -> tuple[Proc, str]:
        """An API server (the Procfile's command) serving ``app``; it and its URL."""
        port = free_port()
        settings = self.settings(host="127.0.0.1", port=port, **overrides)
        command = [app if part == API_APP else part for part in process_table(settings)["api"]]
        proc = self.spawn(app.split(":")[0].rsplit(".", 1)[-1], command, settings)
        url = f"http://127.0.0.1:{port}"
        if wait:
            wait_http(proc, url)
        return proc, url

    def start_api_and_worker(self, **overrides: object) -> str:
        """The API (with ``overrides`` of its settings) and the inbox worker, started side by
        side; the API's URL once it answers."""
        api, url = self.start_http(wait=False, **overrides)
        self.start_worker()
        wait_http(api, url)
        return url

    def start_worker(self, app: str = CELERY_APP, queues: str | None = None,
                     wait: bool = True, concurrency: int | None = None) -> Proc:
        """A Celery worker of ``app``: the Procfile's inbox worker, or with other queues
        (and ``concurrency`` processes instead of the transport's own)."""
        settings = self.settings(worker_concurrency=concurrency)
        command = process_table(settings)[WORKER_PROCESS]
        replace = {
            command[command.index("-A") + 1]: app,
            command[command.index("-Q") + 1]: queues or command[command.index("-Q") + 1],
            # A name of its own: no two workers of a run (or of two runs) share one.
            command[command.index("-n") + 1]: f"bench{uuid.uuid4().hex[:6]}@%h",
        }
        # Mingle only syncs with other workers at start-up (a second each time); nothing else
        # differs from the Procfile's worker.
        command = [replace.get(part, part) for part in command] + ["--without-mingle"]
        proc = self.spawn("worker-" + app.rsplit(".", 1)[-1], command, settings)
        if wait:
            wait_worker(proc)
        return proc

    def stop(self, proc: Proc, sig: int = signal.SIGTERM) -> None:
        """Stop one process of the cluster."""
        proc.stop(sig)
        if proc in self.procs:
            self.procs.remove(proc)


def wait_http(proc: Proc, url: str) -> None:
    """Wait until ``url``/healthz answers 200."""

    def up() -> bool:
        proc.check()
        try:
            return httpx.get(url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, START_TIMEOUT_S, f"{proc.name} at {url}")


def wait_worker(proc: Proc) -> None:
    """Wait until the worker says it is ready."""

    def ready() -> bool:
        proc.check()
        return "ready." in proc.log.read_text(errors="replace")

    wait_for(ready, START_TIMEOUT_S, proc.name)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and every process below it: the scheduler's nanosecond count
    of each live thread (``/proc/*/task/*/schedstat``), not the clock ticks of
    ``/proc/*/stat``, whose 10 ms steps are a tenth of one turn's time."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, grew = {pid}, True
    while grew:
        below = {p for p, parent in parents.items() if parent in tree} - tree
        grew = bool(below)
        tree |= below
    spent_ns = 0
    for process in tree:
        for schedstat in Path(f"/proc/{process}/task").glob("*/schedstat"):
            try:
                spent_ns += int(schedstat.read_text().split()[0])
            except (OSError, IndexError, ValueError):
                continue
    return spent_ns / 1e9


def store_commands(r: Any) -> dict[str, int]:
    """The store's calls by command since it started (but INFO, this one's own)."""
    return {k.removeprefix("cmdstat_"): int(v["calls"])
            for k, v in r.info("commandstats").items() if k != "cmdstat_info"}


def commands_per_send(before: dict[str, int], after: dict[str, int],
                      sends: int) -> dict[str, Any]:
    """What the store ran per send between two ``store_commands``, in all and by name
    (the commands inside scripts included: a script call counts as one more)."""
    return {
        "store_commands_run_per_send": round(
            (sum(after.values()) - sum(before.values())) / sends, 2),
        "store_commands_run_per_send_by_name": {
            name: round((calls - before.get(name, 0)) / sends, 2)
            for name, calls in sorted(after.items(), key=lambda kv: -kv[1])
            if calls > before.get(name, 0)},
    }
