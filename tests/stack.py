"""Real processes for integration tests: a Valkey server, the API, Celery workers.

Each stack gets its own ports and data directory, so test runs can go side
by side. Processes are real, so tests can kill them.

The store is one Valkey server, or with ``COURIER_TEST_STORE=cluster`` (or
``STORE = "cluster"``) a 3-node Valkey cluster with a plain Valkey server of
its own as the Celery broker.
"""

from __future__ import annotations

import os
import random
import secrets
import socket
import subprocess
import sys
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.procs import Proc
from messaging.client import CourierClient
from messaging.config import parse_bytes
from messaging.launch import procfile, workerpool
from messaging.launch.embedded import EmbeddedStore, parent_of
from messaging.store import connect, keys
from tests.cluster import EmbeddedCluster

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 30.0
CLUSTER_NODES = 3
# The store make_stack starts: "node" (one server) or "cluster".
STORE = os.environ.get("COURIER_TEST_STORE", "node")


def _outgoing_ports_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports below the range the kernel hands outgoing connections: a port picked
# here cannot be taken by some process's outbound socket before its server binds
# it (a port from bind(0) can, and did).
_PORTS = range(10000, max(10001, _outgoing_ports_start()))
# The ports free_port handed out last: each is free until its server binds it, so
# a test that picks several before starting any (a cluster's ports and bus ports)
# would otherwise be able to get one twice.
_HANDED_OUT: deque[int] = deque(maxlen=1024)


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and parent_of(int(entry.name)) == pid:
                found.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    return found


def free_port() -> int:
    """A TCP port nobody listens on right now, outside the outgoing ports' range, and
    none of those this process handed out lately."""
    for _ in range(1000):
        port = random.choice(_PORTS)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.append(port)
        return port
    raise RuntimeError(f"no free port in {_PORTS}")


def wait_until(predicate, timeout_s: float = 15.0, interval_s: float = 0.05, what: str = ""):
    """Poll ``predicate`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what or predicate}: {last!r}")


_READERS = {
    "string": lambda r, k: r.get(k),
    "hash": lambda r, k: r.hgetall(k),
    "zset": lambda r, k: r.zrange(k, 0, -1, withscores=True),
    "set": lambda r, k: sorted(r.smembers(k)),
    "list": lambda r, k: r.lrange(k, 0, -1),
    "stream": lambda r, k: r.xrange(k),
}


def project_state(stack: Stack, project_id: str) -> dict[str, Any]:
    """Every key of the project (found with SCAN on its hash tag) with its type and
    content, but its tokens' request rate buckets: every request spends from one,
    refused or not, and each lives about a second."""
    pattern = keys.project(project_id).removesuffix("project") + "*"
    buckets = keys.token_rate(project_id, "")
    with stack.redis() as r:
        state = {}
        for key in r.scan_iter(match=pattern, count=1000):
            if key.startswith(buckets):
                continue
            kind = r.type(key)
            if kind == "none":  # removed between SCAN and TYPE (a lock, a key expiring)
                continue
            state[key] = (kind, _READERS[kind](r, key))
    assert keys.project(project_id) in state  # the pattern does find the project's keys
    return state


@dataclass
class Stack:
    """A running Courier: store, API and workers on their own ports."""

    root: Path
    env: dict[str, str]
    store: EmbeddedStore | EmbeddedCluster
    api_url: str = ""
    procs: list[Proc] = field(default_factory=list)
    # The broker started for a cluster store (None: the store or a given URL).
    broker: EmbeddedStore | None = None

    @property
    def operator_token(self) -> str:
        return self.env["COURIER_OPERATOR_TOKEN"]

    @property
    def broker_url(self) -> str:
        return self.env.get("COURIER_BROKER_URL") or self.store.url

    def redis(self) -> connect.SyncClient:
        return connect.sync_client(self.store.url)

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Proc:
        log = self.root / f"{name}-{len(self.procs)}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, *args], cwd=ROOT, env={**self.env, **(env or {})},
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def serve(self, name: str, args: list[str], health: str,
              env: dict[str, str] | None = None, port: int = 0,
              auth: tuple[str, str] | None = None) -> tuple[Proc, str]:
        """An HTTP process (``{port}`` in ``args``, a free one unless given); it and
        its URL once ``health`` says 200 (asked with ``auth``, if given)."""
        port = port or free_port()
        proc = self.spawn(name, [a.format(port=port) for a in args], env)
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            if not proc.alive():
                raise AssertionError(f"{name} died:\n{proc.tail()}")
            try:
                return httpx.get(url + health, auth=auth, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, START_TIMEOUT_S, what=name)
        return proc, url

    def procfile_argv(self, process: str, env: dict[str, str] | None = None) -> list[str]:
        """The Procfile's command line for ``process``, expanded as ``courier run`` does."""
        argv = procfile.commands({**self.env, **(env or {})})[process]
        assert argv[0] == sys.executable, argv
        return argv[1:]

    def start_api(self, env: dict[str, str] | None = None, port: int = 0) -> tuple[Proc, str]:
        """The Procfile's API process (on a free port unless given); it and its URL once
        it answers."""
        port = port or free_port()
        env = {**(env or {}), "COURIER_HOST": "127.0.0.1", "COURIER_PORT": str(port)}
        return self.serve("api", self.procfile_argv("api", env), "/healthz", env, port)

    def start_flower(self, args: list[str], env: dict[str, str] | None = None) -> tuple[Proc, str]:
        """Flower (``args`` start it) on 127.0.0.1; it and its URL once it answers
        (its health check asked with the operator's credentials)."""
        return self.serve("flower", [*args, "--port={port}", "--address=127.0.0.1"],
                          "/healthcheck", env, auth=("operator", self.operator_token))

    def start_worker(self, queues: str = "deliver.inbox,courier.sweep", concurrency: int = 2,
                     beat: bool = True, env: dict[str, str] | None = None) -> Proc:
        """A delivery worker with the options the Procfile's ``workers`` gives it, serving
        ``queues``, with beat inside it unless told otherwise (so that killing the worker
        stops the sweeper too, as the fault tests want)."""
        args = workerpool.worker_argv(workerpool.SWEEP_TRANSPORT, concurrency=concurrency)[1:]
        args[args.index("-Q") + 1] = queues
        name = f"w{uuid.uuid4().hex[:6]}@test"  # each worker of a stack a node of its own
        args[args.index("-n") + 1] = name
        args += ["--without-mingle", "--without-gossip"]  # no other node to talk to
        if beat:
            args += ["-B", "-s", str(self.root / f"beat-{name}")]
        proc = self.spawn("worker", args, env)

        def ready() -> bool:
            if not proc.alive():
                raise AssertionError(f"worker died:\n{proc.tail()}")
            return "ready." in proc.log.read_text(errors="replace")

        wait_until(ready, START_TIMEOUT_S, what="the worker")
        return proc

    def operator(self) -> CourierClient:
        return CourierClient(self.api_url, self.operator_token)

    def client(self, token: str) -> CourierClient:
        return CourierClient(self.api_url, token)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.store.stop()
        if self.broker is not None:
            self.broker.stop()


