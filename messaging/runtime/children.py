"""Child processes run side by side, as ``courier up`` and the worker pool run them.

Each child runs in a session of its own, so that a Ctrl-C reaches only its
parent, which then stops the children (SIGTERM, a grace period, SIGKILL on the
whole session, so no pool process outlives its master). Children's output
comes back line by line, prefixed with their name. If one exits on its own,
the others are stopped and the run ends with 1, naming the one that died.
"""

from __future__ import annotations

import ctypes
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

from messaging.runtime import logs

# A worker's warm shutdown waits for running tasks, and a webhook may take its timeout.
CHILD_STOP_TIMEOUT_S = 15.0
WATCH_INTERVAL_S = 0.2
READER_JOIN_TIMEOUT_S = 1.0
COLORS = ("36", "33", "32", "35", "34", "31", "96", "93")
# prctl(2): the signal a process gets when the thread that started it exits.
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> None:
    """On Linux, have this process get SIGTERM when its parent dies (a supervisor killed
    with SIGKILL leaves no child serving on); elsewhere nothing. A parent already gone
    ends this process at once: ``parent`` is its pid as this process was started (an
    orphan's parent is another process by now), else the one it has."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid() if parent is None else parent
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


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
    """Writes lines to stdout, each prefixed with the name of the process it came from.

    With ``json`` (COURIER_LOG_FORMAT=json) a line is a JSON object instead: the
    children's as they wrote them, any other wrapped as one of its process.
    """

    def __init__(self, names: Iterable[str], json: bool = False) -> None:
        names = list(names)
        self._json = json
        self._width = max(map(len, names))
        self._colors = {name: COLORS[i % len(COLORS)] for i, name in enumerate(names)}
        self._tty = sys.stdout.isatty()
        self._lock = threading.Lock()

    def line(self, name: str, text: str) -> None:
        """Write one line for ``name``."""
        if self._json:
            with self._lock:
                sys.stdout.write(logs.json_line(name, text) + "\n")
                sys.stdout.flush()
            return
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
    """One running process, and the thread copying its output."""

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


def watch(children: list[Child], stopping: threading.Event, out: Output, me: str) -> int:
    """Wait for a stop signal (0) or for a child to exit on its own (1)."""
    while not stopping.wait(WATCH_INTERVAL_S):
        for child in children:
            code = child.proc.poll()
            if code is not None:
                out.line(me, f"{child.name} exited unexpectedly (code {code}); stopping everything")
                return 1
    out.line(me, "stopping")
    return 0


def stop(children: list[Child], out: Output, me: str) -> None:
    """SIGTERM every child, wait the grace period, then SIGKILL the sessions still running."""
    for child in children:
        if child.proc.poll() is None:
            child.proc.terminate()
    deadline = time.monotonic() + CHILD_STOP_TIMEOUT_S
    for child in children:
        try:
            child.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            out.line(me, f"{child.name} did not stop in time; killing it")
            os.killpg(child.proc.pid, signal.SIGKILL)
            child.proc.wait()
    for child in children:
        child.reader.join(READER_JOIN_TIMEOUT_S)


def supervise(table: dict[str, list[str]], env: dict[str, str], out: Output,
              stopping: threading.Event, me: str, watched: Iterable[Child] = ()) -> int:
    """Run every process of ``table`` until ``stopping`` is set (0) or one of them dies (1).

    ``watched``: children started before (the store), whose death also ends the run;
    they are left running for the caller to stop.
    """
    started: list[Child] = []
    try:
        started = [spawn(name, command, env, out) for name, command in table.items()]
        return watch([*started, *watched], stopping, out, me)
    finally:
        stop(started, out, me)
