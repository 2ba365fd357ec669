"""A primary and a replica watched by three Sentinels, all real Valkey processes on
loopback, for the failover tests: the primary can be killed (SIGKILL) and comes
back as a replica of the one promoted in its place."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
from pathlib import Path

from messaging.config import STORE_PASSWORD_FILE
from messaging.launch.embedded import EmbeddedStore, server_binary
from messaging.store import connect
from tests.stack import free_port, wait_until

NAME = "courier"
SENTINELS = 3
DOWN_AFTER_MS = 1500
FAILOVER_TIMEOUT_MS = 6000


def follow(replica: EmbeddedStore, primary: EmbeddedStore, password: str) -> None:
    """Make ``replica`` a replica of ``primary`` (whose password is ``password``)."""
    with connect.sync_client(replica.url) as r:
        r.config_set("masterauth", password)  # type: ignore[union-attr]
        # A replica that connects is synced at once, not after 5 s of waiting for others.
        r.config_set("repl-diskless-sync-delay", 0)  # type: ignore[union-attr]
        r.execute_command("REPLICAOF", "127.0.0.1", str(primary.port))  # type: ignore[union-attr]


class Watched:
    """Two data nodes (one password, so either may be the primary) and the Sentinels."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.password = secrets.token_urlsafe(24)
        self.nodes: list[EmbeddedStore] = []
        for n in ("a", "b"):
            data = root / f"node-{n}"
            data.mkdir(parents=True, exist_ok=True)
            (data / STORE_PASSWORD_FILE).write_text(self.password + "\n")
            (data / STORE_PASSWORD_FILE).chmod(0o600)
            # A replica that fsyncs each write reports it within a second.
            self.nodes.append(EmbeddedStore(data, port=free_port(), appendfsync="always"))
        self.sentinels: list[tuple[int, subprocess.Popen[bytes]]] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port, _ in self.sentinels)
        return f"redis+sentinel://:{self.password}@{hosts}/{NAME}"

    def start(self) -> Watched:
        for node in self.nodes:
            node.start()
            self._auth(node)
        follow(self.nodes[1], self.nodes[0], self.password)
        for i in range(SENTINELS):
            port = free_port()
            conf = self.root / f"sentinel-{i}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.root}\n"
                f"sentinel monitor {NAME} 127.0.0.1 {self.nodes[0].port} 2\n"
                f"sentinel auth-pass {NAME} {self.password}\n"
                f"sentinel down-after-milliseconds {NAME} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {NAME} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {NAME} 1\n")
            with (self.root / f"sentinel-{i}.log").open("wb") as log:
                proc = subprocess.Popen([str(server_binary()), str(conf), "--sentinel"],
                                        stdout=log, stderr=subprocess.STDOUT)
            self.sentinels.append((port, proc))
        wait_until(lambda: self.primary() is self.nodes[0], what="the Sentinels watching")
        wait_until(lambda: self.replica_up(self.nodes[1]), what="the replica in sync")
        return self

    def _auth(self, node: EmbeddedStore) -> None:
        with connect.sync_client(node.url) as r:
            r.config_set("masterauth", self.password)  # type: ignore[union-attr]
            # A replica that connects is synced at once, not after 5 s of waiting for others.
            r.config_set("repl-diskless-sync-delay", 0)  # type: ignore[union-attr]

    def primary_port(self) -> int | None:
        """The primary's port as a Sentinel says it (None: none answers)."""
        for port, _ in self.sentinels:
            try:
                with connect.sync_client(f"redis://127.0.0.1:{port}") as s:
                    found = s.execute_command("SENTINEL", "get-master-addr-by-name", NAME)  # type: ignore[union-attr]
            except connect.STORE_DOWN:
                continue
            if found:
                return int(found[1])
        return None

    def primary(self) -> EmbeddedStore | None:
        port = self.primary_port()
        return next((n for n in self.nodes if n.port == port), None)

    def other(self, node: EmbeddedStore) -> EmbeddedStore:
        return next(n for n in self.nodes if n is not node)

    def replica_up(self, node: EmbeddedStore) -> bool:
        try:
            with connect.sync_client(node.url) as r:
                info = r.info("replication")  # type: ignore[union-attr]
        except connect.STORE_DOWN:
            return False
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    def is_primary(self, node: EmbeddedStore) -> bool:
        try:
            with connect.sync_client(node.url) as r:
                return bool(r.info("replication").get("role") == "master")  # type: ignore[union-attr]
        except connect.STORE_DOWN:
            return False

    def kill_primary(self) -> EmbeddedStore:
        """SIGKILL the primary; once the other node is promoted, start the killed one
        again as its replica. Returns the new primary."""
        old = self.primary()
        assert old is not None and old.pid is not None
        os.kill(old.pid, signal.SIGKILL)
        new = self.other(old)
        wait_until(lambda: self.primary() is new and self.is_primary(new), timeout_s=30,
                   what="a replica promoted")
        old.stop()
        old.start()
        self._auth(old)
        # Started again as a replica of the new primary, as its host's service would
        # (the Sentinels find it there; left alone, they convert it within 10 s).
        follow(old, new, self.password)
        wait_until(lambda: self.replica_up(old), timeout_s=30, what="the old primary back as "
                   "a replica")
        return new

    def stop(self) -> None:
        for _, proc in self.sentinels:
            proc.kill()
            proc.wait()
        for node in self.nodes:
            if node.pid:
                with_cont(node)
            node.stop()


def with_cont(node: EmbeddedStore) -> None:
    """Let a stopped (SIGSTOP) node run again; harmless on a running one."""
    if node.pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, signal.SIGCONT)
