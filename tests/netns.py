"""Several hosts on one machine: a network namespace per host, each joined to a
bridge of its own by a veth pair, with its own address on a private /24 and no
route out. Courier's processes run in them with the commands of
docs/operations.md; a test cuts a host's link, or one host's route to another,
and mends it. Everything is taken down on exit, whatever the test did."""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from messaging.launch.embedded import EmbeddedStore
from tests.stack import ROOT, wait_until

BRIDGE_OCTET = 254


def can_make_hosts() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"cprobe{secrets.token_hex(3)}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"`ip netns add` failed: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Hosts:
    """The namespaces of one test, their addresses, and the processes in them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tag = secrets.token_hex(2)
        self.net = f"10.{random.randint(100, 250)}.{random.randint(1, 250)}"
        self.bridge = f"cb{self.tag}"
        self.hosts: dict[str, tuple[str, str, str]] = {}  # name -> (netns, veth, address)
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Hosts:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.net}.{BRIDGE_OCTET}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for netns, veth, _ in self.hosts.values():
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    @property
    def bridge_address(self) -> str:
        return f"{self.net}.{BRIDGE_OCTET}"

    def add(self, name: str) -> str:
        """A new host; its address."""
        n = len(self.hosts) + 1
        netns, veth, inside = f"c{self.tag}-{name}", f"v{self.tag}{n}a", f"v{self.tag}{n}b"
        address = f"{self.net}.{n}"
        _ip("netns", "add", netns)
        self.hosts[name] = (netns, veth, address)
        _ip("link", "add", veth, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", netns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        for args in (["addr", "add", f"{address}/24", "dev", inside],
                     ["link", "set", inside, "up"], ["link", "set", "lo", "up"]):
            _ip("netns", "exec", netns, "ip", *args)
        return address

    def address(self, name: str) -> str:
        return self.hosts[name][2]

    def cut(self, name: str) -> None:
        """The host's link down: nothing reaches it or leaves it."""
        _ip("link", "set", self.hosts[name][1], "down")

    def mend(self, name: str) -> None:
        _ip("link", "set", self.hosts[name][1], "up")

    def block(self, name: str, other: str) -> None:
        """``name`` can no longer reach ``other`` (a route to nowhere); the rest stands."""
        _ip("netns", "exec", self.hosts[name][0], "ip", "route", "add", "blackhole",
            f"{self.address(other)}/32")

    def unblock(self, name: str, other: str) -> None:
        _ip("netns", "exec", self.hosts[name][0], "ip", "route", "del", "blackhole",
            f"{self.address(other)}/32")

    def run(self, name: str, label: str, argv: list[str],
            env: dict[str, str]) -> subprocess.Popen[bytes]:
        """``argv`` on host ``name``, in the repository, its output in a log file."""
        with (self.root / f"{name}-{label}.log").open("wb") as log:
            proc = subprocess.Popen(["ip", "netns", "exec", self.hosts[name][0], *argv],
                                    cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs.append(proc)
        return proc

    def log(self, name: str, label: str) -> str:
        return (self.root / f"{name}-{label}.log").read_text(errors="replace")


class HostedStore(EmbeddedStore):
    """The embedded store's server, run on one of the hosts."""

    def __init__(self, hosts: Hosts, name: str, data_dir: Path, port: int) -> None:
        super().__init__(data_dir, port=port, host=hosts.address(name))
        self.netns = hosts.hosts[name][0]

    def command(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *super().command()]


def courier(*args: str) -> list[str]:
    """A ``courier`` command line, as the docs give it."""
    return [sys.executable, "-m", "messaging.cli", *args]


def serving(url: str) -> None:
    import httpx

    def answers() -> bool:
        try:
            return httpx.get(url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(answers, timeout_s=60, what=f"the API at {url}")