def start_store(root: Path, kind: str,
                max_memory_bytes: int = 0) -> EmbeddedStore | EmbeddedCluster:
    """One Valkey server (with a memory limit if given), or a cluster of CLUSTER_NODES, started."""
    if kind == "cluster":
        ports = [(free_port(), free_port()) for _ in range(CLUSTER_NODES)]
        cluster = EmbeddedCluster(root / "cluster", ports)
        cluster.start()
        return cluster
    if kind != "node":
        raise ValueError(f"COURIER_TEST_STORE must be node or cluster, not {kind!r}")
    store = EmbeddedStore(root / "data", port=free_port(), max_memory_bytes=max_memory_bytes)
    store.start()
    return store


def make_stack(root: Path, store_kind: str | None = None, **settings: str) -> Stack:
    """Start a store (``STORE`` unless told) and an API; tests start the workers they need.

    ``store_max_memory`` (a setting, as ``COURIER_STORE_MAX_MEMORY`` takes it)
    also limits the store started here, as the embedded store does.
    """
    limit = parse_bytes(settings.get("store_max_memory", "0"))
    store = start_store(root, store_kind or STORE, limit)
    broker = None
    if isinstance(store, EmbeddedCluster) and "broker_url" not in settings:
        broker = EmbeddedStore(root / "broker", port=free_port())
        try:
            broker.start()
        except BaseException:
            store.stop()
            raise
        settings = {**settings, "broker_url": broker.url}
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    api_port = free_port()
    env.update({
        "COURIER_REDIS_URL": store.url,
        # The API's port, as `courier up` sets it: every process knows it as its own.
        "COURIER_PORT": str(api_port),
        "COURIER_DATA_DIR": str(root / "data"),
        "COURIER_OPERATOR_TOKEN": "cop_" + secrets.token_urlsafe(16),
        "COURIER_OUTBOX_GRACE_S": "2",
        "COURIER_SWEEP_INTERVAL_S": "0.5",
        "COURIER_RATE_LIMIT_PER_S": "0",
        # One API process per stack keeps runs lean on small machines; tests of
        # several processes ask for them (test_api_processes.py).
        "COURIER_API_PROCESSES": "1",
        # Tests read the workers' per-task lines (off by default).
        "COURIER_LOG_TASKS": "1",
        **{f"COURIER_{k.upper()}": v for k, v in settings.items()},
    })
    stack = Stack(root, env, store, broker=broker)
    try:
        _, stack.api_url = stack.start_api(port=api_port)
    except BaseException:
        stack.stop()
        raise
    return stack


@contextmanager
def served_stack(root: Path, queues: str = "deliver.inbox,courier.sweep",
                 **settings: str) -> Iterator[Stack]:
    """A stack (with ``settings``, as ``make_stack`` takes them) and one worker serving
    ``queues`` (with beat), stopped on exit."""
    stack = make_stack(root, **settings)
    try:
        stack.start_worker(queues=queues)
        yield stack
    finally:
        stack.stop()
